"""The DDG's analytic accountant (design §4.4): each step of its bound against brute force.

The sum of n users' ``N_Z(0, σ²)`` is compared pointwise with ``N_Z(0, nσ²)``
(:func:`sum_ratio_bounds`, checked against the exact convolution), and the whole bound
(:func:`analytic_epsilon`) against the exact hockey-stick divergence of the one-dimensional sum
shifted by an integer: every ε it states must hold exactly, and it must be close to the exact
ε where σ_int is not tiny. Then the calibration: at the settings of the healthtweets runs the
protocol's noise is the centralized mechanism's to within 0.1 %, where KLS21's RDP bound needs
~6 % more.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from primitives.analytic_gaussian import agm_multiplier
from primitives.ddg import calibrate_ddg, calibrate_sigma_int, ddg_accounting, ddg_epsilon, tau_ddg
from primitives.ddg.accounting import (
    analytic_epsilon,
    scales_exactly,
    sum_ratio_bounds,
    theta_excess,
)
from primitives.errors import InvalidParameterError


def discrete_gaussian(variance: float, half_width: int) -> npt.NDArray[np.float64]:
    x = np.arange(-half_width, half_width + 1, dtype=np.float64)
    w = np.exp(-x * x / (2.0 * variance))
    return w / w.sum()


def sum_of(sigma: float, n: int) -> npt.NDArray[np.float64]:
    """The exact pmf of a sum of n ``N_Z(0, σ²)`` on ``[−n·L, n·L]`` (mass beyond L ~ e^-450)."""
    one = discrete_gaussian(sigma * sigma, int(30 * sigma * math.sqrt(n)) + 30)
    out = one
    for _ in range(n - 1):
        out = np.convolve(out, one)
    return out


def hockey_stick(pmf: npt.NDArray[np.float64], shift: int, epsilon: float) -> float:
    """``Σ_x max(0, p(x) − e^ε p(x − v))``: the exact δ at ε of adding the sum to a query that
    moves by ``shift`` (the pmf is symmetric, so one direction is the worst)."""
    p = np.concatenate([pmf, np.zeros(shift)])
    q = np.concatenate([np.zeros(shift), pmf])
    return float(np.maximum(p - math.exp(epsilon) * q, 0.0).sum())


def test_theta_excess_bounds_the_theta_series() -> None:
    for variance in (0.05, 0.2, 1.0, 3.0):
        q = math.exp(-2 * math.pi**2 * variance)
        series = 2 * sum(q ** (m * m) for m in range(1, 60))
        assert series <= theta_excess(variance) <= series * (1 + 2 * q + 1e-11) + 1e-300
    assert theta_excess(40.0) == 0.0  # below 1e-307: float64 cannot hold it


@pytest.mark.parametrize("sigma", [0.5, 0.6, 0.8, 1.0, 1.5])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_sum_is_within_its_bounds_of_one_discrete_gaussian(sigma: float, n: int) -> None:
    """Every point where the exact convolution's value is well above float64's resolution:
    log(p_n(x)/g_{nσ²}(x)) ∈ [−A, B]; at n = 2 the bound is attained to 10 % (it is tight)."""
    pmf = sum_of(sigma, n)
    half = (pmf.size - 1) // 2
    x = np.arange(-half, half + 1, dtype=np.float64)
    g = np.exp(-x * x / (2 * n * sigma * sigma))
    g /= g.sum()
    inner = np.abs(x) <= 8 * sigma * math.sqrt(n) + 2
    log_ratio = np.log(pmf[inner] / g[inner])
    lower, upper = sum_ratio_bounds(sigma, n)
    assert log_ratio.min() >= -lower - 1e-12 and log_ratio.max() <= upper + 1e-12
    if n == 2:
        assert log_ratio.max() >= 0.7 * upper and log_ratio.min() <= -0.9 * lower


def test_sum_ratio_bounds_edge_cases() -> None:
    assert sum_ratio_bounds(3.0, 1) == (0.0, 0.0)
    assert sum_ratio_bounds(0.1, 5) == (math.inf, math.inf)  # θ(w²) ≥ 1: no bound
    assert sum_ratio_bounds(9.0, 10**7) == (0.0, 0.0)  # every term below float64's resolution
    # Past the steps summed one by one, the tail is bounded by the last step: still finite, growing.
    few, many = sum_ratio_bounds(0.7, 5000), sum_ratio_bounds(0.7, 50_000)
    assert 0 < few[1] < many[1] < math.inf


@pytest.mark.parametrize("sigma", [0.8, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("shift", [1, 3])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_the_analytic_bound_holds_exactly_in_one_dimension(sigma: float, n: int, shift: int, delta: float) -> None:
    """The exact δ at the stated ε is at most δ; and the stated ε is within 4 % of the exact
    smallest ε once σ_int ≥ 2 (where the bound is meant to be used; σ_int is thousands in a ring
    of 24 bits)."""
    pmf = sum_of(sigma, n)
    eps, a = analytic_epsilon(sigma_int=sigma, n=n, padded_dim=1, l2_bound=shift, delta=delta)
    assert math.isfinite(eps) and a > 0
    assert hockey_stick(pmf, shift, eps) <= delta
    lo, hi = 0.0, eps
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if hockey_stick(pmf, shift, mid) <= delta else (mid, hi)
    assert eps >= hi * (1 - 1e-9)
    if sigma >= 2:
        assert eps <= 1.04 * hi


def test_the_accountant_takes_the_smaller_of_the_two_bounds() -> None:
    common = dict(gamma=1e-3, sensitivity=1.0, dim_padded=64, n=10, delta=1e-6)
    for sigma in (0.4, 3.0, 300.0):
        rdp = ddg_accounting(sigma_int=sigma, accountant="rdp", **common)  # type: ignore[arg-type]
        both = ddg_accounting(sigma_int=sigma, accountant="analytic", **common)  # type: ignore[arg-type]
        assert both.epsilon <= rdp.epsilon
        assert both.accountant == "analytic" and rdp.accountant == rdp.bound == "rdp"
    # Large σ_int: the analytic bound wins and says which smoothing variance gave it.
    win = ddg_accounting(sigma_int=300.0, accountant="analytic", **common)  # type: ignore[arg-type]
    assert win.bound == "analytic" and win.smoothing_variance in (0.25, 0.5, 1.0, 2.0, 4.0)
    assert win.to_dict()["bound"] == "analytic"
    with pytest.raises(InvalidParameterError, match=r"accountant must be one of \['analytic', 'rdp'\], got 'pld'"):
        ddg_epsilon(sigma_int=3.0, accountant="pld", **common)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [4.0, 8.0, 16.0])
def test_the_protocol_noise_is_the_central_mechanisms_under_the_analytic_accountant(epsilon: float) -> None:
    """The healthtweets runs' settings (d = 384, Δ = 2C = 2 with the cap, δ_agg ≈ 1e-6, ⌈τ⌉ = 70,
    24-bit ring): σ of the decoded sum against the analytic Gaussian's σ at the same (ε, δ, Δ)."""
    delta, sens = 9.9e-7, 2.0
    central = agm_multiplier(epsilon, delta) * sens
    ratio = {}
    for accountant in ("analytic", "rdp"):
        cfg = calibrate_ddg(epsilon=epsilon, delta=delta, sensitivity=sens, dim=384, n=70, clip=1.0,
                            modulus_bits=24, n_modulus=700, k_stddevs=8.0, accountant=accountant)
        assert cfg.accountant == accountant
        ratio[accountant] = cfg.noise_std(70) / central
    assert 1.0 <= ratio["analytic"] <= 1.001
    assert ratio["rdp"] >= 1.04


@pytest.mark.parametrize("n", [10, 70])
def test_calibration_is_tight_under_the_analytic_accountant(n: int) -> None:
    kw = dict(gamma=1e-4, sensitivity=1.2, dim_padded=512, n=n, delta=1e-6, accountant="analytic")
    sigma = calibrate_sigma_int(epsilon=8.0, padded_dim=512, **{k: v for k, v in kw.items() if k != "dim_padded"})  # type: ignore[arg-type]
    assert ddg_epsilon(sigma_int=sigma, **kw) <= 8.0  # type: ignore[arg-type]
    assert ddg_epsilon(sigma_int=sigma * (1 - 1e-9), **kw) > 8.0  # type: ignore[arg-type]


def test_scales_exactly_only_where_the_bound_depends_on_n_sigma_squared_alone() -> None:
    # τ_DDG's first term is 10·e^{−π²σ²} (it leaves float64, subnormals included, at σ ≈ 8.65)
    # and θ(σ²/2) ≈ 2e^{−π²σ²} (at σ ≈ 8.49, where expm1 overflows).
    for accountant in ("analytic", "rdp"):
        assert scales_exactly(8.7, 50, accountant) and scales_exactly(100.0, 50, accountant)
        assert not scales_exactly(8.4, 50, accountant)
    assert tau_ddg(8.4, 50) > 0.0 and theta_excess(8.4**2 / 2) > 0.0
    # Where it does, the least σ_int for another n is the √ scaling of one bisection.
    kw = dict(epsilon=8.0, delta=1e-6, sensitivity=1.2, gamma=1e-4, padded_dim=512, accountant="analytic")
    at_50 = calibrate_sigma_int(n=50, **kw)  # type: ignore[arg-type]
    at_200 = calibrate_sigma_int(n=200, **kw)  # type: ignore[arg-type]
    assert at_200 == pytest.approx(at_50 * math.sqrt(50 / 200), rel=1e-10)
