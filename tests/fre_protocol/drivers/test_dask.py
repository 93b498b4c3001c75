"""The Dask driver (issue 13, part 2) against the in-process drivers, its key placement, and
worker loss.

Seeded mode, same seed: Dask releases exactly what :func:`run_protocol` and
:func:`run_streaming` release, bit for bit, noise off and on. Windows of three chunks of 64 users
do not line up with the chunks of participants, as in the streaming tests. The clusters are one
process with two single-threaded workers, except in the SIGKILL tests, whose workers are processes
of their own (started under a nanny, which restarts a killed one at a new address).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from few_dummies import CONFIG, PARAMS

distributed = pytest.importorskip("distributed")

from fre_protocol.drivers import chunk_tasks  # noqa: E402
from fre_protocol.drivers import dask as dask_driver  # noqa: E402
from fre_protocol.drivers.dask import DaskCluster, Placement, ServerHost, run_dask  # noqa: E402
from fre_protocol.drivers.inprocess import run_protocol  # noqa: E402
from fre_protocol.drivers.streaming import run_streaming  # noqa: E402
from fre_protocol.roles.base import Meter  # noqa: E402
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions  # noqa: E402
from mechanism.population import synthetic_population  # noqa: E402
from mechanism.release import Release  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402
from primitives.errors import ProtocolStateError  # noqa: E402
from primitives.randomness import RandomSource  # noqa: E402
from transcripts import TranscriptStore  # noqa: E402

WINDOW_CHUNKS = 3
USER_TASKS = (dask_driver.users_blind, dask_driver.users_submit, dask_driver.users_encode, dask_driver.users_seal)


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return synthetic_population(
        2, 160, 20, 32, 0.5, RandomSource.seeded(11, "streaming/population"), spread=0.02
    ).embeddings


def _cluster() -> Any:
    return distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )


@pytest.fixture
def client() -> Any:
    with _cluster() as cluster, distributed.Client(cluster) as c:
        yield c


def _same_release(a: Release, b: Release) -> None:
    assert len(a) >= 2, "the population must release several buckets for a meaningful check"
    assert a.ids == b.ids
    assert np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.centroids, b.centroids)  # bit for bit
    assert a.info == b.info
    assert a.diagnostics == b.diagnostics


@pytest.fixture(scope="module")
def reference(x: np.ndarray) -> Release:
    return run_protocol(x, RoundSpec(params=PARAMS, seeds=SeedPlan.from_seed(5), noise=False, config=CONFIG)).release


def _dask(
    x: np.ndarray, client: Any, *, noise: bool = False, seeds: SeedPlan | None = None, unit: Any = None,
    users: Any = None, out_dir: Any = None,
) -> Release:
    spec = RoundSpec(
        params=PARAMS, seeds=seeds or SeedPlan.from_seed(5), noise=noise, config=CONFIG,
        **({"unit": unit} if unit is not None else {}),
    )
    return run_dask(
        x, spec, RunOptions(out_dir=out_dir), users=users, window_chunks=WINDOW_CHUNKS,
        cluster=DaskCluster(client=client),
    ).release


def test_same_release_as_the_runner_without_noise(x: np.ndarray, client: Any, reference: Release) -> None:
    _same_release(reference, _dask(x, client))


@pytest.mark.fast  # the Dask driver's one equivalence test in the fast tier
def test_same_noisy_release_as_streaming_and_the_runner(x: np.ndarray, client: Any) -> None:
    params, seeds = PARAMS, SeedPlan.from_seed(6)
    ref = run_streaming(x, RoundSpec(params=params, seeds=seeds, noise=True, config=CONFIG), window_chunks=WINDOW_CHUNKS).release
    got = _dask(x, client, noise=True, seeds=seeds)
    _same_release(ref, got)
    assert got.noise and got.diagnostics["dummies"]["dummy_submissions"] > 0
    # streaming equals the runner (tests/fre_protocol/drivers/test_streaming.py); checked once here too
    assert np.array_equal(run_protocol(x, RoundSpec(params=params, seeds=seeds, noise=True, config=CONFIG)).release.centroids, got.centroids)


def test_a_user_unit_releases_what_the_runner_releases(x: np.ndarray, client: Any) -> None:
    """Several texts per user: each task gets its chunk of slots (padding inputs included) from
    the driver, and the release is the runner's, bit for bit, noise on."""
    from mechanism.contributions import PrivacyUnit

    authors = np.array([f"a{i % 150}" for i in range(x.shape[0])])  # about two texts an author
    unit = PrivacyUnit(kind="user", cap=2, user_field="author")
    # The seed is arbitrary; it is one whose coins let two buckets clear the threshold.
    params, seeds = PARAMS, SeedPlan.from_seed(11)
    ref = run_protocol(x, RoundSpec(params=params, seeds=seeds, noise=True, config=CONFIG, unit=unit), users=authors).release
    got = _dask(x, client, noise=True, seeds=seeds, users=authors, unit=unit)
    _same_release(ref, got)
    assert got.ledger.unit == ref.ledger.unit and got.diagnostics["n_padding_slots"] > 0


def test_server_keys_stay_on_their_workers(x: np.ndarray, client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside test mode: each server's actor runs on the worker the placement names for it, and
    no user task's pickled arguments hold a byte string of either server's secret keys."""
    hosts: list[tuple[ServerHost, str]] = []
    init = ServerHost.__init__

    def spy_init(self: ServerHost, role: str, spec: Any) -> None:
        init(self, role, spec)
        hosts.append((self, distributed.get_worker().address))

    submitted: list[bytes] = []
    submit = client.submit

    def spy_submit(fn: Any, *args: Any, **kwargs: Any) -> Any:
        if fn in USER_TASKS:
            submitted.append(pickle.dumps(args))
        return submit(fn, *args, **kwargs)

    monkeypatch.setattr(ServerHost, "__init__", spy_init)
    monkeypatch.setattr(client, "submit", spy_submit)
    place = Placement.of(client)
    _dask(x, client, seeds=SeedPlan.fresh())
    where = {len(host._keys): addr for host, addr in hosts}  # S_tag holds two key pairs, S_syn one
    assert where == {2: place.s_tag, 1: place.s_syn} and place.s_tag != place.s_syn
    secrets = [pair[0].reveal() for host, _ in hosts for pair in host._keys.values()]
    assert len(secrets) == 3 and all(len(s) == 32 for s in secrets)
    assert len(submitted) >= 4 * 2  # every kind of user task ran, several chunks each
    for payload in submitted:
        for secret in secrets:
            assert secret not in payload


def _close_worker(cluster: Any, address: str) -> None:
    worker = next(w for w in cluster.workers.values() if w.address == address)
    cluster.sync(worker.close, executor_wait=False)


def test_a_users_worker_lost_mid_phase1_changes_nothing(
    x: np.ndarray, reference: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both servers on one worker; the other, which holds devices between the two phase-1 tasks,
    is closed as S_tag's answers come back. Its chunks are recomputed on the survivor from their
    own streams: the same release, every user counted once."""
    with _cluster() as cluster, distributed.Client(cluster) as c:
        first, second = sorted(w.address for w in cluster.workers.values())
        monkeypatch.setattr(Placement, "of", classmethod(lambda cls, _: cls(s_tag=first, s_syn=first, users_resources=None)))
        receive = dask_driver._Phase1Window.receive_evaluations
        held_by_second: list[int] = []

        def lose_second(self: Any, answered: Any) -> None:
            if not held_by_second:
                held_by_second.append(sum(1 for k in chunk_tasks._HELD if k[0] == second))
                _close_worker(cluster, second)
            receive(self, answered)

        monkeypatch.setattr(dask_driver._Phase1Window, "receive_evaluations", lose_second)
        got = _dask(x, c)
        assert held_by_second[0] > 0, "the lost worker must have held devices between the tasks"
        assert len(c.scheduler_info()["workers"]) == 1
    _same_release(reference, got)


def test_a_server_lost_stops_the_run_with_no_release(
    x: np.ndarray, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S_syn's worker is closed before phase 2: its counts and sums are gone, so the run stops
    with a ProtocolStateError naming it, writes no release and marks the transcript aborted."""
    out = tmp_path / "run"
    with _cluster() as cluster, distributed.Client(cluster) as c:
        place = Placement.of(c)
        phase2 = dask_driver.DaskWindows.phase2

        def lose_s_syn(self: Any, *args: Any) -> Any:
            _close_worker(cluster, place.s_syn)
            return phase2(self, *args)

        monkeypatch.setattr(dask_driver.DaskWindows, "phase2", lose_s_syn)
        with pytest.raises(ProtocolStateError, match="S_syn .*releases nothing"):
            _dask(x, c, out_dir=out)
    assert not (out / "release.json").exists() and not (out / "centroids.npy").exists()
    with TranscriptStore.open(out / "transcript.sqlite") as store:
        assert store.state == "aborted:ProtocolStateError"


@contextlib.contextmanager
def _worker_processes(n: int) -> Iterator[tuple[Any, dict[str, int]]]:
    """A client of ``n`` single-threaded worker processes, and each worker's process id."""
    with distributed.LocalCluster(
        n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as c:
        yield c, c.run(os.getpid)


def _removed(c: Any, address: str) -> set[str]:
    """The tasks the scheduler had to redo when it removed ``address`` without its consent
    (running there, or held there and still wanted); fails when it removed nothing."""
    for _ in range(100):  # the scheduler may learn of the loss just after the driver does
        events = [msg for _, msg in c.get_events(address) if msg.get("action") == "remove-worker"]
        if events:
            break
        time.sleep(0.1)
    assert events and not events[0]["expected"], f"the scheduler never lost {address}"
    lost = set(events[0]["processing-tasks"]) | set(events[0]["lost-computed-tasks"])
    assert address not in c.scheduler_info(n_workers=-1)["workers"]
    return lost


def test_a_users_worker_killed_mid_phase1_changes_nothing(
    x: np.ndarray, reference: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three worker processes: the placement puts S_tag on the first and S_syn on the last, so
    the middle one plays users only. It is SIGKILLed once it holds devices between the two
    phase-1 tasks and has been handed the second task of their chunk. Dask runs that task, and
    whatever else it held, again elsewhere, each chunk from its own streams: the same release,
    every user counted once (a chunk counted twice would change the counts or the tally)."""
    with _worker_processes(3) as (c, pids):
        place = Placement.of(c)
        (victim,) = set(pids) - {place.s_tag, place.s_syn}
        receive = dask_driver._Phase1Window.receive_evaluations
        held: list[int] = []

        def count_held() -> int:
            return len(chunk_tasks._HELD)

        def kill_victim(self: Any, answered: Any) -> None:
            n = 0 if held else c.run(count_held, workers=[victim])[victim]
            receive(self, answered)  # the second tasks go out, each near its chunk's devices
            if n:
                for _ in range(50):  # until the victim is handed one (it holds devices for it)
                    if any(str(k).startswith("fre-submit-") for k in c.processing([victim])[victim]):
                        break
                    time.sleep(0.1)
                held.append(n)
                os.kill(pids[victim], signal.SIGKILL)

        monkeypatch.setattr(dask_driver._Phase1Window, "receive_evaluations", kill_victim)
        got = _dask(x, c)
        assert held and held[0] > 0, "the victim must be killed while it holds devices"
        lost = _removed(c, victim)
        # a second task it ran, or was running, is run again elsewhere
        assert any(str(key).startswith("fre-submit-") for key in lost), lost
    _same_release(reference, got)


@pytest.mark.parametrize("role", ["S_syn", "S_tag"])
def test_a_server_killed_mid_call_stops_the_run_with_no_release(
    role: str, x: np.ndarray, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's worker process is SIGKILLed in phase 2, just after the driver has sent it the
    users' shares: its key, counts and sums die with it, so the run stops with a
    ProtocolStateError naming it (not a hang, nor Dask's own error), writes no release and
    marks the transcript aborted."""
    out = tmp_path / "run"
    with _worker_processes(2) as (c, pids):
        place = Placement.of(c)
        victim = place.s_syn if role == "S_syn" else place.s_tag
        wait_for, phase2 = dask_driver.wait_for, dask_driver.DaskWindows.phase2
        in_phase2: list[bool] = []
        killed: list[str] = []

        def arm(self: Any, *args: Any) -> Any:
            in_phase2.append(True)
            return phase2(self, *args)

        def kill_in_flight(who: str, ask: Any) -> Any:
            if who != role or not in_phase2 or killed:
                return wait_for(who, ask)
            call = ask()  # the server's call is under way
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(who)
            return wait_for(who, lambda: call)

        monkeypatch.setattr(dask_driver.DaskWindows, "phase2", arm)
        monkeypatch.setattr(dask_driver, "wait_for", kill_in_flight)
        with pytest.raises(ProtocolStateError, match=f"{role} .*releases nothing"):
            _dask(x, c, out_dir=out)
        assert killed == [role]
        _removed(c, victim)
    assert not (out / "release.json").exists() and not (out / "centroids.npy").exists()
    with TranscriptStore.open(out / "transcript.sqlite") as store:
        assert store.state == "aborted:ProtocolStateError"


def test_simulate_driver_dask(x: np.ndarray, client: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """``fre-e2t simulate --driver dask --scheduler ADDRESS``: the runner's buckets and counts
    (chunks of 1024 users draw the DDG rounding from other streams than the reference's chunks
    of 64, so centroids agree to the rounding only). The command's own dummy setting, at this
    module's t and δ."""
    from fre_protocol.cli import main

    reference = run_protocol(x, RoundSpec(params=PARAMS, seeds=SeedPlan.from_seed(5), noise=False,
                                          config=ProtocolConfig(chunk_size=64))).release
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    code = main([
        "simulate", "--embeddings", str(tmp_path / "x.npy"), "--epsilon", "8", "--seed", "5", "--noise", "off",
        "--threshold", str(PARAMS.threshold), "--delta", str(PARAMS.delta),
        "--out", str(out), "--driver", "dask", "--scheduler", client.scheduler.address, "--window-chunks", "1",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "streaming (dask) driver" in printed
    # every kind of users' task ran and its mean compute time is printed
    tasks = next(line for line in printed.splitlines() if line.strip().startswith("dask tasks:"))
    assert all(f"{kind} " in tasks for kind in dask_driver.TASK_KINDS), tasks
    got = Release.load(out)
    assert len(reference) >= 2 and got.ids == reference.ids and np.array_equal(got.counts, reference.counts)
    assert np.allclose(got.centroids, reference.centroids, atol=1e-3)


def test_task_times_are_metered_by_kind() -> None:
    """The scheduler's task stream becomes one meter entry per kind of users' task: compute
    time only (not transfers or waiting), other tasks and keys ignored."""
    stream = [
        {"key": "fre-blind-0-abc", "startstops": [{"action": "transfer", "start": 0.0, "stop": 5.0},
                                                   {"action": "compute", "start": 5.0, "stop": 5.25}]},
        {"key": "fre-blind-1-abc", "startstops": [{"action": "compute", "start": 1.0, "stop": 1.15}]},
        {"key": "fre-seal-3-abc", "startstops": [{"action": "compute", "start": 2.0, "stop": 2.5}]},
        {"key": "other-task", "startstops": [{"action": "compute", "start": 0.0, "stop": 9.0}]},
    ]
    meter = Meter()
    dask_driver.meter_tasks(meter, stream)
    assert meter.counts == {"dask.task.blind": 2, "dask.task.seal": 1}
    assert meter.seconds["dask.task.blind"] == pytest.approx(0.4)
    assert meter.seconds["dask.task.seal"] == pytest.approx(0.5)


def test_windows_overlap_and_the_release_is_the_same(
    x: np.ndarray, client: Any, reference: Release, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phase 1: S_tag evaluates window k + 1 before window k's tag submissions reach S_syn.
    Phase 2: window k + 1's sealing tasks are submitted before window k is delivered to the
    servers. Neither changes the release."""
    events: list[str] = []
    evaluate, submit, deliver = dask_driver.phase1, dask_driver.phase1_submit, dask_driver.phase2
    seal = dask_driver.users_seal

    def logged(name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            events.append(name)
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(dask_driver, "phase1", logged("evaluate", evaluate))
    monkeypatch.setattr(dask_driver, "phase1_submit", logged("submit", submit))
    monkeypatch.setattr(dask_driver, "phase2", logged("deliver", deliver))
    real_submit = dask_driver.DaskWindows._submit

    def seal_logged(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if fn is seal:
            events.append("seal")
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(dask_driver.DaskWindows, "_submit", seal_logged)
    _same_release(reference, _dask(x, client))
    phase1 = [e for e in events if e in ("evaluate", "submit")]
    n = phase1.count("evaluate")
    assert n >= 2, "the population must span several windows"
    assert phase1 == ["evaluate"] + ["evaluate", "submit"] * (n - 1) + ["submit"]
    # chunks of users (one sealing task each) per window
    size, window = CONFIG.chunk_size, CONFIG.chunk_size * WINDOW_CHUNKS
    per_window = [-(-min(window, len(x) - lo) // size) for lo in range(0, len(x), window)]
    assert len(per_window) == n
    phase2 = [e for e in events if e in ("seal", "deliver")]
    for k in range(n):
        before = _nth(phase2, "deliver", k)
        assert phase2[:before].count("seal") == sum(per_window[: k + 2]), (k, phase2)
    assert phase2.count("deliver") == n


def _nth(items: list[str], item: str, k: int) -> int:
    """Index of the k-th (from 0) occurrence of ``item``."""
    return [j for j, e in enumerate(items) if e == item][k]


def _host(role: str, seeds: SeedPlan) -> ServerHost:
    from fre_protocol.drivers.dask import ServerSpec
    from fre_protocol.roles.round import plan_run

    run = plan_run(np.zeros((4, 8)), RoundSpec(params=PARAMS, seeds=seeds, config=CONFIG))
    spec = ServerSpec(
        params=run.params, seeds=run.seeds, cfg=run.cfg, components=run.comps.header(), floor=run.floor,
        dummy=run.dummy, workers=1,
    )
    return ServerHost(role, spec)


@pytest.mark.parametrize("name", ["_sk", "_box_sk", "_inbox", "_shares", "_rng", "__dict__", "not_there"])
def test_the_actor_refuses_what_the_driver_does_not_ask_for(name: str) -> None:
    """Issue 28 (L12): the actor's generic getter and call answer only the allow-listed names of
    their role; S_tag's VOPRF and sealing keys (``_sk``, ``_box_sk``) and any other attribute
    are refused with a typed error that names the attribute and not its value."""
    from primitives.errors import ProtocolStateError as Refused

    host = _host("S_tag", SeedPlan.fresh())
    secret = host._keys["voprf"][0].reveal()
    with pytest.raises(Refused, match="S_tag") as caught:
        host.get("server", name)
    assert secret.hex() not in str(caught.value) and repr(secret) not in str(caught.value)
    with pytest.raises(Refused, match="S_tag"):
        host.call("server", name, (), {})
    syn = _host("S_syn", SeedPlan.fresh())
    with pytest.raises(Refused, match="S_syn"):
        syn.get("server", name)


def test_the_actor_answers_what_the_driver_asks_for() -> None:
    host = _host("S_tag", SeedPlan.fresh())
    assert host.get("server", "refused") == {} and host.get("server", "rejections") == {}
    with pytest.raises(ProtocolStateError, match="S_tag"):
        host.get("server", "topped_up")  # the release reads S_syn's reconstruction, not this
    with pytest.raises(ProtocolStateError, match="evaluate"):
        host.get("server", "evaluate")  # a method is called, not handed out
    syn = _host("S_syn", SeedPlan.fresh())
    assert syn.get("server", "counts") == {} and syn.get("server", "n_submissions") == 0


def test_window_boundaries_do_not_tell_dummy_tags_from_real_ones(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 (H2) on Dask (servers as actors on an in-process cluster): the test of
    ``test_streaming.py::test_window_boundaries_do_not_tell_dummy_tags_from_real_ones``, same
    population, seed and α = 0.01 (false-failure probability ≈ 0.01 for a fresh seed)."""
    import window_spread as ws

    with ws.syn_view(monkeypatch) as view:
        run_dask(ws.grouped_rows(), RoundSpec(params=ws.PARAMS, seeds=SeedPlan.from_seed(7), noise=False, config=ws.CONFIG), window_chunks=ws.WINDOW_CHUNKS, cluster=DaskCluster(client=client))
    seen = view()
    z, p = ws.spread_test(seen)
    levels = seen.by_level()
    assert sum(len(r) for r, _ in levels.values()) >= 30 and sum(len(d) for _, d in levels.values()) >= 150, ws.describe(seen)
    assert p >= ws.ALPHA, f"Z = {z:.2f}, p = {p:.3g}\n{ws.describe(seen)}"
