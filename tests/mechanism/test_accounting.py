"""The accountant against the paper's numbers (design §4.1-§4.3, §4.6) and first principles."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanism.accounting import (
    calibrate_agm,
    calibrate_noise,
    collision_probability,
    heavy_hitter_delta_exact,
    heavy_hitter_privacy,
    histogram_release_cost,
    kl_bernoulli,
    multi_text_guarantee,
    optimise_budget_factor,
    paper_multiplier,
    protocol_ledger,
    release_floor,
    sensitivity_failure,
)
from mechanism.ledger import LedgerTerm
from mechanism.params import FreParams
from primitives.analytic_gaussian import agm_delta, agm_multiplier, log_normal_cdf, normal_cdf
from primitives.errors import InfeasibleBudgetError, InvalidParameterError
from primitives.randomness import RandomSource

# -- Lemma 1 ----------------------------------------------------------------------------------------

LEMMA1 = [  # (epsilon, eps_fre, delta_fre) — design §4.1 [paper]
    (4.0, 1.42670, 2.926e-10),
    (8.0, 2.77259, 3.802e-13),
    (16.0, 2.74887, 1.765e-11),
]


@pytest.mark.parametrize(("eps", "eps_fre", "delta_fre"), LEMMA1)
def test_lemma1_closed_form_reference_values(eps: float, eps_fre: float, delta_fre: float) -> None:
    p = FreParams.paper(eps)
    got_eps, got_delta = heavy_hitter_privacy(p.p_sample, p.budget_factor, p.tau)
    assert got_eps == pytest.approx(eps_fre, abs=5e-6)
    assert got_delta == pytest.approx(delta_fre, rel=2e-4)


# Exact hockey-stick δ at the same ε: the worst bucket size and δ found here, and the ratio
# closed/exact (design §4.1 promises 20-150x). Pinned so a regression in either mode shows.
EXACT = [
    (4.0, 1.95518e-12, 35, 149.67),
    (8.0, 8.88178e-15, 51, 42.81),
    (16.0, 4.58191e-13, 61, 38.52),
]


@pytest.mark.parametrize(("eps", "delta_exact", "worst_n", "ratio"), EXACT)
def test_lemma1_exact_mode_is_20_to_150_times_tighter(
    eps: float, delta_exact: float, worst_n: int, ratio: float
) -> None:
    p = FreParams.paper(eps)
    eps_fre, closed = heavy_hitter_privacy(p.p_sample, p.budget_factor, p.tau)
    eps_exact, exact = heavy_hitter_privacy(p.p_sample, p.budget_factor, p.tau, exact=True)
    assert eps_exact == eps_fre
    assert exact == pytest.approx(delta_exact, rel=1e-5)
    assert heavy_hitter_delta_exact(p.p_sample, eps_fre, p.tau)[1] == worst_n
    assert closed / exact == pytest.approx(ratio, rel=1e-3)
    assert 20 <= closed / exact <= 150


def _brute_force_exact(p: float, eps: float, tau: float, n_max: int) -> float:
    """Direct sum of max(0, P − e^ε Q) over outcomes {⊥} ∪ {j ≥ τ}, both orders, float64."""
    j0 = math.ceil(tau)
    best = 0.0
    for n in range(1, n_max + 1):
        big = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
        small = [math.comb(n - 1, j) * p**j * (1 - p) ** (n - 1 - j) for j in range(n)] + [0.0]
        for a, b in ((big, small), (small, big)):
            val = max(0.0, sum(a[:j0]) - math.exp(eps) * sum(b[:j0]))
            val += sum(max(0.0, a[j] - math.exp(eps) * b[j]) for j in range(j0, n + 1))
            best = max(best, val)
    return best


@pytest.mark.parametrize(("p", "eps", "tau"), [(0.3, 1.0, 5.0), (0.5, 0.4, 8.0), (0.2, 2.0, 3.0)])
def test_lemma1_exact_matches_brute_force(p: float, eps: float, tau: float) -> None:
    """Small τ keeps every probability far from underflow, so the naive sum is accurate.

    eps = 0.4 < ln(1/(1−0.5)) also exercises the remove direction and the ⊥ outcome.
    """
    got = heavy_hitter_delta_exact(p, eps, tau)[0]
    assert got == pytest.approx(_brute_force_exact(p, eps, tau, 250), rel=1e-9, abs=1e-300)


@settings(max_examples=25, deadline=None)
@given(
    p=st.floats(0.05, 0.9),
    v=st.floats(0.5, 6.0),
    tau=st.integers(3, 60),
)
def test_lemma1_exact_never_exceeds_closed_form(p: float, v: float, tau: int) -> None:
    closed = heavy_hitter_privacy(p, v, float(tau))[1]
    exact = heavy_hitter_privacy(p, v, float(tau), exact=True)[1]
    assert 0.0 <= exact <= closed * (1 + 1e-9)


def test_release_floor_absorbs_rounding() -> None:
    assert release_floor(0.7 * 100) == 70
    assert release_floor(30.5) == 31
    assert release_floor(30.0) == 30


def test_kl_bernoulli_edges() -> None:
    assert kl_bernoulli(0.3, 0.3) == 0.0
    assert kl_bernoulli(1.0, 0.5) == pytest.approx(math.log(2))
    assert kl_bernoulli(0.0, 0.5) == pytest.approx(math.log(2))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((1.5, 4.0, 30.0), "p_sample must be in \\(0, 1\\), got 1.5"),
        ((0.3, 0.0, 30.0), "budget_factor"),
        ((0.3, 4.0, -1.0), "tau"),
    ],
)
def test_lemma1_rejects_bad_parameters(args: tuple[float, float, float], match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        heavy_hitter_privacy(*args)


# -- Lemma 2 ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "expected", "rel"),
    [
        (20, 8.945e-11, 1.2e-4),
        (10, 9.5e-6, 5e-3),
        (15, 2.9e-8, 2e-2),
        (25, 2.8e-13, 2e-2),
        (30, 8.5e-16, 1e-2),
    ],
)
def test_lemma2_reference_values(k: int, expected: float, rel: float) -> None:
    assert sensitivity_failure(k, 2.4) == pytest.approx(expected, rel=rel)


def test_lemma2_paper_headline_and_typo() -> None:
    assert abs(sensitivity_failure(20, 2.4) - 8.945e-11) <= 0.01e-11
    # design §4.2: u = 2 (the paper's "Δ = 2r" sentence) gives 2.16e-9, not 8.9e-11.
    assert sensitivity_failure(20, 2.0) == pytest.approx(2.16e-9, rel=3e-3)


@pytest.mark.parametrize("m", [0.5, 1.7, 3.0])
def test_lemma2_scaling_edge_and_sensitivity_together_is_invariant(m: float) -> None:
    assert sensitivity_failure(20, 2.4 * m, edge_multiplier=m) == pytest.approx(
        sensitivity_failure(20, 2.4), rel=1e-12
    )


def test_collision_probability_limits() -> None:
    assert collision_probability(1e6) == pytest.approx(1.0, abs=1e-6)
    # small x: the series branch and the closed form agree where both are accurate
    x = 0.999e-4  # series branch; the closed form still has ~1e-11 relative accuracy here
    closed = math.erf(x / math.sqrt(2)) - math.sqrt(2 / math.pi) * (-math.expm1(-x * x / 2)) / x
    assert collision_probability(x) == pytest.approx(closed, rel=1e-8)
    with pytest.raises(InvalidParameterError):
        collision_probability(0.0)
    with pytest.raises(InvalidParameterError, match="k must be an integer >= 1"):
        sensitivity_failure(0, 2.4)


def _collisions(u: float, k: int, trials: int, label: str) -> np.ndarray:
    """Per-trial (trials, k) indicators that two points at distance Δ = u·r share a grid cell."""
    rng = RandomSource.seeded(2024, f"lemma2-monte-carlo/{label}")
    d, r = 16, 0.5
    dist = u * r
    edge = 2 * r / math.sqrt(k)
    a = rng.normal(d)
    direction = rng.normal(d)
    b = a + dist * direction / np.linalg.norm(direction)
    z = rng.normal((trials, d, k))
    ya = np.einsum("d,tdk->tk", a, z) / math.sqrt(k)
    yb = np.einsum("d,tdk->tk", b, z) / math.sqrt(k)
    shift = rng.uniform(trials * k).reshape(trials, k) * edge
    return np.floor((ya - shift) / edge) == np.floor((yb - shift) / edge)


def _z_score(hits: int, n: int, p: float) -> float:
    return (hits - n * p) / math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("u", [2.4, 1.2])
def test_lemma2_matches_monte_carlo_per_coordinate(u: float) -> None:
    """Binomial z-test of the per-coordinate collision rate against f(2/u).

    Two points at distance Δ = u·r in R^16 are projected with 10,000 fresh Gaussian matrices
    (k = 20 columns each) and randomly shifted grids; given the pair the 200,000 coordinates are
    i.i.d. Bernoulli(f(2/u)). Two-sided alpha = 1e-6 (|z| < 4.89); the false-failure probability
    for a fresh seed is 1e-6 per parameter. Resolution: one standard error is ~0.33% of f.
    """
    hits = _collisions(u, 20, 10_000, f"coord-{u}")
    p = collision_probability(2.0 / u)
    assert abs(_z_score(int(hits.sum()), hits.size, p)) < 4.89


def test_lemma2_matches_monte_carlo_whole_vector() -> None:
    """Binomial z-test that all k = 3 coordinates collide with probability f(2/u)^3 (u = 2.4).

    50,000 independent projections; alpha = 1e-6 two-sided (|z| < 4.89), false-failure
    probability 1e-6 for a fresh seed. This checks the independence across coordinates that the
    product f^k relies on.
    """
    hits = _collisions(2.4, 3, 50_000, "vector").all(axis=1)
    p = sensitivity_failure(3, 2.4)
    assert abs(_z_score(int(hits.sum()), hits.size, p)) < 4.89


# -- Theorem 3: analytic Gaussian ---------------------------------------------------------------------


def test_normal_cdf_tail_is_accurate() -> None:
    assert normal_cdf(-10.0) == pytest.approx(7.619853024160527e-24, rel=1e-12)
    # continuity of the asymptotic branch at −30, and its value at −40
    assert log_normal_cdf(-30.0 - 1e-9) == pytest.approx(log_normal_cdf(-30.0), abs=1e-6)
    assert log_normal_cdf(-40.0) == pytest.approx(-804.6084420137538, rel=1e-12)


def test_agm_delta_matches_direct_formula() -> None:
    sigma, eps, sens = 1.3, 2.0, 1.2
    a, b = sens / (2 * sigma), eps * sigma / sens
    direct = normal_cdf(a - b) - math.exp(eps) * normal_cdf(-a - b)
    assert agm_delta(sigma, eps, sens) == pytest.approx(direct, rel=1e-12)


def test_agm_delta_depends_only_on_multiplier_and_large_eps_is_finite() -> None:
    assert agm_delta(2.0, 3.0, 4.0) == pytest.approx(agm_delta(0.5, 3.0, 1.0), rel=1e-12)
    # e^800 overflows a float; Φ(0) − e^800·Φ(−40) = 0.5 − exp(800 + ln Φ(−40))
    expected = 0.5 - math.exp(800.0 + log_normal_cdf(-40.0))
    assert agm_delta(0.025, 800.0, 1.0) == pytest.approx(expected, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(0.05, 30.0), m1=st.floats(0.05, 20.0), m2=st.floats(0.05, 20.0))
def test_agm_delta_is_monotone_in_sigma(eps: float, m1: float, m2: float) -> None:
    lo, hi = sorted((m1, m2))
    assert agm_delta(hi, eps, 1.0) <= agm_delta(lo, eps, 1.0) + 1e-15


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.1, 20.0), log_delta=st.floats(-14.0, -2.0))
def test_calibrated_sigma_achieves_delta_tightly(eps: float, log_delta: float) -> None:
    delta = 10.0**log_delta
    m = agm_multiplier(eps, delta)
    assert agm_delta(m, eps, 1.0) <= delta
    assert agm_delta(m * (1 - 1e-9), eps, 1.0) > delta * (1 - 1e-6)


def test_paper_multiplier_rounds_up() -> None:
    assert paper_multiplier(1.77338) == 1.78
    assert paper_multiplier(0.95) == 0.95
    assert paper_multiplier(0.42001) == 0.43


# CalibrateNoise: design §4.3 table [paper]. (eps, eps_agg, exact sigma, m*, paper sigma, paper m)
CALIBRATION = [
    (4.0, 2.57330, 2.12805, 1.77338, 2.136, 1.78),
    (8.0, 5.22741, 1.13111, 0.94259, 1.140, 0.95),
    (16.0, 13.25113, 0.51490, 0.42908, 0.516, 0.43),
]


@pytest.mark.parametrize(("eps", "eps_agg", "sigma", "m_exact", "sigma_p", "m_p"), CALIBRATION)
def test_calibrate_noise_reference_table(
    eps: float, eps_agg: float, sigma: float, m_exact: float, sigma_p: float, m_p: float
) -> None:
    exact = calibrate_noise(FreParams.paper(eps))
    assert exact.term("centroid_gaussian").epsilon == pytest.approx(eps_agg, abs=5e-6)
    assert exact.sigma == pytest.approx(sigma, abs=1e-4)
    assert exact.noise_multiplier == pytest.approx(m_exact, abs=1e-5)
    paper = calibrate_noise(FreParams.paper(eps, rounding="paper"))
    assert paper.sigma == pytest.approx(sigma_p, abs=1e-9)
    assert paper.noise_multiplier == pytest.approx(m_p, abs=1e-12)
    for ledger in (exact, paper):
        flat = ledger.to_dict()
        assert flat["delta_sens"] == pytest.approx(8.945e-11, abs=0.01e-11)
        # basic composition spends exactly the target
        assert ledger.epsilon == pytest.approx(eps, rel=1e-12)
        assert ledger.delta == pytest.approx(1e-6, rel=1e-12)
        agg = ledger.term("centroid_gaussian")
        assert agg.detail["delta_achieved"] <= agg.delta
        assert agm_delta(ledger.sigma, agg.epsilon, 1.2) <= flat["delta_agg"]


# The synthesize defaults for MiniLM before the cap (k = 10, r = 0.9, u = 4: u·r = 3.6 > 2C = 2).
MINILM_EPS8 = {
    "epsilon": 8.0,
    "delta": 1e-6,
    "radius": 0.9,
    "threshold": 100,
    "k": 10,
    "p_sample": 0.7,
    "budget_factor": 1.5,
    "sensitivity_ratio": 4.0,
}


def test_cap_gives_the_sigma_of_the_clipped_diameter() -> None:
    """Unit-norm contributions differ by at most 2: σ is the AGM's for Δ = 2, not u·r = 3.6."""
    params = FreParams(**MINILM_EPS8)
    ledger = calibrate_noise(params)
    eps_fre, delta_fre = heavy_hitter_privacy(0.7, 1.5, params.tau)
    direct = agm_multiplier(8.0 - eps_fre, 1e-6 - delta_fre) * 2.0  # δ_sens = 0 under the cap
    assert ledger.sigma == pytest.approx(direct, rel=1e-12)
    assert ledger.sigma == pytest.approx(1.66, abs=0.01)  # was 2.986 with Δ = 3.6
    assert ledger.noise_multiplier == pytest.approx(direct / 2.0, rel=1e-12)
    agg = ledger.term("centroid_gaussian")
    assert agg.detail["sensitivity"] == 2.0
    assert agm_delta(ledger.sigma, agg.epsilon, 2.0) <= agg.delta
    assert ledger.to_dict()["sensitivity"] == 2.0


def test_cap_binding_charges_no_delta_sens() -> None:
    params = FreParams(**MINILM_EPS8)
    ledger = calibrate_noise(params)
    sens = ledger.term("sensitivity_failure")
    assert sens.delta == 0.0 and sens.epsilon == 0.0
    assert "2C" in sens.source and "design §4.2" in sens.source and "Lemma 2" not in sens.source
    assert sens.detail["cap_binds"] is True
    assert sens.detail["sensitivity"] == 2.0
    assert sens.detail["sensitivity_target"] == pytest.approx(3.6)
    assert sens.detail["clip"] == 1.0
    # What Lemma 2 would have charged, kept for the record only.
    assert sens.detail["delta_lemma2"] == pytest.approx(8.12e-8, rel=1e-3)
    heavy, agg = ledger.term("heavy_hitters"), ledger.term("centroid_gaussian")
    assert agg.delta == pytest.approx(1e-6 - heavy.delta, rel=1e-12)
    assert ledger.delta == pytest.approx(heavy.delta + agg.delta, rel=1e-12)
    assert ledger.delta == pytest.approx(1e-6, rel=1e-12)
    assert ledger.to_dict()["delta_sens"] == 0.0


def test_cap_also_binds_below_the_paper_setting() -> None:
    """A smaller clip C = 0.5 (2C = 1 < u·r = 1.2) rescales σ and removes δ_sens."""
    params = FreParams.paper(8.0, clip=0.5)
    ledger = calibrate_noise(params)
    eps_fre, delta_fre = heavy_hitter_privacy(0.5, 4.0, 50.0)
    assert ledger.term("sensitivity_failure").delta == 0.0
    assert ledger.sigma == pytest.approx(agm_multiplier(8.0 - eps_fre, 1e-6 - delta_fre), rel=1e-12)


def test_uncapped_setting_is_unchanged() -> None:
    """u·r = 1.2 < 2C = 2: Δ = u·r and δ_sens is Lemma 2's, as in the paper (design §4.3 table)."""
    ledger = calibrate_noise(FreParams.paper(8.0))
    sens = ledger.term("sensitivity_failure")
    assert sens.source.startswith("Lemma 2")
    assert sens.detail["cap_binds"] is False
    assert sens.delta == sensitivity_failure(20, 2.4)
    assert sens.detail["sensitivity"] == pytest.approx(1.2)
    assert ledger.sigma == pytest.approx(1.13111, abs=1e-4)
    unit_clip = calibrate_noise(FreParams.paper(8.0, clip=1.0))
    assert unit_clip.sigma == ledger.sigma


def test_protocol_ledger_uses_the_capped_sensitivity() -> None:
    params = FreParams(**MINILM_EPS8)
    ledger = protocol_ledger(params, dummy_epsilon=1.0, dummy_delta=1e-8, aggregation=_ddg_term(5.0, 6e-7))
    assert ledger.term("sensitivity_failure").delta == 0.0
    assert ledger.delta == pytest.approx(ledger.term("histogram_release").delta + 6e-7)
    assert ledger.noise_multiplier == pytest.approx(1.3 / 2.0)


def test_calibrate_noise_exact_lemma1_gives_a_slightly_smaller_sigma() -> None:
    closed = calibrate_noise(FreParams.paper(4.0))
    exact = calibrate_noise(FreParams.paper(4.0), lemma1="exact")
    assert exact.term("heavy_hitters").delta < closed.term("heavy_hitters").delta / 20
    assert exact.sigma < closed.sigma
    assert exact.term("heavy_hitters").detail["worst_bucket_size"] == 35
    with pytest.raises(InvalidParameterError, match="lemma1"):
        calibrate_noise(FreParams.paper(4.0), lemma1="loose")


def test_calibrate_noise_non_dp() -> None:
    ledger = calibrate_noise(FreParams(epsilon=math.inf, p_sample=1.0))
    assert ledger.sigma == 0.0 and math.isinf(ledger.epsilon)
    flat = ledger.to_dict()
    assert flat["tau"] == 100.0  # τ = t
    assert flat["sigma"] == 0.0 and flat["epsilon"] == "inf"


def test_infeasible_epsilon_names_eps_fre_and_epsilon() -> None:
    params = FreParams(epsilon=2.0, p_sample=0.5, budget_factor=4.0)  # eps_fre = 2.77 > 2
    with pytest.raises(InfeasibleBudgetError, match=r"eps_fre = .*2\.77.* >= epsilon = 2"):
        calibrate_noise(params)


def test_infeasible_delta_names_delta_sens() -> None:
    params = FreParams(epsilon=8.0, delta=5e-11, p_sample=0.5, budget_factor=4.0)
    with pytest.raises(InfeasibleBudgetError, match="delta_sens = 8.945e-11 .*dominates"):
        calibrate_noise(params)


def test_infeasible_delta_names_delta_fre() -> None:
    params = FreParams(epsilon=8.0, threshold=10, p_sample=0.5, budget_factor=1.0)
    with pytest.raises(InfeasibleBudgetError, match=r"delta_fre = .*\(Lemma 1\) dominates"):
        calibrate_noise(params)


# -- choosing v -----------------------------------------------------------------------------------------


def test_optimise_budget_factor_prefers_v2_at_eps8() -> None:
    """design §4.3: ε = 8, p_s = 0.5: v = 2 gives σ ≈ 0.924 against 1.14 at v = 4."""
    choice = optimise_budget_factor(FreParams.paper(8.0, rounding="paper"), v_grid=(1, 2, 3, 4, 5))
    assert choice.budget_factor == 2.0 and choice.p_sample == 0.5
    assert choice.sigma == pytest.approx(0.924, abs=1e-9)
    table = {c.budget_factor: c for c in choice.candidates}
    assert table[4.0].sigma == pytest.approx(1.14, abs=1e-9)
    assert not table[1.0].feasible and "delta_fre" in table[1.0].reason
    assert math.isnan(table[1.0].sigma)
    assert choice.ledger.sigma == choice.sigma
    exact = optimise_budget_factor(FreParams.paper(8.0))  # default grid 0.5..8
    assert exact.budget_factor == 2.0
    assert exact.sigma == pytest.approx(0.92256, abs=1e-4)


def test_optimise_over_p_sample_and_objective() -> None:
    choice = optimise_budget_factor(
        FreParams.paper(8.0), v_grid=(1, 2, 3, 4), p_grid=(0.3, 0.5, 0.7), objective="centroid_std"
    )
    best = choice.ledger.sigma / (choice.p_sample * 100)
    for c in choice.candidates:
        if c.feasible:
            assert c.objective >= best - 1e-15
    assert len(choice.candidates) == 12


def test_optimise_all_infeasible_raises() -> None:
    with pytest.raises(InfeasibleBudgetError, match="no \\(p_sample, budget_factor\\)") as failed:
        optimise_budget_factor(FreParams(epsilon=1.0, p_sample=0.5), v_grid=(2, 3))
    assert "(2 tried): 2 by epsilon budget exhausted, e.g. epsilon budget exhausted: eps_fre" in str(failed.value)
    with pytest.raises(InvalidParameterError, match="epsilon must be finite"):
        optimise_budget_factor(FreParams(epsilon=math.inf, p_sample=1.0))


def test_when_delta_sens_alone_exceeds_delta_the_error_says_so_once() -> None:
    # r = 0.456, u = 4: u·r < 2C, so Lemma 2 is paid; at k = 4 it is 1.5e-3, far above δ = 1e-6.
    params = FreParams(epsilon=8.0, delta=1e-6, radius=0.456, k=4, sensitivity_ratio=4.0, p_sample=0.5)
    with pytest.raises(InfeasibleBudgetError) as failed:
        optimise_budget_factor(params, v_grid=(1, 2, 3), p_grid=(0.3, 0.5))
    message = str(failed.value)
    assert message.startswith("no (p_sample, budget_factor) on the grid is feasible (6 tried): delta_sens = 0.001458 "
                              "(Lemma 2 at k = 4, sensitivity_ratio = 4) alone is >= delta = 1e-06")
    assert "raise k or sensitivity_ratio" in message and message.count("delta_sens") == 1


# -- several texts per user -------------------------------------------------------------------------------


def test_multi_text_guarantee() -> None:
    assert multi_text_guarantee(8.0, 1e-6, cap=3) == pytest.approx((24.0, 3e-6))
    eps, delta = multi_text_guarantee(1.0, 1e-6, points=3)
    assert eps == 3.0
    assert delta == pytest.approx(1e-6 * (math.e**3 - 1) / (math.e - 1), rel=1e-12)
    assert multi_text_guarantee(2.0, 1e-6, points=1) == pytest.approx((2.0, 1e-6))
    # tiny ε: (e^{mε}−1)/(e^ε−1) → m
    assert multi_text_guarantee(1e-12, 1e-6, points=5)[1] == pytest.approx(5e-6, rel=1e-9)
    assert multi_text_guarantee(8.0, 1e-6, points=200)[1] == 1.0
    with pytest.raises(InvalidParameterError, match="exactly one"):
        multi_text_guarantee(1.0, 1e-6)
    with pytest.raises(InvalidParameterError, match="cap must be an integer >= 1"):
        multi_text_guarantee(1.0, 1e-6, cap=0)


# -- the protocol's ledger ------------------------------------------------------------------------------


def _ddg_term(eps: float, delta: float, sigma: float = 1.3) -> LedgerTerm:
    return LedgerTerm(
        name="centroid_ddg",
        epsilon=eps,
        delta=delta,
        source="KLS21 (design §4.4)",
        detail={"sigma_effective": sigma},
    )


def test_protocol_ledger_charges_the_histogram_view() -> None:
    params = FreParams.paper(8.0)
    eps_fre, delta_fre = heavy_hitter_privacy(0.5, 4.0, 50.0)
    agg = _ddg_term(5.0, 9e-7)
    low = protocol_ledger(params, dummy_epsilon=2.0, dummy_delta=2e-6 / 10, aggregation=agg)
    hist = low.term("histogram_release")
    # ε: Lemma 1's term dominates ln(1 − p + p·e^2) = 1.43 and ln 2; δ: delta_fre + p_s·2e-7
    assert hist.epsilon == eps_fre and hist.delta == pytest.approx(delta_fre + 0.5 * 2e-7)
    assert low.epsilon == pytest.approx(eps_fre + 5.0)
    assert low.delta == pytest.approx(delta_fre + 1e-7 + sensitivity_failure(20, 2.4) + 9e-7)
    assert low.sigma == 1.3 and low.noise_multiplier == pytest.approx(1.3 / 1.2)
    flat = low.to_dict()
    assert flat["eps_agg"] == 5.0 and flat["delta_agg"] == 9e-7
    assert flat["eps_fre"] == eps_fre and flat["delta_fre"] == delta_fre
    high = protocol_ledger(params, dummy_epsilon=4.0, dummy_delta=1e-14, aggregation=agg)
    assert high.term("histogram_release").epsilon == pytest.approx(math.log(0.5 + 0.5 * math.exp(4.0)))
    assert high.term("histogram_release").delta == pytest.approx(delta_fre + 0.5e-14)
    within = protocol_ledger(
        params, dummy_epsilon=2.0, dummy_delta=1e-8, aggregation=_ddg_term(5.2, 9e-7), strict=True
    )
    assert within.epsilon <= 8.0
    with pytest.raises(InfeasibleBudgetError, match="above the target"):
        protocol_ledger(params, dummy_epsilon=4.5, dummy_delta=0.0, aggregation=agg, strict=True)


def _binomial(n: int, p: float) -> list[float]:
    return [math.comb(n, m) * p**m * (1 - p) ** (n - m) for m in range(n + 1)]


def _synthesis_view(n: int, p: float, tau: int, dummy: np.ndarray) -> tuple[dict[int, float], np.ndarray]:
    """Exact law of S_syn's view of one bucket of n users: its released count (≥ τ), or the
    histogram of levels 1..τ−1, each padded by independent dummies (``dummy`` = TSDLap pmf)."""
    law = _binomial(n, p)
    shifted = np.concatenate([[0.0], dummy[:-1]])
    released = {m: law[m] for m in range(tau, n + 1)}
    sub = np.zeros((dummy.size,) * (tau - 1))
    for c in range(min(tau, n + 1)):
        joint = np.ones(())
        for level in range(1, tau):
            joint = np.multiply.outer(joint, shifted if c == level else dummy)
        sub += law[c] * joint
    return released, sub


@pytest.mark.parametrize(("p", "v", "tau", "delta0"), [(0.5, 1.0, 3, 0.02), (0.3, 2.0, 4, 0.005)])
def test_histogram_release_cost_bounds_the_exact_view(p: float, v: float, tau: int, delta0: float) -> None:
    """Brute force of the argument in histogram_release_cost: for every bucket size n (the bucket
    that crosses τ − 1 → τ included), the exact hockey-stick divergence between S_syn's views of
    n and n + 1 users, both directions, at the stated ε is at most the stated δ."""
    from primitives.dummies.tsdlap import TSDLapDummyGenerator

    eps_fre, delta_fre = heavy_hitter_privacy(p, v, tau, exact=True)
    gen = TSDLapDummyGenerator(eps_fre / 2, delta0)
    dummy = np.append(gen.pmf_vector(np.arange(2 * gen.shift + 1)), 0.0)  # room for the shift
    epsilon, delta = histogram_release_cost(eps_fre, delta_fre, p, 2 * gen.epsilon0, 2 * gen.delta0)
    worst = 0.0
    for n in range(40):
        a, b = _synthesis_view(n, p, tau, dummy), _synthesis_view(n + 1, p, tau, dummy)
        for (ra, sa), (rb, sb) in ((a, b), (b, a)):
            d = sum(max(0.0, ra.get(m, 0.0) - math.exp(epsilon) * rb.get(m, 0.0)) for m in set(ra) | set(rb))
            d += float(np.maximum(0.0, sa - math.exp(epsilon) * sb).sum())
            worst = max(worst, d)
    assert worst <= delta + 1e-12
    assert worst >= delta_fre - 1e-12  # the released counts alone already need Lemma 1's δ


def test_protocol_ledger_without_sigma_and_bad_inputs() -> None:
    params = FreParams.paper(8.0)
    term = dataclasses.replace(_ddg_term(5.0, 9e-7), detail={})
    ledger = protocol_ledger(params, dummy_epsilon=2.0, dummy_delta=0.0, aggregation=term)
    assert math.isnan(ledger.sigma) and ledger.to_dict()["sigma"] == "nan"
    with pytest.raises(InvalidParameterError, match="dummy_delta"):
        protocol_ledger(params, dummy_epsilon=2.0, dummy_delta=2.0, aggregation=term)
    with pytest.raises(InvalidParameterError, match="reserved name"):
        protocol_ledger(
            params,
            dummy_epsilon=2.0,
            dummy_delta=0.0,
            aggregation=dataclasses.replace(term, name="heavy_hitters"),
        )


def test_calibrate_agm_rejects_unknown_rounding() -> None:
    with pytest.raises(InvalidParameterError, match="rounding"):
        calibrate_agm(1.0, 1e-6, 1.0, rounding="up")
