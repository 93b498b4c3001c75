"""TSDLap: reference shifts, the shift's defining inequality, the pmf, the sampler against the
pmf, and the dummy plan (design §4.5)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from chi_square import z_two_sided
from hypothesis import given
from hypothesis import strategies as st

from primitives import registry
from primitives.dummies import DummyGenerator
from primitives.dummies.tsdlap import (
    TSDLapDummyGenerator,
    dummy_submissions,
    tsdlap_privacy,
    tsdlap_shift,
)
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource


def _tail_by_definition(n: int, epsilon0: float, sensitivity: int) -> float:
    """``A · Σ_{j=n-Δ0+1}^{n} r^j`` summed term by term, straight from design §4.5."""
    r = math.exp(-epsilon0)
    normaliser = (1 - r) / (1 + r - 2 * r ** (n + 1))
    return normaliser * math.fsum(r**j for j in range(n - sensitivity + 1, n + 1))


# -- the shift ------------------------------------------------------------
@pytest.mark.parametrize(
    ("sensitivity", "epsilon0", "delta0", "shift"), [(1, 1.0, 1e-6, 14), (1000, 1.0, 1e-8, 1018)]
)
def test_reference_shifts(sensitivity: int, epsilon0: float, delta0: float, shift: int) -> None:
    """design §4.5 reference values."""
    assert tsdlap_shift(epsilon0, delta0, sensitivity) == shift
    assert TSDLapDummyGenerator(epsilon0, delta0, sensitivity).shift == shift


@given(
    st.floats(0.05, 5.0),
    st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3, 0.05, 0.3]),
    st.integers(1, 60),
)
def test_shift_is_the_smallest_n_meeting_the_definition(
    epsilon0: float, delta0: float, sensitivity: int
) -> None:
    n = tsdlap_shift(epsilon0, delta0, sensitivity)
    assert n >= sensitivity
    assert _tail_by_definition(n, epsilon0, sensitivity) <= delta0 * (1 + 1e-12)
    if n > sensitivity:
        assert _tail_by_definition(n - 1, epsilon0, sensitivity) > delta0 * (1 - 1e-12)


def test_shift_grows_as_parameters_tighten() -> None:
    assert tsdlap_shift(1.0, 1e-9) > tsdlap_shift(1.0, 1e-6) > tsdlap_shift(2.0, 1e-6)
    assert tsdlap_shift(0.1, 1e-6) > tsdlap_shift(1.0, 1e-6)
    assert tsdlap_shift(5.0, 0.5) == 1  # the tail is already small at n = Δ0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0.0, 1e-6, 1), "epsilon0"),
        ((math.inf, 1e-6, 1), "epsilon0"),
        ((-1.0, 1e-6, 1), "epsilon0"),
        ((1.0, 0.0, 1), "delta0"),
        ((1.0, 1.0, 1), "delta0"),
        ((1.0, 1e-6, 0), "sensitivity"),
        ((1.0, 1e-6, 2.5), "sensitivity"),
        ((1.0, 1e-6, True), "sensitivity"),
    ],
)
def test_invalid_parameters_rejected(args: tuple[float, float, int], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        tsdlap_shift(*args)
    with pytest.raises(InvalidParameterError, match=match):
        TSDLapDummyGenerator(*args)


# -- the distribution ------------------------------------------------------------
def test_pmf_is_a_symmetric_distribution_on_its_support() -> None:
    gen = TSDLapDummyGenerator(0.7, 1e-5)
    n = gen.shift
    masses = [gen.pmf(x) for x in range(2 * n + 1)]
    assert math.fsum(masses) == pytest.approx(1.0, abs=1e-12)
    assert masses == masses[::-1]
    assert max(masses) == masses[n]
    assert gen.pmf(-1) == gen.pmf(2 * n + 1) == 0.0
    assert gen.pmf_vector([-1, 0, n, 2 * n + 1]).tolist() == [0.0, masses[0], masses[n], 0.0]
    # pmf ratio of neighbours is exactly e^-ε0 away from the mode.
    assert masses[n + 1] / masses[n] == pytest.approx(math.exp(-0.7), rel=1e-12)


def test_sampler_matches_pmf() -> None:
    """Chi-square goodness of fit of 200 000 draws of TSDLap(1, 1e-6, 1) (support 0..28).

    Values whose expected count is below 5 are pooled into the two tails (symmetrically), leaving
    19 cells; the statistic is compared with 49.189, the 0.9999 quantile of chi2(18) (scipy,
    computed offline).
    alpha = 1e-4: a fresh seed fails with probability 1e-4.
    """
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    size = 200_000
    draws = gen.sample(size, RandomSource.seeded(11, "tsdlap"))
    assert draws.dtype == np.int64 and draws.min() >= 0 and draws.max() <= 2 * gen.shift
    expected = gen.pmf_vector(np.arange(2 * gen.shift + 1)) * size
    observed = np.bincount(draws, minlength=2 * gen.shift + 1).astype(float)
    keep = expected >= 5
    lo, hi = int(np.flatnonzero(keep)[0]), int(np.flatnonzero(keep)[-1])
    exp_cells = np.concatenate(
        [[expected[: lo + 1].sum()], expected[lo + 1 : hi], [expected[hi:].sum()]]
    )
    obs_cells = np.concatenate(
        [[observed[: lo + 1].sum()], observed[lo + 1 : hi], [observed[hi:].sum()]]
    )
    stat = float(((obs_cells - exp_cells) ** 2 / exp_cells).sum())
    assert exp_cells.size == 19  # values 0..5 and 23..28 pooled, 6..22 on their own
    assert stat < 49.189, stat  # 0.9999 quantile of chi2(18)


def test_sampler_is_reproducible_and_handles_edges() -> None:
    gen = TSDLapDummyGenerator(0.5, 1e-4)
    a = gen.sample(1000, RandomSource.seeded(3))
    assert np.array_equal(a, gen.sample(1000, RandomSource.seeded(3)))
    assert gen.sample(0, RandomSource.seeded(3)).shape == (0,)
    with pytest.raises(InvalidParameterError, match="size"):
        gen.sample(-1, RandomSource.seeded(3))
    big = TSDLapDummyGenerator(1.0, 1e-8, 1000)
    draws = big.sample(5000, RandomSource.seeded(4))
    assert draws.min() >= 0 and draws.max() <= 2 * 1018
    # z-test of the mean at α = 1e-6 (false failure below 1e-6 for a fresh seed): the shifted
    # discrete Laplace has mean 1018 (its shift) and standard deviation √(2r)/(1 − r), r = e^−ε0
    # (≈ 1.36 for ε0 = 1; truncation at 0 and 2·1018 is 1e-8 of the mass); 5000 draws.
    r = math.exp(-1.0)
    assert abs(draws.mean() - 1018) <= z_two_sided(1e-6) * math.sqrt(2 * r) / (1 - r) / math.sqrt(draws.size)


# -- the plan ------------------------------------------------------------
@pytest.mark.parametrize(("tau", "levels"), [(10, 9), (10.3, 10), (1, 0), (0.5, 0), (2, 1)])
def test_dummy_plan_covers_exactly_the_subthreshold_levels(tau: float, levels: int) -> None:
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    plan = gen.dummy_plan(tau, RandomSource.seeded(5))
    assert sorted(plan) == list(range(1, levels + 1))
    assert all(0 <= z <= 2 * gen.shift for z in plan.values())
    assert all(level < tau for level in plan)


def test_dummy_submissions_never_reach_tau() -> None:
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    tau = 7.5
    rng = RandomSource.seeded(6)
    plan = gen.dummy_plan(tau, rng)
    subs = dummy_submissions(plan, rng)
    counts = Counter(subs)
    assert len(subs) == sum(c * z for c, z in plan.items())
    assert len(counts) == sum(plan.values())
    assert all(len(tag) == 32 for tag in counts)  # the default: a real tag's size
    assert max(counts.values()) < tau
    assert Counter(counts.values()) == Counter({c: z for c, z in plan.items() if z})


def test_expected_dummies_match_the_formula_and_the_sampler() -> None:
    """E[Σ c Z_c] = n τ (τ - 1) / 2; 400 plans at τ = 10, ε0 = 1 (n = 14).

    Var[Σ c Z_c] = Var[Z] Σ c² with Var[Z] ≈ 2r/(1-r)² ≈ 1.84 and Σ c² = 285: sd ≈ 22.9 per
    plan, 1.15 for the mean of 400. z-test at α = 1e-6 (the two-sided normal quantile, 4.89
    standard errors): a fresh seed fails with probability below 1e-6.
    """
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    assert gen.expected_dummy_submissions(10) == 14 * 10 * 9 / 2
    assert gen.expected_dummy_tags(10) == 14 * 9
    rng = RandomSource.seeded(7, "plans")
    totals = [sum(c * z for c, z in gen.dummy_plan(10, rng).items()) for _ in range(400)]
    r = math.exp(-1.0)
    se = math.sqrt(2 * r / (1 - r) ** 2 * sum(c * c for c in range(1, 10)) / len(totals))
    assert abs(float(np.mean(totals)) - 630.0) <= z_two_sided(1e-6) * se


def test_plans_are_fresh_draws() -> None:
    gen = TSDLapDummyGenerator(1.0, 1e-6)
    rng = RandomSource.seeded(8)
    plans = [tuple(gen.dummy_plan(20, rng).values()) for _ in range(5)]
    assert len(set(plans)) == 5


def test_privacy_and_budget() -> None:
    assert tsdlap_privacy(0.5, 1e-7) == (1.0, 2e-7)
    gen = TSDLapDummyGenerator.for_budget(1.0, 2e-7)
    assert (gen.epsilon0, gen.delta0) == (0.5, 1e-7)
    assert gen.privacy() == (1.0, 2e-7)


def test_registry_and_protocol_conformance() -> None:
    gen = registry.create("dummy_generator", "tsdlap", epsilon0=1.0, delta0=1e-6)
    assert isinstance(gen, TSDLapDummyGenerator) and isinstance(gen, DummyGenerator)
    assert gen.name == "tsdlap" and gen.shift == 14


def test_dummy_submissions_validates_plan() -> None:
    with pytest.raises(InvalidParameterError, match="plan entries"):
        dummy_submissions({0: 3}, RandomSource.seeded(1))
    with pytest.raises(InvalidParameterError, match="tag_size"):
        dummy_submissions({1: 3}, RandomSource.seeded(1), tag_size=0)
