"""The distributed Aug-PE user's nearest-candidate scan (paper App. B.1, Table 17), by pool size.

Timing run: ``.venv/bin/pytest tests/bench/test_augpe_costs.py --benchmark-enable --benchmark-only``.
A normal test run executes it once as a smoke test; the growth with the pool is asserted in
timing runs only (one timing on a shared machine says nothing about the code).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from fre_protocol.augpe_costs import measure_scan


@pytest.mark.benchmark(group="augpe-scan")
def test_scan_time_grows_with_the_candidate_pool(benchmark: Any) -> None:
    """A 50x larger pool takes longer to scan (medians of 5; a generous factor of 4 for noise on
    a shared machine, against the expected ~50)."""
    small = measure_scan(1_000, 64, repeats=5)
    large = benchmark.pedantic(measure_scan, args=(50_000, 64), kwargs={"repeats": 5}, rounds=1, iterations=1)
    assert all(math.isfinite(t) and t >= 0 for t in (*small, *large)) and small[0] > 0 and large[0] > 0
    benchmark.extra_info.update(small_s=small[0], large_s=large[0])
    if not benchmark.disabled:
        assert large[0] > 4 * small[0], (small, large)
