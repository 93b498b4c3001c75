"""The driver adapters and fault hooks of the driver conformance suite
(tests/fre_protocol/drivers/test_conformance.py).

Every driver is one adapter ``(x, spec, options, users) -> Outcome``: the release it published
and the transcript stores it wrote (one ``transcript.sqlite`` for the drivers that play the round
in this process, one store per party for the networked services). The suite's parameter list
names each adapter with the transcript traits that legitimately set it apart (:class:`Driver`).

Faults are injected where the users' devices compute, in every process that plays them
(:func:`arm`): this process (the in-process, streaming and Dask drivers on an in-process cluster,
the networked users' client), and the spawned worker processes of ``in_worker_processes``, whose
task calls are wrapped so that the worker installs the same patches before its first task.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from fre_protocol.roles.config import RoundSpec, RunOptions
from mechanism.release import Release
from mechanism.seeds import SeedPlan

#: Chunks of users per window (streaming, worker processes, Dask) and the networked proxy's
#: batch, in chunks: three chunks of 64 users, so windows do not line up with the chunks of
#: participants (a participant chunk straddles two windows).
WINDOW_CHUNKS = 3

#: One view-count key: (view, phase, message type, status).
ViewKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a driver's run left: its release and the transcript stores it wrote."""

    release: Release
    transcripts: tuple[Path, ...]


Adapter = Callable[[npt.NDArray[Any], RoundSpec, RunOptions, Any], Outcome]


@dataclass(frozen=True, slots=True)
class Driver:
    """One driver of the suite: its adapter, and how its transcripts legitimately differ from the
    in-process driver's (each trait is checked, not skipped, by the suite).

    ``settles_windows``: its servers keep running sums and settle each window's contributions
    (two ``accepted_contributions`` messages a tag and window in phase 2, S_syn → S_tag and
    back, which the in-process driver does not send; ``streaming.settle_window``).
    ``idempotent_resends``: its proxy answers a device's identical re-sent request from its log
    (an HTTP retry) instead of forwarding or refusing it, so a re-sent submission leaves no entry.
    ``syn_diagnostics``: its operator diagnostics are S_syn's own (the networked S_syn serves
    them; no process sees the users', the proxy's and S_tag's counts), so it publishes a subset of
    the reference's keys, and its ``rejections`` are those in S_syn's view only.
    ``unsupported``: scenario name → why this driver cannot play it (a skip naming the reason)."""

    name: str
    run: Adapter
    settles_windows: bool = False
    idempotent_resends: bool = False
    syn_diagnostics: bool = False
    unsupported: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:  # the test id
        return self.name


# -- adapters -------------------------------------------------------------------------------------
def inprocess(x: npt.NDArray[Any], spec: RoundSpec, options: RunOptions, users: Any) -> Outcome:
    from fre_protocol.drivers.inprocess import run_protocol

    result = run_protocol(x, spec, options, users=users)
    assert result.transcript_path is not None
    return Outcome(result.release, (Path(result.transcript_path),))


def streaming(x: npt.NDArray[Any], spec: RoundSpec, options: RunOptions, users: Any) -> Outcome:
    from fre_protocol.drivers.streaming import run_streaming

    result = run_streaming(x, spec, options, users=users, window_chunks=WINDOW_CHUNKS)
    assert result.transcript_path is not None
    return Outcome(result.release, (Path(result.transcript_path),))


def streaming_processes(x: npt.NDArray[Any], spec: RoundSpec, options: RunOptions, users: Any) -> Outcome:
    """Streaming with the users' tasks in two local worker processes (spawned for the run)."""
    from fre_protocol.drivers.streaming import run_streaming
    from fre_protocol.drivers.user_processes import in_worker_processes

    result = run_streaming(
        x, spec, options, users=users, window_chunks=WINDOW_CHUNKS, players=in_worker_processes(2)
    )
    assert result.transcript_path is not None
    return Outcome(result.release, (Path(result.transcript_path),))


def dask(x: npt.NDArray[Any], spec: RoundSpec, options: RunOptions, users: Any) -> Outcome:
    """The Dask driver on a cluster of its own: one process, two single-threaded workers (as in
    tests/fre_protocol/drivers/test_dask.py), so the faults patched here reach its tasks."""
    distributed = pytest.importorskip("distributed")
    from fre_protocol.drivers.dask import DaskCluster, run_dask

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        result = run_dask(
            x, spec, options, users=users, window_chunks=WINDOW_CHUNKS, cluster=DaskCluster(client=client)
        )
    assert result.transcript_path is not None
    return Outcome(result.release, (Path(result.transcript_path),))


def net(x: npt.NDArray[Any], spec: RoundSpec, options: RunOptions, users: Any) -> Outcome:
    """A local deployment (S_tag, S_syn and the proxy as HTTPS service processes, the users'
    client in this process), as tests/fre_protocol/drivers/net/test_deploy_equivalence.py runs
    one. The one place that knows the networked driver's entry point: ``deploy_local``, its
    ``RoundSettings`` and the per-party stores (``stores_of``)."""
    for module in ("starlette", "uvicorn", "httpx", "aiohttp"):
        pytest.importorskip(module, reason=f"the networked deployment needs {module} (the 'net' extra)")
    from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local, stores_of
    from fre_protocol.drivers.net.round import RoundSettings

    if spec.components is not None or options.transcript != "full":
        raise NotImplementedError("the net adapter plays default components and full transcripts only")
    seed = _integer_seed(spec.seeds)
    dropout = spec.dropout
    if callable(dropout):
        mask = np.asarray(dropout(len(x) if users is None else len(set(np.asarray(users).tolist()))), dtype=bool)
    elif dropout == 0:
        mask = None
    else:
        raise NotImplementedError("the net adapter takes a dropout mask (a callable), not a fraction")
    settings = RoundSettings(
        round_id="conformance", params=spec.params, public_seed=spec.seeds.public_seed, rng_mode="seeded",
        dim=int(x.shape[1]), noise=spec.noise, protocol=spec.config, unit=spec.unit,
        window_count=WINDOW_CHUNKS * spec.config.chunk_size, window_seconds=0.1,
    )
    assert options.out_dir is not None
    out = Path(options.out_dir)
    summary = deploy_local(x, settings, out, DeployOptions(test_seed=seed, dropout=mask), users=users)
    assert summary["users"]["failures"] == {}, summary["users"]["failures"]
    return Outcome(Release.load(out), tuple(stores_of(out).values()))


def _integer_seed(seeds: SeedPlan, limit: int = 100_000) -> int:
    """The integer a seeded plan came from (a deployment's services take the integer)."""
    for n in range(limit):
        if SeedPlan.from_seed(n) == seeds:
            return n
    raise NotImplementedError(f"the net adapter needs a SeedPlan.from_seed(n) with n < {limit}")


# -- what the suite compares ----------------------------------------------------------------------
def view_counts(paths: tuple[Path, ...]) -> Counter[ViewKey]:
    """Entries per (view, phase, message type, status), over every store of a run."""
    from transcripts import TranscriptStore

    out: Counter[ViewKey] = Counter()
    for path in paths:
        with TranscriptStore.open(path) as store:
            for view, phases in store.summary(by=("view", "phase", "message_type", "status")).items():
                for phase, types in phases.items():
                    for kind, statuses in types.items():
                        for status, cell in statuses.items():
                            out[(view, phase, kind, status)] += int(cell["count"])
    return out


@dataclass(frozen=True, slots=True)
class FixedDropout:
    """A dropout mask fixed in advance, as ``RoundSpec.dropout`` takes it (``n -> mask``);
    picklable, and one mask every driver (the networked one included) is given."""

    dropped: tuple[int, ...]

    def __call__(self, n: int) -> npt.NDArray[np.bool_]:
        mask = np.zeros(n, dtype=bool)
        mask[list(self.dropped)] = True
        return mask


# -- faults ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Faults:
    """What goes wrong in a scenario. ``refused_share``: the first participant of participant
    chunk 0 sends this server a share one byte short (tests/support/share_faults.py), so exactly
    that server refuses it. ``duplicate_submission``: one device sends its sealed tag submission
    twice, the same bytes from the same device (once per run, whichever process plays it)."""

    refused_share: str | None = None
    duplicate_submission: bool = False


@dataclass(frozen=True, slots=True)
class _Armed:
    """Faults as a process installs them (picklable: sent to worker processes)."""

    refused_share: str | None
    marker: str | None  # a file created by the one device that re-sends (claimed across processes)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if self.refused_share is not None:
            from share_faults import faulty_share

            faulty_share(monkeypatch, self.refused_share)
        if self.marker is not None:
            from fre_protocol.roles.user import UserPopulation

            monkeypatch.setattr(
                UserPopulation, "tag_submissions", _resending(UserPopulation.tag_submissions, self.marker)
            )


def _resending(original: Callable[[Any], list[Any]], marker: str) -> Callable[[Any], list[Any]]:
    def tag_submissions(self: Any) -> list[Any]:
        out = original(self)
        if out and _claim(marker):
            out = [out[0], *out]  # the first sender's sealed submission, sent twice
        return out

    return tag_submissions


def _claim(marker: str) -> bool:
    """True for the first caller in any process (an exclusive create of the marker file)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


_INSTALLED: set[_Armed] = set()


def _in_worker(armed: _Armed, fn: Callable[..., Any], *args: Any) -> Any:
    """A users' task in a worker process, with the faults installed there first (the worker is
    spawned for one run and stopped after it, so the patch is never undone)."""
    if armed not in _INSTALLED:
        armed.install(pytest.MonkeyPatch())
        _INSTALLED.add(armed)
    return fn(*args)


@contextlib.contextmanager
def arm(faults: Faults, workdir: Path) -> Iterator[Callable[[], bool]]:
    """Within the block, ``faults`` happen in this process and in any users' worker process.
    Yields ``resent()``: whether a device has re-sent its submission (in whichever process)."""
    marker = str(workdir / "resent.marker") if faults.duplicate_submission else None

    def resent() -> bool:
        return marker is not None and os.path.exists(marker)

    if faults == Faults():
        yield resent
        return
    from fre_protocol.drivers.user_processes import UserProcesses

    armed = _Armed(refused_share=faults.refused_share, marker=marker)
    submit = UserProcesses.submit

    def submit_armed(self: UserProcesses, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return submit(self, functools.partial(_in_worker, armed, fn), *args, **kwargs)

    with pytest.MonkeyPatch.context() as monkeypatch:
        armed.install(monkeypatch)
        monkeypatch.setattr(UserProcesses, "submit", submit_armed)
        yield resent


__all__ = [
    "WINDOW_CHUNKS", "Adapter", "Driver", "Faults", "FixedDropout", "Outcome", "ViewKey", "arm", "dask",
    "inprocess", "net", "streaming", "streaming_processes", "view_counts",
]
