from __future__ import annotations

import math

import pytest

from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError


def test_derived_quantities() -> None:
    p = FreParams.paper(8)
    assert p.tau == 50.0
    assert p.bucket_edge == pytest.approx(2 * 0.5 / math.sqrt(20))
    assert p.sensitivity == pytest.approx(1.2)
    inf = FreParams.paper(math.inf)
    assert not inf.is_dp and inf.tau == 100 and inf.effective_p_sample == 1.0


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("p_sample", 1.5, "p_sample must be in"),
        ("p_sample", 1.0, "p_sample must be in \\(0, 1\\) for finite epsilon"),
        ("delta", 0.0, "delta must be in"),
        ("epsilon", -1.0, "epsilon must be"),
        ("epsilon", math.nan, "epsilon must be"),
        ("threshold", 0, "threshold must be"),
        ("k", 2.5, "k must be"),
        ("radius", math.inf, "radius must be"),
        ("rounding", "fast", "rounding must be"),
    ],
)
def test_bad_parameters_name_themselves(field: str, value: object, pattern: str) -> None:
    with pytest.raises(InvalidParameterError, match=pattern):
        FreParams(**{field: value})  # type: ignore[arg-type]


def test_round_trip_through_dict() -> None:
    for p in (FreParams.paper(4), FreParams.paper(math.inf)):
        assert FreParams.from_dict(p.to_dict()) == p


def test_seed_plan_modes() -> None:
    a, b = SeedPlan.from_seed(3), SeedPlan.from_seed(3)
    assert a == b and a.rng_mode == "seeded"
    assert a.public("projection").uint64(4).tolist() == b.public("projection").uint64(4).tolist()
    assert a.secret("coins").uint64(4).tolist() == b.secret("coins").uint64(4).tolist()
    assert a.public("x").uint64(2).tolist() != a.secret("x").uint64(2).tolist()
    fresh = SeedPlan.fresh()
    assert fresh.rng_mode == "crypto" and "test_seed" not in fresh.to_dict()
    assert fresh.secret("coins").mode == "crypto"
    with pytest.raises(InvalidParameterError, match="seed"):
        SeedPlan.from_seed(-2)
