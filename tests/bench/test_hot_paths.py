"""Before/after benchmarks of the user's VOPRF finalize and of bucket reconstruction (design §9:
user online time ≤ 0.4 ms, reconstruction ≤ 10 µs per bucket).

Each group runs the previous implementation (``impl="before"``, kept here verbatim in spirit:
every identity addition and the scalar inversion in libsodium, the public key decoded per call;
one 32×32 product then butterfly passes; int64 centring, a range pass per share) beside the
current one (``impl="after"``) in the same run, so the ratio is meaningful on a shared machine.
Timing run::

    .venv/bin/pytest tests/bench/test_hot_paths.py --benchmark-enable --benchmark-only

Divide by ``extra_info["rows"]`` for per-bucket figures. BLAS is limited to one thread (as the
protocol runner does) when threadpoolctl is importable.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from fre_protocol.roles.synthesis_server import decode_many
from mechanism.grid import single_threaded_blas
from primitives.ddg import DDGConfig, DDGEncoder, fwht
from primitives.ddg.hadamard import rotation_signs
from primitives.group import ELEMENT_SIZE, SCALAR_SIZE
from primitives.group.ristretto255_sodium import SodiumRistretto255, load_libsodium
from primitives.randomness import RandomSource
from primitives.sharing.ring2k import AdditiveRing2k
from primitives.sharing.wire import as_residues
from primitives.voprf import Mode, OprfSuite

IMPLS = ["before", "after"]


# -- the previous implementations ------------------------------------------------------------
class _SodiumBefore(SodiumRistretto255):
    """Every addition (identity operands included) and the inversion go to libsodium."""

    __slots__ = ()

    def add(self, a: bytes, b: bytes) -> bytes:
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        if load_libsodium().crypto_core_ristretto255_add(out, a, b) != 0:
            raise AssertionError("operands must decode")
        return out.raw

    def scalar_inverse(self, a: bytes) -> bytes:
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        if load_libsodium().crypto_core_ristretto255_scalar_invert(out, a) != 0:
            raise AssertionError("scalar must be non-zero")
        return out.raw


class _SuiteBefore(OprfSuite):
    """Decodes the public key on every finalize."""

    __slots__ = ()

    def _decode_pk(self, pk: bytes) -> Any:
        return self._decode(pk, "pk")


_SYLVESTER32 = np.block([[1.0]])
while _SYLVESTER32.shape[0] < 32:
    _SYLVESTER32 = np.block([[_SYLVESTER32, _SYLVESTER32], [_SYLVESTER32, -_SYLVESTER32]])


def _fwht_before(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    y = np.array(x, dtype=np.float64, copy=True)
    rows, d = y.shape
    y = (y.reshape(-1, 32) @ _SYLVESTER32).reshape(rows, d)
    h = 32
    while h < d:
        blocks = y.reshape(rows, d // (2 * h), 2, h)
        a = blocks[:, :, 0, :]
        b = blocks[:, :, 1, :]
        a += b
        b *= -2.0
        b += a
        h *= 2
    y *= 1.0 / math.sqrt(d)
    return y


def _reconstruct_and_decode_before(
    ring: AdditiveRing2k, config: DDGConfig, signs: npt.NDArray[np.float64], a: Any, b: Any
) -> npt.NDArray[np.float64]:
    left = as_residues(a, ring.modulus, name="first share")
    right = as_residues(b, ring.modulus, name="second share")
    totals = (left + right) & ring.mask
    m = int(config.modulus)
    centred = totals.astype(np.int64)
    centred[centred >= m // 2] -= m
    out: npt.NDArray[np.float64] = _fwht_before(centred.astype(np.float64) * float(config.gamma)) * signs
    return out[:, : config.dim]


# -- user: blind + verify + finalize of one element (per-user proofs) -------------------------
@pytest.mark.benchmark(group="user-finalize-1")
@pytest.mark.parametrize("impl", IMPLS)
def test_user_finalize_single_proof(benchmark: Any, impl: str) -> None:
    group = _SodiumBefore() if impl == "before" else SodiumRistretto255()
    suite = (_SuiteBefore if impl == "before" else OprfSuite)(Mode.VOPRF, group, workers=1)
    rng = RandomSource.seeded(7, "bench-finalize")
    sk, pk = suite.generate_key_pair(rng)
    blind, blinded = suite.blind(b"bucket 0042", rng=rng)
    (evaluated,), proof = suite.blind_evaluate(sk, [blinded], rng=rng)
    assert proof is not None

    def finalize() -> list[bytes]:
        return suite.finalize([b"bucket 0042"], [blind], [evaluated], blinded_elements=[blinded], pk=pk, proof=proof)

    (tag,) = benchmark(finalize)
    assert tag == suite.evaluate(sk, b"bucket 0042")
    benchmark.extra_info.update(impl=impl)


# -- S_syn: Hadamard rotation and reconstruction of m buckets --------------------------------
def _rows(m: int, d: int) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = RandomSource.seeded(m, "bench-fwht").normal((m, d))
    return out


@pytest.mark.benchmark(group="fwht-1024")
@pytest.mark.parametrize("m", [100, 1000])
@pytest.mark.parametrize("impl", IMPLS)
def test_fwht(benchmark: Any, impl: str, m: int) -> None:
    x = _rows(m, 1024)
    transform: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]] = (
        _fwht_before if impl == "before" else fwht
    )
    with single_threaded_blas():
        out = benchmark(transform, x)
    np.testing.assert_allclose(out, _fwht_before(x), atol=1e-9)
    benchmark.extra_info.update(impl=impl, rows=m)


@pytest.mark.benchmark(group="reconstruct-768")
@pytest.mark.parametrize("m", [100, 1000])
@pytest.mark.parametrize("impl", IMPLS)
def test_reconstruct_and_decode(benchmark: Any, impl: str, m: int) -> None:
    """Ring reconstruction of m bucket aggregates plus the batched DDG decode (d = 768)."""
    config = DDGConfig(dim=768, padded_dim=1024, gamma=1e-3, sigma_int=3.0, modulus_bits=24, clip=1.0)
    encoder = DDGEncoder(config)
    ring = AdditiveRing2k(bits=24)
    rng = RandomSource.seeded(m, "bench-reconstruct")
    a = ring.random_elements(m * 1024, rng).reshape(m, 1024)
    b = ring.random_elements(m * 1024, rng).reshape(m, 1024)
    signs = rotation_signs(config.rotation_seed, 1024)

    def after() -> npt.NDArray[np.float64]:
        return decode_many(encoder, ring.reconstruct(a, b), [1] * m)

    def before() -> npt.NDArray[np.float64]:
        return _reconstruct_and_decode_before(ring, config, signs, a, b)

    with single_threaded_blas():
        out = benchmark(before if impl == "before" else after)
    np.testing.assert_allclose(out, before(), atol=1e-9)
    benchmark.extra_info.update(impl=impl, rows=m)
