"""The public output of one Fre-E2T run: released buckets, their centroids, and the guarantee.

Both paths produce a :class:`Release` — the centralized mechanism (design §3, bucket ids are the
hex of :func:`mechanism.grid.encode_bucket`) and the distributed protocol (design §6, ids are VOPRF
tags) — so a run of either can be stored, reloaded and compared the same way.

On disk a release is a directory with ``centroids.npy`` (one float64 row per released bucket) and
``release.json`` (buckets in the same order, ledger, parameters, seeds, noise flag, public info).

Everything in those two files is published, so it must be a function of the DP outputs, the
public parameters and public randomness only: ``info`` accepts only the keys of
:data:`PUBLIC_INFO_KEYS` (each one of that kind). Counts that read the private data directly —
users, sampled buckets, distinct tags, dummies, contributors, rejections — and wall-clock timings
go into ``diagnostics``, written to :data:`DIAGNOSTICS_FILE`, which is operator-private (like an
evaluation: never publish it).
Each file is written to a temporary name and renamed into place; ``release.json`` is written last
and records the shape and SHA-256 of the centroid array, so a crash between the two writes, or a
centroid file from another run, is detected by :meth:`Release.load`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.ledger import PrivacyLedger
from mechanism.params import FreParams
from mechanism.run_files import CENTROIDS_FILE, DIAGNOSTICS_FILE, RELEASE_FILE
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.jsonsafe import json_safe

DIAGNOSTICS_LABEL = (
    "OPERATOR-PRIVATE: diagnostics that read the private data directly (not covered by the DP "
    "guarantee); never publish this file"
)
FORMAT_VERSION = 2

#: The keys ``release.json``'s ``info`` may hold, and why each is public: a public parameter or
#: configuration, or a function of the DP output (the released buckets and centroids).
PUBLIC_INFO_KEYS: Mapping[str, str] = {
    "path": "which path produced the release (mechanism or protocol)",
    "dim": "embedding dimension (the public embedder's)",
    "k": "projection dimension (public parameter)",
    "release_floor": "smallest released count, ⌈τ⌉ (public parameter)",
    "sigma": "calibrated noise scale (public parameters)",
    "sigma_applied": "noise scale added (public parameters and whether anything was released)",
    "rng_mode": "crypto or seeded (public)",
    "note": "a fixed remark about the parameters",
    "n_released": "number of released centroids (DP output)",
    "n_released_tags": "number of tags in the public broadcast (DP output)",
    "withheld": "released tags without a centroid and the rule that withheld each (public broadcast minus centroids)",
    "topped_up": "tags whose noise S_tag topped up (dropout policy outcome, with the withheld ones)",
    "dropout_policy": "withhold or topup (public configuration)",
    "cover_traffic": "whether every user sent phase-2 cover messages (public configuration)",
    "norm_guard": "the norm bound above which a decoded sum is withheld (public parameters)",
    "ddg": "DDG configuration (public parameters and the largest released count)",
    "sigma_effective": "DDG noise at the release floor (public parameters)",
    "sigma_mechanism": "the centralized mechanism's σ (public parameters)",
    "proof_batch_size": "DLEQ proof batch size (public configuration)",
    "noise_calibration": "users' DDG noise sized for the release floor or for each bucket's released count (public configuration)",
    "dropout_allowance": "the dropout allowance f of count-sized noise (public configuration)",
    "components": "registry names of the primitives (public configuration)",
    "component_origins": "each primitive's registry name with its origin: built-in, or the plug-in distribution and version (public configuration)",
}

_HEX = re.compile(r"\A(?:[0-9a-f]{2})+\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleasedBucket:
    """One heavy bucket: its public id (lower-case hex) and its sampled count n_h."""

    id: str
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _HEX.match(self.id):
            raise InvalidParameterError(
                f"bucket id must be non-empty lower-case hex of whole bytes, got {self.id!r}"
            )
        if isinstance(self.count, bool) or not isinstance(self.count, int | np.integer):
            raise InvalidParameterError(f"bucket count must be an integer, got {self.count!r}")
        if self.count < 1:
            raise InvalidParameterError(f"bucket count must be >= 1, got {self.count}")
        object.__setattr__(self, "count", int(self.count))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "count": self.count}


def _sha256(array: npt.NDArray[np.float64]) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f8").tobytes()).hexdigest()


def write_atomically(path: Path, write: Any, mode: str) -> None:
    """Write via ``write(fh)`` to a temporary file in ``path``'s directory, fsync, rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True, slots=True, kw_only=True)
class Release:
    """Released buckets (sorted by id), their centroids (same order) and the privacy ledger."""

    buckets: tuple[ReleasedBucket, ...]
    centroids: npt.NDArray[np.float64]
    ledger: PrivacyLedger
    params: FreParams
    seeds: Mapping[str, Any]
    noise: bool
    info: Mapping[str, Any] = field(default_factory=dict)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        buckets = tuple(self.buckets)
        if not all(isinstance(b, ReleasedBucket) for b in buckets):
            raise InvalidParameterError("buckets must be ReleasedBucket objects")
        ids = [b.id for b in buckets]
        if any(a >= b for a, b in zip(ids, ids[1:], strict=False)):
            raise InvalidParameterError("buckets must be sorted by id with no repeated id")
        c = np.array(self.centroids, dtype=np.float64, copy=True)
        if c.ndim != 2 or c.shape[0] != len(buckets):
            raise InvalidParameterError(
                f"centroids must have shape ({len(buckets)}, d), one row per bucket, got "
                f"{tuple(c.shape)}"
            )
        if not np.isfinite(c).all():
            raise InvalidParameterError("centroids must be finite")
        c.flags.writeable = False
        if not isinstance(self.ledger, PrivacyLedger):
            raise InvalidParameterError(f"ledger must be a PrivacyLedger, got {type(self.ledger)}")
        if not isinstance(self.params, FreParams):
            raise InvalidParameterError(f"params must be FreParams, got {type(self.params)}")
        if not isinstance(self.noise, bool):
            raise InvalidParameterError(f"noise must be a bool, got {self.noise!r}")
        object.__setattr__(self, "buckets", buckets)
        object.__setattr__(self, "centroids", c)
        object.__setattr__(self, "seeds", dict(self.seeds))
        unknown = sorted(set(self.info) - set(PUBLIC_INFO_KEYS))
        if unknown:
            raise InvalidParameterError(
                f"info may hold only public keys {sorted(PUBLIC_INFO_KEYS)}, got {unknown}: "
                "put what reads the private data into diagnostics"
            )
        object.__setattr__(self, "info", dict(self.info))
        object.__setattr__(self, "diagnostics", dict(self.diagnostics))

    # -- views ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def ids(self) -> list[str]:
        return [b.id for b in self.buckets]

    @property
    def counts(self) -> npt.NDArray[np.int64]:
        return np.array([b.count for b in self.buckets], dtype=np.int64)

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    # -- serialization -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The JSON document of ``release.json`` (without the centroid file record)."""
        return {
            "buckets": [b.to_dict() for b in self.buckets],
            "ledger": self.ledger.to_dict(),
            "params": self.params.to_dict(),
            "seeds": json_safe(dict(self.seeds)),
            "noise": self.noise,
            "info": json_safe(dict(self.info)),
        }

    def save(self, out_dir: str | os.PathLike[str]) -> None:
        """Write ``centroids.npy`` then ``release.json`` into ``out_dir``, each atomically, and the
        operator-private diagnostics (when there are any) into :data:`DIAGNOSTICS_FILE`."""
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise InvalidParameterError(
                f"out_dir must be a directory, got existing file {str(out)!r}"
            )
        out.mkdir(parents=True, exist_ok=True)
        document = self.to_json()
        document["format_version"] = FORMAT_VERSION
        document["centroids"] = {
            "file": CENTROIDS_FILE,
            "shape": list(self.centroids.shape),
            "dtype": "float64",
            "sha256": _sha256(self.centroids),
        }
        write_atomically(
            out / CENTROIDS_FILE,
            lambda fh: np.save(fh, np.ascontiguousarray(self.centroids), allow_pickle=False),
            "wb",
        )
        text = json.dumps(document, indent=2, allow_nan=False) + "\n"
        write_atomically(out / RELEASE_FILE, lambda fh: fh.write(text), "w")
        if self.diagnostics:
            private = {"label": DIAGNOSTICS_LABEL, **json_safe(dict(self.diagnostics))}
            body = json.dumps(private, indent=2, allow_nan=False) + "\n"
            write_atomically(out / DIAGNOSTICS_FILE, lambda fh: fh.write(body), "w")

    @classmethod
    def load(cls, out_dir: str | os.PathLike[str]) -> Release:
        """Read a release written by :meth:`save`, checking the centroid file against the record."""
        out = Path(out_dir)
        json_path, npy_path = out / RELEASE_FILE, out / CENTROIDS_FILE
        for p in (json_path, npy_path):
            if not p.is_file():
                raise InvalidInputError(f"release file {str(p)!r} does not exist")
        try:
            doc = json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInputError(f"{str(json_path)!r} is not valid JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise InvalidInputError(f"{str(json_path)!r} must hold a JSON object")
        missing = [
            key
            for key in ("buckets", "ledger", "params", "seeds", "noise", "info", "centroids")
            if key not in doc
        ]
        if missing:
            raise InvalidInputError(f"{str(json_path)!r} is missing the keys {missing}")
        try:
            centroids = np.load(npy_path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            raise InvalidInputError(
                f"{str(npy_path)!r} is not a readable .npy array ({exc})"
            ) from None
        record = doc["centroids"]
        if (
            not isinstance(record, dict)
            or list(centroids.shape) != record.get("shape")
            or centroids.dtype != np.float64
            or _sha256(centroids) != record.get("sha256")
        ):
            raise InvalidInputError(
                f"{str(npy_path)!r} does not match the centroid record in {str(json_path)!r} "
                "(shape, dtype or SHA-256 differ): the directory holds parts of different runs"
            )
        diagnostics: dict[str, Any] = {}
        private_path = out / DIAGNOSTICS_FILE
        if private_path.is_file():
            try:
                diagnostics = json.loads(private_path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise InvalidInputError(f"{str(private_path)!r} is not valid JSON ({exc})") from None
            diagnostics.pop("label", None)
        try:
            return cls.from_json(doc, centroids, diagnostics)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{str(json_path)!r}: {exc}") from None

    @classmethod
    def from_json(
        cls,
        doc: Mapping[str, Any],
        centroids: npt.NDArray[np.float64],
        diagnostics: Mapping[str, Any] | None = None,
    ) -> Release:
        """A release from the document :meth:`to_json` gives and its centroids (how a release
        received over the network is written with :meth:`save`)."""
        try:
            buckets = tuple(ReleasedBucket(id=b["id"], count=b["count"]) for b in doc["buckets"])
            return cls(
                buckets=buckets,
                centroids=centroids,
                ledger=PrivacyLedger.from_dict(doc["ledger"]),
                params=FreParams.from_dict(doc["params"]),
                seeds=doc["seeds"],
                noise=doc["noise"],
                info=doc["info"],
                diagnostics=dict(diagnostics or {}),
            )
        except (KeyError, TypeError) as exc:
            raise InvalidInputError(f"release document is malformed ({exc!r})") from None
        except InvalidParameterError as exc:
            raise InvalidInputError(f"release document holds an invalid release: {exc}") from None
