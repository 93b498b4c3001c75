"""Transcript store and audit throughput (design §6.7).

Timing run: ``.venv/bin/pytest tests/bench/test_transcripts.py --benchmark-enable --benchmark-only``.
A normal test run executes each benchmark once as a smoke test. ``extra_info`` records entries/s
and bytes/s beside the time.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from primitives.randomness import RandomSource
from transcripts import TranscriptHeader, TranscriptStore, check_no_forbidden_content

PAYLOAD = 100
_counter = itertools.count()


def _rows(n: int) -> list[tuple[str, str, str, str, str, bytes, str]]:
    blob = RandomSource.seeded(1, "bench").random_bytes(n * PAYLOAD)
    views = ("S_tag", "S_syn", "proxy")
    return [
        (
            views[i % 3],
            "phase2",
            "proxy",
            views[i % 3],
            "share",
            blob[i * PAYLOAD : (i + 1) * PAYLOAD],
            "accepted",
        )
        for i in range(n)
    ]


@pytest.mark.benchmark(group="transcripts-record_many")
@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
@pytest.mark.parametrize("n", [10_000, 100_000])
def test_record_many_throughput(benchmark: Any, tmp_path: Path, n: int, synchronous: str) -> None:
    """record_many + flush of n ~100-byte entries into a fresh store (default batch size)."""
    rows = _rows(n)
    header = TranscriptHeader(rng_mode="crypto", run_id="bench")

    def setup() -> tuple[tuple[TranscriptStore], dict[str, Any]]:
        path = tmp_path / f"bench-{next(_counter)}.sqlite"
        return (TranscriptStore.create(path, header, synchronous=synchronous),), {}

    stores: list[TranscriptStore] = []

    def write(store: TranscriptStore) -> None:
        store.record_many(rows)
        store.flush()
        stores.append(store)

    benchmark.pedantic(write, setup=setup, rounds=3, iterations=1)
    for store in stores:
        assert store.count() == n
        store.close()
    seconds = benchmark.stats.stats.min if benchmark.stats else float("nan")
    benchmark.extra_info.update(
        entries=n,
        payload_bytes=PAYLOAD,
        entries_per_s=n / seconds,
        payload_bytes_per_s=n * PAYLOAD / seconds,
    )


@pytest.mark.benchmark(group="transcripts-audit")
@pytest.mark.parametrize("n", [10_000, 100_000])
def test_forbidden_scan_throughput(benchmark: Any, tmp_path: Path, n: int) -> None:
    """check_no_forbidden_content over n ~100-byte payloads with 10k 32-byte and 100 1536-byte
    needles (two distinct lengths), all views scanned."""
    with TranscriptStore.create(
        tmp_path / "scan.sqlite", TranscriptHeader(rng_mode="crypto")
    ) as store:
        store.record_many(_rows(n))
    rng = RandomSource.seeded(2, "needles")
    forbidden = {
        "tags": [rng.random_bytes(32) for _ in range(10_000)],
        "embeddings": [rng.random_bytes(1536) for _ in range(100)],
    }
    with TranscriptStore.open(tmp_path / "scan.sqlite") as store:
        findings = benchmark.pedantic(
            check_no_forbidden_content,
            kwargs={"store": store, "views": ["S_tag", "S_syn", "proxy"], "forbidden": forbidden},
            rounds=3,
            iterations=1,
        )
    assert all(f.passed for f in findings)
    seconds = benchmark.stats.stats.min if benchmark.stats else float("nan")
    benchmark.extra_info.update(entries=n, scanned_bytes_per_s=n * PAYLOAD / seconds)
