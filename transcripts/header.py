"""The transcript header: what a run was, so that any run can be rebuilt and audited (design §6.7).

A header carries the schema version, the run id, the registry names of every swappable component,
the parameters, the randomness mode, the package version and the creation time. It is written
once, when a transcript store is created, and never changes afterwards.

JSON values are canonicalised when the header is built, so ``from_dict(h.to_dict()) == h`` holds
exactly: the one canonical form of :mod:`primitives.jsonsafe` (tuples become lists, numpy values
Python ones, bytes hex, non-finite floats the strings ``"inf"``, ``"-inf"`` and ``"nan"``, as in
the privacy ledger), with ``str`` keys only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.jsonsafe import json_safe as canonical_json
from transcripts.schema import SCHEMA_VERSION as SCHEMA_VERSION

"""Version of the on-disk layout (SQLite tables and JSONL lines). Readers refuse newer ones."""

RNG_MODES = ("crypto", "seeded")
"""``crypto``: all secret randomness from the OS CSPRNG; ``seeded``: explicit test/research mode."""

PACKAGE_NAME = "fre-e2t"
UNKNOWN_VERSION = "0+unknown"

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+\-]{0,127}")


def package_version() -> str:
    """The installed version of fre-e2t, or ``"0+unknown"`` when running from an uninstalled tree."""
    try:
        return metadata.version(PACKAGE_NAME)
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def utc_now() -> str:
    """The current time as ISO 8601 in UTC with a ``Z`` suffix, to the microsecond."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_run_id() -> str:
    """A fresh run id: UTC time (sortable) plus 8 random hex digits (unique across machines)."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def json_safe(value: Any, *, where: str) -> Any:
    """Canonical JSON form of ``value`` (:func:`primitives.jsonsafe.json_safe`) with ``str`` keys
    only, so that a header reads back exactly; ``where`` names it in errors. A value without one
    is a bad parameter of the header (or artifact, or finding) being built."""
    try:
        return canonical_json(value, where=where, str_keys=True)
    except InvalidInputError as exc:
        raise InvalidParameterError(str(exc)) from None


def _check_created_at(value: str) -> None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidParameterError(
            f"created_at must be an ISO 8601 UTC timestamp, got {value!r}"
        ) from None
    if parsed.utcoffset() is None or parsed.utcoffset() != UTC.utcoffset(None):
        raise InvalidParameterError(
            f"created_at must be in UTC (suffix Z or +00:00), got {value!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TranscriptHeader:
    """What a recorded run was (design §6.7).

    ``components`` maps a registry family to the registry name used (``{"oprf":
    "ristretto255-SHA512", ...}``); ``params`` are the run's parameters (e.g.
    ``FreParams.to_dict()``); ``rng_mode`` must be given explicitly so a seeded run can never be
    mistaken for a real one. ``extra`` holds anything else JSON-safe (seed plan, dataset name).
    """

    rng_mode: str
    run_id: str = field(default_factory=new_run_id)
    components: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    package_version: str = field(default_factory=package_version)
    created_at: str = field(default_factory=utc_now)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rng_mode not in RNG_MODES:
            raise InvalidParameterError(
                f"rng_mode must be one of {list(RNG_MODES)}, got {self.rng_mode!r}"
            )
        if not isinstance(self.run_id, str) or not _RUN_ID.fullmatch(self.run_id):
            raise InvalidParameterError(
                "run_id must be 1-128 characters of letters, digits, '_', '.', ':', '-' "
                f"starting with a letter or digit, got {self.run_id!r}"
            )
        if (
            isinstance(self.schema_version, bool)
            or not isinstance(self.schema_version, int)
            or self.schema_version < 1
        ):
            raise InvalidParameterError(
                f"schema_version must be a positive int, got {self.schema_version!r}"
            )
        if not isinstance(self.package_version, str) or not self.package_version.strip():
            raise InvalidParameterError(
                f"package_version must be a non-empty string, got {self.package_version!r}"
            )
        if not isinstance(self.created_at, str):
            raise InvalidParameterError(f"created_at must be a string, got {self.created_at!r}")
        _check_created_at(self.created_at)
        if not isinstance(self.components, Mapping):
            raise InvalidParameterError(
                f"components must be a mapping family -> registry name, got {type(self.components).__name__}"
            )
        components: dict[str, str] = {}
        for family, name in self.components.items():
            for label, text in (("family", family), ("name", name)):
                if not isinstance(text, str) or not _COMPONENT.fullmatch(text):
                    raise InvalidParameterError(
                        f"components {label} must be a registry identifier, got {text!r}"
                    )
            components[family] = name
        if not isinstance(self.params, Mapping):
            raise InvalidParameterError(
                f"params must be a mapping, got {type(self.params).__name__}"
            )
        if not isinstance(self.extra, Mapping):
            raise InvalidParameterError(f"extra must be a mapping, got {type(self.extra).__name__}")
        # Canonicalise now so equality, hashing-free comparison and JSON round trips agree.
        object.__setattr__(self, "components", components)
        object.__setattr__(self, "params", json_safe(self.params, where="params"))
        object.__setattr__(self, "extra", json_safe(self.extra, where="extra"))

    @property
    def seeded(self) -> bool:
        """True in the explicit seeded test/research mode (secrets may then be recorded)."""
        return self.rng_mode == "seeded"

    def to_dict(self) -> dict[str, Any]:
        """Strict-JSON form (no NaN/inf literals); the inverse of :meth:`from_dict`."""
        return {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "components": dict(self.components),
            "params": json_safe(self.params, where="params"),
            "rng_mode": self.rng_mode,
            "package_version": self.package_version,
            "created_at": self.created_at,
            "extra": json_safe(self.extra, where="extra"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TranscriptHeader:
        """Rebuild a header; unknown or missing keys raise :class:`InvalidInputError`."""
        if not isinstance(data, Mapping):
            raise InvalidInputError(f"header must be a JSON object, got {type(data).__name__}")
        expected = {
            "schema_version",
            "run_id",
            "components",
            "params",
            "rng_mode",
            "package_version",
            "created_at",
            "extra",
        }
        missing = expected - data.keys()
        unknown = data.keys() - expected
        if missing or unknown:
            raise InvalidInputError(
                f"header keys must be {sorted(expected)}, missing {sorted(missing)}, "
                f"unknown {sorted(unknown)}"
            )
        try:
            return cls(**{key: data[key] for key in expected})
        except InvalidParameterError as exc:
            raise InvalidInputError(f"invalid transcript header: {exc}") from None
