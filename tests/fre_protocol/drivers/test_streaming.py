"""The streaming driver against the in-process runner (issue 13, part 1).

Seeded mode, same seed: the streaming driver must release exactly the runner's buckets, counts
and centroids, bit for bit, with noise off and with noise on; both transcripts must hold the same
multiset of messages besides the servers' settling of each window's contributions (only their
order differs: the proxy shuffles per window). Windows of three
chunks of 64 users do not line up with the chunks of participants, so a participant chunk that
straddles two windows is exercised. The memory test checks the property that motivates the
driver: traced peak memory grows with N by far less per user than a user's shares weigh.

With ``user_processes`` the users play in local worker processes (spawned: a second or two to
start) and the windows overlap: the same release, the same multiset of messages; a worker killed
mid-run stops the run with no release.
"""

from __future__ import annotations

import collections
import gc
import math
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from few_dummies import CONFIG, PARAMS

from fre_protocol.drivers import dask as dask_driver
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.streaming import run_streaming
from fre_protocol.drivers.user_processes import UserProcesses, in_worker_processes
from fre_protocol.gc_policy import ROUND_THRESHOLDS
from fre_protocol.inputs import EmbeddingShards, open_embeddings
from fre_protocol.roles.config import RoundSpec, RunOptions
from fre_protocol.roles.server_common import ShareBook
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidParameterError, ProtocolStateError
from primitives.randomness import RandomSource
from primitives.sharing.ring2k import AdditiveRing2k
from transcripts import TranscriptStore

WINDOW_CHUNKS = 3


def _population(dim: int, clusters: int, size: int, outliers: int, seed: int) -> Population:
    # Tight clusters (spread ≪ bucket edge) so each cluster shares a bucket and clears τ.
    return synthetic_population(
        clusters, size, outliers, dim, 0.5, RandomSource.seeded(seed, "streaming/population"), spread=0.02
    )


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return _population(32, 2, 160, 20, 11).embeddings


def _same_release(a: Release, b: Release) -> None:
    assert len(a) >= 2, "the population must release several buckets for a meaningful check"
    assert a.ids == b.ids
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.centroids, b.centroids)  # bit for bit, not up to a tolerance
    assert a.info == b.info
    assert a.diagnostics == b.diagnostics


def _messages(path: object) -> collections.Counter[tuple[object, ...]]:
    with TranscriptStore.open(path) as store:  # type: ignore[arg-type]
        return collections.Counter(
            (e.view, e.phase, e.sender, e.receiver, e.message_type, e.status, e.size, e.payload) for e in store
        )


def test_same_release_without_noise(x: np.ndarray) -> None:
    params, seeds = PARAMS, SeedPlan.from_seed(5)
    ref = run_protocol(x, RoundSpec(params=params, seeds=seeds, noise=False, config=CONFIG)).release
    got = run_streaming(x, RoundSpec(params=params, seeds=seeds, noise=False, config=CONFIG), window_chunks=WINDOW_CHUNKS).release
    _same_release(ref, got)


def test_same_noisy_release_and_messages_from_shards(x: np.ndarray, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Noise on, same seed; the streaming run reads its users from three uneven .npy shards."""
    shard_dir = tmp_path / "shards"
    shard_dir.mkdir()
    for name, (lo, hi) in zip(("a", "b", "c"), ((0, 100), (100, 333), (333, len(x))), strict=True):
        np.save(shard_dir / f"{name}.npy", x[lo:hi])
    shards = open_embeddings(shard_dir)
    assert isinstance(shards, EmbeddingShards) and shards.shape == x.shape
    assert np.array_equal(shards.rows(90, 340), x[90:340])  # across both shard boundaries

    params, seeds = PARAMS, SeedPlan.from_seed(6)
    ref = run_protocol(x, RoundSpec(params=params, seeds=seeds, config=CONFIG), RunOptions(out_dir=tmp_path / "ref"))
    got = run_streaming(shards, RoundSpec(params=params, seeds=seeds, config=CONFIG), RunOptions(out_dir=tmp_path / "stream"), window_chunks=WINDOW_CHUNKS)
    _same_release(ref.release, got.release)
    assert got.release.diagnostics["dummies"]["dummy_submissions"] > 0  # dummies were mixed in
    # Besides the runner's messages, the servers settle each window's contributions (issue 28,
    # M6): S_syn names them to S_tag and S_tag names them back, one message each way per tag.
    streamed = _messages(got.transcript_path)
    settling = collections.Counter({m: n for m, n in streamed.items() if m[1] == "phase2" and m[4] == "accepted_contributions"})
    assert {(m[0], m[2]) for m in settling} == {("S_tag", "S_syn"), ("S_syn", "S_tag")}
    assert _messages(ref.transcript_path) == streamed - settling


def test_a_sizes_only_transcript_records_every_message_without_its_bytes(x: np.ndarray, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``transcript="sizes"`` (for paper-scale runs): the same release, and the same entries as a
    full transcript — view, phase, roles, type, status, size, in order — none with its bytes;
    the header says so and the audit runs the checks a sizes-only store allows, stating the rest."""
    from fre_protocol.audit import audit_run

    params, seeds = PARAMS, SeedPlan.from_seed(6)
    spec = RoundSpec(params=params, seeds=seeds, config=CONFIG)
    full = run_streaming(x, spec, RunOptions(out_dir=tmp_path / "full"), window_chunks=WINDOW_CHUNKS)
    sizes = run_streaming(
        x, spec, RunOptions(out_dir=tmp_path / "sizes", transcript="sizes"), window_chunks=WINDOW_CHUNKS
    )
    _same_release(full.release, sizes.release)
    with TranscriptStore.open(full.transcript_path) as a, TranscriptStore.open(sizes.transcript_path) as b:  # type: ignore[arg-type]
        assert (a.header.extra["transcript"], b.header.extra["transcript"]) == ("full", "sizes")
        # Phase 2's two servers take a window at once, so the global interleaving (and seq) varies
        # from run to run; each view's own order does not.
        assert _entries_by_view(a) == _entries_by_view(b)
        assert any(e.payload_recorded for e in a) and not any(e.payload_recorded for e in b)
    report = audit_run(tmp_path / "sizes")
    assert report.passed, report.failures
    assert "release:centroids" not in {f.name for f in report.findings}  # nothing to recompute from
    assert any("--transcript-mode sizes" in note for note in report.summary["notes"])
    with pytest.raises(InvalidParameterError, match="transcript must be one of"):
        run_streaming(x, spec, RunOptions(transcript="payloads"), window_chunks=WINDOW_CHUNKS)


def _entries_by_view(store: TranscriptStore) -> dict[str, list[tuple[object, ...]]]:
    views: dict[str, list[tuple[object, ...]]] = {}
    for e in store:
        views.setdefault(e.view, []).append((e.phase, e.sender, e.receiver, e.message_type, e.status, e.size))
    return views


def test_share_book_running_sum_equals_the_kept_shares() -> None:
    """The running sum is the sum of the kept shares; a strict subset cannot be summed from it."""
    sharing = AdditiveRing2k(bits=24)
    rng = RandomSource.seeded(3, "streaming/book")
    shares = (rng.uint64(5 * 8).reshape(5, 8) & np.uint64(sharing.modulus - 1)).astype(np.uint64)
    ids = [bytes([i]) * 16 for i in range(5)]
    kept, running = ShareBook(keep_contributions=True), ShareBook(keep_contributions=False)
    for book in (kept, running):
        for j, (cid, share) in enumerate(zip(ids, shares, strict=True)):
            book.add(b"t", cid, share)
            if j == 2:
                book.fold(sharing)  # two batches
        book.fold(sharing)
    assert np.array_equal(running.total(b"t", ids, sharing=sharing), kept.total(b"t", ids, sharing=sharing))
    assert np.array_equal(kept.total(b"t", ids[:3], sharing=sharing), sharing.aggregate(shares[:3]))
    with pytest.raises(ProtocolStateError):
        running.total(b"t", ids[:3], sharing=sharing)
    with pytest.raises(ProtocolStateError):
        running.add(b"t", ids[0], shares[0])


def test_settling_takes_a_contribution_the_other_server_lacks_out_of_the_running_sum() -> None:
    """Issue 28 (M6): after a window, a running sum keeps only the contributions named by the
    other server; the one it lacks leaves the sum and the ids, and the total then equals the
    kept shares' sum over the common ids (what the runner's servers add up)."""
    from primitives.sharing.wire import pack_words

    sharing = AdditiveRing2k(bits=24)
    rng = RandomSource.seeded(4, "streaming/settle")
    shares = (rng.uint64(5 * 8).reshape(5, 8) & np.uint64(sharing.modulus - 1)).astype(np.uint64)
    ids = [bytes([i]) * 16 for i in range(5)]
    kept, running = ShareBook(keep_contributions=True), ShareBook(keep_contributions=False)
    for book in (kept, running):
        book.add_many(b"t", ids, list(shares), [pack_words(s, sharing.word_bytes) for s in shares])
        book.fold(sharing)
    assert running.unsettled() == {b"t": sorted(ids)}
    common = ids[:2] + ids[3:]
    assert running.settle({b"t": set(common)}, sharing=sharing, dim=8) == {b"t": sorted(common)}
    assert running.unsettled() == {} and running.ids(b"t") == set(common) and running.count(b"t") == 4
    assert not running.has(b"t", ids[2])
    assert np.array_equal(running.total(b"t", common, sharing=sharing), kept.total(b"t", common, sharing=sharing))
    with pytest.raises(ProtocolStateError):
        running.add(b"t", ids[2], shares[2])  # its id stays spent


def test_peak_memory_grows_far_less_than_a_users_shares() -> None:
    """Traced peak at N and 4N users, d = 768, ε = ∞ (every user of a released bucket sends its
    shares). A participant's two shares weigh 2 · 8 · 1024 bytes in the servers when kept: the
    runner's peak grows by more than 10 kB per added user. The streaming driver keeps one running
    sum per released tag; what still grows with N is per-message bookkeeping (replay digests,
    nonces, contribution ids, coins and device flags: Python sets of 16-byte strings, ~0.1 kB an
    entry, a few entries a user; 1.6 to 4.9 kB a user measured). Its growth per added user must
    stay under 8 kB, half of what one participant's kept shares would add."""
    params, seeds = FreParams.paper(math.inf), SeedPlan.from_seed(7)
    small, large = (_population(768, 2, n // 2, 0, 13).embeddings for n in (256, 1024))

    def peak(run: object, x: np.ndarray) -> int:
        kwargs = {"window_chunks": 2} if run is run_streaming else {}
        spec = RoundSpec(params=params, seeds=seeds, noise=False, config=CONFIG)
        result = run(x, spec, RunOptions(measure_memory=True), **kwargs)  # type: ignore[operator]
        assert result.release.diagnostics["n_participants"] > 0.8 * len(x)
        return int(result.costs["peak_memory_bytes"])

    # Lazy imports and JIT compilation happen in a process's first run: not in a measured one.
    run_streaming(small[:128], RoundSpec(params=params, seeds=seeds, noise=False, config=CONFIG))
    added = len(large) - len(small)
    streaming = -(peak(run_streaming, small) - peak(run_streaming, large)) / added
    runner = -(peak(run_protocol, small) - peak(run_protocol, large)) / added
    assert runner > 10_000, runner  # the property is visible at this size
    print(f"peak growth per added user: streaming {streaming:.0f} B, runner {runner:.0f} B")
    assert streaming < 8_000, (streaming, runner)


# -- users in local worker processes (user_processes) ---------------------------------------------
def _run_users_in(x: np.ndarray, out: Path, processes: int) -> Release:
    return run_streaming(x, RoundSpec(params=PARAMS, seeds=SeedPlan.from_seed(6), noise=True, config=CONFIG), RunOptions(out_dir=out), window_chunks=WINDOW_CHUNKS, players=in_worker_processes(processes) if processes else None).release


@pytest.mark.integration  # worker processes
def test_same_release_and_messages_as_threads(x: np.ndarray, tmp_path: Path) -> None:
    threads = _run_users_in(x, tmp_path / "threads", 0)
    processes = _run_users_in(x, tmp_path / "processes", 2)
    _same_release(threads, processes)
    assert processes.noise and processes.diagnostics["dummies"]["dummy_submissions"] > 0
    assert _messages(tmp_path / "processes" / "transcript.sqlite") == _messages(tmp_path / "threads" / "transcript.sqlite")


@pytest.mark.integration  # worker processes
def test_a_killed_worker_process_stops_the_run_with_no_release(
    x: np.ndarray, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL to a users' worker before phase 2: the devices it held are gone, so the run stops
    with a ProtocolStateError that says so, and nothing is released."""
    pools: list[UserProcesses] = []
    start = UserProcesses.__init__

    def remember(self: UserProcesses, processes: int) -> None:
        start(self, processes)
        pools.append(self)

    phase2 = dask_driver.DaskWindows.phase2

    def kill_first(self: Any, *args: Any, **kwargs: Any) -> Any:
        worker = pools[0]._workers[0]
        for pid in list(worker._processes):  # the pool's one process
            os.kill(pid, signal.SIGKILL)
        return phase2(self, *args, **kwargs)

    monkeypatch.setattr(UserProcesses, "__init__", remember)
    monkeypatch.setattr(dask_driver.DaskWindows, "phase2", kill_first)
    out = tmp_path / "run"
    with pytest.raises(ProtocolStateError, match="worker process died"):
        _run_users_in(x, out, 2)
    assert not (out / "release.json").exists() and not (out / "centroids.npy").exists()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_worker_processes_must_be_a_positive_count(bad: Any) -> None:
    with pytest.raises(InvalidParameterError, match="processes must be an integer >= 1"):
        in_worker_processes(bad)
    with pytest.raises(InvalidParameterError, match="processes must be an integer >= 1"):
        UserProcesses(bad)


def test_simulate_refuses_processes_outside_the_drivers_that_have_them(tmp_path: Path) -> None:
    from fre_protocol.cli import main

    x = synthetic_population(1, 40, 0, 8, 0.5, RandomSource.seeded(1, "p"), spread=0.02).embeddings
    np.save(tmp_path / "x.npy", x)
    code = main([
        "simulate", "--embeddings", str(tmp_path / "x.npy"), "--seed", "1", "--out", str(tmp_path / "run"),
        "--driver", "runner", "--processes", "2",
    ])
    assert code == 2
    assert not (tmp_path / "run" / "release.json").exists()


@pytest.mark.integration  # worker processes
def test_worker_processes_collect_cycles_at_the_round_thresholds() -> None:
    """The users' workers run with the collector policy of fre_protocol.gc_policy, not CPython's
    default (which would spend ~5% of a round's CPU on collections that find nothing)."""
    with UserProcesses(1) as pool:
        thresholds = pool.gather([pool.submit(gc.get_threshold, key="thresholds")])[0]
    assert tuple(thresholds) == ROUND_THRESHOLDS != (700, 10, 10)


@pytest.mark.parametrize("processes", [0, 1])
def test_window_boundaries_do_not_tell_dummy_tags_from_real_ones(processes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 (H2). Rows grouped by topic (50 clusters of 8 users one after the other, 40 rare
    points; windows of 32 users): in S_syn's recorded view, the number of distinct deliveries a
    tag's submissions came in must not depend on whether the tag is real or a dummy. Test: the
    stratified two-sample permutation test of :func:`window_spread.spread_test` (real against
    dummy tags within each count level 2 … 7: 45 real and ~250 dummy tags), two-sided,
    α = 0.01: a fresh seed fails it with probability ≈ 0.01 (normal approximation of the
    permutation distribution). Seed fixed (population 3, run 7). Users on threads, or in one
    worker process (the servers stay here). When each window was delivered with its own share of
    the dummies, real tags came in one delivery and dummies in about as many as their count
    (Z = −13.2, p = 1e-39)."""
    import window_spread as ws

    players = in_worker_processes(processes) if processes else None
    with ws.syn_view(monkeypatch) as view:
        run_streaming(ws.grouped_rows(), RoundSpec(params=ws.PARAMS, seeds=SeedPlan.from_seed(7), noise=False, config=ws.CONFIG), window_chunks=ws.WINDOW_CHUNKS, players=players)
    seen = view()
    z, p = ws.spread_test(seen)
    levels = seen.by_level()
    assert sum(len(r) for r, _ in levels.values()) >= 30 and sum(len(d) for _, d in levels.values()) >= 150, ws.describe(seen)
    assert p >= ws.ALPHA, f"Z = {z:.2f}, p = {p:.3g}\n{ws.describe(seen)}"
