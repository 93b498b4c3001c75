"""The users' side of the streaming windows in local worker processes:
``run_streaming(..., players=in_worker_processes(k))``, ``fre-e2t simulate --driver streaming-processes --processes k``.

The in-process streaming driver plays the users' devices on threads of the process that also
plays the servers and the proxy, so both sides share one GIL: the two cores are busy ~1.55 of 2.
:class:`UserProcesses` runs the users' tasks (:mod:`fre_protocol.drivers.chunk_tasks`: blind; verify,
finalize and seal the tag; encode and share; seal the shares or cover) in ``k`` worker processes
of this machine instead, through the few calls of a Dask client that
:class:`~fre_protocol.drivers.dask.DaskWindows` makes (``submit``, ``gather``, ``who_has``), with
the servers and the proxy left in this process. The windows overlap as on Dask: S_tag evaluates
a window while the workers finalize the one before, and the workers seal the next window's
shares while the servers take this one's. The release is the same as every other driver's.

Each worker is a single-process pool, so a task sent after another to the same worker runs where
that one's devices are held (``who_has`` answers with the worker's index). Workers are started
with ``spawn`` (forking a process whose threads hold locks is unsafe) and take a second or two to
import the project, which is why the option pays only for runs of many windows.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from fre_protocol.drivers.dask import DaskWindows, Placement
from fre_protocol.drivers.streaming import Players, WindowContext, WindowPlayer
from fre_protocol.gc_policy import relax_for_rounds
from primitives.errors import InvalidParameterError, ProtocolStateError


@dataclass(frozen=True, slots=True)
class Task:
    """A submitted task: its key (unique within a run) and the future of its result, or, for a
    task waiting on earlier ones, the future of the future its worker gives once it is sent."""

    key: str
    future: Future[Any]
    sent_later: bool = False

    def result(self) -> Any:
        out = self.future.result()
        return out.result() if self.sent_later else out


class UserProcesses:
    """``processes`` local worker processes for the users' tasks, with the client calls of Dask
    that :class:`~fre_protocol.drivers.dask.DaskWindows` uses. A task whose arguments include a
    list of earlier tasks (the sealing task's encodings) is handed to its worker once those are
    done, by a dispatching thread, so submitting never blocks the driver."""

    def __init__(self, processes: int) -> None:
        _check_count(processes)
        context = multiprocessing.get_context("spawn")
        self._workers = [ProcessPoolExecutor(max_workers=1, mp_context=context) for _ in range(processes)]
        for pool in self._workers:
            pool.submit(_import_tasks)  # starts the worker, which imports the tasks meanwhile
        self._dispatch = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fre-dispatch")
        self._turn = itertools.count()
        self._where: dict[str, int] = {}

    def submit(self, fn: Callable[..., Any], *args: Any, key: str, workers: Sequence[int] | None = None,
               **_dask_options: Any) -> Task:
        """Run ``fn(*args)`` on worker ``workers[0]`` (a task that must follow an earlier one to
        its worker), else on the next worker in turn. Dask's resources and retries do not apply."""
        k = int(workers[0]) if workers else next(self._turn) % len(self._workers)
        self._where[key] = k
        pool = self._workers[k]
        if not any(_is_task_list(a) for a in args):
            try:
                return Task(key, pool.submit(fn, *args))
            except BrokenProcessPool as exc:  # the worker died before this task was sent
                raise _lost(exc) from exc

        def after_inputs() -> Future[Any]:
            ready = [[t.result() for t in a] if _is_task_list(a) else a for a in args]
            return pool.submit(fn, *ready)

        return Task(key, self._dispatch.submit(after_inputs), sent_later=True)

    def gather(self, tasks: Sequence[Task]) -> list[Any]:
        """The tasks' results, in order; a lost worker process stops the run."""
        try:
            return [t.result() for t in tasks]
        except BrokenProcessPool as exc:
            raise _lost(exc) from exc

    def who_has(self, tasks: Sequence[Task]) -> dict[str, list[int]]:
        """Which worker each task ran on (where its devices stay between the phase-1 tasks)."""
        return {t.key: [self._where[t.key]] for t in tasks if t.key in self._where}

    def close(self) -> None:
        self._dispatch.shutdown(wait=True, cancel_futures=True)
        for pool in self._workers:
            pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> UserProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_worker_processes(processes: int = 2) -> Players:
    """Players for :func:`~fre_protocol.drivers.streaming.run_streaming` that run the users' tasks in
    ``processes`` local worker processes, started for the run and stopped after it."""
    _check_count(processes)  # here too, so a bad count fails before the run starts

    @contextlib.contextmanager
    def players(ctx: WindowContext) -> Iterator[WindowPlayer]:
        with UserProcesses(processes) as pool:
            yield DaskWindows(pool, ctx, Placement(s_tag="", s_syn="", users_resources=None), ctx.parties.keys)

    return players


def _check_count(processes: object) -> None:
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise InvalidParameterError(f"processes must be an integer >= 1, got {processes!r}")


def _lost(exc: BrokenProcessPool) -> ProtocolStateError:
    return ProtocolStateError(
        f"a users' worker process died ({exc}); the devices it held are gone, so the run stops and "
        "releases nothing"
    )


def _import_tasks() -> None:
    """A worker's start: importing this module imports the tasks' module; the worker's collector
    is set for rounds (:mod:`fre_protocol.gc_policy`)."""
    relax_for_rounds()


def _is_task_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Task) for v in value)


__all__ = ["Task", "UserProcesses", "in_worker_processes"]
