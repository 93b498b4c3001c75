"""The users' client's per-step worker pool (:func:`fre_protocol.drivers.net.users_client._each`).

Whole rounds through it, and a proxy that never answers, are tested against running services
(test_robustness_http, test_faults); here, without a network: the order of the results, the bound
on requests in flight, one user's failure staying that user's, and the step's shared deadline.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from net_rounds import needs_net

needs_net()

from fre_protocol.drivers.net.users_client import UsersReport, _each  # noqa: E402


def _http(concurrency: int, deadline_s: float = 60.0) -> SimpleNamespace:
    """What :func:`_each` reads of the users' HTTP side."""
    return SimpleNamespace(concurrency=concurrency, deadline_s=deadline_s, until=None, report=UsersReport(n_users=0))


@pytest.mark.parametrize(("n", "concurrency"), [(0, 4), (3, 8), (50, 4), (50, 1)])
def test_each_returns_results_in_the_items_order_with_at_most_concurrency_in_flight(n: int, concurrency: int) -> None:
    http = _http(concurrency)
    in_flight, most = 0, 0

    async def fn(item: int) -> int:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.001 * (item % 3))  # unequal durations: workers finish out of order
        in_flight -= 1
        return item * item

    out = asyncio.run(_each("step", http, list(range(n)), fn))
    assert out == [i * i for i in range(n)]
    assert most == min(n, concurrency)
    assert http.report.failures == {}


def test_one_users_failure_is_counted_and_yields_none_while_the_others_go_on() -> None:
    http = _http(3)

    async def fn(item: int) -> int:
        if item % 4 == 1:
            raise ValueError(f"user {item} fails")
        return item

    out = asyncio.run(_each("phase2", http, list(range(10)), fn))
    assert out == [None if i % 4 == 1 else i for i in range(10)]
    assert http.report.failures == {"phase2": 3}
    assert "phase2" in http.report.wall


def test_the_steps_deadline_is_one_from_its_start_and_is_lifted_after_it() -> None:
    http = _http(2, deadline_s=30.0)
    seen: list[float | None] = []
    first_call: list[float] = []

    async def fn(item: int) -> None:
        first_call.append(first_call[0] if first_call else time.monotonic())
        seen.append(http.until)
        await asyncio.sleep(0.002)

    t0 = time.monotonic()
    asyncio.run(_each("phase1", http, list(range(6)), fn))
    assert len(set(seen)) == 1  # every user of the step shares one deadline
    # An order, not a speed: the deadline is 30 s from a moment between the call and the first
    # user's start (each reading of the monotonic clock bounds the next).
    assert seen[0] is not None and t0 + 30.0 <= seen[0] <= first_call[0] + 30.0
    assert http.until is None
