"""Crash faults: ``kill -9`` of each service during each phase, then a restart from its state.

Every case must publish the undisturbed release (the in-process runner's, which an undisturbed
deployment equals bit for bit, see test_deploy_equivalence), with nothing lost or counted twice:
S_syn saw each user's tag submission once and every released bucket's users contributed, S_tag
evaluated each blind request and took each share once, and the proxy admitted one request of
each kind per user and put every item in exactly one acknowledged batch.

Two ways to crash: at the deployment's ``on_phase`` steps (after every user's tag submission,
before phase 1 closes; after every share, before phase 2 closes), and mid-traffic, from a thread
that kills a service while users are still sending phase-1 requests (their bounded retries, and
the proxy's re-sending of logged batches, carry the round through). The default suite kills each
service once, and S_syn once more mid phase-2 traffic at ε = 8 (sampling, dummies, noise) while it
holds some of the users' shares; ``-m heavy`` runs the whole matrix.

Every kill is recorded (:class:`Kill`: the process's exit by SIGKILL, the new process, when, in
which phase) and asserted by the test that asked for it: a kill thread that failed, or never
found its moment, fails the test instead of passing as a survived fault.
"""

from __future__ import annotations

import collections
import contextlib
import json
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from net_rounds import PARAMS, SEED, assert_same_release, needs_net, population, round_settings

from fre_protocol.drivers.net.deploy import (
    Deployment,
    DeployOptions,
    deploy_local,
    operator_client,
    start_service,
    stop_service,
)
from fre_protocol.roles.config import RoundSpec
from mechanism.params import FreParams
from mechanism.population import Population
from mechanism.release import Release
from transcripts import TranscriptStore

needs_net()

ROLES = ("S_tag", "S_syn", "proxy")
STEPS = ("phase1_submitted", "phase2_sent")


def proxy_status(dep: Deployment, client: Any | None = None) -> dict[str, Any]:
    if client is None:
        with operator_client(dep) as fresh:
            return proxy_status(dep, fresh)
    response = client.get(dep.url("proxy") + "/v1/admin/status")
    response.raise_for_status()
    return dict(response.json())


@dataclass(frozen=True)
class Kill:
    """One ``kill -9`` and restart of a service, as it happened: what the round was doing
    (``phase``), when (``perf_counter`` at the signal), and the evidence it was a real kill."""

    role: str
    phase: str
    at: float
    old_pid: int
    returncode: int | None
    new_pid: int

    def assert_real(self) -> None:
        assert self.returncode == -signal.SIGKILL, f"{self.role} ended with {self.returncode}, not SIGKILL"
        assert self.new_pid != self.old_pid, f"{self.role} was not restarted"


def restart(dep: Deployment, role: str, phase: str) -> Kill:
    """SIGKILL ``role``'s running process (it must be running) and start it again from its state."""
    proc = dep.processes.get(role)
    assert proc is not None and proc.poll() is None, f"{role} was not running when the kill was due"
    at = time.perf_counter()
    stop_service(dep, role, kill=True)  # SIGKILL, then waits for the exit
    start_service(dep, role)
    return Kill(role, phase, at, proc.pid, proc.returncode, dep.processes[role].pid)


@dataclass
class KillThread:
    """A thread that kills and restarts ``role`` once ``due(dep)`` says so. It records what it
    did (``kill``) or why it could not (``error``); ``join`` re-raises the error and fails when
    no kill happened, so a kill that silently never came cannot pass as a survived one."""

    role: str
    phase: str
    deadline_s: float = 120.0
    kill: Kill | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = field(default=None, repr=False)
    over: threading.Event = field(default_factory=threading.Event, repr=False)  # set by join: stop waiting

    def start(self, dep: Deployment) -> None:
        self.thread = threading.Thread(target=self._run, args=(dep,), name=f"kill-{self.role}", daemon=True)
        self.thread.start()

    def _run(self, dep: Deployment) -> None:
        try:
            self.kill = self.wait_and_kill(dep)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def wait_and_kill(self, dep: Deployment) -> Kill:
        raise NotImplementedError

    def join(self) -> Kill:
        assert self.thread is not None, "the kill thread never started"
        self.over.set()
        self.thread.join(timeout=self.deadline_s + 60)
        assert not self.thread.is_alive(), f"the kill of {self.role} still pending after {self.deadline_s:.0f} s"
        if self.error is not None:
            raise self.error
        assert self.kill is not None, f"{self.role} was never killed"
        self.kill.assert_real()
        return self.kill


def logged_requests(dep: Deployment, role: str, kind: str) -> int:
    """How many ``kind`` requests (batches from the proxy) a server has durably logged, read from
    its state file (WAL: a reader does not block the service)."""
    paths = list((dep.out / "state" / role).rglob("state.sqlite"))
    if not paths:
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{paths[0]}?mode=ro", uri=True, timeout=5)) as db:
        return int(db.execute("SELECT COUNT(*) FROM log WHERE kind = ?", (kind,)).fetchone()[0])


@dataclass
class MidTrafficKiller(KillThread):
    """Kills ``role`` once the proxy has admitted ``after`` requests of ``phase`` (users still
    sending) and, with ``served``, once the server has logged that many batches of that phase
    (so that it dies holding some of them), then restarts it; joined when that phase's traffic
    ends. Records the proxy's count just before the signal and, for a server, just after it."""

    phase: str = "phase1"
    after: int = 20
    served: int = 0
    admitted_at_kill: int | None = None
    admitted_after_kill: int | None = None
    served_at_kill: int | None = None

    def wait_and_kill(self, dep: Deployment) -> Kill:
        end = time.monotonic() + self.deadline_s
        with operator_client(dep) as client:  # one connection: a poll every few ms, not a handshake each
            while time.monotonic() < end and not self.over.is_set():
                admitted = int(proxy_status(dep, client)["items"].get(self.phase, 0))
                served = logged_requests(dep, self.role, self.phase) if self.served else 0
                if admitted >= self.after and served >= self.served:
                    self.admitted_at_kill, self.served_at_kill = admitted, served
                    proc = dep.processes[self.role]
                    at = time.perf_counter()
                    stop_service(dep, self.role, kill=True)
                    if self.role != "proxy":
                        self.admitted_after_kill = int(proxy_status(dep, client)["items"].get(self.phase, 0))
                    start_service(dep, self.role)
                    return Kill(self.role, self.phase, at, proc.pid, proc.returncode, dep.processes[self.role].pid)
                time.sleep(0.002)
        raise AssertionError(f"the proxy admitted fewer than {self.after} {self.phase} requests before {self.phase} ended")

    def assert_mid_traffic(self, total: int, steps: dict[str, float]) -> None:
        """The kill came while users were sending ``phase``'s requests: after ``after`` of the
        ``total`` were in, before the last; and between the round's steps bounding that phase."""
        kill = self.join()
        print(f"kill of {self.role} in {self.phase}: {self.admitted_at_kill} requests in before it, "
              f"{self.admitted_after_kill} after, {self.served_at_kill} batches logged by it")
        assert self.admitted_at_kill is not None and self.after <= self.admitted_at_kill < total, (
            f"the kill came after {self.phase}'s traffic ({self.admitted_at_kill} of {total} in)"
        )
        if self.phase == "phase2" and self.admitted_after_kill is not None:
            # Phase 1's requests are admitted before S_tag answers them: all may be in by the time
            # a server is down while users still wait for answers, so this reading binds phase 2 only.
            assert self.admitted_after_kill < total, f"{self.phase}'s traffic was over when {self.role} died"
        assert self.served_at_kill is not None and self.served_at_kill >= self.served
        if self.phase == "phase1":
            assert steps["started"] < kill.at < steps["phase1_submitted"]
        else:  # phase 2 requests are only admitted once phase 1 has closed (the broadcast is out)
            assert steps["phase1_submitted"] < kill.at < steps["phase2_sent"]


@dataclass
class DelayedKiller(KillThread):
    """Kills ``role`` ``delay`` seconds after it is started (at a step of the round)."""

    delay: float = 0.1

    def wait_and_kill(self, dep: Deployment) -> Kill:
        time.sleep(self.delay)
        return restart(dep, self.role, self.phase)


@dataclass
class Faults:
    """What a faulty round did: every kill, when each step of the round came, the proxy's status
    once every share was in (after any restart at that step), and the deployment summary."""

    kills: list[Kill] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def run_with_faults(
    out: Path, population: Population, deployments: list[Deployment], *,
    at_step: dict[str, Callable[[Deployment], list[Kill]]] | None = None, killer: KillThread | None = None,
    params: FreParams = PARAMS, noise: bool = False, concurrency: int = 16,
) -> tuple[Release, Faults]:
    """One seeded deploy-local round (noiseless unless asked) with the given faults; its release
    and what happened. A mid-traffic killer is joined at the end of the phase it waits in, a
    delayed one (started at a step) once every share is sent."""
    faults = Faults()
    joined_at = {"phase1": "phase1_submitted", "phase2": "phase2_sent"}.get(killer.phase if killer else "", "phase2_sent")

    def on_phase(dep: Deployment, step: str) -> None:
        faults.steps[step] = time.perf_counter()
        if step == "started":
            deployments.append(dep)  # a restarted process is killed at teardown too
            if isinstance(killer, MidTrafficKiller):
                killer.start(dep)
            return
        if killer is not None and step == joined_at:
            faults.kills.append(killer.join())
        if at_step and step in at_step:
            faults.kills += at_step[step](dep)
        if step == "phase2_sent":
            faults.status = proxy_status(dep)

    # Fewer concurrent users than the default keep phase 1 going while a killer waits its turn.
    faults.summary = deploy_local(
        population.embeddings, round_settings(f"faults-{out.name}"[:60], params=params, noise=noise), out,
        DeployOptions(test_seed=SEED, concurrency=concurrency, deadline_s=300), on_phase=on_phase,
    )
    assert faults.summary["users"]["failures"] == {}
    assert faults.summary["users"]["status"] == {"ok": len(population.embeddings)}
    for kill in faults.kills:
        kill.assert_real()
    return Release.load(out), faults


def assert_nothing_lost_or_doubled(
    out: Path, got: Release, want: Release, status: dict[str, Any], n: int, *, exact_centroids: bool = True
) -> None:
    """``want`` is the in-process runner's release of the same seeded round (ε = ∞ or not)."""
    if exact_centroids:
        assert_same_release(got, want)
    # S_syn: each user's (and, with noise, each dummy's) tag submission once, every released user's share.
    assert got.diagnostics["n_submissions"] == want.diagnostics["n_submissions"]
    assert got.diagnostics["contributors"] == dict(zip(want.ids, want.counts.tolist(), strict=True))
    assert got.info["withheld"] == {}
    # The proxy: one request of each kind per user (two envelopes in phase 2; S_tag's dummies
    # are submitted through it too), none refused.
    assert status["items"] == {"phase1": n, "submit": want.diagnostics["n_submissions"], "phase2": 2 * n}
    assert status["refused"] == {}
    round_dir = next((out / "state" / "proxy").iterdir())
    with sqlite3.connect(round_dir / "state.sqlite") as db:
        items = dict(db.execute("SELECT id, batch_id FROM items").fetchall())
        batched: list[int] = []
        for batch_id, ids, done in db.execute("SELECT batch_id, item_ids, done FROM batches"):
            assert done == 1, batch_id
            assert all(items[i] == batch_id for i in json.loads(ids))
            batched += json.loads(ids)
        assert sorted(batched) == sorted(items)  # every item in exactly one batch
        assert db.execute("SELECT COUNT(*) FROM items WHERE kind = 'phase1' AND response IS NULL").fetchone()[0] == 0
    # S_tag's view: each blind request evaluated once, each share (or cover) taken once.
    with TranscriptStore.open(out / "transcripts" / "S_tag.sqlite") as store:
        seen = collections.Counter(e.phase for e in store.entries(sender="proxy"))
    assert seen == {"phase1": n, "phase2": n}


def _check(tmp_path: Path, small_population: Population, reference_release: Release,
           deployments: list[Deployment], **faults: Any) -> Faults:
    got, happened = run_with_faults(tmp_path, small_population, deployments, **faults)
    assert_nothing_lost_or_doubled(tmp_path, got, reference_release, happened.status, len(small_population.embeddings))
    return happened


HOOK_CASES = [(role, step) for step in STEPS for role in ROLES]
DEFAULT_HOOK_CASES = {("S_syn", "phase2_sent")}


def kills_at(*roles: str, phase: str) -> Callable[[Deployment], list[Kill]]:
    return lambda dep: [restart(dep, role, phase) for role in roles]


@pytest.mark.parametrize(
    ("role", "step"),
    [pytest.param(r, s, marks=() if (r, s) in DEFAULT_HOOK_CASES else pytest.mark.heavy) for r, s in HOOK_CASES],
)
def test_kill_at_a_phase_step_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str, step: str,
) -> None:
    happened = _check(tmp_path, small_population, reference_release, deployments,
                      at_step={step: kills_at(role, phase=step)})
    assert [(k.role, k.phase) for k in happened.kills] == [(role, step)]


@pytest.mark.parametrize("role", ["proxy", "S_tag", pytest.param("S_syn", marks=pytest.mark.heavy)])
def test_kill_mid_phase1_traffic_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str,
) -> None:
    killer = MidTrafficKiller(role)
    happened = _check(tmp_path, small_population, reference_release, deployments, killer=killer)
    killer.assert_mid_traffic(len(small_population.embeddings), happened.steps)
    assert [k.role for k in happened.kills] == [role]


@pytest.mark.heavy
@pytest.mark.parametrize("role", ROLES)
def test_kill_mid_phase2_traffic_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str,
) -> None:
    # Two envelopes per user: 40 items is 20 users' shares in, most still to come. Four users at
    # a time stretch phase 2's traffic (≈ 0.1 s at 16) so that the kill lands inside it.
    killer = MidTrafficKiller(role, phase="phase2", after=40)
    happened = _check(tmp_path, small_population, reference_release, deployments, killer=killer, concurrency=4)
    killer.assert_mid_traffic(2 * len(small_population.embeddings), happened.steps)


def test_kill_of_S_syn_mid_phase2_traffic_with_noise_and_dummies_publishes_the_unkilled_release(
    tmp_path: Path, deployments: list[Deployment],
) -> None:
    """``kill -9`` of S_syn while users send their phase-2 shares, at ε = 8 (sampling, S_tag's
    dummies, DDG noise), then a restart from its state: the round completes and publishes the
    release an unkilled round with the same seed publishes (the in-process runner's, which an
    unkilled deployment equals bit for bit, noisy centroids included: test_deploy_equivalence),
    with nothing lost or counted twice. The kill is shown to have come mid phase 2: after 30 of
    the 376 share requests were admitted, before the last (counted by the proxy just before and
    just after the signal), and between the close of phase 1 and the end of the users' sends."""
    from fre_protocol.drivers.inprocess import run_protocol
    from mechanism.seeds import SeedPlan

    pop = population(size=60, rare=8)  # 188 users; ε = 8 needs t ≥ 50 (τ = 25, p_s = 0.5)
    params = FreParams.paper(8.0, threshold=50)
    ref = run_protocol(pop.embeddings, RoundSpec(params=params, seeds=SeedPlan.from_seed(SEED), noise=True)).release
    assert len(ref) >= 2 and ref.diagnostics["n_submissions"] > len(pop.embeddings)  # dummies in play
    killer = MidTrafficKiller("S_syn", phase="phase2", after=30, served=1)
    # Two users at a time stretch phase 2's traffic (about 0.1 s at 16) so that the kill lands
    # inside it, on a loaded machine too.
    got, happened = run_with_faults(tmp_path, pop, deployments, killer=killer, params=params, noise=True,
                                    concurrency=2)
    assert_nothing_lost_or_doubled(tmp_path, got, ref, happened.status, len(pop.embeddings))
    assert got.ledger.sigma == pytest.approx(ref.ledger.sigma, rel=1e-12)
    killer.assert_mid_traffic(2 * len(pop.embeddings), happened.steps)
    assert [(k.role, k.phase) for k in happened.kills] == [("S_syn", "phase2")]


@pytest.mark.heavy
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_kill_while_phase1_closes_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str, delay: float,
) -> None:
    """The kill lands somewhere in closing phase 1 (the last windows, the dummies, the shuffled
    submissions, the release, the broadcast) or just after (phase 2's traffic, or once it is
    sent): wherever, the round completes. The kill is asserted to have come ``delay`` after the
    last submission and before phase 2 closed (the killer is joined before the close)."""
    killer = DelayedKiller(role, "closing phase 1 or later", delay=delay)

    def later(dep: Deployment) -> list[Kill]:
        killer.start(dep)
        return []

    happened = _check(tmp_path, small_population, reference_release, deployments,
                      at_step={"phase1_submitted": later}, killer=killer)
    (kill,) = happened.kills
    assert happened.steps["phase1_submitted"] + delay <= kill.at


@pytest.mark.heavy
def test_every_service_killed_in_both_phases(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
) -> None:
    killer = MidTrafficKiller("proxy")
    happened = _check(tmp_path, small_population, reference_release, deployments,
                      at_step={step: kills_at(*ROLES, phase=step) for step in STEPS}, killer=killer)
    killer.assert_mid_traffic(len(small_population.embeddings), happened.steps)
    assert [(k.role, k.phase) for k in happened.kills] == (
        [("proxy", "phase1")] + [(r, s) for s in STEPS for r in ROLES]
    )


@pytest.mark.heavy
@pytest.mark.parametrize("role", ["proxy", "S_tag"])
def test_kill_while_phase1_closes_with_dummies_counts_each_submission_once(
    tmp_path: Path, deployments: list[Deployment], role: str
) -> None:
    """With noise on (ε = 8) S_tag's dummy submissions are fetched and shuffled in while phase 1
    closes; a kill there must neither drop nor repeat a user's or a dummy's submission: the
    release, its counts and the number of submissions S_syn opened are the runner's."""
    from fre_protocol.drivers.inprocess import run_protocol
    from mechanism.seeds import SeedPlan

    pop = population(size=60, rare=8)
    params = FreParams.paper(8.0, threshold=50)
    ref = run_protocol(pop.embeddings, RoundSpec(params=params, seeds=SeedPlan.from_seed(SEED), noise=True)).release
    killer = DelayedKiller(role, "closing phase 1 or later", delay=0.1)

    def later(dep: Deployment) -> list[Kill]:
        killer.start(dep)
        return []

    got, happened = run_with_faults(tmp_path, pop, deployments, at_step={"phase1_submitted": later},
                                    killer=killer, params=params, noise=True, concurrency=64)
    (kill,) = happened.kills
    assert happened.steps["phase1_submitted"] + 0.1 <= kill.at  # and before phase 2 closed (joined)
    assert got.ids == ref.ids and got.counts.tolist() == ref.counts.tolist()
    assert got.diagnostics["n_submissions"] == ref.diagnostics["n_submissions"]  # users' and dummies', once each
