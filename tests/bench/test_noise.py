"""Discrete Gaussian sampling and the DDG encoder/decoder/accountant (design §4.4, §9).

Timing run: ``.venv/bin/pytest tests/bench/test_noise.py --benchmark-enable --benchmark-only``
(add ``-m heavy`` for a batch of 10,000 users). A normal test run executes each benchmark once as
a smoke test. ``extra_info`` records throughput (samples/s, µs per user) and the bytes a user
uploads for its encoding (``d'·b/8`` before secret sharing).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from primitives import registry
from primitives.ddg import DDGEncoder, calibrate_ddg
from primitives.randomness import RandomSource

DIM = 768
SIZES = {"cks-exact": 2_000, "fast-vectorized": 1_000_000}


@pytest.mark.benchmark(group="noise-discrete-gaussian")
@pytest.mark.parametrize("sigma", [1.0, 10.0, 1000.0])
@pytest.mark.parametrize("name", ["cks-exact", "fast-vectorized"])
def test_discrete_gaussian_throughput(benchmark: Any, name: str, sigma: float) -> None:
    sampler = registry.create("discrete_gaussian", name)
    rng = RandomSource.seeded(1, f"bench/{name}/{sigma}")
    size = SIZES[name]
    out = benchmark(sampler.sample, sigma, size, rng)
    assert out.shape == (size,)
    benchmark.extra_info["samples"] = size
    if benchmark.stats is not None:  # absent when benchmarks are disabled (smoke run)
        benchmark.extra_info["samples_per_s"] = size / benchmark.stats.stats.mean


def _config(n_modulus: int) -> Any:
    return calibrate_ddg(
        epsilon=8.0, delta=1e-6, sensitivity=1.2, dim=DIM, n=30, clip=1.0, n_modulus=n_modulus
    )


def _users(n: int) -> np.ndarray:
    x = RandomSource.seeded(2, f"bench/users/{n}").normal((n, DIM))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.benchmark(group="ddg-encode")
@pytest.mark.parametrize("users", [64, 1024, pytest.param(10_000, marks=pytest.mark.heavy)])
def test_ddg_encode_batch(benchmark: Any, users: int) -> None:
    cfg = _config(max(users, 30))
    enc = DDGEncoder(cfg)
    x = _users(users)
    rng = RandomSource.seeded(3, "bench/encode")
    out = benchmark(enc.encode, x, rng)
    assert out.shape == (users, 1024)
    benchmark.extra_info["padded_dim"] = cfg.padded_dim
    benchmark.extra_info["modulus_bits"] = cfg.modulus_bits
    benchmark.extra_info["bytes_per_user"] = cfg.padded_dim * cfg.modulus_bits // 8
    if benchmark.stats is not None:
        benchmark.extra_info["us_per_user"] = 1e6 * benchmark.stats.stats.mean / users


@pytest.mark.benchmark(group="ddg-decode")
@pytest.mark.parametrize("users", [64, 1024])
def test_ddg_aggregate_and_decode_bucket(benchmark: Any, users: int) -> None:
    cfg = _config(users)
    enc = DDGEncoder(cfg)
    x = _users(users)
    encoded = enc.encode(x, RandomSource.seeded(4, "bench/decode"))

    def aggregate_and_decode() -> np.ndarray:
        return enc.decode_sum(enc.aggregate(encoded), users)

    decoded = benchmark(aggregate_and_decode)
    err = decoded - x.sum(axis=0)
    assert np.abs(err).max() <= 6.0 * cfg.noise_std(users)  # nothing wrapped
    benchmark.extra_info["noise_std_per_coordinate"] = cfg.noise_std(users)


@pytest.mark.benchmark(group="ddg-decode")
def test_ddg_decode_only(benchmark: Any) -> None:
    enc = DDGEncoder(_config(1000))
    total = enc.aggregate(enc.encode(_users(8), RandomSource.seeded(5)))
    out = benchmark(enc.decode_sum, total, 8)
    assert out.shape == (DIM,)


@pytest.mark.benchmark(group="ddg-calibrate")
@pytest.mark.parametrize("mode", ["gamma-given", "bits-given"])
def test_ddg_calibration(benchmark: Any, mode: str) -> None:
    kwargs: dict[str, Any] = {
        "epsilon": 8.0,
        "delta": 1e-6,
        "sensitivity": 1.2,
        "dim": DIM,
        "n": 30,
        "clip": 1.0,
        "n_modulus": 5000,
    }
    if mode == "gamma-given":
        kwargs["gamma"] = 1e-6
    else:
        kwargs["modulus_bits"] = 32
    cfg = benchmark(calibrate_ddg, **kwargs)
    assert cfg.modulus_bits <= 63 and math.isfinite(cfg.sigma_int)
