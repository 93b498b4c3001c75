"""The DDG encoder/decoder (design §4.4): rotation, conditional rounding, modular wrap, round trips.

Statistical checks use fixed seeds; each states its level. Together they would fail falsely for a
fresh seed with probability below 1e-5.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from chi_square import z_two_sided
from hypothesis import given, settings
from hypothesis import strategies as st

from primitives import registry
from primitives.ddg import (
    KLS21_BETA,
    DDGConfig,
    DDGEncoder,
    fwht,
    padded_dimension,
    randomized_round,
    rounded_l2_bound,
)
from primitives.ddg.hadamard import rotation_signs
from primitives.errors import FreError, InvalidInputError, InvalidParameterError
from primitives.noise import ExactDiscreteGaussian, FastDiscreteGaussian
from primitives.randomness import RandomSource

SETTINGS = settings(max_examples=40, deadline=None)


def _sylvester(d: int) -> npt.NDArray[np.float64]:
    h = np.ones((1, 1))
    while h.shape[0] < d:
        h = np.block([[h, h], [h, -h]])
    return h


def _config(size: int, **overrides: object) -> DDGConfig:
    fields: dict[str, object] = {
        "dim": size,
        "padded_dim": padded_dimension(size),
        "gamma": 1e-3,
        "sigma_int": 0.0,
        "modulus_bits": 32,
        "clip": 1.0,
    }
    fields.update(overrides)
    return DDGConfig(**fields)  # type: ignore[arg-type]


def _unit_rows(rng: RandomSource, n: int, d: int) -> npt.NDArray[np.float64]:
    x: npt.NDArray[np.float64] = rng.normal((n, d))
    out: npt.NDArray[np.float64] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


# -- rotation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 8, 32, 64, 1024, 2048])
def test_fwht_is_the_normalized_sylvester_hadamard(d: int) -> None:
    """Against the dense matrix: d ≤ 32 is one block product, 64 and 1024 add the second
    (middle-bits) product, 2048 also a butterfly pass. The input is left unchanged."""
    x = RandomSource.seeded(1).normal((5, d))
    before = x.copy()
    assert np.allclose(fwht(x), x @ _sylvester(d) / math.sqrt(d), atol=1e-12)
    assert np.array_equal(x, before)
    assert np.allclose(fwht(x[0]), fwht(x)[0])


@SETTINGS
@given(log_d=st.integers(0, 10), seed=st.integers(0, 2**32))
def test_rotation_is_orthogonal_round_trip(log_d: int, seed: int) -> None:
    d = 1 << log_d
    dim = max(1, d - seed % max(1, d // 2))  # some padding when d > 1
    cfg = _config(dim, rotation_seed=seed.to_bytes(8, "big"))
    enc = DDGEncoder(cfg)
    x = RandomSource.seeded(seed).normal((3, dim))
    y = enc.rotate(x)
    assert y.shape == (3, d)
    assert np.allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)
    assert np.allclose(enc.unrotate(y), x, atol=1e-12)


def test_rotation_signs_come_from_the_public_seed() -> None:
    a = rotation_signs(b"seed-a", 1024)
    assert set(np.unique(a).tolist()) == {-1.0, 1.0}
    assert np.array_equal(a, rotation_signs(b"seed-a", 1024))
    assert not np.array_equal(a, rotation_signs(b"seed-b", 1024))
    with pytest.raises(InvalidParameterError):
        rotation_signs(b"", 8)


def test_padded_dimension() -> None:
    assert [padded_dimension(d) for d in (1, 2, 3, 768, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]
    with pytest.raises(InvalidParameterError):
        padded_dimension(0)


# -- rounding --------------------------------------------------------------------------------------
@SETTINGS
@given(
    d=st.integers(1, 64),
    c=st.floats(0.0, 50.0),
    beta=st.one_of(st.just(0.0), st.floats(1e-9, 0.99)),
    seed=st.integers(0, 2**32),
)
def test_conditional_rounding_never_exceeds_the_bound(
    d: int, c: float, beta: float, seed: int
) -> None:
    rng = RandomSource.seeded(seed)
    z = rng.normal((20, d))
    z *= c / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-300)
    bound = rounded_l2_bound(c, d, beta)
    out = randomized_round(z, rng, bound=bound, beta=beta)
    assert out.dtype == np.int64
    assert np.all(np.linalg.norm(out.astype(np.float64), axis=1) <= bound)
    assert np.all(np.abs(out - z) < 1.0)  # each coordinate moved to a neighbouring integer


def test_conditional_rounding_rerounds_when_needed() -> None:
    """All coordinates at 1/2 and β → 1: the bound is sqrt(d/2 + d/4·0 ...) ≈ the mean norm, so
    about half the unconditional roundings exceed it; the conditional ones never do."""
    d, rows = 64, 200
    z = np.full((rows, d), 0.5)
    c = 0.5 * math.sqrt(d)
    bound = rounded_l2_bound(c, d, 0.999)
    plain = randomized_round(z, RandomSource.seeded(3))
    assert (np.linalg.norm(plain.astype(float), axis=1) > bound).mean() > 0.2
    cond = randomized_round(z, RandomSource.seeded(3), bound=bound, beta=0.999)
    assert np.all(np.linalg.norm(cond.astype(float), axis=1) <= bound)
    with pytest.raises(FreError, match="norm bound"):
        randomized_round(np.full((2, 4), 10.0), RandomSource.seeded(1), bound=1.0, beta=0.5)


def test_encoder_rounding_respects_the_configured_bound() -> None:
    """Default (β = 0): unconditional rounding, norm < clip/γ + √d' by construction. β > 0: every
    user's rounded vector is re-rounded until its norm is within the KLS21 bound."""
    x = _unit_rows(RandomSource.seeded(10), 300, 40)
    for beta in (0.0, KLS21_BETA, 0.99):
        cfg = _config(40, gamma=0.05, beta=beta)
        assert cfg.rounding_bound == rounded_l2_bound(20.0, 64, beta)
        q = DDGEncoder(cfg).quantize(x, RandomSource.seeded(11))
        assert np.all(np.linalg.norm(q.astype(np.float64), axis=1) <= cfg.rounding_bound)
    assert _config(40).beta == 0.0


def test_randomized_rounding_is_unbiased() -> None:
    """z-test on the mean of 20k roundings of 8 fractional values at α = 1e-6 each (8 checks:
    false failure below 8e-6 for a fresh seed); the integers' zero variance gets a floor."""
    frac = np.array([0.0, 0.1, 0.25, 0.5, 0.7, 0.99, -0.3, 3.6])
    z = np.tile(frac, (20_000, 1))
    out = randomized_round(z, RandomSource.seeded(4)).astype(np.float64)
    p = z[0] - np.floor(z[0])
    se = np.sqrt(np.maximum(p * (1 - p), 1e-12) / z.shape[0])
    assert np.all(np.abs(out.mean(axis=0) - z[0]) <= z_two_sided(1e-6) * se)


# -- encode / decode --------------------------------------------------------------------------------
@SETTINGS
@given(
    n=st.integers(1, 20),
    dim=st.integers(1, 40),
    log_gamma=st.floats(-6.0, -0.5),
    rotate=st.booleans(),
    conditional=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_noiseless_round_trip_within_quantization_bound(
    n: int, dim: int, log_gamma: float, rotate: bool, conditional: bool, seed: int
) -> None:
    gamma = 10.0**log_gamma
    padded = padded_dimension(dim) if rotate else dim
    # Enough bits that the sum of n rounded vectors (norm < clip/γ + √d' each) never wraps.
    bits = min(63, math.ceil(math.log2(n * (1.0 / gamma + math.sqrt(padded)) + 1)) + 2)
    cfg = _config(
        dim,
        padded_dim=padded,
        gamma=gamma,
        modulus_bits=bits,
        rotate=rotate,
        beta=KLS21_BETA if conditional else 0.0,
        sigma_int=5.0,
    )
    enc = DDGEncoder(cfg)
    rng = RandomSource.seeded(seed)
    x = rng.normal((n, dim)) * 0.7  # some rows longer than the clip: they are projected
    encoded = enc.encode(x, rng, noise=False)
    assert encoded.shape == (n, padded) and encoded.dtype == np.uint64
    assert int(encoded.max()) < cfg.modulus
    decoded = enc.decode_sum(enc.aggregate(encoded), n)
    truth = enc.clip_rows(x).sum(axis=0)
    assert np.linalg.norm(decoded - truth) <= enc.quantization_bound(n)


def test_modular_wrap_is_undone_by_centring() -> None:
    """b = 12 bits, γ = 2^-12: 100 users share one direction, so partial sums run to many times
    M = 4096 and wrap, but 100 near-opposite users follow and the total fits. The modular aggregate
    equals the integer sum mod 2^b exactly, and decoding recovers the true sum."""
    dim, pairs = 16, 100
    cfg = _config(dim, gamma=1.0 / 4096, modulus_bits=12, sigma_int=3.0)
    enc = DDGEncoder(cfg)
    rng = RandomSource.seeded(5)
    base = np.repeat(_unit_rows(rng, 1, dim), pairs, axis=0) + 1e-3 * rng.normal((pairs, dim))
    x = np.concatenate([base, -base + 1e-3 * rng.normal((pairs, dim))])
    encoded = enc.encode(x, RandomSource.seeded(6))
    # Replay the same coins to get the integer (unwrapped) values.
    replay = RandomSource.seeded(6)
    q = enc.quantize(x, replay)
    q += FastDiscreteGaussian().sample(3.0, q.size, replay).reshape(q.shape)
    assert np.array_equal(encoded, (q % cfg.modulus).astype(np.uint64))
    running = np.cumsum(q, axis=0)
    assert np.abs(running).max() > 10 * cfg.modulus  # partial sums really do wrap
    total = enc.aggregate(encoded)
    assert np.array_equal(total.astype(np.int64), q.sum(axis=0) % cfg.modulus)
    assert np.abs(q.sum(axis=0)).max() < cfg.modulus // 2
    decoded = enc.decode_sum(total, 2 * pairs)
    assert np.allclose(decoded, enc.unrotate(q.sum(axis=0) * cfg.gamma), atol=1e-12)
    noise_bound = 6 * cfg.noise_std(2 * pairs) * math.sqrt(dim)
    truth = enc.clip_rows(x).sum(axis=0)
    assert np.linalg.norm(decoded - truth) <= enc.quantization_bound(2 * pairs) + noise_bound


def test_decoded_noise_has_the_accountants_scale() -> None:
    """n = 64 users, d = 768 → 1024, σ_int = 200: decoded-minus-true per coordinate has variance
    γ²(nσ_int²·v + rounding), v = Var/σ² ≈ 1. z-tests at α = 1e-6 each of the sample variance
    (sqrt(2/3072) relative standard error) and mean over 4 × 768 coordinates (false failure below
    2e-6 for a fresh seed)."""
    dim, n, gamma, sigma = 768, 64, 1e-4, 200.0
    cfg = _config(dim, gamma=gamma, sigma_int=sigma)
    enc = DDGEncoder(cfg)
    rng = RandomSource.seeded(7)
    errors = []
    for _ in range(4):
        x = _unit_rows(rng, n, dim)
        errors.append(enc.decode_sum(enc.aggregate(enc.encode(x, rng)), n) - x.sum(axis=0))
    err = np.concatenate(errors)
    expected = cfg.noise_std(n) ** 2 + gamma**2 * n / 6.0  # rounding adds ≤ 1/4, ~1/6 on average
    z = z_two_sided(1e-6)
    assert abs(err.var() / expected - 1.0) <= z * math.sqrt(2.0 / err.size)
    assert abs(err.mean()) <= z * math.sqrt(expected / err.size)


def test_exact_sampler_plugs_in_and_chunks_are_seamless() -> None:
    cfg = _config(12, gamma=1e-2, sigma_int=2.0)
    enc = DDGEncoder(cfg, ExactDiscreteGaussian())
    enc.chunk_rows = 3
    x = _unit_rows(RandomSource.seeded(8), 10, 12)
    out = enc.encode(x, RandomSource.seeded(9))
    assert out.shape == (10, 16)
    zero = enc.encode(x, RandomSource.seeded(9), noise=False)
    decoded = enc.decode_sum(enc.aggregate(zero), 10)
    assert np.linalg.norm(decoded - x.sum(axis=0)) <= enc.quantization_bound(10)
    assert registry.create("ddg_encoder", "ddg", config=cfg).config == cfg


def test_empty_batch_and_zero_count() -> None:
    enc = DDGEncoder(_config(5))
    assert enc.encode(np.zeros((0, 5)), RandomSource.seeded(1)).shape == (0, 8)
    assert np.array_equal(enc.decode_sum(np.zeros(8, dtype=np.uint64), 0), np.zeros(5))
    assert enc.quantization_bound(0) == 0.0


# -- configuration and errors -----------------------------------------------------------------------
def test_config_round_trips_through_dict() -> None:
    cfg = _config(768, gamma=1.5e-7, sigma_int=1.2e6, beta=KLS21_BETA, rotation_seed=b"\x00\xff")
    data = cfg.to_dict()
    assert data["rotation_seed"] == "00ff"
    assert DDGConfig.from_dict(data) == cfg
    assert cfg.modulus == 2**32 and cfg.norm_bound == pytest.approx(1.0 / 1.5e-7)
    with pytest.raises(InvalidInputError):
        DDGConfig.from_dict({"dim": 3})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("dim", 0, "dim"),
        ("padded_dim", 1000, "padded_dim"),
        ("padded_dim", 512, "padded_dim"),
        ("gamma", 0.0, "gamma"),
        ("gamma", math.inf, "gamma"),
        ("gamma", 1e-17, "gamma"),
        ("sigma_int", -1.0, "sigma_int"),
        ("sigma_int", 2.0**41, "sigma_int"),
        ("modulus_bits", 64, "modulus_bits"),
        ("modulus_bits", 1, "modulus_bits"),
        ("clip", 0.0, "clip"),
        ("beta", 1.0, "beta"),
        ("rotation_seed", b"", "rotation_seed"),
        ("rotate", 1, "rotate"),
    ],
)
def test_bad_config_rejected(field: str, value: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _config(768, **{field: value})


def test_unrotated_config_allows_any_padding() -> None:
    cfg = _config(768, padded_dim=768, rotate=False)
    enc = DDGEncoder(cfg)
    x = _unit_rows(RandomSource.seeded(2), 3, 768)
    assert enc.encode(x, RandomSource.seeded(3), noise=False).shape == (3, 768)


def test_bad_inputs_rejected() -> None:
    enc = DDGEncoder(_config(4))
    rng = RandomSource.seeded(1)
    with pytest.raises(InvalidInputError, match="shape"):
        enc.encode(np.zeros((2, 5)), rng)
    with pytest.raises(InvalidInputError, match="finite"):
        enc.encode(np.array([[0.0, np.nan, 0.0, 0.0]]), rng)
    with pytest.raises(InvalidInputError, match="shape"):
        enc.decode_sum(np.zeros(3, dtype=np.uint64), 1)
    with pytest.raises(InvalidInputError, match="range|2\\^32"):
        enc.decode_sum(np.full(4, 2**32, dtype=np.uint64), 1)
    with pytest.raises(InvalidInputError, match="integers"):
        enc.decode_sum(np.zeros(4), 1)
    with pytest.raises(InvalidParameterError, match="count"):
        enc.decode_sum(np.zeros(4, dtype=np.uint64), -1)
    with pytest.raises(InvalidInputError, match="unsigned"):
        enc.aggregate(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(InvalidParameterError, match="config"):
        DDGEncoder({"dim": 4})  # type: ignore[arg-type]


def test_unrotate_with_a_scale_is_the_scaled_inverse() -> None:
    """``unrotate(y, scale=s)`` equals ``s · unrotate(y)``, with and without the rotation."""
    rng = np.random.default_rng(11)
    for rotate in (True, False):
        cfg = DDGConfig(dim=20, padded_dim=32, gamma=0.1, sigma_int=1.0, modulus_bits=16, clip=1.0, rotate=rotate)
        enc = DDGEncoder(cfg)
        y = rng.normal(size=(3, 32))
        np.testing.assert_allclose(enc.unrotate(y, scale=0.25), 0.25 * enc.unrotate(y), rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(enc.unrotate(y[0], scale=3.0), 3.0 * enc.unrotate(y[0]), rtol=1e-15)


# -- a σ_int per row (count-sized noise, design §4.4) ------------------------------------------------
def _row_config() -> DDGConfig:
    return DDGConfig(dim=20, padded_dim=32, gamma=0.01, sigma_int=6.0, modulus_bits=30, clip=1.0)


def test_a_sigma_per_row_equal_to_the_configs_draws_exactly_what_none_draws() -> None:
    enc = DDGEncoder(_row_config())
    x = RandomSource.seeded(1, "rows").normal((300, 20)) * 0.1  # several chunks of 2,048 // 32 rows
    plain = enc.encode(x, RandomSource.seeded(2, "enc"))
    assert np.array_equal(enc.encode(x, RandomSource.seeded(2, "enc"), sigma_int=[6.0] * 300), plain)
    assert np.array_equal(enc.encode(x, RandomSource.seeded(2, "enc"), sigma_int=6.0), plain)


def test_each_row_gets_its_own_sigma() -> None:
    """In one chunk of rows, rows at σ = 0 are the noiseless encoding (the chunk's rounding coins
    come first, and σ = 0 draws nothing); rows at 3 and 12 carry noise of those scales
    (chi-square on the differences to the noiseless encoding, α = 1e-6 per level)."""
    enc = DDGEncoder(_row_config())
    n = enc.chunk_rows - enc.chunk_rows % 3
    x = RandomSource.seeded(3, "rows").normal((n, 20)) * 0.1
    levels = np.array([0.0, 3.0, 12.0])[np.arange(n) % 3]
    noisy = enc.encode(x, RandomSource.seeded(4, "enc"), sigma_int=levels)
    quiet = enc.encode(x, RandomSource.seeded(4, "enc"), noise=False)
    m = enc.modulus
    diff = ((noisy.astype(np.int64) - quiet.astype(np.int64) + m // 2) % m) - m // 2
    assert np.array_equal(diff[levels == 0], np.zeros_like(diff[levels == 0]))
    for level in (3.0, 12.0):
        d = diff[levels == level].astype(np.float64).ravel()
        var, k = float(np.mean(d**2)) / level**2, d.size
        assert abs(var - 1.0) <= z_two_sided(1e-6) * math.sqrt(2.0 / k), (level, var)
    with pytest.raises(InvalidParameterError, match="sigma_int"):
        enc.encode(x[:2], RandomSource.seeded(4, "enc"), sigma_int=[1.0])
    with pytest.raises(InvalidParameterError, match="sigma_int"):
        enc.encode(x[:2], RandomSource.seeded(4, "enc"), sigma_int=[1.0, -1.0])


def test_the_norm_guard_takes_a_sigma() -> None:
    enc = DDGEncoder(_row_config())
    assert enc.sum_norm_bound(10, 10, sigma_int=6.0) == enc.sum_norm_bound(10, 10)
    assert enc.sum_norm_bound(10, 10, sigma_int=3.0) < enc.sum_norm_bound(10, 10)
