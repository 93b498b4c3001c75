"""What the drivers that hold the servers in this process share: running a round around its play
(thread pools, meter, transcript store, release files, costs) and moving one stage's messages
between the roles through the in-process proxy.

Each function here only moves messages: which messages a role takes in which state, what it does
with them and what it answers are the roles' (:mod:`fre_protocol.roles`).
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fre_protocol.costs import summarize
from fre_protocol.messages import Role
from fre_protocol.roles.base import (
    BROADCAST,
    PHASE1,
    PHASE1_SUBMIT,
    PHASE2,
    Meter,
    Recorder,
    Runtime,
    Workers,
    status_of,
)
from fre_protocol.roles.config import TRANSCRIPT_FULL, RunOptions
from fre_protocol.roles.proxy import Delivery, NetworkAdversary
from fre_protocol.roles.release import assemble_release, store_artifacts
from fre_protocol.roles.round import Parties, Phase2Plan, RunPlan, topup_noise, transcript_header
from fre_protocol.roles.synthesis_server import ContributionValidator, Reconstruction
from fre_protocol.roles.user import UserPopulation, UserTally
from mechanism.grid import single_threaded_blas
from mechanism.release import Release
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import InvalidParameterError, ProtocolStateError


@dataclass
class ProtocolResult:
    """What :func:`run_protocol` returns: the release, where the transcript is, and the costs."""

    release: Release
    transcript_path: Path | None
    costs: dict[str, Any] = field(default_factory=dict)

Play = Callable[["RunPlan", "Runtime", Any], tuple[Release, dict[str, Any]]]

def execute(
    run: RunPlan,
    play: Play,
    options: RunOptions | None = None,
    *,
    adversary: NetworkAdversary | None = None,
    validator: ContributionValidator | None = None,
) -> ProtocolResult:
    """What every in-process driver does around its ``play``: thread pools, meter, transcript
    store (``transcript``: payloads recorded or sizes only), single-threaded BLAS, the release
    files, the costs (peak traced memory on request)."""
    options = options if options is not None else RunOptions()
    progress, workers, transcript = options.progress, run.workers, options.transcript
    measure_memory = options.measure_memory
    if measure_memory:
        tracemalloc.start()
    t_start = time.perf_counter()
    meter = Meter()
    pool = Workers(workers, progress=progress)
    user_workers = run.cfg.user_workers
    user_pool = pool if user_workers in (None, workers) else Workers(int(user_workers), progress=progress)
    out_path = Path(options.out_dir) if options.out_dir is not None else None
    store = _open_store(out_path, run, transcript) if out_path is not None else None
    driver = Runtime(
        meter=meter, pool=pool, user_pool=user_pool, adversary=adversary,
        recorder=Recorder(store, payloads=transcript == TRANSCRIPT_FULL),
        validator=validator,
    )
    # The parties already run on ``workers`` threads: a multi-threaded BLAS inside each of them
    # (the DDG rotation's block products) would oversubscribe the cores.
    blas = ExitStack()
    blas.enter_context(single_threaded_blas())
    try:
        release, info = play(run, driver, store)
        driver.recorder.flush()
        if store is not None:
            assert out_path is not None
            with meter.phase("save"):
                release.save(out_path)
    except BaseException as exc:
        if store is not None:
            # Keep what was exchanged and mark the transcript aborted (never "complete").
            store.__exit__(type(exc), exc, exc.__traceback__)
        raise
    else:
        if store is not None:
            store.close()
    finally:
        pool.close()
        user_pool.close()
        blas.close()
    meter.wall["total"] = time.perf_counter() - t_start
    peak = None
    if measure_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    costs = summarize(meter, info, peak_bytes=peak, workers=workers)
    transcript_path = out_path / TRANSCRIPT_FILE if out_path is not None else None
    return ProtocolResult(release=release, transcript_path=transcript_path, costs=costs)

def _open_store(out: Path, run: RunPlan, transcript: str) -> Any:
    from transcripts import TranscriptStore

    if out.exists() and not out.is_dir():
        raise InvalidParameterError(f"out_dir must be a directory, got existing file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    header = transcript_header(
        run.seeds, run.comps, run.params, run.cfg,
        protocol="fre-e2t two-server two-phase (design §6)", n_users=run.slots.n_users, n_texts=run.slots.n_texts,
        n_slots=run.n, dim=run.dim, noise=run.noise, unit=run.slots.unit.to_dict(), transcript=transcript,
    )
    return TranscriptStore.create(out / TRANSCRIPT_FILE, header, overwrite=True)

def _refuse(parties: Parties, recorder: Recorder, role: Role, phase: str, delivery: Delivery) -> None:
    """A batch of user messages for a server that takes none in this phase: each is refused,
    counted and recorded in that server's view."""
    server = parties.s_tag if role is Role.S_TAG else parties.s_syn
    status = status_of(ProtocolStateError(f"{role.label} takes no user messages in {phase}"))
    server.rejections[status] = server.rejections.get(status, 0) + len(delivery.ciphertexts)
    recorder.add(
        (role.label, phase, Role.PROXY.label, role.label, "sealed_payload", c, status) for c in delivery.ciphertexts
    )

def phase1(parties: Parties, users: UserPopulation, driver: Runtime) -> None:
    """Step 2, VOPRF: users blind, S_tag evaluates with proofs, users verify and finalize."""
    proxy, s_tag = parties.proxy, parties.s_tag
    with driver.meter.phase("phase1_voprf"):
        answered: list[tuple[int, bytes]] = []
        for role, delivery in proxy.forward(PHASE1, users.blind_requests()).items():
            if role is Role.S_TAG:
                answered.extend(proxy.route_back(PHASE1, delivery, s_tag.evaluate(delivery.ciphertexts)))
            elif role is Role.S_SYN:
                parties.s_syn.receive_submissions(delivery.ciphertexts)
            else:
                _refuse(parties, driver.recorder, role, PHASE1, delivery)
        users.receive_evaluations(answered)

def phase1_submit(
    parties: Parties, submissions: list[tuple[int, Role, bytes]], driver: Runtime,
    deliver: Callable[[list[bytes]], None] | None = None,
) -> None:
    """Step 2, submission: the sealed tags (users' with their coin, and dummies) through the
    proxy to S_syn (``deliver``: where the proxy puts S_syn's batch instead, e.g. a windowed
    run's :class:`~fre_protocol.roles.windows.HeldSubmissions`)."""
    for role, delivery in parties.proxy.forward(PHASE1_SUBMIT, submissions).items():
        if role is Role.S_SYN:
            (deliver or parties.s_syn.receive_submissions)(delivery.ciphertexts)
        else:
            _refuse(parties, driver.recorder, role, PHASE1_SUBMIT, delivery)

def broadcast(
    parties: Parties, driver: Runtime, users: UserPopulation | None = None
) -> tuple[dict[bytes, int], bytes]:
    """S_syn thresholds the counts at τ: the full list of released tags with their counts goes to
    S_tag over the servers' channel, and the compact broadcast (the round's encoding) to every
    user through the proxy; returns the released counts and the users' broadcast (``users``: a
    population that hears it now; a streaming driver hands it to its windows later)."""
    with driver.meter.phase("broadcast"):
        full = parties.s_syn.release()
        message = parties.proxy.broadcast(BROADCAST, Role.S_SYN, parties.s_syn.user_broadcast())
        if users is not None:
            users.receive_broadcast(message)
        # Server to server, not through the proxy: the full list, then each released tag's token
        # hashes (design §6.8).
        parties.s_tag.receive_broadcast(full)
        parties.s_tag.receive_tokens(parties.s_syn.released_tokens())
    return dict(parties.s_syn.released), message

def phase2(
    parties: Parties, plan: Phase2Plan, shares: list[tuple[int, Role, bytes]], driver: Runtime, *, concurrent: bool = False
) -> None:
    """Step 3: the users' sealed shares (or cover) through the proxy, one to each server.

    ``concurrent``: the two servers take their batches at the same time, as two machines would
    (S_tag's on a second thread): each server's view keeps its order, but the transcript then
    interleaves the two views, so a driver replayed in sequence order leaves it off."""

    def deliver(role: Role, delivery: Any) -> None:
        if role is Role.S_TAG:
            parties.s_tag.receive_shares(delivery.ciphertexts, sharing=plan.sharing, dim=plan.width)
        elif role is Role.S_SYN:
            parties.s_syn.receive_shares(delivery.ciphertexts, sharing=plan.sharing, dim=plan.width)
        else:
            _refuse(parties, driver.recorder, role, PHASE2, delivery)

    deliveries = parties.proxy.forward(PHASE2, shares)
    aside = deliveries.pop(Role.S_TAG, None) if concurrent else None
    if aside is None:
        for role, delivery in deliveries.items():
            deliver(role, delivery)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fre-S_tag") as side:
        tag_done = side.submit(deliver, Role.S_TAG, aside)
        try:
            for role, delivery in deliveries.items():
                deliver(role, delivery)
        except BaseException:
            wait([tag_done])  # this thread's error is the one raised
            raise
        tag_done.result()

def aggregation(run: RunPlan, parties: Parties, plan: Phase2Plan, driver: Runtime) -> Reconstruction:
    """S_syn names the contributions it accepted, S_tag answers with its aggregate share per tag
    (topping up missing noise under ``topup``), S_syn reconstructs, decodes and divides."""
    with driver.meter.phase("aggregation"):
        accepted = parties.s_syn.accepted_contributions()
        aggregates = parties.s_tag.aggregate(
            accepted, sharing=plan.sharing, noise=topup_noise(run, plan), plan=plan.noise
        )
        return parties.s_syn.reconstruct(
            aggregates, sharing=plan.sharing, encoder=plan.encoder, policy=run.cfg.dropout_policy, plan=plan.noise
        )

def finish(
    run: RunPlan, parties: Parties, plan: Phase2Plan, released: dict[bytes, int], driver: Runtime,
    dummy_user: Any, tally: UserTally, store: Any,
) -> tuple[Release, dict[str, Any]]:
    """The aggregation, then the release (``tally``: what the users did) and, with a transcript
    store, the run's artifacts: how every driver ends a round."""
    result = aggregation(run, parties, plan, driver)
    release, info = assemble_release(run, parties, plan, released, result, dummy_user, driver.user_pool.workers, tally)
    if store is not None:
        store_artifacts(store, release, plan.ddg_config, run.seeds, parties, dummy_user)
    return release, info
