"""Single-element DLEQ proof verification (RFC 9497 §2.2.2, m = 1): the variable-time kernel
against libsodium, 256 independent proofs per call.

Three implementations run in the same session, so their ratio is meaningful on a shared machine:
``libsodium`` (:func:`dleq.verify_proof` per proof, six scalar multiplications each),
``kernel`` (:func:`dleq.verify_single_proofs`, hashing included) and ``kernel-points`` (the four
points alone, :func:`vartime_numba.single_proof_points`). Timing run::

    .venv/bin/pytest tests/bench/test_vartime_verify.py --benchmark-enable --benchmark-only -s

Divide the reported times by ``extra_info["proofs"]`` for per-proof figures;
``test_single_proof_ratio`` prints best-of-5 per-proof microseconds of all three, measured
interleaved in one process, and the libsodium/kernel ratio. State the machine's load with any
figure (it is recorded).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import pytest

from primitives.group import get_group, vartime_numba
from primitives.randomness import RandomSource
from primitives.voprf import Mode, dleq, get_suite
from primitives.voprf.hashing import hash_to_scalar_dst

PROOFS = 256
SODIUM = get_group("ristretto255-sodium")

pytestmark = pytest.mark.skipif(not vartime_numba.SWITCH.usable(), reason="needs numba")


@lru_cache(maxsize=1)
def _case() -> dict[str, Any]:
    """PROOFS VOPRF proofs over one element each, by one server key."""
    suite = get_suite(mode=Mode.VOPRF)
    rng = RandomSource.seeded(PROOFS, "bench-single-proofs")
    sk, pk = suite.derive_key_pair(bytes(32), b"bench")
    c, d, proofs = [], [], []
    for i in range(PROOFS):
        _, blinded = suite.blind(f"bucket {i}".encode(), rng=rng)
        evaluated, proof = suite.blind_evaluate(sk, [blinded], rng=rng)
        assert proof is not None
        c.append(blinded)
        d.append(evaluated[0])
        proofs.append((proof[:32], proof[32:]))
    context = suite.context_string
    return {"b": pk, "c": c, "d": d, "proofs": proofs, "context": context,
            "dst": hash_to_scalar_dst(context)}  # fmt: skip


def _libsodium(case: dict[str, Any]) -> list[bool]:
    return [
        dleq.verify_proof(
            SODIUM, case["b"], [ci], [di], proof, context=case["context"], dst=case["dst"]
        )  # fmt: skip
        for ci, di, proof in zip(case["c"], case["d"], case["proofs"], strict=True)
    ]


def _kernel(case: dict[str, Any]) -> list[bool]:
    return dleq.verify_single_proofs(SODIUM, case["b"], case["c"], case["d"], case["proofs"],
                                     context=case["context"], dst=case["dst"])  # fmt: skip


def _points_args(case: dict[str, Any]) -> tuple[bytes, ...]:
    """The kernel's inputs: the composite weights d0 are hashed here, outside the timing."""
    seed = dleq.composite_seed(case["b"], case["context"])
    weights = [
        dleq.composite_weight(SODIUM, seed, 0, ci, di, case["dst"])
        for ci, di in zip(case["c"], case["d"], strict=True)
    ]
    return (
        case["b"] * PROOFS,
        b"".join(case["c"]),
        b"".join(case["d"]),
        b"".join(weights),
        b"".join(p[0] for p in case["proofs"]),
        b"".join(p[1] for p in case["proofs"]),
    )


def _points(args: tuple[bytes, ...]) -> Any:
    pk, c, d, d0, ch, s = args
    return vartime_numba.single_proof_points(pk, c, d, d0, ch, s, PROOFS)


IMPLS: dict[str, Callable[[], Any]] = {
    "libsodium": lambda: _libsodium(_case()),
    "kernel": lambda: _kernel(_case()),
    "kernel-points": lambda: _points(_points_args(_case())),
}


@pytest.mark.benchmark(group="voprf-single-proofs")
@pytest.mark.parametrize("impl", ["libsodium", "kernel", "kernel-points"])
def test_single_proof_verification(benchmark: Any, impl: str) -> None:
    case = _case()
    _kernel(case)  # compile (or load the cache) outside the timing
    if impl == "kernel-points":
        args = _points_args(case)
        status, *_ = benchmark(_points, args)
        assert not status.any()
    else:
        results = benchmark(_libsodium if impl == "libsodium" else _kernel, case)
        assert results == [True] * PROOFS
    benchmark.extra_info.update(proofs=PROOFS, impl=impl, cpus=os.cpu_count())
    if benchmark.stats is not None:  # absent when benchmarks are disabled (smoke run)
        benchmark.extra_info["us_per_proof"] = benchmark.stats.stats.min / PROOFS * 1e6


def _best_of(fn: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / PROOFS * 1e6


@pytest.mark.benchmark(group="voprf-single-proofs-ratio")
def test_single_proof_ratio(benchmark: Any) -> None:
    """Per-proof µs of the three implementations, interleaved in one process (best of 5)."""
    case = _case()
    assert _kernel(case) == _libsodium(case) == [True] * PROOFS
    args = _points_args(case)
    repeats = 1 if benchmark.disabled else 5
    figures = {name: float("inf") for name in IMPLS}
    for _ in range(repeats):
        figures["libsodium"] = min(figures["libsodium"], _best_of(lambda: _libsodium(case), 1))
        figures["kernel"] = min(figures["kernel"], _best_of(lambda: _kernel(case), 1))
        figures["kernel-points"] = min(figures["kernel-points"], _best_of(lambda: _points(args), 1))
    ratio = figures["libsodium"] / figures["kernel"]
    info = {
        "proofs": PROOFS,
        "cpus": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
        **{f"{name}_us_per_proof": round(value, 1) for name, value in figures.items()},
        "python_us_per_proof": round(figures["kernel"] - figures["kernel-points"], 1),
        "libsodium_over_kernel": round(ratio, 2),
    }
    benchmark.extra_info.update(info)
    print(f"\nsingle-element proofs, per proof: {info}", file=sys.stderr)
    assert benchmark.pedantic(_kernel, args=(case,), rounds=1, iterations=1) == [True] * PROOFS
    if not benchmark.disabled:  # timing runs only: one smoke-run timing says nothing
        assert ratio > 1.0, info
