"""Benchmarks of ristretto255 and the RFC 9497 ristretto255-SHA512 suite (design §9: ≤ 45 µs per
element for server evaluation in batches of 1000 with one proof, on 2 cores).

Default runs execute each benchmark once as a smoke test. Timing run::

    .venv/bin/pytest tests/bench/test_voprf.py --benchmark-enable --benchmark-only

``extra_info`` records the batch size, the bytes on the wire and the threads used; divide the
reported time by ``batch`` for the per-element figure. State the machine's cores with any figure.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from primitives import registry
from primitives.group import get_group
from primitives.randomness import RandomSource
from primitives.voprf import Mode, OprfSuite, get_suite

SODIUM = get_group("ristretto255-sodium")
PURE = get_group("ristretto255-pure")


def _info(benchmark: Any, **values: Any) -> None:
    benchmark.extra_info.update(values, cpus=os.cpu_count())


# -- group operations ------------------------------------------------------------------------
@pytest.mark.benchmark(group="ristretto255")
def test_hash_to_group_sodium(benchmark: Any) -> None:
    dst = b"HashToGroup-OPRFV1-\x01-ristretto255-SHA512"
    element = benchmark(SODIUM.hash_to_group, b"bucket 0123456789abcdef", dst)
    assert len(element) == 32
    _info(benchmark, backend="sodium")


@pytest.mark.benchmark(group="ristretto255")
def test_scalar_mult_sodium(benchmark: Any) -> None:
    rng = RandomSource.seeded(1, "bench")
    k, point = SODIUM.random_scalar(rng), SODIUM.hash_to_group(b"p", b"bench")
    out = benchmark(SODIUM.scalar_mult, k, point)
    assert SODIUM.deserialize_element(out) == out
    _info(benchmark, backend="sodium")


@pytest.mark.benchmark(group="ristretto255")
def test_scalar_mult_pure(benchmark: Any) -> None:
    rng = RandomSource.seeded(1, "bench")
    k, point = PURE.random_scalar(rng), PURE.hash_to_group(b"p", b"bench")
    out = benchmark(PURE.scalar_mult, k, point)
    assert PURE.serialize_element(out) == SODIUM.scalar_mult(
        PURE.serialize_scalar(k), PURE.serialize_element(point)
    )
    _info(benchmark, backend="pure")


@pytest.mark.parametrize("batch", [100, 1000])
@pytest.mark.benchmark(group="ristretto255-msm")
def test_multi_scalar_mult_sodium(benchmark: Any, batch: int) -> None:
    rng = RandomSource.seeded(batch, "bench-msm")
    points = [SODIUM.hash_to_group(rng.random_bytes(8), b"bench") for _ in range(batch)]
    scalars = [SODIUM.random_scalar(rng) for _ in range(batch)]
    out = benchmark(SODIUM.multi_scalar_mult, scalars, points)
    assert len(out) == 32
    _info(benchmark, backend="sodium+bucket", batch=batch)


# -- client ----------------------------------------------------------------------------------
@pytest.mark.benchmark(group="voprf-client")
def test_client_blind(benchmark: Any) -> None:
    suite = get_suite(mode=Mode.VOPRF)
    rng = RandomSource.seeded(2, "bench")
    blind, blinded = benchmark(suite.blind, b"bucket 0123456789abcdef", None, rng)
    assert len(blind) == len(blinded) == 32
    _info(benchmark, upload_bytes=32)


def _server_batch(mode: Mode, batch: int, workers: int) -> dict[str, Any]:
    suite = get_suite(mode=mode, workers=workers)
    rng = RandomSource.seeded(batch, "bench-batch")
    sk, pk = suite.derive_key_pair(bytes(32), b"bench")
    inputs = [f"bucket {i}".encode() for i in range(batch)]
    blinds, blinded = zip(*(suite.blind(x, rng=rng) for x in inputs), strict=True)
    return {
        "suite": suite,
        "sk": sk,
        "pk": pk,
        "inputs": inputs,
        "blinds": list(blinds),
        "blinded": list(blinded),
        "rng": rng,
    }


@pytest.mark.parametrize("batch", [1, 100])
@pytest.mark.benchmark(group="voprf-client")
def test_client_finalize_with_batch_verification(benchmark: Any, batch: int) -> None:
    case = _server_batch(Mode.VOPRF, batch, 2)
    suite = case["suite"]
    evaluated, proof = suite.blind_evaluate(case["sk"], case["blinded"], rng=case["rng"])
    outputs = benchmark(
        suite.finalize,
        case["inputs"],
        case["blinds"],
        evaluated,
        blinded_elements=case["blinded"],
        pk=case["pk"],
        proof=proof,
    )
    assert len(outputs) == batch
    _info(benchmark, batch=batch, download_bytes=32 * batch + 64, workers=2)


# -- server ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("batch", "workers"), [(1, 1), (100, 2), (1000, 1), (1000, 2)], ids=lambda v: str(v)
)
@pytest.mark.benchmark(group="voprf-server")
def test_server_blind_evaluate(benchmark: Any, batch: int, workers: int) -> None:
    """One VOPRF BlindEvaluate call over ``batch`` elements with ONE proof (per-element = t/batch)."""
    case = _server_batch(Mode.VOPRF, batch, workers)
    suite = case["suite"]
    evaluated, proof = benchmark(suite.blind_evaluate, case["sk"], case["blinded"], b"", None,
                                 case["rng"])  # fmt: skip
    assert len(evaluated) == batch and proof is not None and len(proof) == 64
    _info(benchmark, batch=batch, workers=workers, bytes_out=32 * batch + 64)


@pytest.mark.benchmark(group="voprf-server")
def test_server_blind_evaluate_poprf_1000(benchmark: Any) -> None:
    case = _server_batch(Mode.POPRF, 1000, 2)
    suite = case["suite"]
    evaluated, proof = benchmark(suite.blind_evaluate, case["sk"], case["blinded"], b"epoch-7",
                                 None, case["rng"])  # fmt: skip
    assert len(evaluated) == 1000 and proof is not None
    _info(benchmark, batch=1000, workers=2, mode="POPRF")


@pytest.mark.parametrize("composites", ["kernel", "libsodium"])
@pytest.mark.benchmark(group="voprf-server-each")
def test_server_blind_evaluate_each_512(benchmark: Any, composites: str) -> None:
    """One ``blind_evaluate_each`` call over a chunk of 512 elements, a proof each (per element =
    t/512, one thread): M and Z from the variable-time kernel, or all four products in libsodium."""
    case = _server_batch(Mode.VOPRF, 512, 1)
    group = registry.create("group", "ristretto255-sodium", accelerate=composites == "kernel")
    suite = OprfSuite(Mode.VOPRF, group, workers=1)
    suite.warm_up()
    rngs = [RandomSource.seeded(7, f"proof/{i}") for i in range(512)]
    answers = benchmark(suite.blind_evaluate_each, case["sk"], case["blinded"], rngs)
    assert len(answers) == 512 and all(len(proof) == 64 for _, proof in answers)
    _info(benchmark, batch=512, workers=1, composites=composites, bytes_out=(32 + 64) * 512)
