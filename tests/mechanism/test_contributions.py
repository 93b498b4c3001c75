"""Contribution bounding and the unit of privacy (design §4.6, paper App. D).

Statistical tests state their false-failure probability: chi-square at alpha = 1e-6.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from itertools import combinations

import numpy as np
import pytest
from scipy import stats

from mechanism.accounting import (
    HISTOGRAM_RELEASE,
    calibrate_noise,
    multi_text_guarantee,
    protocol_ledger,
)
from mechanism.contributions import (
    TEXT_UNIT,
    PrivacyUnit,
    bound_contributions,
    dense_users,
    estimate_cap,
    one_text_per_user,
    per_user_guarantee,
    with_unit,
)
from mechanism.fre_e2t import run_mechanism
from mechanism.grid import PublicGrid
from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource

ALPHA = 1e-6


def _plan_by_user(user_ids: np.ndarray, buckets: np.ndarray, cap: int, seed: int = 1) -> dict[int, list[int]]:
    plan = bound_contributions(user_ids, buckets, cap, SeedPlan.from_seed(seed))
    chosen: dict[int, list[int]] = defaultdict(list)
    for row, slot in zip(plan.rows.tolist(), plan.slots.tolist(), strict=True):
        chosen[slot // cap].append(row)
    return chosen


def test_each_user_keeps_at_most_cap_distinct_buckets_of_their_own() -> None:
    rng = np.random.default_rng(3)
    n = 3000
    users = rng.integers(0, 400, n)
    buckets = rng.integers(0, 6, (n, 3))
    cap = 3
    plan = bound_contributions(users, buckets, cap, SeedPlan.from_seed(1))
    owners, n_users = dense_users(users, n)
    assert plan.n_users == n_users == len(np.unique(users))
    assert np.all(np.diff(plan.slots) > 0), "contributions are ordered by slot"
    for u in range(n_users):
        mine = plan.rows[plan.slots // cap == u]
        assert np.all(owners[mine] == u)
        distinct = {tuple(b) for b in buckets[owners == u].tolist()}
        kept = [tuple(b) for b in buckets[mine].tolist()]
        assert len(kept) == len(set(kept)) == min(cap, len(distinct))
        # slots are filled from the first: user u's slots are u*c .. u*c + len - 1
        assert plan.slots[plan.slots // cap == u].tolist() == list(range(u * cap, u * cap + len(kept)))


def test_users_are_numbered_by_first_appearance() -> None:
    owners, n = dense_users(np.array(["bo", "al", "bo", "cy", "al"]), 5)
    assert n == 3 and owners.tolist() == [0, 1, 0, 2, 1]
    with pytest.raises(InvalidInputError, match="one entry per row"):
        dense_users(np.array(["a", "b"]), 3)


def test_the_text_in_a_bucket_is_chosen_uniformly() -> None:
    # 3000 users with 3 texts each in one bucket: the kept position is uniform on {0, 1, 2}.
    users = np.repeat(np.arange(3000), 3)
    buckets = np.zeros((users.size, 2), dtype=np.int64)
    plan = bound_contributions(users, buckets, 2, SeedPlan.from_seed(5))
    assert plan.rows.size == 3000
    counts = np.bincount(plan.rows % 3, minlength=3)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_the_kept_buckets_are_a_uniform_subset() -> None:
    # 6000 users with 4 distinct buckets, cap 2: each of the 6 pairs is kept equally often.
    users = np.repeat(np.arange(6000), 4)
    buckets = np.tile(np.arange(4), 6000)[:, None].astype(np.int64)
    plan = bound_contributions(users, buckets, 2, SeedPlan.from_seed(6))
    pairs = {p: i for i, p in enumerate(combinations(range(4), 2))}
    kept = np.sort(buckets[plan.rows, 0].reshape(-1, 2), axis=1)
    counts = np.bincount([pairs[(a, b)] for a, b in kept.tolist()], minlength=6)
    assert stats.chisquare(counts).pvalue > ALPHA


def test_choices_depend_on_the_secret_seed_only_in_test_mode() -> None:
    users = np.repeat(np.arange(200), 5)
    buckets = np.zeros((1000, 1), dtype=np.int64)
    a = bound_contributions(users, buckets, 1, SeedPlan.from_seed(1))
    b = bound_contributions(users, buckets, 1, SeedPlan.from_seed(1))
    c = bound_contributions(users, buckets, 1, SeedPlan.from_seed(2))
    assert np.array_equal(a.rows, b.rows) and not np.array_equal(a.rows, c.rows)


def test_another_users_texts_do_not_move_a_users_slots() -> None:
    """Same seed, one user's texts moved to other buckets (a neighbouring population): every
    other user keeps the same rows in the same slots, so the seeded coupling of neighbours the
    privacy tests rely on holds (draws belong to rows, not to group numbers)."""
    rng = np.random.default_rng(5)
    n = 2000
    users = rng.integers(0, 300, n)
    buckets = rng.integers(0, 8, (n, 2))
    moved = users == users[0]
    other = buckets.copy()
    other[moved] = rng.integers(8, 16, (int(moved.sum()), 2))
    a = bound_contributions(users, buckets, 3, SeedPlan.from_seed(4))
    b = bound_contributions(users, other, 3, SeedPlan.from_seed(4))
    owner_a, owner_b = a.slot_rows.copy(), b.slot_rows.copy()
    mine = np.arange(a.n_slots) // 3 == 0  # user 0 is the one moved (numbered first)
    assert np.array_equal(owner_a[~mine], owner_b[~mine])
    assert not np.array_equal(buckets[moved], other[moved])


def test_one_text_per_user_is_the_identity_plan() -> None:
    plan = one_text_per_user(4)
    assert plan.rows.tolist() == plan.slots.tolist() == [0, 1, 2, 3] and plan.cap == 1
    bounded = bound_contributions(np.arange(4), np.arange(8).reshape(4, 2), 1, SeedPlan.from_seed(1))
    assert bounded.rows.tolist() == [0, 1, 2, 3] and bounded.slots.tolist() == [0, 1, 2, 3]
    assert bounded.slot_rows.tolist() == [0, 1, 2, 3]
    padded = bound_contributions(np.array([0, 0, 1]), np.array([[0], [0], [1]]), 2, SeedPlan.from_seed(1))
    assert padded.n_slots == 4 and (padded.slot_rows == -1).sum() == 2


@pytest.mark.parametrize("cap", [0, -1, 1.5, True, "2"])
def test_bad_caps_are_refused(cap: object) -> None:
    with pytest.raises(InvalidParameterError, match="cap"):
        bound_contributions(np.zeros(2), np.zeros((2, 1), dtype=np.int64), cap, SeedPlan.from_seed(1))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def corpus() -> tuple[np.ndarray, np.ndarray, FreParams]:
    pop = synthetic_population(4, (320, 300, 260, 40), 200, 24, 0.5, RandomSource.seeded(11, "pop"), spread=0.02)
    return pop.embeddings, pop.labels, FreParams(epsilon=8.0, threshold=100)


def test_distinct_users_with_cap_one_release_what_the_text_unit_releases(corpus: tuple[np.ndarray, np.ndarray, FreParams]) -> None:
    x, _, params = corpus
    seeds = SeedPlan.from_seed(4)
    text = run_mechanism(x, params, seeds, noise=False)
    unit = PrivacyUnit(kind="user", cap=1, user_field="author")
    users = run_mechanism(x, params, seeds, noise=False, users=np.arange(x.shape[0]), unit=unit)
    assert text.ids == users.ids and np.array_equal(text.counts, users.counts)
    np.testing.assert_allclose(text.centroids, users.centroids, rtol=0, atol=1e-12)
    assert text.ledger.unit is not None and text.ledger.unit["kind"] == "text"
    assert "separate user" in text.ledger.unit["statement"]
    assert users.ledger.unit is not None and users.ledger.unit["user_field"] == "author"


def test_a_prolific_user_counts_once_per_bucket(corpus: tuple[np.ndarray, np.ndarray, FreParams]) -> None:
    # Every text of the largest cluster (320 rows) written by one person: its buckets keep one
    # contribution each and are no longer released; without the user field they are.
    x, labels, params = corpus
    seeds = SeedPlan.from_seed(4)
    grid = PublicGrid.derive(seeds, x.shape[1], params)
    buckets = grid.bucket_indices(x)
    users = np.arange(x.shape[0])
    users[labels == 0] = -1
    assert np.sum(labels == 0) == 320
    unit = PrivacyUnit(kind="user", cap=4, user_field="author")
    bounded = run_mechanism(x, params, seeds, noise=False, users=users, unit=unit)
    text = run_mechanism(x, params, seeds, noise=False)
    plan = bound_contributions(users, buckets, 4, seeds)
    assert np.sum(plan.slots // 4 == 0) <= 4
    assert len(bounded) < len(text)
    assert bounded.diagnostics["n_users"] == x.shape[0] - 319
    assert bounded.diagnostics["n_texts"] == x.shape[0]
    assert bounded.ledger.unit is not None and bounded.ledger.unit["epsilon"] == pytest.approx(4 * 8.0)


def test_users_and_unit_must_come_together(corpus: tuple[np.ndarray, np.ndarray, FreParams]) -> None:
    x, _, params = corpus
    with pytest.raises(InvalidParameterError, match="users"):
        run_mechanism(x, params, SeedPlan.from_seed(1), users=np.arange(x.shape[0]))
    with pytest.raises(InvalidParameterError, match="users"):
        run_mechanism(x, params, SeedPlan.from_seed(1), unit=PrivacyUnit(kind="user", cap=2))


def test_central_ledger_composes_c_fold() -> None:
    ledger = calibrate_noise(FreParams(epsilon=8.0, delta=1e-6))
    eps, delta, rule = per_user_guarantee(ledger, PrivacyUnit(kind="user", cap=3))
    assert (eps, delta) == pytest.approx(multi_text_guarantee(ledger.epsilon, ledger.delta, cap=3))
    assert (eps, delta) == pytest.approx((24.0, 3e-6)) and "composition" in rule
    assert per_user_guarantee(ledger, TEXT_UNIT)[:2] == (ledger.epsilon, ledger.delta)


def test_protocol_ledger_pays_group_privacy_for_the_shared_histogram() -> None:
    params = FreParams(epsilon=8.0, delta=1e-6)
    central = calibrate_noise(params)
    agg = dataclasses.replace(central.term("centroid_gaussian"), name="ddg")
    ledger = protocol_ledger(params, dummy_epsilon=1.0, dummy_delta=1e-12, aggregation=agg)
    hist = ledger.term(HISTOGRAM_RELEASE)
    c = 4
    eps, delta, rule = per_user_guarantee(ledger, PrivacyUnit(kind="user", cap=c))
    rest_eps, rest_delta = ledger.epsilon - hist.epsilon, ledger.delta - hist.delta
    # Group privacy by hand: δ_h · Σ_{i<c} e^{i·ε_h}.
    group_delta = hist.delta * sum(math.exp(i * hist.epsilon) for i in range(c))
    assert eps == pytest.approx(c * hist.epsilon + c * rest_eps)
    assert delta == pytest.approx(group_delta + c * rest_delta, rel=1e-9)
    assert delta > c * ledger.delta - c * hist.delta  # the histogram costs more than c-fold
    assert "group privacy" in rule


def test_data_chosen_cap_adds_its_cost() -> None:
    ledger = calibrate_noise(FreParams(epsilon=8.0, delta=1e-6))
    unit = PrivacyUnit(kind="user", cap=2, user_field="u", extra_epsilon=0.5, extra_delta=1e-9)
    eps, delta, _ = per_user_guarantee(ledger, unit)
    assert (eps, delta) == pytest.approx((16.5, 2e-6 + 1e-9))
    record = with_unit(ledger, unit).unit
    assert record is not None and record["epsilon"] == pytest.approx(16.5)
    assert "spent choosing c" in record["statement"]


def test_ledger_round_trips_its_unit() -> None:
    ledger = with_unit(calibrate_noise(FreParams()), PrivacyUnit(kind="user", cap=2, user_field="author"))
    back = PrivacyLedger.from_dict(ledger.to_dict())
    assert back.unit == ledger.unit and back.to_dict()["unit"]["cap"] == 2
    old = {k: v for k, v in ledger.to_dict().items() if k != "unit"}
    assert PrivacyLedger.from_dict(old).unit is None
    assert PrivacyUnit.from_dict(PrivacyUnit(kind="user", cap=3, user_field="a").to_dict()).cap == 3


def test_unit_validation() -> None:
    with pytest.raises(InvalidParameterError, match="text unit"):
        PrivacyUnit(kind="text", cap=2)
    with pytest.raises(InvalidParameterError, match="kind"):
        PrivacyUnit(kind="person")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="extra_epsilon"):
        PrivacyUnit(kind="user", cap=1, extra_epsilon=-1.0)


def test_estimate_cap_reads_the_quantile_of_texts_per_user() -> None:
    # 92.5% of 20,000 users hold <= 3 texts; σ of a (1, 1e-6) Gaussian is ~5 against bins of thousands.
    counts = np.concatenate([np.full(10000, 1), np.full(5000, 2), np.full(3500, 3), np.full(1500, 9)])
    est = estimate_cap(counts, epsilon=1.0, delta=1e-6, seeds=SeedPlan.from_seed(2), quantile=0.9)
    assert est.cap == 3 and len(est.noisy_histogram) == 32
    unit = est.unit("author")
    assert unit.cap == 3 and unit.extra_epsilon == 1.0 and unit.extra_delta == 1e-6
    assert estimate_cap(counts, epsilon=1.0, delta=1e-6, seeds=SeedPlan.from_seed(2), quantile=0.95).cap == 9


def test_estimate_cap_noise_is_calibrated() -> None:
    # The histogram's noise has the analytic-Gaussian σ of (ε, δ) at sensitivity 1 (z-test, alpha 1e-6).
    from primitives.analytic_gaussian import agm_multiplier

    sigma = agm_multiplier(0.5, 1e-6)
    counts = np.full(100, 1)
    draws = np.array(
        [estimate_cap(counts, epsilon=0.5, delta=1e-6, seeds=SeedPlan.from_seed(s), max_cap=32).noisy_histogram[5:]
         for s in range(40)]
    ).ravel()
    z = draws.mean() / (sigma / math.sqrt(draws.size))
    assert abs(z) < stats.norm.isf(ALPHA / 2)
    assert stats.chi2.sf((draws**2).sum() / sigma**2, draws.size) > ALPHA / 2
    assert stats.chi2.cdf((draws**2).sum() / sigma**2, draws.size) > ALPHA / 2


def test_estimate_cap_refuses_bad_input() -> None:
    with pytest.raises(InvalidInputError, match="texts_per_user"):
        estimate_cap(np.array([0, 1]), epsilon=1.0, delta=1e-6, seeds=SeedPlan.from_seed(1))
    with pytest.raises(InvalidParameterError, match="quantile"):
        estimate_cap(np.array([1]), epsilon=1.0, delta=1e-6, seeds=SeedPlan.from_seed(1), quantile=1.0)


def test_group_privacy_applies_exactly_when_a_histogram_term_is_present() -> None:
    # A ledger without a histogram term (the centralized one) never takes the group-privacy branch.
    ledger = calibrate_noise(FreParams())
    assert not ledger.has_term(HISTOGRAM_RELEASE)
    term = LedgerTerm(name=HISTOGRAM_RELEASE, epsilon=1.0, delta=0.0, source="test", detail={})
    extended = dataclasses.replace(ledger, terms=(*ledger.terms, term))
    assert "group privacy" in per_user_guarantee(extended, PrivacyUnit(kind="user", cap=2))[2]
