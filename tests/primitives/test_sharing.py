"""Secret sharing: share/reconstruct identity, aggregation, wire round trips and rejections,
the seed expansion's known answer, and uniformity of a single share (design §5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from primitives import registry
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.sharing import SEED_SIZE, SecretSharing, ShareBatch
from primitives.sharing.prime_field import DEFAULT_PRIME, RING_PRIME, AdditivePrimeField, for_ring
from primitives.sharing.ring2k import AdditiveRing2k
from primitives.sharing.seeded import EXPAND_DOMAIN, SeedCompressedRing2k, expand_seed

BITS = [1, 2, 7, 8, 9, 12, 24, 31, 32, 33, 48, 63, 64]
RING_KINDS = [AdditiveRing2k, SeedCompressedRing2k]
PRIMES = [3, 251, 257, 65537, DEFAULT_PRIME, (1 << 61) - 1, (1 << 62) - 57]


def _schemes() -> list[SecretSharing]:
    rings: list[SecretSharing] = [cls(bits=b) for cls in RING_KINDS for b in (1, 31, 32, 63, 64)]
    return rings + [AdditivePrimeField(prime=p) for p in PRIMES]


# Built once: constructing a prime field runs galois' primality test, which must not happen
# inside a hypothesis strategy (it draws from the global random module).
SCHEMES: list[SecretSharing] = [cls(bits=b) for cls in RING_KINDS for b in BITS] + [
    AdditivePrimeField(prime=p) for p in PRIMES
]


@st.composite
def ring_case(draw: st.DrawFn) -> tuple[SecretSharing, np.ndarray]:
    """A scheme (either ring construction at any width, or a prime field) and (n, d) values."""
    scheme = draw(st.sampled_from(SCHEMES))
    n = draw(st.integers(1, 5))
    dim = draw(st.integers(1, 40))
    values = draw(arrays(np.uint64, (n, dim), elements=st.integers(0, scheme.modulus - 1)))
    return scheme, values


def _python_sum(values: np.ndarray, modulus: int) -> list[int]:
    return [sum(int(v) for v in column) % modulus for column in values.T]


# -- identities ------------------------------------------------------------
@given(ring_case(), st.integers(0, 2**32))
def test_share_then_reconstruct_is_identity(
    case: tuple[SecretSharing, np.ndarray], seed: int
) -> None:
    scheme, values = case
    first, second = scheme.share(values, RandomSource.seeded(seed, "share"))
    assert first.n == second.n == values.shape[0]
    out = scheme.reconstruct(first.values(), second.values())
    assert out.dtype == np.uint64
    assert np.array_equal(out, values)


@given(ring_case(), st.integers(0, 2**32))
def test_aggregate_then_reconstruct_is_sum_mod_m(
    case: tuple[SecretSharing, np.ndarray], seed: int
) -> None:
    scheme, values = case
    first, second = scheme.share(values, RandomSource.seeded(seed, "agg"))
    total = scheme.reconstruct(scheme.aggregate(first), scheme.aggregate(second.values()))
    assert total.tolist() == _python_sum(values, scheme.modulus)


@given(ring_case(), st.integers(0, 2**32))
def test_encode_decode_round_trip_and_sizes(
    case: tuple[SecretSharing, np.ndarray], seed: int
) -> None:
    scheme, values = case
    n, dim = values.shape
    first, second = scheme.share(values, RandomSource.seeded(seed, "wire"))
    size_first, size_second = scheme.share_sizes(dim)
    for i in range(n):
        a, b = scheme.encode_share(first, i), scheme.encode_share(second, i)
        assert (len(a), len(b)) == (size_first, size_second)
        decoded = scheme.reconstruct(scheme.decode_share(a, dim), scheme.decode_share(b, dim))
        assert np.array_equal(decoded, values[i])
        assert np.array_equal(scheme.decode_share(a, dim), first.values()[i])


def test_fresh_masks_each_time() -> None:
    scheme = AdditiveRing2k(bits=32)
    rng = RandomSource.seeded(5)
    values = np.zeros((2, 64), dtype=np.uint64)
    a1, _ = scheme.share(values, rng)
    a2, _ = scheme.share(values, rng)
    assert not np.array_equal(a1.values(), a2.values())


def test_sixty_four_bit_ring_wraps_exactly() -> None:
    scheme = AdditiveRing2k(bits=64)
    top = (1 << 64) - 1
    values = np.array([[top, 1], [top, top]], dtype=np.uint64)
    first, second = scheme.share(values, RandomSource.seeded(9))
    total = scheme.reconstruct(scheme.aggregate(first), scheme.aggregate(second))
    assert total.tolist() == [(2 * top) % (1 << 64), (top + 1) % (1 << 64)]


def test_accepts_python_ints_and_signed_arrays() -> None:
    scheme = AdditiveRing2k(bits=64)
    big = [[(1 << 64) - 1, 3]]
    first, second = scheme.share(big, RandomSource.seeded(1))
    assert scheme.reconstruct(first.values(), second.values()).tolist() == big[0:1]
    small = AdditiveRing2k(bits=8)
    f, s = small.share(np.array([[0, 255]], dtype=np.int16), RandomSource.seeded(1))
    assert small.reconstruct(f.values(), s.values()).tolist() == [[0, 255]]


def test_aggregate_of_zero_users_is_zero() -> None:
    for scheme in _schemes():
        assert scheme.aggregate(np.zeros((0, 5), dtype=np.uint64)).tolist() == [0] * 5


# -- seed-compressed shares ------------------------------------------------------------------------
def test_seed_expansion_known_answer() -> None:
    """G(seed) for seed = 00 01 .. 1f, b = 32, d = 4: recorded once; guards the wire format."""
    seed = bytes(range(32))
    assert expand_seed(seed, 4, 32).tolist() == [1895879263, 4004547044, 3405075321, 2410565917]


@pytest.mark.parametrize("bits", [1, 8, 12, 31, 32, 40, 64])
def test_seed_expansion_is_the_documented_aes_ctr_stream(bits: int) -> None:
    """Recompute G from its specification: AES-256-CTR(seed, H(domain||b)[:8]||0^8), LE words."""
    import hashlib

    seed = bytes(range(100, 132))
    width = next(w for w in (1, 2, 4, 8) if bits <= 8 * w)
    counter = hashlib.sha256(EXPAND_DOMAIN + bytes([bits])).digest()[:8] + bytes(8)
    stream = Cipher(algorithms.AES(seed), modes.CTR(counter)).encryptor().update(bytes(50 * width))
    words = [
        int.from_bytes(stream[k * width : (k + 1) * width], "little") % (1 << bits)
        for k in range(50)
    ]
    assert expand_seed(seed, 50, bits).tolist() == words
    # Deterministic, a prefix for shorter dims, and separated by bit width.
    assert expand_seed(seed, 10, bits).tolist() == words[:10]
    if bits != 64:
        assert expand_seed(seed, 50, 64).tolist() != words


def test_seed_share_is_32_bytes_and_halves_upload() -> None:
    scheme = SeedCompressedRing2k(bits=32)
    values = np.arange(3 * 1024, dtype=np.uint64).reshape(3, 1024)
    first, second = scheme.share(values, RandomSource.seeded(2))
    assert first.is_seeded and not second.is_seeded
    assert scheme.share_sizes(1024) == (SEED_SIZE, 4096)
    assert len(scheme.encode_share(first, 1)) == SEED_SIZE
    plain = AdditiveRing2k(bits=32).share_sizes(1024)
    assert sum(scheme.share_sizes(1024)) < 0.51 * sum(plain)


@pytest.mark.parametrize(("bits", "dim"), [(32, 8), (32, 1), (8, 32), (64, 4)])
def test_seeded_falls_back_to_explicit_when_a_seed_saves_nothing(bits: int, dim: int) -> None:
    scheme = SeedCompressedRing2k(bits=bits)
    assert not scheme.compresses(dim)
    values = np.ones((2, dim), dtype=np.uint64)
    first, second = scheme.share(values, RandomSource.seeded(3))
    assert not first.is_seeded
    encoded = scheme.encode_share(first, 0)
    assert len(encoded) == dim * scheme.word_bytes
    assert np.array_equal(scheme.decode_share(encoded, dim), first.values()[0])


def test_seeded_decode_rejects_other_lengths() -> None:
    scheme = SeedCompressedRing2k(bits=32)
    for bad in (b"", bytes(31), bytes(33), bytes(4 * 100 - 1), bytes(4 * 100 + 1)):
        with pytest.raises(DecodeError, match=r"32 bytes \(seed\) or 400 bytes"):
            scheme.decode_share(bad, 100)


# -- wire rejections ------------------------------------------------------------
@pytest.mark.parametrize("cls", RING_KINDS)
@pytest.mark.parametrize("bits", [1, 12, 31, 32, 40, 64])
def test_decode_rejects_bad_lengths(cls: type[AdditiveRing2k], bits: int) -> None:
    scheme = cls(bits=bits)
    width = math.ceil(bits / 8)
    dim = 3  # too small for a seed share: explicit words only
    good = bytes(dim * width)
    assert scheme.decode_share(good, dim).tolist() == [0, 0, 0]
    for bad in (b"", good[:-1], good + b"\x00", bytes(dim * width * 2)):
        with pytest.raises(
            DecodeError, match=rf"must be {dim * width} bytes .* got {len(bad)} bytes"
        ):
            scheme.decode_share(bad, dim)


@pytest.mark.parametrize("cls", RING_KINDS)
@pytest.mark.parametrize(
    ("bits", "word"),
    [
        (1, b"\xc7"),
        (7, b"\x93"),
        (12, b"\xcd\xab"),
        (31, b"\xef\xcd\xab\x89"),
        (33, b"\x89\x67\x45\x23\xf1"),
    ],
)
def test_decode_rejects_out_of_range_words(
    cls: type[AdditiveRing2k], bits: int, word: bytes
) -> None:
    scheme = cls(bits=bits)
    width = len(word)
    data = bytes(width) + word + bytes(width)
    with pytest.raises(DecodeError, match=rf"word 1 is out of range: expected < 2\^{bits}") as info:
        scheme.decode_share(data, 3)
    # The offending word is secret material and must not appear in the message.
    assert str(int.from_bytes(word, "little")) not in str(info.value)


def test_decode_rejects_non_bytes_and_bad_dims() -> None:
    scheme = AdditiveRing2k(bits=32)
    with pytest.raises(DecodeError, match="must be bytes"):
        scheme.decode_share("0000", 1)  # type: ignore[arg-type]
    for dim in (0, -1, True):
        with pytest.raises(DecodeError, match="dimension"):
            scheme.decode_share(b"", dim)


# -- input and parameter validation ------------------------------------------------------------
@pytest.mark.parametrize("bits", [0, 65, -3, True, 2.0])
def test_bits_out_of_range_rejected(bits: object) -> None:
    with pytest.raises(InvalidParameterError, match="bits"):
        AdditiveRing2k(bits=bits)  # type: ignore[arg-type]


def test_share_rejects_malformed_values() -> None:
    scheme = AdditiveRing2k(bits=8)
    rng = RandomSource.seeded(0)
    with pytest.raises(InvalidInputError, match=r"\[0, 2\^8\), got 1 of 2 entries outside"):
        scheme.share(np.array([[1, 256]]), rng)
    with pytest.raises(InvalidInputError, match="outside"):
        scheme.share(np.array([[-1, 3]]), rng)
    with pytest.raises(InvalidInputError, match="dtype float64"):
        scheme.share(np.array([[1.0, 2.0]]), rng)
    with pytest.raises(InvalidInputError, match="2-D"):
        scheme.share(np.array([1, 2]), rng)
    with pytest.raises(InvalidInputError, match="same shape"):
        scheme.reconstruct(np.zeros(3, dtype=np.uint64), np.zeros(4, dtype=np.uint64))


@pytest.mark.parametrize("bits", [1, 8, 24, 63, 64])
def test_reconstruct_uint64_fast_path_checks_each_share(bits: int) -> None:
    """The uint64 path checks both ranges in one pass: it agrees with Python integers mod 2^bits
    and still names the share holding a word outside the ring."""
    scheme = AdditiveRing2k(bits=bits)
    rng = RandomSource.seeded(bits, "reconstruct")
    a = scheme.random_elements(40, rng).reshape(5, 8)
    b = scheme.random_elements(40, rng).reshape(5, 8)
    a_before = a.copy()
    want = [[(int(x) + int(y)) % (1 << bits) for x, y in zip(r, q, strict=True)] for r, q in zip(a, b, strict=True)]
    assert scheme.reconstruct(a, b).tolist() == want
    assert np.array_equal(a, a_before)
    if bits < 64:
        bad = a.copy()
        bad[3, 5] = np.uint64(1 << bits)
        with pytest.raises(InvalidInputError, match="first share"):
            scheme.reconstruct(bad, b)
        with pytest.raises(InvalidInputError, match="second share"):
            scheme.reconstruct(a, bad)


@pytest.mark.parametrize("scheme", _schemes(), ids=lambda s: type(s).__name__ + str(s.modulus))
def test_reconstruct_into_out_in_place_and_untouched_on_error(scheme: SecretSharing) -> None:
    """``out=`` (which may be the first share itself) gets exactly the fresh result; an input
    outside the ring raises before ``out`` changes; a wrong buffer is named."""
    rng = RandomSource.seeded(3, "out")
    a = (rng.uint64(64) % np.uint64(scheme.modulus) if scheme.modulus < 1 << 64 else rng.uint64(64)).reshape(8, 8)
    b = (rng.uint64(64) % np.uint64(scheme.modulus) if scheme.modulus < 1 << 64 else rng.uint64(64)).reshape(8, 8)
    want = np.array(_python_sum(np.stack([a, b]).reshape(2, 64), scheme.modulus), dtype=np.uint64).reshape(8, 8)
    assert np.array_equal(scheme.reconstruct(a, b), want)
    buffer = np.empty((8, 8), dtype=np.uint64)
    assert scheme.reconstruct(a, b, out=buffer) is buffer and np.array_equal(buffer, want)
    # Strided views work the same.
    assert np.array_equal(scheme.reconstruct(a[:, ::2], b[:, ::2]), want[:, ::2])
    in_place = a.copy()
    assert scheme.reconstruct(in_place, b, out=in_place) is in_place
    assert np.array_equal(in_place, want)
    if scheme.modulus < 1 << 64:
        bad = b.copy()
        bad[2, 3] = np.uint64(scheme.modulus)
        kept = a.copy()
        with pytest.raises(InvalidInputError, match="second share"):
            scheme.reconstruct(kept, bad, out=kept)
        assert np.array_equal(kept, a)  # nothing written
    with pytest.raises(InvalidInputError, match=r"out must be a uint64 array of shape \(8, 8\), got int64"):
        scheme.reconstruct(a, b, out=np.empty((8, 8), dtype=np.int64))
    with pytest.raises(InvalidInputError, match=r"out must be a uint64 array of shape \(8, 8\), got list"):
        scheme.reconstruct(a, b, out=[0] * 64)  # type: ignore[arg-type]


def test_encode_checks_index_and_batch() -> None:
    scheme = AdditiveRing2k(bits=16)
    first, _ = scheme.share(np.zeros((2, 4), dtype=np.uint64), RandomSource.seeded(0))
    for bad in (2, -1):
        with pytest.raises(InvalidInputError, match=r"user index must be in \[0, 2\)"):
            scheme.encode_share(first, bad)
    with pytest.raises(InvalidInputError, match="modulus"):
        AdditiveRing2k(bits=32).encode_share(first, 0)


def test_share_batch_is_redacted_and_read_only() -> None:
    scheme = SeedCompressedRing2k(bits=32)
    first, second = scheme.share(np.full((2, 64), 7, dtype=np.uint64), RandomSource.seeded(4))
    seed_hex = first.seeds[0].hex() if first.seeds else ""
    for batch in (first, second):
        text = repr(batch)
        assert "redacted" in text and seed_hex not in text and "7" not in text.split("dim=")[0]
    with pytest.raises(ValueError, match="read-only"):
        second.values()[0, 0] = 1
    with pytest.raises(InvalidInputError, match="dim must be 64"):
        first.values(65)
    with pytest.raises(InvalidInputError, match="seed 0 must be 32 bytes"):
        ShareBatch(
            modulus=4, dim=2, seeds=(b"short",), expand=lambda s, d: np.zeros((1, d), np.uint64)
        )


def test_registry_and_protocol_conformance() -> None:
    for name, cls in [
        ("additive-ring2k", AdditiveRing2k),
        ("additive-ring2k-seeded", SeedCompressedRing2k),
    ]:
        scheme = registry.create("secret_sharing", name, bits=20)
        assert isinstance(scheme, cls) and isinstance(scheme, SecretSharing)
        assert scheme.name == name and scheme.modulus == 1 << 20


# -- a single share is uniform ------------------------------------------------------------
# 0.9999 quantiles of chi-square (scipy.stats.chi2.ppf, computed offline): df 1 and df 15.
_CHI2_9999 = {1: 15.137, 15: 44.263}


def _chi_square(samples: np.ndarray, bins: int) -> float:
    counts = np.bincount(samples.astype(np.int64), minlength=bins)
    expected = samples.size / bins
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("cls", RING_KINDS)
@pytest.mark.parametrize("bits", [1, 32, 64])
def test_single_share_of_a_fixed_vector_is_uniform(cls: type[AdditiveRing2k], bits: int) -> None:
    """Both shares of a constant vector, binned by their top 4 bits (or the one bit for b = 1).

    Chi-square goodness of fit to the uniform law, 2000 users x 16 coordinates = 32 000 samples
    per share, alpha = 1e-4 per check (critical value = the 0.9999 quantile). 6 parametrizations
    x 2 shares = 12 checks: a fresh seed fails this test with probability about 1.2e-3 overall;
    the fixed seed makes the suite deterministic.
    """
    scheme = cls(bits=bits)
    constant = np.full((2000, 16), (1 << bits) - 1 if bits < 64 else 12345, dtype=np.uint64)
    first, second = scheme.share(constant, RandomSource.seeded(2024, f"{cls.name}/{bits}"))
    top = min(4, bits)
    for batch in (first, second):
        binned = batch.values() >> np.uint64(bits - top)
        stat = _chi_square(binned.ravel(), 1 << top)
        assert stat < _CHI2_9999[(1 << top) - 1], (batch, stat)


# 1 - 1e-6 quantile of chi-square with df 1 (scipy.stats.chi2.ppf, computed offline).
_CHI2_DF1_1E6 = 23.928


@pytest.mark.parametrize("cls", RING_KINDS)
@pytest.mark.parametrize("bits", [1, 32, 64])
def test_every_bit_of_a_single_share_is_balanced(cls: type[AdditiveRing2k], bits: int) -> None:
    """Every bit position of both shares of a constant vector, and their low 4 bits together.

    The top-4-bit test above misses a mask that leaves low bits fixed. Per bit: chi-square (df 1)
    of the count of ones among 32 000 samples against 1/2, alpha = 1e-6 per bit; low 4 bits:
    chi-square (df 15), alpha = 1e-4. 2 x (1 + 32 + 64) bit checks x 2 shares = 388 checks at 1e-6
    and 8 at 1e-4: a fresh seed fails this test with probability about 1.2e-3 overall.
    """
    scheme = cls(bits=bits)
    constant = np.full((2000, 16), (1 << bits) - 1 if bits < 64 else 12345, dtype=np.uint64)
    first, second = scheme.share(constant, RandomSource.seeded(2025, f"{cls.name}/{bits}/bits"))
    for batch in (first, second):
        values = batch.values().ravel()
        n = values.size
        for j in range(bits):
            ones = int(((values >> np.uint64(j)) & np.uint64(1)).sum())
            stat = (2 * ones - n) ** 2 / n  # (ones - n/2)^2/(n/2) + (zeros - n/2)^2/(n/2)
            assert stat < _CHI2_DF1_1E6, (cls.name, bits, j, ones)
        if bits >= 4:
            low = _chi_square(values & np.uint64(15), 16)
            assert low < _CHI2_9999[15], (cls.name, bits, low)


@pytest.mark.parametrize("prime", [DEFAULT_PRIME, (1 << 62) - 57])
def test_prime_field_single_share_is_uniform(prime: int) -> None:
    """Both shares of a constant vector, binned into 16 equal ranges floor(16 v / p).

    Chi-square against the bin masses of the uniform law on [0, p) (equal up to one element in
    2^27 or more), 32 000 samples per share, alpha = 1e-4 per check, 4 checks: a fresh seed
    fails with probability about 4e-4.
    """
    scheme = AdditivePrimeField(prime=prime)
    constant = np.full((2000, 16), prime - 1, dtype=np.uint64)
    first, second = scheme.share(constant, RandomSource.seeded(2024, f"prime/{prime}"))
    for batch in (first, second):
        binned = [int(v) * 16 // prime for v in batch.values().ravel()]
        stat = _chi_square(np.array(binned), 16)
        assert stat < _CHI2_9999[15], (batch, stat)


# -- the prime field ------------------------------------------------------------------------------
def test_prime_field_hot_paths_agree_with_galois() -> None:
    """share/reconstruct/aggregate on uint64 against galois.GF(p) arithmetic."""
    for prime in (DEFAULT_PRIME, (1 << 61) - 1):
        scheme = AdditivePrimeField(prime=prime)
        values = RandomSource.seeded(prime).integers_below(prime, 60 * 9).reshape(60, 9)
        first, second = scheme.share(values, RandomSource.seeded(1, "galois"))
        field = scheme.field
        a, b = scheme.as_field(first.values()), scheme.as_field(second.values())
        assert isinstance(a, field)
        assert np.array_equal(np.asarray(a + b).astype(np.uint64), values)
        assert scheme.aggregate(first).tolist() == [int(v) for v in np.sum(a, axis=0)]
        assert np.array_equal(
            scheme.reconstruct(first.values(), second.values()), np.asarray(a + b).astype(np.uint64)
        )


def test_large_prime_aggregates_in_blocks_without_overflow() -> None:
    """p = 2^62 - 57: only 4 residues fit in a uint64 sum, so 1001 rows need block reductions."""
    prime = (1 << 62) - 57
    scheme = AdditivePrimeField(prime=prime)
    values = np.full((1001, 3), prime - 1, dtype=np.uint64)
    assert scheme.aggregate(values).tolist() == [(1001 * (prime - 1)) % prime] * 3
    first, second = scheme.share(values, RandomSource.seeded(3))
    total = scheme.reconstruct(scheme.aggregate(first), scheme.aggregate(second))
    assert total.tolist() == [(1001 * (prime - 1)) % prime] * 3


@pytest.mark.parametrize(
    ("prime", "word"),
    [(251, b"\xfb"), (251, b"\xff"), (257, b"\x01\x01"), (DEFAULT_PRIME, b"\xff\xff\xff\x7f")],
)
def test_prime_field_rejects_words_not_below_p(prime: int, word: bytes) -> None:
    scheme = AdditivePrimeField(prime=prime)
    with pytest.raises(DecodeError, match=rf"word 0 is out of range: expected < {prime}"):
        scheme.decode_share(word + bytes(len(word)), 2)
    with pytest.raises(DecodeError, match="bytes"):
        scheme.decode_share(word, 2)
    with pytest.raises(InvalidInputError, match="outside"):
        scheme.aggregate(np.array([[prime]], dtype=np.uint64))


@pytest.mark.parametrize("prime", [2, 1 << 31, 1 << 63, (1 << 64) - 59, 91, True, 7.0])
def test_prime_field_rejects_bad_primes(prime: object) -> None:
    with pytest.raises(InvalidParameterError, match="prime"):
        AdditivePrimeField(prime=prime)  # type: ignore[arg-type]


def test_prime_field_registry_and_defaults() -> None:
    """Registered for the protocol as GF(2^61 - 1) carrying the ring Z_{2^b} (design §5); the
    class's own default is plain GF(2^31 - 1)."""
    carried = registry.create("secret_sharing", "additive-prime-field", bits=32)
    assert isinstance(carried, AdditivePrimeField) and isinstance(carried, SecretSharing)
    assert carried.modulus == RING_PRIME and carried.ring_modulus == 1 << 32
    assert carried.capacity == (RING_PRIME - 1) // (2**32 - 1) >= 1 << 29
    scheme = AdditivePrimeField()
    assert scheme.ring_modulus == scheme.modulus
    assert scheme.modulus == DEFAULT_PRIME == 2**31 - 1
    assert scheme.word_bytes == 4 and scheme.share_sizes(1024) == (4096, 4096)


def test_prime_field_carrying_a_ring_sums_lifted_residues_exactly() -> None:
    """Lifted residues mod 2^b sum in GF(p) without wrapping, so the reconstruction read mod 2^b
    is the ring sum — including a signed top-up and a subtracted (dropped) share."""
    bits = 24
    field, ring = for_ring(bits=bits), AdditiveRing2k(bits=bits)
    rng = RandomSource.seeded(61, "prime/ring")
    values = rng.integers_below(1 << bits, 500 * 6).reshape(500, 6).astype(np.uint64)
    values[:50] = (1 << bits) - 1  # the largest lifted value, many times
    a, b = field.share(values, rng)
    noise = np.array([-5, 3, -(1 << 23), 0, 7, -1], dtype=np.int64)
    p = np.uint64(RING_PRIME)

    def settled(batch: ShareBatch) -> np.ndarray:
        # A server's running sum of all 500, then the first 10 taken out again (a settlement).
        total, gone = field.aggregate(batch), field.aggregate(batch.values()[:10])
        return field.aggregate(np.stack([total, (p - gone) % p]))

    got = field.reconstruct(field.add_integers(settled(a), noise), settled(b))
    ra, rb = ring.share(values[10:], rng)
    want = ring.reconstruct(ring.add_integers(ring.aggregate(ra), noise), ring.aggregate(rb))
    assert np.array_equal(got, want)


def test_prime_field_refuses_a_ring_too_wide_for_its_capacity() -> None:
    for_ring(bits=41)
    with pytest.raises(InvalidParameterError, match="ring_bits must leave room"):
        for_ring(bits=42)
    with pytest.raises(InvalidParameterError):
        AdditivePrimeField(prime=RING_PRIME, ring_bits=0)
