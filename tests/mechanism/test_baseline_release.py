"""BaselineRelease: one id per count and centroid row, frozen arrays, publishable info."""

from __future__ import annotations

import numpy as np
import pytest

from mechanism.baseline_release import BaselineRelease
from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from primitives.errors import InvalidInputError, InvalidParameterError


def _ledger() -> PrivacyLedger:
    term = LedgerTerm(name="t", epsilon=1.0, delta=0.0, source="test", detail={"sensitivity": 2.0})
    return PrivacyLedger(
        terms=(term,),
        epsilon=1.0,
        delta=0.0,
        sigma=0.5,
        noise_multiplier=0.25,
        composition="one term",
        params=FreParams().to_dict(),
        aggregation="t",
    )


def _release(**overrides: object) -> BaselineRelease:
    fields: dict[str, object] = {
        "method": "m",
        "ids": ("ab", "empty-000000"),
        "counts": [3.5, 101.0],
        "centroids": np.zeros((2, 3)),
        "ledger": _ledger(),
        "info": {"sigma": 0.5},
    }
    fields.update(overrides)
    return BaselineRelease(**fields)  # type: ignore[arg-type]


def test_valid_release_is_frozen() -> None:
    release = _release()
    assert len(release) == 2 and release.dim == 3
    assert release.counts.dtype == np.float64 and not release.counts.flags.writeable
    assert not release.centroids.flags.writeable
    # The aggregation term's recorded sensitivity is the ledger's Δ (no sensitivity term here).
    assert release.ledger.flat()["sensitivity"] == 2.0


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"ids": ("ab", "ab")}, "ids must not repeat"),
        ({"ids": ("ab", "")}, "ids must be non-empty strings"),
        ({"counts": [1.0]}, "counts must have shape"),
        ({"centroids": np.zeros((3, 3))}, "centroids must have shape"),
        ({"counts": [1.0, np.inf]}, "finite"),
        ({"method": ""}, "method must"),
        ({"ledger": {}}, "ledger must be a PrivacyLedger"),
    ],
)
def test_inconsistent_release_rejected(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _release(**overrides)


def test_info_must_be_publishable_json() -> None:
    with pytest.raises(InvalidInputError, match="info"):
        _release(info={"x": object()})
