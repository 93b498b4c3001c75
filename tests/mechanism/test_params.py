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
        ("clip", 0.0, "clip must be"),
        ("clip", math.inf, "clip must be"),
        ("clip", "1", "clip must be"),
    ],
)
def test_bad_parameters_name_themselves(field: str, value: object, pattern: str) -> None:
    with pytest.raises(InvalidParameterError, match=pattern):
        FreParams(**{field: value})  # type: ignore[arg-type]


def test_round_trip_through_dict() -> None:
    for p in (FreParams.paper(4), FreParams.paper(math.inf), FreParams.paper(8, clip=0.5)):
        assert FreParams.from_dict(p.to_dict()) == p
    assert FreParams.paper(8, clip=0.5).to_dict()["clip"] == 0.5


def test_files_written_before_the_clip_load_with_the_unit_default() -> None:
    old = FreParams.paper(8).to_dict()
    del old["clip"]
    assert FreParams.from_dict(old).clip == 1.0


def test_sensitivity_is_capped_at_the_clipped_diameter() -> None:
    """Δ = min(u·r, 2C) (design §4.2): the cap binds as soon as 2C ≤ u·r."""
    paper = FreParams.paper(8)  # u·r = 1.2 < 2C = 2
    assert paper.clip == 1.0
    assert paper.sensitivity_target == pytest.approx(1.2) and paper.diameter == 2.0
    assert paper.sensitivity == pytest.approx(1.2) and not paper.sensitivity_capped
    minilm = FreParams(radius=0.9, k=10, p_sample=0.7, budget_factor=1.5, sensitivity_ratio=4.0)
    assert minilm.sensitivity_target == pytest.approx(3.6)
    assert minilm.sensitivity == 2.0 and minilm.sensitivity_capped
    small = FreParams.paper(8, clip=0.5)  # 2C = 1 < 1.2
    assert small.sensitivity == 1.0 and small.sensitivity_capped
    equal = FreParams.paper(8, clip=0.6)  # 2C = u·r: no pair can be farther apart than u·r
    assert equal.sensitivity_capped


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
