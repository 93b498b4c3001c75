"""Parameter helpers for the default embedder: documented defaults, radius from public data,
the private-data evaluation label, and the pre-flight check."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from fre_protocol.text.tuning import (
    EVALUATION_LABEL,
    MINILM_DEFAULTS,
    MINILM_SETTINGS,
    choose_sampling,
    evaluate_radius_on_private_data,
    explain_empty_release,
    min_feasible_threshold,
    minilm_params,
    preflight,
    radius_from_public,
    radius_quantile_public,
    smallest_threshold,
)
from mechanism.accounting import calibrate_noise, sensitivity_failure
from mechanism.params import FreParams
from primitives.errors import InfeasibleBudgetError
from primitives.randomness import RandomSource


@pytest.mark.parametrize("epsilon", [4.0, 8.0, 16.0, math.inf])
def test_minilm_defaults_are_feasible_at_every_documented_epsilon(epsilon: float) -> None:
    """The documented (p_s, v) table is what choose_sampling derives (σ/τ minimal)."""
    params = minilm_params(epsilon)
    ledger = calibrate_noise(params)
    assert ledger.epsilon <= epsilon + 1e-9 and ledger.delta <= params.delta * (1 + 1e-9)
    if math.isfinite(epsilon):
        assert (params.p_sample, params.budget_factor) == MINILM_SETTINGS[epsilon]
        # Unit-norm embeddings, u·r = 3.6 ≥ 2C: the cap binds, Δ = 2 and δ_sens = 0 (design §4.2)
        assert params.clip == 1.0 and params.sensitivity_capped and params.sensitivity == 2.0
        assert ledger.term("sensitivity_failure").delta == 0.0
        # u = 4 keeps Lemma 2 far below δ at k = 10 should a smaller r (< 0.5) lift the cap
        assert sensitivity_failure(params.k, params.sensitivity_ratio) < 0.1 * params.delta
    else:
        assert params.effective_p_sample == 1.0 and ledger.sigma == 0.0


def test_synthesize_flag_defaults_are_the_documented_ones() -> None:
    """synthesize keeps its defaults literal (so --help imports no text code): they must agree."""
    from fre_protocol.cli.synthesize import _DEFAULTS

    for name, value in MINILM_DEFAULTS.items():
        assert getattr(_DEFAULTS, name) == value, name
    assert (_DEFAULTS.p_sample, _DEFAULTS.budget_factor) == MINILM_SETTINGS[_DEFAULTS.epsilon]


def test_radius_from_public_is_the_knn_distance_quantile() -> None:
    x = RandomSource.seeded(5, "public").normal((120, 6))
    choice = radius_from_public(x, quantile=0.3, neighbour_rank=3)
    d = np.linalg.norm(x[:, None, :] - x[None, :, :], axis=2)
    np.fill_diagonal(d, np.inf)
    third = np.sort(d, axis=1)[:, 2]
    assert choice.radius == pytest.approx(float(np.quantile(third, 0.3)), rel=1e-6)
    assert choice.source == "public" and choice.n_public == 120
    assert radius_quantile_public(choice.radius, x, neighbour_rank=3) == pytest.approx(
        float(np.mean(third <= choice.radius))
    )


def test_private_radius_statistics_are_labelled_as_evaluation() -> None:
    x = RandomSource.seeded(6, "private").normal((50, 4))
    out = evaluate_radius_on_private_data(x, [0.5, 5.0], threshold=3)
    assert out["label"] == EVALUATION_LABEL and "private" in out["label"]
    assert out["rows"][1]["frequent_share"] == 1.0  # every point has ≥ 3 others within 5σ-ish
    assert out["rows"][0]["frequent_share"] <= out["rows"][1]["frequent_share"]


def test_preflight_population_smaller_than_threshold() -> None:
    check = preflight(minilm_params(8.0), 80)
    assert check.feasible
    assert any("smaller than the threshold t = 100" in w for w in check.warnings)


def test_preflight_small_population_expects_few_buckets() -> None:
    check = preflight(minilm_params(8.0), 200)  # p_s = 0.7: τ = 70, about 140 texts sampled
    assert check.release_floor == 70 and check.max_releasable_buckets == 2
    assert any("expect at most 2 released bucket" in w for w in check.warnings)


def test_preflight_reports_infeasible_budget_and_smallest_feasible_t() -> None:
    params = minilm_params(8.0, threshold=20, p_sample=0.5, budget_factor=3.0)
    with pytest.raises(InfeasibleBudgetError, match="delta budget exhausted"):
        calibrate_noise(params)
    check = preflight(params, 63_000)
    assert not check.feasible and "delta budget exhausted" in check.reason
    t_min = check.min_feasible_threshold
    assert t_min is not None and t_min > 20
    calibrate_noise(dataclasses.replace(params, threshold=t_min))  # feasible at t_min ...
    with pytest.raises(InfeasibleBudgetError, match="budget"):
        calibrate_noise(dataclasses.replace(params, threshold=t_min - 1))  # ... and not below
    assert min_feasible_threshold(minilm_params(8.0)) == 100


@pytest.mark.parametrize("start", [1, 7, 64])
def test_smallest_threshold_finds_the_edge_of_any_monotone_predicate(start: int) -> None:
    for edge in [1, 2, 3, 63, 64, 65, 100, 999, 1000]:
        asked: list[int] = []

        def feasible(t: int, edge: int = edge, asked: list[int] = asked) -> bool:
            asked.append(t)
            return t >= edge

        assert smallest_threshold(feasible, start=start, limit=1000) == max(edge, start)
        assert len(asked) <= 2 * 11  # doubling then bisection: logarithmic in the limit
    assert smallest_threshold(lambda t: t >= 1001, start=start, limit=1000) is None


def test_preflight_quiet_on_the_documented_setting_and_large_population() -> None:
    assert preflight(minilm_params(8.0), 63_322).warnings == ()
    params = FreParams(epsilon=8.0, k=10, sensitivity_ratio=2.4, radius=0.8, p_sample=0.5)
    with pytest.raises(InfeasibleBudgetError, match="delta_sens"):
        calibrate_noise(params)  # u = 2.4 at k = 10, u·r = 1.92 < 2C: Lemma 2 alone exhausts δ
    check = preflight(params, 63_322)
    assert any("δ_sens" in w and "2C = 2" in w for w in check.warnings)
    # At r = 0.9, u·r = 2.16 ≥ 2C: the cap binds, δ_sens = 0 and the same u is feasible.
    capped = dataclasses.replace(params, radius=0.9)
    assert calibrate_noise(capped).term("sensitivity_failure").delta == 0.0
    assert not any("δ_sens" in w for w in preflight(capped, 63_322).warnings)


def test_empty_release_explanation_uses_public_quantities_only() -> None:
    text = explain_empty_release(minilm_params(8.0), 3000)
    assert "τ = p_s·t = 70" in text and "N = 3000" in text and "k = 10" in text


def test_choose_sampling_minimises_centroid_noise_and_respects_fixed_values() -> None:
    params = minilm_params(8.0)
    p_s, v = choose_sampling(params)
    score = calibrate_noise(params).sigma / params.tau
    for other in [(0.5, 3.0), (0.5, 2.0), (0.3, 4.0), (0.6, 2.0)]:
        trial = dataclasses.replace(params, p_sample=other[0], budget_factor=other[1])
        assert calibrate_noise(trial).sigma / trial.tau >= score
    assert choose_sampling(params, fix_p_sample=True)[0] == params.p_sample
    fixed = minilm_params(8.0, budget_factor=3.0)
    assert fixed.budget_factor == 3.0 and (fixed.p_sample, 3.0) == choose_sampling(fixed, fix_budget_factor=True)
    assert (p_s, v) == MINILM_SETTINGS[8.0]
