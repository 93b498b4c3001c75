"""Benchmarks of the released-tags broadcast (primitives.compact, issue 32): building the fuse
and ribbon broadcasts for 10^5 tags (target < 1 s), one device query (target < 0.1 ms), and the
bytes a device downloads at the released-set sizes of the 10^6- and 10^7-user runs (1,372 and
13,812 tags; targets 8 kB and 64 kB, kB = 1000 bytes) for 16- and 32-bit fingerprints.

Default runs execute each benchmark once as a smoke test. Timing run::

    .venv/bin/pytest tests/bench/test_compact.py --benchmark-enable --benchmark-only

``extra_info`` records the tag count, the bytes and the false-positive rate. State the
machine's cores with any figure.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from primitives.compact import FullListBroadcast, FuseBroadcast
from primitives.compact.ribbon import RibbonBroadcast
from primitives.compact.ribbon_classes import RibbonClassesBroadcast

SEED = b"bench public seed"
# Released-set sizes of the seeded streaming runs in issue 32, and the download targets.
TARGETS = {1_372: 8_000, 13_812: 64_000}


def _released(n: int) -> dict[bytes, int]:
    rng = np.random.default_rng([32, n])
    raw = rng.integers(0, 256, size=(n, 32), dtype=np.uint8)
    counts = rng.integers(1, 60_000, size=n)
    return {bytes(t): int(c) for t, c in zip(raw, counts, strict=True)}


def _info(benchmark: Any, **values: Any) -> None:
    benchmark.extra_info.update(values, cpus=os.cpu_count())


@pytest.mark.benchmark(group="compact-build")
@pytest.mark.parametrize("n", [1_372, 13_812, 100_000])
@pytest.mark.parametrize(
    "make", [lambda: FuseBroadcast(16), lambda: RibbonBroadcast(16), RibbonClassesBroadcast],
    ids=["fuse", "ribbon", "ribbon-classes"],
)
def test_build(benchmark: Any, make: Any, n: int) -> None:
    """Build the broadcast of n tags (16-bit fuse and ribbon, the default ribbon-classes; hashing
    the tags included; the ribbon's numba kernels are compiled or loaded before timing)."""
    released = _released(n)
    make().build(_released(100), SEED)
    data = benchmark(make().build, released, SEED)
    _info(benchmark, tags=n, bytes=len(data))


@pytest.mark.benchmark(group="compact-query")
@pytest.mark.parametrize(
    "encoding", [FuseBroadcast(16), RibbonBroadcast(16), RibbonClassesBroadcast(), FullListBroadcast()], ids=repr
)
def test_query(benchmark: Any, encoding: Any) -> None:
    """One device's query at 13,812 released tags: its own tag (released) and 999 others."""
    released = _released(13_812)
    loaded = encoding.load(encoding.build(released, SEED))
    mine = next(iter(released))
    others = [
        bytes(t) for t in np.random.default_rng(1).integers(0, 256, (999, 32), dtype=np.uint8)
    ]
    probes = [mine, *others]

    def query_all() -> int:
        return sum(loaded.query(t) is not None for t in probes)

    assert benchmark(query_all) >= 1
    _info(benchmark, queries=len(probes), tags=13_812)


@pytest.mark.benchmark(group="compact-load")
def test_load(benchmark: Any) -> None:
    """A device parses the broadcast of 13,812 tags."""
    data = FuseBroadcast(16).build(_released(13_812), SEED)
    loaded = benchmark(FuseBroadcast(16).load, data)
    _info(benchmark, tags=13_812, bytes=loaded.size)


def _sizes(n: int) -> dict[str, int]:
    released = _released(n)
    return {
        "fuse-16": len(FuseBroadcast(16).build(released, SEED)),
        "fuse-32": len(FuseBroadcast(32).build(released, SEED)),
        "ribbon-16": len(RibbonBroadcast(16).build(released, SEED)),
        "ribbon-32": len(RibbonBroadcast(32).build(released, SEED)),
        "ribbon-classes": len(RibbonClassesBroadcast().build(released, SEED)),
        "full-list": len(FullListBroadcast().build(released, SEED)),
    }


@pytest.mark.parametrize("n", sorted(TARGETS))
def test_sizes(n: int, record_property: Any) -> None:
    """Bytes per device at each released-set size (16-bit counts here: all counts < 2^16)."""
    sizes = _sizes(n)
    for name, size in sizes.items():
        record_property(name, size)
    print(f"\n{n} tags: {sizes}")
    assert sizes["ribbon-16"] < sizes["fuse-16"] < sizes["fuse-32"] < sizes["full-list"]
    assert sizes["ribbon-16"] < sizes["ribbon-32"] < sizes["fuse-32"]


def test_16_bit_fingerprints_meet_the_target_at_1372_tags() -> None:
    assert _sizes(1_372)["fuse-16"] <= TARGETS[1_372]


def test_32_bit_fingerprints_miss_the_target_at_1372_tags() -> None:
    """48 bits per slot cannot fit 1,372 keys in 8 kB at any load: 8,000 B / 6 B < 1,372 slots."""
    sizes = _sizes(1_372)
    assert sizes["fuse-32"] > TARGETS[1_372] and sizes["ribbon-32"] > TARGETS[1_372]


@pytest.mark.parametrize("n", sorted(TARGETS))
def test_16_bit_ribbon_meets_both_targets(n: int) -> None:
    assert _sizes(n)["ribbon-16"] <= TARGETS[n]


@pytest.mark.parametrize("n", sorted(TARGETS))
def test_the_default_ribbon_classes_meets_both_targets(n: int) -> None:
    """27-bit fingerprints and 8-bit classes in 35-bit slots, below the 32-bit ribbon's exact counts."""
    sizes = _sizes(n)
    assert sizes["ribbon-classes"] <= TARGETS[n] < sizes["ribbon-32"]


@pytest.mark.xfail(
    strict=True,
    reason="3-wise fuse at 13,812 keys peels only from ~1.18 slots per key: 16-bit"
    " fingerprints + 16-bit counts = 65.6 kB (median of 20 sets; 64.6-66.6) > 64 kB; the ribbon meets it",
)
def test_16_bit_fingerprints_meet_the_target_at_13812_tags() -> None:
    assert _sizes(13_812)["fuse-16"] <= TARGETS[13_812]
