"""The output of a baseline of paper §7.3 (Table 8): released bucket ids, counts, centroids, ledger.

The LDP baselines (:mod:`mechanism.ldp_embedding`, :mod:`mechanism.ldp_oue`) release what Fre-E2T
releases — heavy buckets of the public grid with a centroid each — so that cluster-level precision
and recall (:func:`mechanism.metrics.cluster_recovery`) compare them on the same footing. Ids of
real buckets are the mechanism's canonical hex (:func:`mechanism.grid.encode_bucket`); a baseline
may release ids that name no bucket of the data (OUE's false positives from the empty part of its
domain), which never match a real one. Counts are floats: OUE releases estimates.

``info`` is published (public parameters and functions of the DP output, JSON-safe);
``diagnostics`` reads the data directly (true counts, which release is a false positive) and is
operator-private, as for :class:`mechanism.release.Release`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from mechanism.ledger import PrivacyLedger
from primitives.errors import InvalidParameterError
from primitives.jsonsafe import json_safe


@dataclass(frozen=True, slots=True, kw_only=True)
class BaselineRelease:
    """Released ids (one per row of ``centroids`` and entry of ``counts``) and the guarantee."""

    method: str
    ids: tuple[str, ...]
    counts: npt.NDArray[np.float64]
    centroids: npt.NDArray[np.float64]
    ledger: PrivacyLedger
    info: Mapping[str, Any] = field(default_factory=dict)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise InvalidParameterError(f"method must be a non-empty string, got {self.method!r}")
        ids = tuple(self.ids)
        if not all(isinstance(i, str) and i for i in ids):
            raise InvalidParameterError("ids must be non-empty strings")
        if len(set(ids)) != len(ids):
            raise InvalidParameterError("ids must not repeat")
        counts = np.array(self.counts, dtype=np.float64, copy=True)
        centroids = np.array(self.centroids, dtype=np.float64, copy=True)
        if counts.shape != (len(ids),):
            raise InvalidParameterError(
                f"counts must have shape ({len(ids)},), one per id, got {tuple(counts.shape)}"
            )
        if centroids.ndim != 2 or centroids.shape[0] != len(ids):
            raise InvalidParameterError(
                f"centroids must have shape ({len(ids)}, d), one row per id, got "
                f"{tuple(centroids.shape)}"
            )
        if not (np.isfinite(counts).all() and np.isfinite(centroids).all()):
            raise InvalidParameterError("counts and centroids must be finite")
        if not isinstance(self.ledger, PrivacyLedger):
            raise InvalidParameterError(f"ledger must be a PrivacyLedger, got {type(self.ledger)}")
        counts.flags.writeable = False
        centroids.flags.writeable = False
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "centroids", centroids)
        json_safe(self.info, where="info", str_keys=True)  # refuses what cannot be published
        object.__setattr__(self, "info", dict(self.info))
        object.__setattr__(self, "diagnostics", dict(self.diagnostics))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])
