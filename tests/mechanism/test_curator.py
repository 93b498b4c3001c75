"""The trusted-curator baseline (paper §7.3): its ledger, its noise-free release, and the
distribution of its noisy counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanism.accounting import calibrate_noise
from mechanism.curator import COUNT_SENSITIVITY, curator_ledger, run_trusted_curator
from mechanism.fre_e2t import clip_factors
from mechanism.grid import PublicGrid, encode_bucket
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.seeds import SeedPlan
from primitives.analytic_gaussian import agm_delta
from primitives.errors import InfeasibleBudgetError
from primitives.randomness import RandomSource

POP = synthetic_population(4, [300, 400, 500, 800], 100, 64, 0.5, RandomSource.seeded(3, "curator"), spread=0.02)


@pytest.mark.parametrize("epsilon", [4.0, 8.0, 16.0])
def test_the_ledger_spends_the_budget_and_gives_the_sums_fre_e2ts_sigma(epsilon: float) -> None:
    params = FreParams.paper(epsilon)
    ledger, mechanism = curator_ledger(params), calibrate_noise(params)
    assert ledger.sigma == mechanism.sigma
    assert ledger.epsilon <= params.epsilon * (1 + 1e-12) and ledger.delta <= params.delta
    counts = ledger.terms[0]
    sigma_c = counts.detail["sigma_counts"]
    # the count term pays Lemma 1's share: AGM at (eps_fre, delta_fre/2) plus the appearing buckets
    heavy = mechanism.terms[0]
    assert counts.epsilon == heavy.epsilon
    assert agm_delta(sigma_c, heavy.epsilon, COUNT_SENSITIVITY) <= heavy.delta / 2 * (1 + 1e-9)
    assert counts.delta <= heavy.delta


def test_a_threshold_too_close_to_the_noise_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the paper's t the appearing buckets cost nothing (Q(99/σ_c) underflows); were the count
    noise as large as the threshold (stood in for by Q = 1/2), the ledger must refuse."""
    import mechanism.curator as curator

    assert curator_ledger(FreParams.paper(8.0)).terms[0].detail["delta_appear"] < 1e-300
    monkeypatch.setattr(curator, "normal_cdf", lambda _: 0.5)
    with pytest.raises(InfeasibleBudgetError, match="raise the threshold"):
        curator_ledger(FreParams.paper(8.0))


def test_without_noise_it_releases_every_bucket_of_t_users_and_their_exact_centroids() -> None:
    params, seeds = FreParams.paper(math.inf), SeedPlan.from_seed(5)
    release = run_trusted_curator(POP.embeddings, params, seeds)
    buckets = PublicGrid.derive(seeds, POP.embeddings.shape[1], params).bucket_indices(POP.embeddings)
    ids = np.array([encode_bucket(b).hex() for b in buckets])
    want = sorted(i for i in set(ids.tolist()) if (ids == i).sum() >= params.threshold)
    assert list(release.ids) == want and len(want) >= 4
    clipped = POP.embeddings * clip_factors(POP.embeddings, params.clip)[:, None]
    for j, bucket in enumerate(release.ids):
        members = ids == bucket
        assert release.counts[j] == members.sum()
        np.testing.assert_allclose(release.centroids[j], clipped[members].mean(axis=0), rtol=1e-9, atol=1e-12)


def test_noisy_counts_carry_the_stated_gaussian() -> None:
    """Released count minus true count over 60 seeds (5 heavy buckets each): the sample variance
    against σ_c² by a two-sided chi-square bound at α = 1e-6 (normal approximation), and the
    mean against 0 at the same α."""
    params = FreParams.paper(8.0)
    sigma_c = curator_ledger(params).terms[0].detail["sigma_counts"]
    exact = run_trusted_curator(POP.embeddings, FreParams.paper(math.inf), SeedPlan.from_seed(5))
    truth = dict(zip(exact.ids, exact.counts.tolist(), strict=True))
    residuals = []
    public = SeedPlan.from_seed(5).public_seed  # the same grid, fresh secret coins per run
    for seed in range(60):
        coins = SeedPlan.from_seed(1000 + seed).test_seed
        release = run_trusted_curator(POP.embeddings, params, SeedPlan(public_seed=public, test_seed=coins))
        residuals += [c - truth[i] for i, c in zip(release.ids, release.counts.tolist(), strict=True) if i in truth]
    r = np.asarray(residuals)
    n, z = r.size, 4.89  # two-sided α = 1e-6
    assert n >= 200
    assert abs(r.mean()) < z * sigma_c / math.sqrt(n)
    assert abs(r.var(ddof=1) / sigma_c**2 - 1) < z * math.sqrt(2 / (n - 1))
