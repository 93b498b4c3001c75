"""Driver conformance: every driver plays the same populations and releases exactly what the
in-process driver (:func:`fre_protocol.drivers.inprocess.run_protocol`, the reference) releases.

Seeded test mode, so every driver draws the same coins, keys, noise and shuffles' effects: the
same bucket ids, counts and centroids (bit for bit, noise on or off), the same public info, the
same ledger (``to_dict``), the same operator diagnostics, and the same number of transcript
entries per (view, phase, message type, status) over all the stores a run wrote. Where a driver
differs by design, the difference is a declared trait of the driver (:class:`conformance.Driver`)
and is itself checked, not skipped:

* ``settles_windows`` (streaming, worker processes, Dask): the servers keep running sums and
  settle each window's contributions: in phase 2, one ``accepted_contributions`` message each
  way (S_syn → S_tag, S_tag → S_syn) per window and broadcast tag with contributions new in that
  window, which the reference does not send. Checked: only those two entries, equal in both
  views, between the number of released centroids and windows × broadcast tags.
* ``idempotent_resends`` (net): the proxy answers a device's identical re-sent request from its
  log (an HTTP retry), so the duplicate-submission scenario's re-sent tag submission leaves no
  entry, where the in-process proxy refuses it as the device's second message of the kind
  (one ``rejected:RateLimitedError`` in its view). Checked: the reference has exactly that one
  entry more, and nothing else differs.
* ``syn_diagnostics`` (net): the diagnostics are S_syn's own (what its service serves): a subset
  of the reference's keys, equal to them, and ``rejections`` equal to the rejected entries of the
  reference's S_syn view (the reference merges both servers' rejections).

Scenarios (a few hundred users in 32 dimensions, chunks of 64 users, windows of three chunks
so windows do not line up with the chunks of participants; ε = 8 with a small threshold, so
coins are sampled and S_tag's dummy user adds dummy tags): planted clusters, noise off and on;
dropouts between the phases (a fixed mask, noise on: under count-sized noise with the topup
policy, the large tags topped up to their m_h; under the floor calibration, withheld below it); a
malformed share that one server refuses (S_tag with noise off, S_syn with noise on: the release
leaves it out, in every driver); a duplicate submission (one device sends its sealed tag
submission twice, the same bytes); topic-ordered rows (clusters one after the other in the
input, noise on). Faults are injected where the devices compute, in this process and in the
users' worker processes (:func:`conformance.arm`); each run checks that its re-send happened.

Adding a driver: write its adapter ``(x, spec, options, users) -> Outcome`` in
tests/support/conformance.py and add ONE line to ``DRIVERS`` below (a ``conformance.Driver`` with
its traits; ``pytest.mark.integration`` if it starts processes, services or a cluster). The
networked driver's entry point (``deploy_local``, ``RoundSettings``, ``stores_of``) is used in
one place only: :func:`conformance.net`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import conformance
import numpy as np
import pytest
from conformance import Driver, Faults, FixedDropout, Outcome, arm, view_counts
from few_dummies import CONFIG, PARAMS

from fre_protocol.roles.config import RoundSpec, RunOptions
from mechanism.population import synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource

integration = pytest.mark.integration

#: Every driver, one line each (adding a driver: one line here, one adapter in conformance.py).
DRIVERS = [
    pytest.param(Driver("inprocess", conformance.inprocess), id="inprocess"),
    pytest.param(Driver("streaming", conformance.streaming, settles_windows=True), id="streaming"),
    pytest.param(Driver("streaming-processes", conformance.streaming_processes, settles_windows=True), id="streaming-processes", marks=integration),
    pytest.param(Driver("dask", conformance.dask, settles_windows=True), id="dask", marks=integration),
    pytest.param(Driver("net", conformance.net, idempotent_resends=True, syn_diagnostics=True), id="net", marks=integration),
]

#: S_tag withholds a tag short of its m_h, which a dropout allowance f = 0.1 sizes.
WITHHOLD = dataclasses.replace(CONFIG, dropout_policy="withhold", dropout_allowance=0.1)
FLOOR = dataclasses.replace(CONFIG, noise_calibration="floor")
DIM = 32


@functools.cache
def planted() -> np.ndarray:
    """Two tight clusters of 160 users (one bucket each) and 20 rare points, shuffled: 340 users."""
    return synthetic_population(
        2, 160, 20, DIM, 0.5, RandomSource.seeded(11, "conformance/planted"), spread=0.02
    ).embeddings


@functools.cache
def topic_ordered() -> np.ndarray:
    """Rows grouped by topic (tests/support/window_spread.py's layout, larger topics so that they
    clear τ): six clusters of 40 users one after the other, then 40 rare points; 280 users. The
    first window (192 users) holds four topics and most of the fifth, whose last users are in the
    second window with the sixth topic and the rare points."""
    return synthetic_population(
        6, 40, 40, DIM, 0.5, RandomSource.seeded(3, "conformance/topics"), spread=0.02, shuffle=False
    ).embeddings


def _dropped(n: int, fraction: float, seed: int) -> FixedDropout:
    rng = np.random.default_rng(seed)
    return FixedDropout(tuple(sorted(rng.choice(n, size=int(fraction * n), replace=False).tolist())))


@dataclass(frozen=True)
class Scenario:
    name: str
    rows: Callable[[], np.ndarray]
    spec: RoundSpec
    faults: Faults = field(default_factory=Faults)
    users: Any = None

    def __str__(self) -> str:
        return self.name


def _spec(seed: int, *, noise: bool, **kw: Any) -> RoundSpec:
    return RoundSpec(**{"params": PARAMS, "seeds": SeedPlan.from_seed(seed), "noise": noise, "config": CONFIG, **kw})


SCENARIOS = [
    Scenario("planted-noiseless", planted, _spec(5, noise=False)),
    Scenario("planted-noisy", planted, _spec(6, noise=True)),
    # Count-sized noise and topup with f = 0 (the defaults): a quarter of the users drop out, so
    # S_tag tops the tags up to their m_h at their σ_int,h.
    Scenario("dropout", planted, _spec(5, noise=True, dropout=_dropped(340, 0.25, 1))),
    Scenario("dropout-floor", planted, _spec(5, noise=True, dropout=_dropped(340, 0.25, 1), config=FLOOR)),
    # The same dropouts under withhold with f = 0.1: more than f of each tag is gone, so S_tag
    # withholds them.
    Scenario("dropout-withhold", planted, _spec(5, noise=True, dropout=_dropped(340, 0.25, 1), config=WITHHOLD)),
    # Noise on: the tag one contribution short of its m_h (n_h at f = 0) is topped up by S_tag.
    Scenario("share-refused-by-S_tag", planted, _spec(5, noise=True), Faults(refused_share="S_tag")),
    Scenario("share-refused-by-S_syn", planted, _spec(6, noise=True), Faults(refused_share="S_syn")),
    Scenario("duplicate-submission", planted, _spec(5, noise=False), Faults(duplicate_submission=True)),
    Scenario("topic-ordered", topic_ordered, _spec(7, noise=True)),
]

#: The proxy's refusal of a device's second tag submission (the in-process proxies' view of the
#: duplicate-submission scenario).
RESENT = ("proxy", "phase1_submit", "sealed_envelope", "rejected:RateLimitedError")


def _play(driver: Driver, scenario: Scenario, out: Path) -> Outcome:
    out.mkdir(parents=True, exist_ok=True)
    with arm(scenario.faults, out) as resent:
        outcome = driver.run(scenario.rows(), scenario.spec, RunOptions(out_dir=out / "run"), scenario.users)
    assert resent() is scenario.faults.duplicate_submission  # the re-send happened, wherever devices ran
    return outcome


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Scenario], Outcome]:
    """The in-process driver's run of a scenario, once per module."""
    runs: dict[str, Outcome] = {}

    def get(scenario: Scenario) -> Outcome:
        if scenario.name not in runs:
            out = tmp_path_factory.mktemp(f"reference-{scenario.name}")
            runs[scenario.name] = _play(Driver("reference", conformance.inprocess), scenario, out)
        return runs[scenario.name]

    return get


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_the_reference_shows_what_the_scenario_is_about(scenario: Scenario, reference: Callable[[Scenario], Outcome]) -> None:
    """Each scenario is not vacuous: several buckets released, and its fault or setting visible."""
    ref = reference(scenario)
    release, views = ref.release, view_counts(ref.transcripts)
    released = len(release) + len(release.info["withheld"])  # withheld: released tags, no centroid
    assert released >= 2, "the population must release several buckets for a meaningful check"
    assert release.noise is scenario.spec.noise
    assert release.diagnostics["dummies"]["dummy_submissions"] > 0  # S_tag's dummies were mixed in
    rejections = release.diagnostics["rejections"]
    if scenario.faults.refused_share is not None:
        assert rejections == {"rejected:DecodeError": 1}
        assert views[(scenario.faults.refused_share, "phase2", "share_submission", "rejected:DecodeError")] == 1
    else:
        assert rejections == {}
    assert views[RESENT] == (1 if scenario.faults.duplicate_submission else 0)
    dropped = release.diagnostics["n_dropped_out"]
    assert (dropped > 0) is scenario.name.startswith("dropout")
    if scenario.name == "dropout":  # tags short of their count-sized m_h, topped up and released
        topped = release.info["topped_up"]
        assert len(topped) >= 2 and set(topped) <= set(release.ids) and release.info["withheld"] == {}
    if scenario.name == "dropout-withhold":  # the large tags withheld, nothing topped up
        assert len(release.info["withheld"]) >= 2 and release.info["topped_up"] == []
    if scenario.rows is topic_ordered:  # contiguous topics: several windows each hold whole topics
        assert len(release) >= 4


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
@pytest.mark.parametrize("driver", DRIVERS)
def test_every_driver_releases_what_the_in_process_driver_releases(
    driver: Driver, scenario: Scenario, reference: Callable[[Scenario], Outcome], tmp_path: Path
) -> None:
    if scenario.name in driver.unsupported:
        pytest.skip(f"{driver.name} cannot play {scenario.name}: {driver.unsupported[scenario.name]}")
    want = reference(scenario)
    got = _play(driver, scenario, tmp_path)
    a, b = got.release, want.release
    assert a.ids == b.ids
    assert a.counts.tolist() == b.counts.tolist()
    assert a.centroids.dtype == b.centroids.dtype
    np.testing.assert_array_equal(a.centroids, b.centroids)  # bit for bit: the same arithmetic
    assert dict(a.info) == dict(b.info)
    assert a.ledger.to_dict() == b.ledger.to_dict()
    views = view_counts(want.transcripts)
    assert_same_diagnostics(driver, a.diagnostics, b.diagnostics, views)
    assert_same_views(driver, scenario, view_counts(got.transcripts), views, b)


def assert_same_diagnostics(driver: Driver, got: dict[str, Any], want: dict[str, Any], views: Counter[Any]) -> None:
    """The same operator diagnostics, up to the driver's traits."""
    if not driver.syn_diagnostics:
        assert got == want
        return
    # S_syn's own: the contributors per released tag, the submissions it counted, the tags it saw,
    # the tags below the floor, and the rejections in its own view (a share S_tag alone refused
    # is not among them; the reference merges both servers' rejections).
    assert {"contributors", "n_submissions", "rejections"} <= set(got) <= set(want), sorted(got)
    assert {k: v for k, v in got.items() if k != "rejections"} == {k: want[k] for k in got if k != "rejections"}
    in_syn_view: Counter[str] = Counter()
    for (view, _, _, status), n in views.items():
        if view == "S_syn" and status.startswith("rejected"):
            in_syn_view[status] += n
    assert got["rejections"] == dict(in_syn_view)


def assert_same_views(driver: Driver, scenario: Scenario, got: Counter[Any], want: Counter[Any], release: Release) -> None:
    """The same entries per (view, phase, message type, status), up to the driver's traits."""
    got, want = Counter(got), Counter(want)
    if driver.settles_windows:
        settling = Counter({k: n for k, n in got.items() if k[1] == "phase2" and k[2] == "accepted_contributions"})
        assert set(settling) == {("S_tag", "phase2", "accepted_contributions", "accepted"),
                                 ("S_syn", "phase2", "accepted_contributions", "accepted")}, settling
        per_view = set(settling.values())
        assert len(per_view) == 1, settling  # each server received one per message the other sent
        windows = -(-len(scenario.rows()) // (conformance.WINDOW_CHUNKS * scenario.spec.config.chunk_size))
        # One per window and broadcast tag with contributions new in that window: every released
        # centroid's tag has some, and no tag has more windows than there are.
        assert len(release) <= per_view.pop() <= windows * release.info["n_released_tags"], settling
        got -= settling
    if driver.idempotent_resends and want[RESENT]:
        assert want[RESENT] == 1
        del want[RESENT]
    assert dict(sorted(got.items())) == dict(sorted(want.items()))
