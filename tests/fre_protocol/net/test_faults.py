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
service once; ``-m heavy`` runs the whole matrix.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from net_rounds import SEED, assert_same_release, needs_net, round_settings

from fre_protocol.net.deploy import (
    Deployment,
    deploy_local,
    operator_client,
    start_service,
    stop_service,
)
from mechanism.population import Population
from mechanism.release import Release
from transcripts import TranscriptStore

needs_net()

ROLES = ("S_tag", "S_syn", "proxy")
STEPS = ("phase1_submitted", "phase2_sent")


def proxy_status(dep: Deployment) -> dict[str, Any]:
    with operator_client(dep) as client:
        response = client.get(dep.url("proxy") + "/v1/admin/status")
        response.raise_for_status()
        return dict(response.json())


def restart(dep: Deployment, role: str) -> None:
    stop_service(dep, role, kill=True)
    start_service(dep, role)


@dataclass
class MidTrafficKiller:
    """Kills ``role`` once the proxy has admitted ``after`` requests of ``kind`` (users still
    sending), then restarts it; joined before that phase closes."""

    role: str
    kind: str = "phase1"
    after: int = 20
    deadline_s: float = 120.0
    admitted_at_kill: int | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = field(default=None, repr=False)

    def start(self, dep: Deployment) -> None:
        self.thread = threading.Thread(target=self._run, args=(dep,), name=f"kill-{self.role}", daemon=True)
        self.thread.start()

    def _run(self, dep: Deployment) -> None:
        try:
            end = time.monotonic() + self.deadline_s
            while time.monotonic() < end:
                admitted = int(proxy_status(dep)["items"].get(self.kind, 0))
                if admitted >= self.after:
                    self.admitted_at_kill = admitted
                    restart(dep, self.role)
                    return
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - re-raised by join()
            self.error = exc

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join(timeout=self.deadline_s)
        if self.error is not None:
            raise self.error


def run_with_faults(
    out: Path, population: Population, deployments: list[Deployment], *,
    at_step: dict[str, Callable[[Deployment], None]] | None = None, killer: MidTrafficKiller | None = None,
) -> tuple[Release, dict[str, Any]]:
    """One seeded, noiseless deploy-local round with the given faults; its release and the
    proxy's status read once every share is in (after any restart at that step)."""
    seen: dict[str, Any] = {}

    def on_phase(dep: Deployment, step: str) -> None:
        if step == "started":
            deployments.append(dep)  # a restarted process is killed at teardown too
            if killer is not None:
                killer.start(dep)
            return
        if killer is not None and step == {"phase1": "phase1_submitted", "phase2": "phase2_sent"}[killer.kind]:
            killer.join()
        if at_step and step in at_step:
            at_step[step](dep)
        if step == "phase2_sent":
            seen["status"] = proxy_status(dep)

    # Fewer concurrent users than the default keep phase 1 going while a killer waits its turn.
    summary = deploy_local(
        population.embeddings, round_settings(f"faults-{out.name}"[:60]), out, test_seed=SEED,
        on_phase=on_phase, concurrency=16, deadline_s=300,
    )
    assert summary["users"]["failures"] == {}
    assert summary["users"]["status"] == {"ok": len(population.embeddings)}
    return Release.load(out), seen["status"]


def assert_nothing_lost_or_doubled(out: Path, got: Release, want: Release, status: dict[str, Any], n: int) -> None:
    assert_same_release(got, want)
    # S_syn: each user's tag submission once (ε = ∞: no dummies), every released user's share.
    assert got.diagnostics["n_submissions"] == n
    assert got.diagnostics["contributors"] == dict(zip(want.ids, want.counts.tolist(), strict=True))
    assert got.info["withheld"] == {}
    # The proxy: one request of each kind per user (two envelopes in phase 2), none refused.
    assert status["items"] == {"phase1": n, "submit": n, "phase2": 2 * n}
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
           deployments: list[Deployment], **faults: Any) -> None:
    got, status = run_with_faults(tmp_path, small_population, deployments, **faults)
    assert_nothing_lost_or_doubled(tmp_path, got, reference_release, status, len(small_population.embeddings))


HOOK_CASES = [(role, step) for step in STEPS for role in ROLES]
DEFAULT_HOOK_CASES = {("S_syn", "phase2_sent")}


@pytest.mark.parametrize(
    ("role", "step"),
    [pytest.param(r, s, marks=() if (r, s) in DEFAULT_HOOK_CASES else pytest.mark.heavy) for r, s in HOOK_CASES],
)
def test_kill_at_a_phase_step_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str, step: str,
) -> None:
    _check(tmp_path, small_population, reference_release, deployments, at_step={step: lambda dep: restart(dep, role)})


@pytest.mark.parametrize("role", ["proxy", "S_tag", pytest.param("S_syn", marks=pytest.mark.heavy)])
def test_kill_mid_phase1_traffic_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str,
) -> None:
    killer = MidTrafficKiller(role)
    _check(tmp_path, small_population, reference_release, deployments, killer=killer)
    assert killer.admitted_at_kill is not None
    assert killer.admitted_at_kill < len(small_population.embeddings), "the kill came after phase 1's traffic"


@pytest.mark.heavy
@pytest.mark.parametrize("role", ROLES)
def test_kill_mid_phase2_traffic_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str,
) -> None:
    # Two envelopes per user: 40 items is 20 users' shares in, most still to come.
    killer = MidTrafficKiller(role, kind="phase2", after=40)
    _check(tmp_path, small_population, reference_release, deployments, killer=killer)
    assert killer.admitted_at_kill is not None
    assert killer.admitted_at_kill < 2 * len(small_population.embeddings), "the kill came after phase 2's traffic"


@pytest.mark.heavy
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_kill_while_phase1_closes_loses_and_doubles_nothing(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
    role: str, delay: float,
) -> None:
    """The kill lands somewhere in closing phase 1 (the last windows, the dummies, the shuffled
    submissions, the release, the broadcast) or just after: wherever, the round completes."""
    killers: list[threading.Thread] = []

    def later(dep: Deployment) -> None:
        def kill() -> None:
            time.sleep(delay)
            restart(dep, role)

        killers.append(threading.Thread(target=kill, daemon=True))
        killers[-1].start()

    def joined(dep: Deployment) -> None:
        for thread in killers:
            thread.join(timeout=120)

    _check(tmp_path, small_population, reference_release, deployments,
           at_step={"phase1_submitted": later, "phase2_sent": joined})


@pytest.mark.heavy
def test_every_service_killed_in_both_phases(
    tmp_path: Path, small_population: Population, reference_release: Release, deployments: list[Deployment],
) -> None:
    def all_roles(dep: Deployment) -> None:
        for role in ROLES:
            restart(dep, role)

    _check(tmp_path, small_population, reference_release, deployments,
           at_step=dict.fromkeys(STEPS, all_roles), killer=MidTrafficKiller("proxy"))


@pytest.mark.heavy
@pytest.mark.parametrize("role", ["proxy", "S_tag"])
def test_kill_while_phase1_closes_with_dummies_counts_each_submission_once(
    tmp_path: Path, deployments: list[Deployment], role: str
) -> None:
    """With noise on (ε = 8) S_tag's dummy submissions are fetched and shuffled in while phase 1
    closes; a kill there must neither drop nor repeat a user's or a dummy's submission: the
    release, its counts and the number of submissions S_syn opened are the runner's."""
    from net_rounds import population

    from fre_protocol.runner import run_protocol
    from mechanism.params import FreParams
    from mechanism.seeds import SeedPlan

    pop = population(size=60, rare=8)
    params = FreParams.paper(8.0, threshold=50)
    ref = run_protocol(pop.embeddings, params, SeedPlan.from_seed(SEED), noise=True).release
    killers: list[threading.Thread] = []

    def on_phase(dep: Deployment, step: str) -> None:
        if step == "started":
            deployments.append(dep)
        elif step == "phase1_submitted":
            def kill() -> None:
                time.sleep(0.1)
                restart(dep, role)

            killers.append(threading.Thread(target=kill, daemon=True))
            killers[-1].start()
        elif step == "phase2_sent":
            for thread in killers:
                thread.join(timeout=120)

    settings = round_settings(f"dummies-{role}", params=params, noise=True)
    summary = deploy_local(pop.embeddings, settings, tmp_path, test_seed=SEED, on_phase=on_phase, deadline_s=300)
    got = Release.load(tmp_path)
    assert summary["users"]["failures"] == {}
    assert got.ids == ref.ids and got.counts.tolist() == ref.counts.tolist()
    assert got.diagnostics["n_submissions"] == ref.diagnostics["n_submissions"]  # users' and dummies', once each
