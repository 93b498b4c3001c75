"""RandomSource: reproducibility in seeded mode, independence of streams, and distributions."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from chi_square import z_two_sided
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from hypothesis import given
from hypothesis import strategies as st

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource


def test_seeded_streams_are_reproducible_and_labelled() -> None:
    a = RandomSource.seeded(7, "coins").uint64(16)
    b = RandomSource.seeded(7, "coins").uint64(16)
    c = RandomSource.seeded(7, "noise").uint64(16)
    d = RandomSource.seeded(8, "coins").uint64(16)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not np.array_equal(a, d)


def test_children_are_independent_and_reproducible() -> None:
    parent = RandomSource.seeded(b"seed", "root")
    x = parent.child("user/1").random_bytes(32)
    assert x == RandomSource.seeded(b"seed", "root").child("user/1").random_bytes(32)
    assert x != parent.child("user/2").random_bytes(32)
    assert parent.child("x").mode == "seeded"


def _stream(seed: int | bytes | str, components: list[str]) -> bytes:
    source = RandomSource.seeded(seed, components[0])
    for component in components[1:]:
        source = source.child(component)
    return source.random_bytes(32)


def test_label_paths_are_unambiguous() -> None:
    """Labels are components of a path, not a "/"-joined string: every split is its own stream."""
    splits = [
        RandomSource.seeded(b"s", "users").child("phase2/0"),
        RandomSource.seeded(b"s", "users/phase2").child("0"),
        RandomSource.seeded(b"s", "users/phase2/0"),
        RandomSource.seeded(b"s", "users").child("phase2").child("0"),
        RandomSource.seeded(b"s").child("users/phase2/0"),
        RandomSource.seeded(b"s", "").child("users").child("phase2/0"),
    ]
    streams = [source.random_bytes(32) for source in splits]
    assert len(set(streams)) == len(streams)


def _group(atoms: list[str], cuts: list[bool]) -> list[str]:
    """Join ``atoms`` with "/" into components, starting a new component after atom i if cuts[i]."""
    components, current = [], [atoms[0]]
    for atom, cut in zip(atoms[1:], cuts, strict=False):
        if cut:
            components.append("/".join(current))
            current = []
        current.append(atom)
    return [*components, "/".join(current)]


@given(
    st.lists(st.text(alphabet="a/\x00", max_size=2), min_size=1, max_size=5),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_streams_differ_exactly_when_paths_differ(
    atoms: list[str], left_cuts: list[bool], right_cuts: list[bool]
) -> None:
    """Two splits of one "/"-joined string into components give one stream only if they are equal."""
    left, right = _group(atoms, left_cuts), _group(atoms, right_cuts)
    assert "/".join(left) == "/".join(right)
    assert (_stream(3, left) == _stream(3, right)) == (left == right)


def test_seed_types_are_distinguished() -> None:
    """The integer 1, the byte 0x01 and the one-character string "\x01" are three seeds."""
    streams = [RandomSource.seeded(s, "x").random_bytes(32) for s in (1, b"\x01", "\x01")]
    assert len(set(streams)) == 3
    # Within a type, equal values are one seed (bytearray is bytes).
    assert RandomSource.seeded(bytearray(b"\x01"), "x").random_bytes(32) == streams[1]


def test_same_path_from_same_seed_is_reproducible() -> None:
    for seed in (0, 1, 1 << 70, b"", b"\x01", "", "\x01", "s\u00e9ed"):
        a = RandomSource.seeded(seed, "users").child("phase2/0").child("x")
        b = RandomSource.seeded(seed, "users").child("phase2/0").child("x")
        assert a.random_bytes(64) == b.random_bytes(64)
        assert a.label == b.label == "users/phase2/0/x"
        assert a.mode == b.mode == "seeded"


@pytest.mark.parametrize(
    ("seed", "tagged"),
    [(0, b"i\x00"), (258, b"i\x01\x02"), (b"\x01", b"b\x01"), ("\u00e9", b"s\xc3\xa9")],
)
def test_seeded_stream_is_the_documented_derivation(seed: int | bytes | str, tagged: bytes) -> None:
    """Recompute the module docstring's steps 1-4 without the module's helpers."""
    material = hashlib.sha256(b"fre-e2t/seed/v2" + tagged).digest()
    path = ["users", "phase2/0", ""]
    info = b"".join(len(c.encode()).to_bytes(8, "big") + c.encode() for c in path)
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"fre-e2t/random-source/v2", info=info
    ).derive(material)
    expected = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(48))
    source = RandomSource.seeded(seed, "users").child("phase2/0").child("")
    assert source.path == ("users", "phase2/0", "")
    assert source.random_bytes(48) == expected


@pytest.mark.parametrize("bad", [None, 3, b"x", ("a", "b")])
def test_bad_label_rejected(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="label must be a str"):
        RandomSource.seeded(1, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="label must be a str"):
        RandomSource.seeded(1).child(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="label must be a str"):
        RandomSource.cryptographic(bad)  # type: ignore[arg-type]


def test_cryptographic_children_are_fresh() -> None:
    parent = RandomSource.cryptographic("root")
    first, second = parent.child("phase2/0"), parent.child("phase2/0")
    assert first.mode == second.mode == "crypto"
    assert first.random_bytes(32) != second.random_bytes(32)
    assert first.random_bytes(32) != RandomSource.cryptographic("root").child("phase2/0").random_bytes(32)


def test_cryptographic_mode_is_fresh_each_time() -> None:
    a, b = RandomSource.cryptographic(), RandomSource.cryptographic()
    assert a.mode == "crypto" and a.child("c").mode == "crypto"
    assert a.random_bytes(32) != b.random_bytes(32)
    assert "key" not in repr(a).lower() or "redacted" in repr(a)


def test_stream_continues_rather_than_repeats() -> None:
    rs = RandomSource.seeded(1)
    assert rs.random_bytes(32) != rs.random_bytes(32)


@pytest.mark.parametrize("bad", [-1, 1.5, True, None])
def test_bad_seed_rejected(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="seed must be a non-negative"):
        RandomSource.seeded(bad)  # type: ignore[arg-type]


def _chi_square_uniform(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def test_uniform_and_integers_below_are_uniform() -> None:
    """Chi-square goodness of fit on 20 bins, 200k draws, fixed seed.

    Critical value 43.82 is the 0.999 quantile of chi2(19): alpha = 1e-3 per check, two checks,
    so a fresh seed fails this test with probability about 2e-3.
    """
    rs = RandomSource.seeded(2024, "uniformity")
    u = rs.uniform(200_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert _chi_square_uniform(np.bincount((u * 20).astype(int), minlength=20)) < 43.82
    k = rs.integers_below(20, 200_000)
    assert k.max() < 20
    assert _chi_square_uniform(np.bincount(k.astype(int), minlength=20)) < 43.82


def test_integers_below_extremes() -> None:
    rs = RandomSource.seeded(3)
    assert (rs.integers_below(1, 100) == 0).all()
    assert rs.integers_below(1 << 64, 10).dtype == np.uint64
    with pytest.raises(InvalidParameterError, match="bound"):
        rs.integers_below(0, 1)


def test_normal_moments() -> None:
    """Mean and variance of 400k standard normals, fixed seed.

    z-tests at α = 1e-6 each (the two-sided normal quantile, 4.89): mean within z standard
    errors of 0, variance |s^2 - 1| within z * sqrt(2/n). False failure below 2e-6 for a fresh seed.
    """
    z = RandomSource.seeded(99, "normal").normal(400_000)
    n = z.size
    crit = z_two_sided(1e-6)
    assert abs(z.mean()) <= crit / math.sqrt(n)
    assert abs(z.var() - 1.0) <= crit * math.sqrt(2.0 / n)
    assert RandomSource.seeded(1).normal((3, 5)).shape == (3, 5)


def test_bernoulli_edges_and_rate() -> None:
    rs = RandomSource.seeded(5, "coins")
    assert rs.bernoulli(1.0, 1000).all()
    assert not rs.bernoulli(0.0, 1000).any()
    hits = int(rs.bernoulli(0.3, 100_000).sum())
    # Binomial(1e5, 0.3): sd = 144.9; 5 sd bound, false failure < 1e-6.
    assert abs(hits - 30_000) < 5 * 144.9
    with pytest.raises(InvalidParameterError, match="p must be"):
        rs.bernoulli(1.5, 3)


def test_permutation_is_a_permutation_and_uniform_in_position() -> None:
    """Where element 0 lands over 30k permutations of 10: chi-square(9) < 27.88 (alpha 1e-3)."""
    rs = RandomSource.seeded(11, "perm")
    p = rs.permutation(1000)
    assert sorted(p.tolist()) == list(range(1000))
    positions = np.array([int(np.argmax(rs.permutation(10) == 0)) for _ in range(30_000)])
    assert _chi_square_uniform(np.bincount(positions, minlength=10)) < 27.88


def test_binomial_matches_its_pmf() -> None:
    """Chi-square goodness of fit of 100 000 Bin(20, 0.3) draws against math.comb's pmf.

    Cells 0-1, 2, ..., 11 and 12-20 (12 cells, every expected count above 380); 31.264 is the
    0.999 quantile of chi2(11) (scipy, computed offline).
    alpha = 1e-3: a fresh seed fails with probability 1e-3.
    """
    n, p, size = 20, 0.3, 100_000
    draws = RandomSource.seeded(17, "binomial").binomial(np.full(size, n), p)
    assert draws.dtype == np.int64 and draws.shape == (size,)
    observed = np.bincount(draws, minlength=n + 1).astype(float)
    expected = np.array([math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]) * size
    cells_obs = np.concatenate([[observed[:2].sum()], observed[2:12], [observed[12:].sum()]])
    cells_exp = np.concatenate([[expected[:2].sum()], expected[2:12], [expected[12:].sum()]])
    assert cells_exp.min() >= 5
    assert float(((cells_obs - cells_exp) ** 2 / cells_exp).sum()) < 31.264


def test_binomial_broadcasts_over_n_and_p() -> None:
    """Different (n, p) per entry: 20 000 draws each of Bin(63 000, 0.12) and Bin(40, 0.5), whose
    means must pass a z-test at α = 1e-6 each (false failure below 2e-6 for a fresh seed)."""
    rs = RandomSource.seeded(18, "binomial")
    n = np.array([63_000, 40] * 20_000)
    p = np.array([0.12, 0.5] * 20_000)
    draws = rs.binomial(n, p)
    for offset, (nn, pp) in enumerate(((63_000, 0.12), (40, 0.5))):
        sample = draws[offset::2]
        assert abs(sample.mean() - nn * pp) <= z_two_sided(1e-6) * math.sqrt(nn * pp * (1 - pp) / sample.size)
    assert rs.binomial(5, [0.0, 1.0]).tolist() == [0, 5]
    assert rs.binomial(0, 0.5) == 0
    a = RandomSource.seeded(19, "b").binomial([10, 100, 1000], 0.4)
    assert np.array_equal(a, RandomSource.seeded(19, "b").binomial([10, 100, 1000], 0.4))
    with pytest.raises(InvalidParameterError, match="p must"):
        rs.binomial(3, 1.5)
    with pytest.raises(InvalidParameterError, match="n must"):
        rs.binomial(-1, 0.5)
