"""Benchmarks: secret sharing at d' = 1024, b = 32 (design §9), and sealing a share for the channel.

Per-share figures are the mean time divided by ``n`` (``extra_info["users"]``). Bytes on the
wire per user are in ``extra_info``. Timing run:
``pytest tests/bench/test_sharing.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from primitives.channel import SealedBoxChannel
from primitives.randomness import RandomSource
from primitives.sharing import SecretSharing
from primitives.sharing.prime_field import AdditivePrimeField
from primitives.sharing.ring2k import AdditiveRing2k
from primitives.sharing.seeded import SeedCompressedRing2k

DIM = 1024
BITS = 32


def _scheme(name: str) -> SecretSharing:
    if name == "ring2k":
        return AdditiveRing2k(bits=BITS)
    if name == "seeded":
        return SeedCompressedRing2k(bits=BITS)
    return AdditivePrimeField()


def _values(scheme: SecretSharing, n: int) -> np.ndarray:
    return (
        RandomSource.seeded(1, "bench/values")
        .integers_below(scheme.modulus, n * DIM)
        .reshape(n, DIM)
    )


@pytest.mark.benchmark(group="sharing-share")
@pytest.mark.parametrize("n", [1, 256, 4096])
@pytest.mark.parametrize("name", ["ring2k", "seeded", "prime"])
def test_share(benchmark: Any, name: str, n: int) -> None:
    """Split n users' vectors into two shares (mask draw + subtraction; seeds + expansion)."""
    scheme = _scheme(name)
    values = _values(scheme, n)
    rng = RandomSource.seeded(2, "bench/share")
    first_size, second_size = scheme.share_sizes(DIM)
    benchmark.extra_info.update(users=n, dim=DIM, upload_bytes=first_size + second_size)
    first, second = benchmark(scheme.share, values, rng)
    assert first.n == second.n == n


@pytest.mark.benchmark(group="sharing-aggregate")
@pytest.mark.parametrize("n", [1024, 8192])
@pytest.mark.parametrize("name", ["ring2k", "prime"])
def test_aggregate(benchmark: Any, name: str, n: int) -> None:
    """A server's per-tag accumulation of n decoded (n, 1024) shares: target <= 1 µs per share."""
    scheme = _scheme(name)
    shares = _values(scheme, n).astype(np.uint64)
    benchmark.extra_info.update(users=n, dim=DIM)
    total = benchmark(scheme.aggregate, shares)
    assert total.shape == (DIM,)


@pytest.mark.benchmark(group="sharing-aggregate")
@pytest.mark.parametrize("n", [1024])
def test_aggregate_seed_shares(benchmark: Any, n: int) -> None:
    """The seed-holding server: expand n 32-byte seeds (AES-256-CTR) and accumulate."""
    scheme = SeedCompressedRing2k(bits=BITS)
    first, _ = scheme.share(_values(scheme, n), RandomSource.seeded(3))
    benchmark.extra_info.update(users=n, dim=DIM, seed_bytes=32)
    total = benchmark(scheme.aggregate, first)
    assert total.shape == (DIM,)


@pytest.mark.benchmark(group="sharing-wire")
@pytest.mark.parametrize("name", ["ring2k", "seeded", "prime"])
def test_encode_share(benchmark: Any, name: str) -> None:
    """One user's explicit (second) share to bytes."""
    scheme = _scheme(name)
    _, second = scheme.share(_values(scheme, 4), RandomSource.seeded(4))
    data = benchmark(scheme.encode_share, second, 2)
    benchmark.extra_info.update(bytes=len(data))
    assert len(data) == 4 * DIM


@pytest.mark.benchmark(group="sharing-wire")
@pytest.mark.parametrize(
    ("name", "part"), [("ring2k", 1), ("seeded", 0), ("seeded", 1), ("prime", 1)]
)
def test_decode_share(benchmark: Any, name: str, part: int) -> None:
    """One user's share from bytes with length and range checks (a seed share is expanded)."""
    scheme = _scheme(name)
    batches = scheme.share(_values(scheme, 4), RandomSource.seeded(5))
    data = scheme.encode_share(batches[part], 1)
    benchmark.extra_info.update(bytes=len(data))
    out = benchmark(scheme.decode_share, data, DIM)
    assert out.shape == (DIM,)


@pytest.mark.benchmark(group="channel")
@pytest.mark.parametrize("size", [32, 4 * DIM])
def test_seal(benchmark: Any, size: int) -> None:
    """Seal one message (a 32-byte tag, or a 4096-byte share) to a server's public key."""
    channel = SealedBoxChannel()
    _, pk = channel.generate_keypair(RandomSource.seeded(6))
    plaintext = bytes(size)
    ciphertext = benchmark(channel.seal, pk, plaintext)
    benchmark.extra_info.update(bytes=len(ciphertext))
    assert len(ciphertext) == size + 48


@pytest.mark.benchmark(group="channel")
@pytest.mark.parametrize("size", [32, 4 * DIM])
def test_open(benchmark: Any, size: int) -> None:
    channel = SealedBoxChannel()
    sk, pk = channel.generate_keypair(RandomSource.seeded(7))
    ciphertext = channel.seal(pk, bytes(size))
    assert benchmark(channel.open, sk, ciphertext) == bytes(size)
