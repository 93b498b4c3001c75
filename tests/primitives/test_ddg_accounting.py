"""The DDG accountant, calibration and modulus selection (design §4.4; KLS21).

Cross-checks: values derived by hand from the closed forms, an independent transcription of the
reference accountant's formulas (google-research/federated ``distributed_dp/accounting_utils.py``:
three-term RDP per integer order, tensorflow-privacy's RDP → (ε, δ) conversion), convergence to
the continuous Gaussian as γ → 0, and calibration that is tight from both sides.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from primitives.ddg import (
    KLS21_BETA,
    DDGEncoder,
    aggregate_range,
    calibrate_ddg,
    calibrate_sigma_int,
    clipped_sensitivity,
    ddg_accounting,
    ddg_epsilon,
    ddg_ledger_term,
    ddg_rdp,
    gaussian_rdp_epsilon,
    rdp_to_epsilon,
    rounded_l1_bound,
    rounded_l2_bound,
    tau_ddg,
)
from primitives.errors import InfeasibleBudgetError, InvalidParameterError
from primitives.randomness import RandomSource

PI2 = math.pi**2


# -- hand-derived values ------------------------------------------------------------------------
def test_tau_by_hand() -> None:
    # τ = 10 Σ_{k=1}^{n−1} exp(−2π²σ² k/(k+1))
    assert tau_ddg(0.5, 1) == 0.0
    assert tau_ddg(1.0, 2) == pytest.approx(10 * math.exp(-PI2), rel=1e-14)
    assert tau_ddg(0.5, 3) == pytest.approx(
        10 * (math.exp(-PI2 / 4) + math.exp(-PI2 / 3)), rel=1e-14
    )
    assert tau_ddg(0.0, 4) == pytest.approx(30.0)


def test_rounded_norm_bounds_by_hand() -> None:
    # c = 3, d = 16, β = e^{-1/2} so sqrt(2 ln 1/β) = 1: min(3 + 4, sqrt(9 + 4 + (3 + 2))) = √18.
    assert rounded_l2_bound(3.0, 16, math.exp(-0.5)) == pytest.approx(math.sqrt(18.0), rel=1e-15)
    assert rounded_l2_bound(3.0, 16, 0.0) == 7.0
    # Tiny β (sqrt(2 ln 1/β) ≈ 37): the deterministic c + √d is the smaller one.
    assert rounded_l2_bound(0.1, 16, 1e-300) == pytest.approx(4.1, rel=1e-15)
    assert rounded_l1_bound(math.sqrt(18.0), 16) == pytest.approx(4 * math.sqrt(18.0))
    assert rounded_l1_bound(2.0, 16) == 4.0  # integer vectors: ‖v‖₁ <= ‖v‖₂²


def test_single_user_large_noise_reduces_to_the_gaussian_rdp_curve() -> None:
    """n = 1 (τ = 0), so ε = min_α[α l2²/2 + ln(1−1/α) − (ln δ + ln α)/(α−1)] with
    l2 = Δ̂₂/σ_int; compared with a golden-section minimization of that expression."""
    sigma, gamma, sens, d, delta = 40.0, 0.05, 1.0, 64, 1e-6
    l2 = rounded_l2_bound(sens / gamma, d, KLS21_BETA) / sigma

    def f(a: float) -> float:
        return a * l2 * l2 / 2 + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)

    lo, hi = 1.0001, 1e4
    for _ in range(300):
        m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        lo, hi = (lo, m2) if f(m1) < f(m2) else (m1, hi)
    acc = ddg_accounting(
        sigma_int=sigma,
        gamma=gamma,
        sensitivity=sens,
        dim_padded=d,
        n=1,
        delta=delta,
        beta=KLS21_BETA,
        accountant="rdp",
    )
    assert acc.tau == 0.0 and acc.l2_scale == pytest.approx(l2, rel=1e-15)
    assert acc.epsilon == pytest.approx(f(lo), rel=1e-6)
    assert acc.epsilon >= f(lo) - 1e-12  # a grid can only be above the true minimum


def test_improved_conversion_beats_the_classical_one() -> None:
    # Classical RDP conversion: ε = rdp(α) + ln(1/δ)/(α−1) ≥ the improved one at every α.
    for sigma in (0.5, 1.0, 4.0):
        classical = min(
            a / (2 * sigma**2) + math.log(1e6) / (a - 1) for a in np.linspace(1.01, 500, 50_000)
        )
        assert gaussian_rdp_epsilon(sigma=sigma, sensitivity=1.0, delta=1e-6) < classical


# -- cross-check against the reference accountant's formulas ------------------------------------
def _reference_epsilon(
    *, sigma_int: float, gamma: float, sens: float, d: int, n: int, delta: float, beta: float
) -> tuple[float, list[float]]:
    """Transcription of the reference DDG accountant (integer orders 2..128 and 256).

    Rounded L2 bound of the scaled sensitivity; L1 = L2·min(√d, L2); τ; per order the minimum of
    the three RDP terms; ε(α) = rdp + ln((α−1)/α) − (ln δ + ln α)/(α−1); minimum over orders.
    """
    c = sens / gamma
    first = c + math.sqrt(d)
    if beta > 0:
        second = math.sqrt(
            c * c + d / 4 + math.sqrt(2 * math.log(1 / beta)) * (c + math.sqrt(d) / 2)
        )
        l2_int = min(first, second)
    else:
        l2_int = first
    l1_int = l2_int * min(math.sqrt(d), l2_int)
    tau = 10 * sum(math.exp(-2 * PI2 * sigma_int**2 * k / (k + 1)) for k in range(1, n))
    l2 = l2_int / (math.sqrt(n) * sigma_int)
    l1 = l1_int / (math.sqrt(n) * sigma_int)
    rdps, best = [], math.inf
    for a in [*range(2, 129), 256]:
        rdp = min(
            a / 2 * l2**2 + tau * d,
            a / 2 * (l2**2 + 2 * l1 * tau + tau**2 * d),
            a / 2 * (l2 + math.sqrt(d) * tau) ** 2,
        )
        rdps.append(rdp)
        best = min(best, rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return best, rdps


CASES = [
    # sigma_int, gamma, sensitivity, d', n, delta, beta: τ large / moderate / negligible
    (0.8, 0.5, 1.0, 16, 5, 1e-5, 0.0),
    (1.1, 0.02, 2.0, 64, 100, 1e-8, KLS21_BETA),
    (1e5, 1e-5, 1.2, 1024, 30, 1e-6, KLS21_BETA),
    (3.0, 0.01, 0.5, 256, 1000, 1e-6, 1e-3),
]


@pytest.mark.parametrize(("sigma_int", "gamma", "sens", "d", "n", "delta", "beta"), CASES)
def test_matches_reference_formulas(
    sigma_int: float, gamma: float, sens: float, d: int, n: int, delta: float, beta: float
) -> None:
    ref_eps, ref_rdp = _reference_epsilon(
        sigma_int=sigma_int, gamma=gamma, sens=sens, d=d, n=n, delta=delta, beta=beta
    )
    acc = ddg_accounting(
        sigma_int=sigma_int,
        gamma=gamma,
        sensitivity=sens,
        dim_padded=d,
        n=n,
        delta=delta,
        beta=beta,
        accountant="rdp",
    )
    orders = np.array([*range(2, 129), 256], dtype=np.float64)
    ours = ddg_rdp(orders, l2_scale=acc.l2_scale, l1_scale=acc.l1_scale, tau=acc.tau, padded_dim=d)
    assert np.allclose(ours, ref_rdp, rtol=1e-12, atol=0)
    assert rdp_to_epsilon(ours, orders, delta)[0] == pytest.approx(ref_eps, rel=1e-12)
    # The fractional grid can only improve on integer orders, and by little when α* is not small.
    assert acc.epsilon <= ref_eps * (1 + 1e-12)
    assert acc.epsilon >= 0.9 * ref_eps


# -- γ → 0 convergence to the continuous Gaussian ------------------------------------------------
@pytest.mark.parametrize("beta", [0.0, KLS21_BETA])
def test_converges_monotonically_to_the_continuous_gaussian(beta: float) -> None:
    """Fixed effective noise γ·σ_int·√n = 0.9: as γ shrinks, rounding inflation and τ vanish and ε
    decreases to the continuous Gaussian's RDP-based ε (same conversion, same α grid)."""
    sens, n, d, delta, sigma_eff = 1.2, 30, 1024, 1e-6, 0.9
    gauss = gaussian_rdp_epsilon(sigma=sigma_eff, sensitivity=sens, delta=delta)
    gammas = [10.0**-k for k in range(1, 9)]
    eps = [
        ddg_epsilon(
            sigma_int=sigma_eff / (g * math.sqrt(n)),
            gamma=g,
            sensitivity=sens,
            dim_padded=d,
            n=n,
            delta=delta,
            beta=beta,
            accountant="rdp",
        )
        for g in gammas
    ]
    assert all(a > b for a, b in zip(eps, eps[1:], strict=False)), eps
    assert all(e >= gauss for e in eps)
    assert eps[-1] == pytest.approx(gauss, rel=1e-6)
    assert eps[0] > 1.1 * gauss  # coarse γ really does cost privacy


def test_monotone_in_each_argument() -> None:
    base = {
        "sigma_int": 50.0,
        "gamma": 0.01,
        "sensitivity": 1.0,
        "dim_padded": 256,
        "n": 20,
        "delta": 1e-6,
    }
    e0 = ddg_epsilon(**base)  # type: ignore[arg-type]
    assert ddg_epsilon(**{**base, "sigma_int": 60.0}) < e0  # type: ignore[arg-type]
    assert ddg_epsilon(**{**base, "sensitivity": 1.5}) > e0  # type: ignore[arg-type]
    assert ddg_epsilon(**{**base, "n": 40}) < e0  # type: ignore[arg-type]
    assert ddg_epsilon(**{**base, "delta": 1e-9}) > e0  # type: ignore[arg-type]
    assert ddg_epsilon(**{**base, "sigma_int": 0.0}) == math.inf  # type: ignore[arg-type]


# -- calibration ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("epsilon", "gamma", "n", "beta"),
    [
        (1.0, 1e-3, 30, KLS21_BETA),
        (5.0, 1e-6, 30, 0.0),
        (2.0, 0.05, 100, KLS21_BETA),
        (10.0, 0.2, 2, 0.0),
    ],
)
def test_calibrated_sigma_is_tight(epsilon: float, gamma: float, n: int, beta: float) -> None:
    kw = {
        "gamma": gamma,
        "sensitivity": 1.2,
        "dim_padded": 1024,
        "n": n,
        "delta": 1e-6,
        "beta": beta,
    }
    sigma = calibrate_sigma_int(
        epsilon=epsilon, delta=1e-6, sensitivity=1.2, gamma=gamma, padded_dim=1024, n=n, beta=beta
    )
    assert ddg_epsilon(sigma_int=sigma, **kw) <= epsilon  # type: ignore[arg-type]
    assert ddg_epsilon(sigma_int=sigma * (1 - 1e-9), **kw) > epsilon  # type: ignore[arg-type]


def test_calibrate_with_gamma_picks_the_smallest_modulus() -> None:
    cfg = calibrate_ddg(
        epsilon=4.0, delta=1e-6, sensitivity=1.2, dim=768, n=30, clip=1.0, gamma=1e-5, n_modulus=500
    )
    assert (cfg.padded_dim, cfg.gamma, cfg.clip) == (1024, 1e-5, 1.0)
    span = aggregate_range(
        gamma=cfg.gamma, sigma_int=cfg.sigma_int, clip=1.0, padded_dim=1024, n=500
    )
    assert 2 ** (cfg.modulus_bits - 1) < span <= 2**cfg.modulus_bits
    # The formula by hand: 2·4·sqrt(c²n²/d' + (γ²/4 + (γσ)²)n)/γ.
    local = cfg.gamma * cfg.sigma_int
    assert span == pytest.approx(8 * math.sqrt(500**2 / 1024 + (1e-10 / 4 + local**2) * 500) / 1e-5)
    with pytest.raises(InvalidParameterError, match="modulus_bits"):
        calibrate_ddg(
            epsilon=4.0,
            delta=1e-6,
            sensitivity=1.2,
            dim=768,
            n=30,
            clip=1.0,
            gamma=1e-5,
            modulus_bits=cfg.modulus_bits - 1,
            n_modulus=500,
        )


@pytest.mark.parametrize("bits", [16, 32])
def test_calibrate_with_bits_picks_the_finest_gamma(bits: int) -> None:
    cfg = calibrate_ddg(
        epsilon=8.0,
        delta=1e-6,
        sensitivity=1.2,
        dim=768,
        n=50,
        clip=1.0,
        modulus_bits=bits,
        n_modulus=1000,
    )
    assert cfg.modulus_bits == bits
    kw = {"clip": 1.0, "padded_dim": 1024, "n": 1000}
    assert aggregate_range(gamma=cfg.gamma, sigma_int=cfg.sigma_int, **kw) <= 2.0**bits  # type: ignore[arg-type]
    finer = cfg.gamma * (1 - 1e-5)
    sigma = calibrate_sigma_int(
        epsilon=8.0, delta=1e-6, sensitivity=1.2, gamma=finer, padded_dim=1024, n=50
    )
    assert aggregate_range(gamma=finer, sigma_int=sigma, **kw) > 2.0**bits  # type: ignore[arg-type]
    assert (
        ddg_epsilon(
            sigma_int=cfg.sigma_int,
            gamma=cfg.gamma,
            sensitivity=1.2,
            dim_padded=1024,
            n=50,
            delta=1e-6,
        )
        <= 8.0
    )


def test_default_modulus_is_32_bits_and_fits_an_aggregate() -> None:
    """End to end: a 16-bit config for 300 users who all hold the same direction (the largest
    aggregate per coordinate); nothing wraps and the decoded error is noise-sized (|z| <= 6 for
    every coordinate: level 768·2e-9)."""
    assert (
        calibrate_ddg(epsilon=8.0, delta=1e-6, sensitivity=1.2, dim=64, n=30, clip=1.0).modulus_bits
        == 32
    )
    cfg = calibrate_ddg(
        epsilon=8.0,
        delta=1e-6,
        sensitivity=1.2,
        dim=768,
        n=30,
        clip=1.0,
        modulus_bits=16,
        n_modulus=300,
    )
    enc = DDGEncoder(cfg)
    rng = RandomSource.seeded(21)
    direction = rng.normal(768)
    x = np.tile(direction / np.linalg.norm(direction), (300, 1))
    decoded = enc.decode_sum(enc.aggregate(enc.encode(x, rng)), 300)
    z = (decoded - x.sum(axis=0)) / cfg.noise_std(300)
    assert np.abs(z).max() <= 6.0


# -- ledger term ------------------------------------------------------------------------------------
def test_ledger_term_is_json_safe_and_complete() -> None:
    cfg = calibrate_ddg(epsilon=3.0, delta=1e-7, sensitivity=1.2, dim=768, n=30, clip=1.0)
    term = ddg_ledger_term(cfg, delta=1e-7, n=30, sensitivity=1.2, epsilon=3.0)
    json.dumps(term)
    assert term["name"] == "centroid_ddg" and term["source"] == "KLS21 (design §4.4)"
    assert 3.0 * (1 - 1e-6) <= term["epsilon"] <= 3.0 and term["delta"] == 1e-7
    detail = term["detail"]
    for key in (
        "sigma_int",
        "gamma",
        "modulus_bits",
        "padded_dim",
        "n",
        "tau_ddg",
        "rounded_l2",
        "alpha",
    ):
        assert key in detail
    assert detail["sigma_effective"] == pytest.approx(cfg.gamma * cfg.sigma_int * math.sqrt(30))
    # More contributors than the worst case: a smaller epsilon, recorded as such.
    assert ddg_ledger_term(cfg, delta=1e-7, n=60, sensitivity=1.2)["epsilon"] < term["epsilon"]
    with pytest.raises(InfeasibleBudgetError, match="epsilon"):
        ddg_ledger_term(cfg, delta=1e-7, n=30, sensitivity=1.2, epsilon=2.0)
    silent = cfg.__class__(
        **{**cfg.to_dict(), "rotation_seed": cfg.rotation_seed, "sigma_int": 0.0}
    )
    assert (
        json.loads(
            json.dumps(ddg_ledger_term(silent, delta=1e-7, n=30, sensitivity=1.2)["detail"])
        )["l2_scale"]
        == "inf"
    )


def test_sensitivity_is_capped_at_the_clip_diameter() -> None:
    """Clipped vectors differ by at most 2·clip: a larger Δ is never paid for (design §4.2 cap)."""
    assert clipped_sensitivity(3.6, 1.0) == 2.0
    assert clipped_sensitivity(1.2, 1.0) == 1.2
    assert clipped_sensitivity(1.2, 0.5) == 1.0
    with pytest.raises(InvalidParameterError, match="clip"):
        clipped_sensitivity(1.2, 0.0)
    common = {"epsilon": 5.0, "delta": 6e-7, "dim": 64, "n": 70, "clip": 1.0, "gamma": 1e-3}
    wide = calibrate_ddg(sensitivity=3.6, **common)  # type: ignore[arg-type]
    diameter = calibrate_ddg(sensitivity=2.0, **common)  # type: ignore[arg-type]
    assert wide.sigma_int == diameter.sigma_int
    term = ddg_ledger_term(wide, delta=6e-7, n=70, sensitivity=3.6, epsilon=5.0)
    assert term["detail"]["sensitivity"] == 2.0
    assert term["detail"]["sensitivity_target"] == 3.6 and term["detail"]["cap_binds"] is True
    same = ddg_ledger_term(diameter, delta=6e-7, n=70, sensitivity=2.0)
    assert term["epsilon"] == same["epsilon"]
    below = ddg_ledger_term(wide, delta=6e-7, n=70, sensitivity=1.2)
    assert below["detail"]["sensitivity"] == 1.2 and below["detail"]["cap_binds"] is False


# -- errors -----------------------------------------------------------------------------------------
GOOD = {"epsilon": 4.0, "delta": 1e-6, "sensitivity": 1.2, "dim": 768, "n": 30, "clip": 1.0}


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("epsilon", 0.0, "epsilon"),
        ("epsilon", math.nan, "epsilon"),
        ("delta", 1.0, "delta"),
        ("delta", 0.0, "delta"),
        ("sensitivity", -1.0, "sensitivity"),
        ("n", 0, "n must"),
        ("n", 30.0, "ceil"),
        ("clip", 0.0, "clip"),
        ("modulus_bits", 64, "modulus_bits"),
        ("gamma", -1.0, "gamma"),
        ("beta", 1.0, "beta"),
        ("k_stddevs", 0.0, "k_stddevs"),
        ("dim", 0, "dim"),
    ],
)
def test_bad_parameters_rejected(field: str, value: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        calibrate_ddg(**{**GOOD, field: value})  # type: ignore[arg-type]


def test_infeasible_settings_say_why() -> None:
    with pytest.raises(InfeasibleBudgetError, match="modulus_bits"):
        calibrate_ddg(**GOOD, modulus_bits=4, n_modulus=10_000)  # type: ignore[arg-type]
    with pytest.raises(InfeasibleBudgetError, match="63"):
        calibrate_ddg(**GOOD, gamma=1e-9, n_modulus=10**12)  # type: ignore[arg-type]
    with pytest.raises(InfeasibleBudgetError, match="2\\^40"):
        calibrate_ddg(**GOOD, gamma=1e-14)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="delta"):
        ddg_epsilon(sigma_int=1.0, gamma=0.1, sensitivity=1.0, dim_padded=8, n=2, delta=2.0)
    with pytest.raises(InvalidParameterError, match="dim_padded"):
        ddg_epsilon(sigma_int=1.0, gamma=0.1, sensitivity=1.0, dim_padded=0, n=2, delta=1e-6)


# -- known answers: calibrate_ddg's configs, pinned bit for bit -----------------------------------
CALIBRATE_KAT = [
    (
        dict(epsilon=8.0, delta=1e-6, sensitivity=1.2, dim=64, n=30, clip=1.0),
        ("0x1.eb89bcb821d60p-28", "0x1.422805fc6d87ep+24", 32, 64),
    ),
    (
        dict(epsilon=3.0, delta=1e-7, sensitivity=3.6, dim=768, n=30, clip=1.0, modulus_bits=20),
        ("0x1.d82cdf5084d0dp-16", "0x1.69a291cbe7d2bp+14", 20, 1024),
    ),
    (
        dict(
            epsilon=1.0,
            delta=1e-5,
            sensitivity=0.5,
            dim=100,
            n=5,
            clip=0.5,
            n_modulus=1000,
            rotate=False,
        ),
        ("0x1.f4d1509308689p-21", "0x1.d976830d5d397p+19", 32, 100),
    ),
    (
        dict(epsilon=2.0, delta=1e-6, sensitivity=1.0, dim=64, n=10, clip=1.0, gamma=1e-3),
        ("0x1.0624dd2f1a9fcp-10", "0x1.7b934037726f5p+9", 15, 64),
    ),
    (
        dict(
            epsilon=2.0,
            delta=1e-6,
            sensitivity=1.0,
            dim=64,
            n=10,
            clip=1.0,
            gamma=1e-3,
            modulus_bits=40,
            beta=0.1,
        ),
        ("0x1.0624dd2f1a9fcp-10", "0x1.78f89d4245932p+9", 40, 64),
    ),
]


@pytest.mark.parametrize(("params", "expected"), CALIBRATE_KAT)
def test_calibrate_ddg_known_answers(params: dict[str, object], expected: tuple) -> None:
    """Recorded outputs of ``calibrate_ddg`` under the RDP accountant; a refactor must reproduce
    them exactly."""
    cfg = calibrate_ddg(**{"accountant": "rdp", **params})  # type: ignore[arg-type]
    assert (cfg.gamma.hex(), cfg.sigma_int.hex(), cfg.modulus_bits, cfg.padded_dim) == expected


def test_calibrate_ddg_bisection_below_the_noise_ceiling_says_so() -> None:
    # A 63-bit modulus drives the γ search down until σ_int leaves the sampler's range.
    with pytest.raises(
        InfeasibleBudgetError,
        match=r"^epsilon = 50\.0 needs sigma_int above 2\^40 at gamma = 5\.684341886080802e-14; "
        r"raise epsilon or gamma$",
    ):
        calibrate_ddg(
            epsilon=50.0, delta=1e-6, sensitivity=1.0, dim=8, n=2, clip=1.0, modulus_bits=63
        )
