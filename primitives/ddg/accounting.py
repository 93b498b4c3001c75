"""Privacy accounting, calibration and modulus selection for the distributed discrete Gaussian.

design §4.4, after Kairouz, Liu, Steinke 2021 (Thm. 1 / Prop. 14 for the RDP of a sum of discrete
Gaussians, Thm. 1 / Prop. 22 for rounded norms, §4.4 for the modulus heuristic); the reference
implementation cross-checked in the tests is google-research/federated
``distributed_dp/accounting_utils.py``.

With ``n`` contributors each adding ``N_Z(0, σ_int²)`` (integer units) and rounded sensitivities
``Δ̂₂, Δ̂₁`` (integer units, :func:`~primitives.ddg.rounding.rounded_l2_bound` with ``c = Δ/γ``)::

    τ     = 10 Σ_{k=1}^{n−1} exp(−2π² σ_int² k/(k+1))
    l2    = Δ̂₂/(√n σ_int),   l1 = Δ̂₁/(√n σ_int)
    ε(α)  = min{ α/2·l2² + τd',  α/2·(l2² + 2 l1 τ + τ² d'),  α/2·(l2 + √d' τ)² }
    ε     = min_α [ ε(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) ]

Neighbouring relation. ``sensitivity`` Δ bounds the distance between the two neighbouring users'
clipped vectors (replacement). Clipped vectors never differ by more than ``2·clip``, so wherever
the clip is known (:func:`calibrate_ddg`, :func:`ddg_ledger_term`) a larger Δ is capped at that
diameter (:func:`clipped_sensitivity`, design §4.2). With unconditional rounding (``beta = 0``, the default) the two
users' rounding coins can be coupled so that the rounded difference is a randomized rounding of
``(x − x')/γ``; its norm is then below ``Δ/γ + √d'`` with certainty, and joint convexity of Rényi
divergence carries the bound through the mixture over coins. The ``β > 0`` term of ``Δ̂₂`` is
KLS21's bound on a *single* conditionally rounded vector, i.e. for add/remove neighbours with Δ
the clip; it is applied as design §4.4 states when ``beta > 0`` is passed.

The order ``α`` ranges over a fixed dense grid (fractional orders from 1 + 1e-6 to 1e8, ratio
1.004 between neighbours). Every order gives a valid bound, so the grid only affects tightness,
and the minimum over a fixed grid is continuous and strictly monotone in ``σ_int`` — which makes
bisection on it well defined.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from primitives.analytic_gaussian import agm_epsilon, agm_multiplier
from primitives.ddg.encoder import (
    ANALYTIC_ACCOUNTANT,
    DEFAULT_ACCOUNTANT,
    DEFAULT_BETA,
    DEFAULT_ROTATION_SEED,
    MAX_SCALED_NORM,
    RDP_ACCOUNTANT,
    DDGConfig,
    check_accountant,
)
from primitives.ddg.hadamard import padded_dimension
from primitives.ddg.rounding import rounded_l1_bound, rounded_l2_bound
from primitives.errors import InfeasibleBudgetError, InvalidParameterError
from primitives.noise.fast import MAX_SIGMA

ALPHA_GRID: npt.NDArray[np.float64] = 1.0 + np.geomspace(1e-6, 1e8, 8001)
DEFAULT_K_STDDEVS = 4.0
DEFAULT_MODULUS_BITS = 32
SOURCE = "KLS21 (design §4.4)"


# -- validation --------------------------------------------------------------------------------
def _real(name: str, value: object, *, low: float, low_open: bool, high: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InvalidParameterError(f"{name} must be a number, got {type(value).__name__}")
    v = float(value)
    below = v <= low if low_open else v < low
    if math.isnan(v) or below or v > high or (high == math.inf and math.isinf(v)):
        bracket = "(" if low_open else "["
        raise InvalidParameterError(f"{name} must be in {bracket}{low}, {high}), got {value}")
    return v


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 1:
        raise InvalidParameterError(
            f"{name} must be an integer >= 1 (use ceil(tau) for a threshold), got {value!r}"
        )
    return int(value)


def _delta(value: object) -> float:
    d = _real("delta", value, low=0.0, low_open=True, high=1.0)
    if d >= 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1), got {value}")
    return d


def clipped_sensitivity(sensitivity: float, clip: float) -> float:
    """``min(Δ, 2·clip)``: the encoder clips every vector to norm ``clip``, so two users' vectors
    differ by at most the diameter ``2·clip`` whatever Δ a caller states (design §4.2 cap)."""
    sens = _real("sensitivity", sensitivity, low=0.0, low_open=True)
    c = _real("clip", clip, low=0.0, low_open=True)
    return min(sens, 2.0 * c)


# -- RDP → (ε, δ) -------------------------------------------------------------------------------
def rdp_to_epsilon(
    rdp: npt.NDArray[np.float64], alphas: npt.NDArray[np.float64], delta: float
) -> tuple[float, float]:
    """``min_α [rdp(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)]`` and the minimizing order.

    The conversion of Canonne, Kamath, Steinke 2020 (Prop. 12) / Asoodeh et al.; also the one in
    the reference accountant. Clamped at 0.
    """
    d = _delta(delta)
    with np.errstate(over="ignore", invalid="ignore"):
        eps = rdp + np.log1p(-1.0 / alphas) - (math.log(d) + np.log(alphas)) / (alphas - 1.0)
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(alphas[i])


def gaussian_rdp_epsilon(*, sigma: float, sensitivity: float, delta: float) -> float:
    """ε of the continuous Gaussian mechanism from its RDP ``αΔ²/(2σ²)``, same conversion/grid.

    The limit the DDG accountant approaches as γ → 0 at fixed effective noise (tests).
    """
    s = _real("sigma", sigma, low=0.0, low_open=True)
    sens = _real("sensitivity", sensitivity, low=0.0, low_open=True)
    return rdp_to_epsilon(ALPHA_GRID * sens * sens / (2.0 * s * s), ALPHA_GRID, delta)[0]


# -- the analytic bound (design §4.4, "the analytic accountant") ----------------------------------
#: Variances a of the smoothing kernel tried by :func:`analytic_epsilon`; each gives a valid bound.
SMOOTHING_VARIANCES: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)
#: Summands of the sum-to-discrete-Gaussian bound taken one by one; the rest are bounded by the last.
_EXACT_STEPS = 4096


def theta_excess(variance: float | npt.NDArray[np.float64]) -> Any:
    """An upper bound on ``2 Σ_{m≥1} exp(−2π² s² m²)`` at ``s² = variance``: ``2/expm1(2π² s²)``.

    By Poisson summation ``Σ_{y∈ℤ} exp(−(y − c)²/(2s²)) = √(2π)·s·(1 + Σ_{m≠0} e^{−2π²s²m²}
    cos 2πmc)``, so this bounds, for every centre c, how far a discrete Gaussian's normaliser
    is from the continuous one's, relatively (``Σ_{m≥1} q^{m²} ≤ q/(1 − q)``). It is 0 in float64
    once ``2π² s² > 709`` (s² > 35.9), where the true value is below 1e-307.
    """
    x = 2.0 * math.pi**2 * np.asarray(variance, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore"):
        # The factor keeps it above the series when both round (a bound must not round down).
        out = 2.0 / np.expm1(x) * (1.0 + 1e-12)
    return float(out) if out.ndim == 0 else out


def sum_ratio_bounds(sigma_int: float, n: int) -> tuple[float, float]:
    """(A, B): ``e^{−A} ≤ p_n(x)/g_{nσ²}(x) ≤ e^{B}`` for every integer x, where ``p_n`` is the law
    of a sum of ``n`` independent ``N_Z(0, σ²)`` and ``g_{nσ²}`` is ``N_Z(0, nσ²)`` (σ = σ_int).

    Induction on k (design §4.4): convolving ``N_Z(0, kσ²)`` with ``N_Z(0, σ²)`` gives
    ``N_Z(0, (k+1)σ²)`` times ``(1 + θ((k+1)σ²))(1 ± θ(w²)) / ((1 + θ(kσ²))(1 + θ(σ²)))`` with
    ``w² = kσ²/(k+1)`` and θ = :func:`theta_excess`; the factors' logs add up. ``inf`` where a
    θ(w²) reaches 1 (σ_int below ~0.3). The first 4,096 steps are summed one by one, the rest
    bounded by the last of them (θ(w²) falls as k grows).
    """
    s2 = float(sigma_int) ** 2
    count = int(n)
    if count <= 1:
        return 0.0, 0.0
    if s2 == 0.0:
        return math.inf, math.inf
    k = np.arange(1, min(count, _EXACT_STEPS + 1), dtype=np.float64)
    theta_w = theta_excess(k * s2 / (k + 1.0))
    if np.any(theta_w >= 1.0):
        return math.inf, math.inf
    theta_k = theta_excess(k * s2)
    theta_k1 = theta_excess((k + 1.0) * s2)
    theta_1 = float(theta_excess(s2))
    upper = np.log1p(theta_k1) + np.log1p(theta_w)
    lower = -np.log1p(-theta_w) + np.log1p(theta_k) + math.log1p(theta_1)
    rest = count - 1 - k.size  # steps k = _EXACT_STEPS + 1 .. n − 1, each below step _EXACT_STEPS's
    return (
        float(lower.sum() + rest * lower[-1]),
        float(upper.sum() + rest * upper[-1]),
    )


def _kernel_bounds(a: float, padded_dim: int, lower_sum: float, upper_sum: float, theta_s: float) -> tuple[float, float]:
    """(U, L) over the d' coordinates with the smoothing kernel of variance ``a`` (design §4.4):
    U = d'·(B + ln(1 + θ(a))), L = d'·(A − ln(1 − θ(a)) + ln(1 + θ(s²)))."""
    theta_a = float(theta_excess(a))
    d = float(padded_dim)
    return d * (upper_sum + math.log1p(theta_a)), d * (lower_sum - math.log1p(-theta_a) + math.log1p(theta_s))


def analytic_epsilon(
    *, sigma_int: float, n: int, padded_dim: int, l2_bound: float, delta: float
) -> tuple[float, float]:
    """ε at ``delta`` of adding the sum of ``n`` users' ``N_Z(0, σ_int²)^{d'}`` to an integer query
    whose neighbours differ by at most ``l2_bound`` (Δ̂₂) in L2, and the smoothing variance a that
    gave it (design §4.4, the analytic accountant).

    The sum is within the per-coordinate ratios of :func:`sum_ratio_bounds` of ``N_Z(0, s²)``,
    s² = nσ²; that is within ``[(1 − θ(a))/(1 + θ(s²)), 1 + θ(a)]`` of the smoothed rounding of the
    continuous ``N(0, s² − a)``: output integer k with probability ∝ ``exp(−(k − y)²/(2a))`` (an
    integer-shift-equivariant post-processing). With U, L the log ratio bounds over the d'
    coordinates, the sum is ``(ε_c + U + L, e^U·δ_c)``-DP where ``(ε_c, δ_c)`` is the analytic
    Gaussian's at σ_c = √(s² − a) and Δ̂₂; δ_c = δ·e^{−U}, so ε = ε_c + U + L. The smallest ε over
    :data:`SMOOTHING_VARIANCES` (``inf`` if none applies).
    """
    s2 = float(n) * float(sigma_int) ** 2
    if s2 == 0.0:
        return math.inf, math.nan
    lower_sum, upper_sum = sum_ratio_bounds(sigma_int, n)
    theta_s = float(theta_excess(s2))
    best, best_a = math.inf, math.nan
    for a in SMOOTHING_VARIANCES:
        if a >= s2 or float(theta_excess(a)) >= 1.0 or not math.isfinite(upper_sum):
            continue
        upper, lower = _kernel_bounds(a, padded_dim, lower_sum, upper_sum, theta_s)
        delta_c = float(delta) * math.exp(-upper)
        if not 0.0 < delta_c < 1.0:
            continue
        eps = agm_epsilon(math.sqrt(s2 - a), delta_c, float(l2_bound)) + upper + lower
        if eps < best:
            best, best_a = eps, a
    return best, best_a


def scales_exactly(sigma_int: float, n: int, accountant: str) -> bool:
    """Whether the accountant's ε at (σ_int, n) depends on them only through n·σ_int² (so σ_int
    for another n follows by √ scaling): τ_DDG underflows to 0 and, for the analytic accountant,
    so does θ(σ_int²/2), which bounds every step of :func:`sum_ratio_bounds`."""
    if tau_ddg(sigma_int, n) != 0.0:
        return False
    return accountant == RDP_ACCOUNTANT or float(theta_excess(float(sigma_int) ** 2 / 2.0)) == 0.0


# -- the DDG accountant --------------------------------------------------------------------------
def tau_ddg(sigma_int: float, n: int) -> float:
    """KLS21 Thm. 1 inflation ``τ = 10 Σ_{k=1}^{n−1} exp(−2π² σ_int² k/(k+1))`` (0 for n = 1)."""
    s = _real("sigma_int", sigma_int, low=0.0, low_open=False)
    count = _count("n", n)
    if count == 1:
        return 0.0
    k = np.arange(1, count, dtype=np.float64)
    return 10.0 * float(np.exp(-2.0 * math.pi**2 * s * s * k / (k + 1.0)).sum())


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else "inf"


def ddg_rdp(
    alphas: npt.ArrayLike, *, l2_scale: float, l1_scale: float, tau: float, padded_dim: int
) -> npt.NDArray[np.float64]:
    """RDP of the distributed discrete Gaussian at orders ``alphas`` (KLS21 Prop. 14, design §4.4).

    ``min{α/2·l2² + τd',  α/2·(l2² + 2·l1·τ + τ²d'),  α/2·(l2 + √d'·τ)²}``.
    """
    half = np.asarray(alphas, dtype=np.float64) / 2.0
    l2, l1, d = float(l2_scale), float(l1_scale), float(padded_dim)
    first = half * l2 * l2 + tau * d
    second = half * (l2 * l2 + 2.0 * l1 * tau + tau * tau * d)
    third = half * (l2 + math.sqrt(d) * tau) ** 2
    out: npt.NDArray[np.float64] = np.minimum(np.minimum(first, second), third)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class DDGAccounting:
    """Every intermediate of one DDG privacy computation (design §4.4), for ledgers and audits."""

    epsilon: float
    delta: float
    alpha: float
    tau: float
    rounded_l2: float  # Δ̂₂, integer units
    rounded_l1: float  # Δ̂₁, integer units
    l2_scale: float
    l1_scale: float
    sigma_int: float
    gamma: float
    sensitivity: float
    padded_dim: int
    n: int
    beta: float
    accountant: str = RDP_ACCOUNTANT
    bound: str = RDP_ACCOUNTANT  # which bound gave ε: "rdp" or "analytic"
    smoothing_variance: float = math.nan  # the analytic bound's a (NaN when the RDP bound won)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe; infinities (no noise) are written as the string ``"inf"``."""
        return {
            "epsilon": _json_float(self.epsilon),
            "delta": self.delta,
            "alpha": _json_float(self.alpha),
            "tau_ddg": self.tau,
            "rounded_l2": self.rounded_l2,
            "rounded_l1": self.rounded_l1,
            "l2_scale": _json_float(self.l2_scale),
            "l1_scale": _json_float(self.l1_scale),
            "sigma_int": self.sigma_int,
            "gamma": self.gamma,
            "sensitivity": self.sensitivity,
            "padded_dim": self.padded_dim,
            "n": self.n,
            "beta": self.beta,
            "accountant": self.accountant,
            "bound": self.bound,
            "smoothing_variance": None if math.isnan(self.smoothing_variance) else self.smoothing_variance,
        }


def ddg_accounting(
    *,
    sigma_int: float,
    gamma: float,
    sensitivity: float,
    dim_padded: int,
    n: int,
    delta: float,
    beta: float = DEFAULT_BETA,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> DDGAccounting:
    """The DDG (ε, δ) guarantee for a sum of ``n`` users' encodings, with all intermediates.

    ``sensitivity`` is the L2 distance bound Δ between two neighbouring users' (clipped) vectors in
    embedding units; ``gamma`` the granularity; ``sigma_int`` each user's noise scale in integer
    units; ``beta`` the conditional-rounding parameter (0: unconditional rounding). ``accountant``
    ``"rdp"``: KLS21's RDP bound; ``"analytic"``: the smaller ε of it and
    :func:`analytic_epsilon` (both are valid guarantees at the same δ).
    """
    acct = check_accountant(accountant)
    s = _real("sigma_int", sigma_int, low=0.0, low_open=False)
    g = _real("gamma", gamma, low=0.0, low_open=True)
    sens = _real("sensitivity", sensitivity, low=0.0, low_open=True)
    d = _count("dim_padded", dim_padded)
    count = _count("n", n)
    dl = _delta(delta)
    b = _real("beta", beta, low=0.0, low_open=False, high=1.0)
    delta_2 = rounded_l2_bound(sens / g, d, b)
    delta_1 = rounded_l1_bound(delta_2, d)
    tau = tau_ddg(s, count)
    if s == 0.0:
        eps, alpha, l2, l1 = math.inf, math.inf, math.inf, math.inf
    else:
        l2 = delta_2 / (math.sqrt(count) * s)
        l1 = delta_1 / (math.sqrt(count) * s)
        rdp = ddg_rdp(ALPHA_GRID, l2_scale=l2, l1_scale=l1, tau=tau, padded_dim=d)
        eps, alpha = rdp_to_epsilon(rdp, ALPHA_GRID, dl)
    bound, smoothing = RDP_ACCOUNTANT, math.nan
    if acct == ANALYTIC_ACCOUNTANT and s > 0.0:
        eps_analytic, a = analytic_epsilon(
            sigma_int=s, n=count, padded_dim=d, l2_bound=delta_2, delta=dl
        )
        if eps_analytic < eps:
            eps, bound, smoothing = eps_analytic, ANALYTIC_ACCOUNTANT, a
    return DDGAccounting(
        epsilon=eps,
        delta=dl,
        alpha=alpha,
        tau=tau,
        rounded_l2=delta_2,
        rounded_l1=delta_1,
        l2_scale=l2,
        l1_scale=l1,
        sigma_int=s,
        gamma=g,
        sensitivity=sens,
        padded_dim=d,
        n=count,
        beta=b,
        accountant=acct,
        bound=bound,
        smoothing_variance=smoothing,
    )


def ddg_epsilon(
    *,
    sigma_int: float,
    gamma: float,
    sensitivity: float,
    dim_padded: int,
    n: int,
    delta: float,
    beta: float = DEFAULT_BETA,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> float:
    """ε of the DDG sum of ``n`` contributors at ``delta`` (design §4.4); see :func:`ddg_accounting`."""
    return ddg_accounting(
        sigma_int=sigma_int,
        gamma=gamma,
        sensitivity=sensitivity,
        dim_padded=dim_padded,
        n=n,
        delta=delta,
        beta=beta,
        accountant=accountant,
    ).epsilon


# -- calibration ---------------------------------------------------------------------------------
def _analytic_sigma_int(
    *, epsilon: float, delta: float, sensitivity: float, gamma: float, padded_dim: int, n: int, beta: float
) -> float | None:
    """The least σ_int meeting ``epsilon`` under the analytic accountant by inverting its bound
    (design §4.4), where that is exact: there the sum's ratio terms underflow (θ(σ_int²/2) = 0),
    so ε = ε_c(√(nσ² − a)) + d'·(ln(1 + θ(a)) − ln(1 − θ(a))) and the analytic Gaussian's
    multiplier gives σ_c for each a. None where the terms do not underflow, or where the RDP
    bound already meets ``epsilon`` at that σ_int (it may then be met lower: the bisection
    decides); the caller checks the result against the accountant."""
    l2 = rounded_l2_bound(float(sensitivity) / float(gamma), int(padded_dim), float(beta))
    best = math.inf
    for a in SMOOTHING_VARIANCES:
        upper, lower = _kernel_bounds(a, padded_dim, 0.0, 0.0, 0.0)  # the sum's terms underflow
        eps_c, delta_c = float(epsilon) - upper - lower, float(delta) * math.exp(-upper)
        if eps_c <= 0.0 or not 0.0 < delta_c < 1.0:
            continue
        try:
            sigma_c = agm_multiplier(eps_c, delta_c) * l2
        except InfeasibleBudgetError:
            continue
        best = min(best, math.sqrt((sigma_c * sigma_c + a) / n))
    if not math.isfinite(best) or best > MAX_SIGMA or float(theta_excess(best * best / 2.0)) != 0.0:
        return None
    rdp = ddg_epsilon(
        sigma_int=best, gamma=gamma, sensitivity=sensitivity, dim_padded=padded_dim, n=n,
        delta=delta, beta=beta, accountant=RDP_ACCOUNTANT,
    )
    return None if rdp <= epsilon else best


def calibrate_sigma_int(
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    gamma: float,
    padded_dim: int,
    n: int,
    beta: float = DEFAULT_BETA,
    rel_tol: float = 1e-12,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> float:
    """Smallest ``σ_int`` (to ``rel_tol``) with ``ddg_epsilon ≤ epsilon``: bisection in log scale.

    ε is strictly decreasing in σ_int (both ``l2`` and ``τ`` decrease), so the bracket
    ``ε(lo) > epsilon ≥ ε(hi)`` shrinks to the threshold; ``hi`` is returned. Under the analytic
    accountant, where its bound can be inverted exactly (:func:`_analytic_sigma_int`), the
    inverse is returned instead (checked against the accountant), about 45 times fewer
    evaluations.
    """
    target = _real("epsilon", epsilon, low=0.0, low_open=True)

    def eps_at(s: float) -> float:
        return ddg_epsilon(
            sigma_int=s,
            gamma=gamma,
            sensitivity=sensitivity,
            dim_padded=padded_dim,
            n=n,
            delta=delta,
            beta=beta,
            accountant=accountant,
        )

    if check_accountant(accountant) == ANALYTIC_ACCOUNTANT:
        direct = _analytic_sigma_int(
            epsilon=target, delta=delta, sensitivity=sensitivity, gamma=gamma,
            padded_dim=padded_dim, n=n, beta=beta,
        )
        for _ in range(64 if direct is not None else 0):
            assert direct is not None
            if eps_at(direct) <= target:
                return direct
            direct *= 1.0 + 1e-12  # rounding left it a hair above the budget

    # Start from the continuous Gaussian's scale, converted to integer units.
    guess = (
        float(sensitivity)
        * math.sqrt(2.0 * math.log(1.25 / float(delta)))
        / target
        / (float(gamma) * math.sqrt(n))
    )
    hi = max(guess, 1e-3)
    while eps_at(hi) > target:
        hi *= 2.0
        if hi > MAX_SIGMA:
            raise InfeasibleBudgetError(
                f"epsilon = {target} needs sigma_int above 2^40 at gamma = {gamma}; "
                "raise epsilon or gamma"
            )
    lo = hi / 2.0
    while eps_at(lo) <= target:
        hi, lo = lo, lo / 2.0
        if lo < 1e-12:
            return hi
    while hi / lo - 1.0 > rel_tol:
        mid = math.sqrt(lo * hi)
        if mid <= lo or mid >= hi:
            break
        if eps_at(mid) <= target:
            hi = mid
        else:
            lo = mid
    if hi > MAX_SIGMA:
        raise InfeasibleBudgetError(
            f"epsilon = {target} needs sigma_int = {hi:.4g} > 2^40 at gamma = {gamma}; "
            "raise epsilon or gamma"
        )
    return hi


def aggregate_range(
    *,
    gamma: float,
    sigma_int: float,
    clip: float,
    padded_dim: int,
    n: int,
    k_stddevs: float = DEFAULT_K_STDDEVS,
    rotate: bool = True,
) -> float:
    """Integer range that holds ``k`` standard deviations of an aggregate coordinate (KLS21 §4.4).

    ``2k·sqrt(ρ c_x² n² + (γ²/4 + σ_loc²) n)/γ`` with ``σ_loc = γ·σ_int`` the per-user noise in
    embedding units and ``ρ = 1/d'`` the flatness of a rotated vector (``ρ = 1`` without rotation,
    where one coordinate can carry a whole vector). The modulus ``2^b`` must be at least this.
    """
    g = float(gamma)
    flat = 1.0 / padded_dim if rotate else 1.0
    local = g * float(sigma_int)
    variance = flat * float(clip) ** 2 * n * n + (g * g / 4.0 + local * local) * n
    return 2.0 * float(k_stddevs) * math.sqrt(variance) / g


def modulus_bits_for(
    *,
    gamma: float,
    sigma_int: float,
    clip: float,
    padded_dim: int,
    n: int,
    k_stddevs: float = DEFAULT_K_STDDEVS,
    rotate: bool = True,
) -> int:
    """``⌈log2⌉`` of :func:`aggregate_range` (at least 2)."""
    span = aggregate_range(
        gamma=gamma,
        sigma_int=sigma_int,
        clip=clip,
        padded_dim=padded_dim,
        n=n,
        k_stddevs=k_stddevs,
        rotate=rotate,
    )
    return max(2, math.ceil(math.log2(span)))


@dataclass(frozen=True, slots=True, kw_only=True)
class _CalibrationTarget:
    """The validated parameters of one :func:`calibrate_ddg` call, against which a γ is tried."""

    epsilon: float  # as given: the messages quote it
    delta: float  # as given
    sensitivity: float  # capped at the clip's diameter
    clip: float
    dim: int
    padded_dim: int
    n: int
    n_modulus: int
    k_stddevs: float
    beta: float
    rotate: bool
    rotation_seed: bytes
    accountant: str

    def sigma_int(self, gamma: float) -> float:
        return calibrate_sigma_int(
            epsilon=self.epsilon,
            delta=self.delta,
            sensitivity=self.sensitivity,
            gamma=gamma,
            padded_dim=self.padded_dim,
            n=self.n,
            beta=self.beta,
            accountant=self.accountant,
        )

    def aggregate_range(self, gamma: float, sigma_int: float) -> float:
        return aggregate_range(
            gamma=gamma,
            sigma_int=sigma_int,
            clip=self.clip,
            padded_dim=self.padded_dim,
            n=self.n_modulus,
            k_stddevs=self.k_stddevs,
            rotate=self.rotate,
        )

    def modulus_bits(self, gamma: float, sigma_int: float) -> int:
        return modulus_bits_for(
            gamma=gamma,
            sigma_int=sigma_int,
            clip=self.clip,
            padded_dim=self.padded_dim,
            n=self.n_modulus,
            k_stddevs=self.k_stddevs,
            rotate=self.rotate,
        )

    def config(self, gamma: float, sigma_int: float, modulus_bits: int) -> DDGConfig:
        return DDGConfig(
            dim=int(self.dim),
            padded_dim=self.padded_dim,
            gamma=gamma,
            sigma_int=sigma_int,
            modulus_bits=modulus_bits,
            clip=self.clip,
            beta=self.beta,
            rotation_seed=self.rotation_seed,
            rotate=self.rotate,
            accountant=self.accountant,
        )


def _check_modulus_bits(modulus_bits: int | None) -> None:
    if modulus_bits is not None and (
        isinstance(modulus_bits, bool)
        or not isinstance(modulus_bits, int | np.integer)
        or not 2 <= modulus_bits <= 63
    ):
        raise InvalidParameterError(
            f"modulus_bits must be an integer in [2, 63], got {modulus_bits!r}"
        )


def _config_at_gamma(
    target: _CalibrationTarget, gamma: float, modulus_bits: int | None
) -> DDGConfig:
    """γ fixed: calibrate σ_int, then choose the smallest modulus (or check the one given)."""
    s = target.sigma_int(gamma)
    need = target.modulus_bits(gamma, s)
    if modulus_bits is None:
        if need > 63:
            raise InfeasibleBudgetError(
                f"gamma = {gamma} needs a {need}-bit modulus for n_modulus = {target.n_modulus} "
                "users; at most 63 bits are supported: raise gamma"
            )
        return target.config(gamma, s, need)
    if need > modulus_bits:
        raise InvalidParameterError(
            f"modulus_bits = {modulus_bits} is too small for gamma = {gamma}: "
            f"{target.k_stddevs} standard deviations of the aggregate need {need} bits"
        )
    return target.config(gamma, s, int(modulus_bits))


class _FitsModulus:
    """Whether the aggregate at γ fits ``2^bits``; keeps σ_int per γ, as each is a bisection."""

    def __init__(self, target: _CalibrationTarget, bits: int) -> None:
        self.target = target
        self.limit = float(1 << bits)
        self.sigma_int: dict[float, float] = {}

    def __call__(self, gamma: float) -> bool:
        if gamma not in self.sigma_int:
            self.sigma_int[gamma] = self.target.sigma_int(gamma)
        return self.target.aggregate_range(gamma, self.sigma_int[gamma]) <= self.limit


def _config_at_finest_gamma(target: _CalibrationTarget, bits: int) -> DDGConfig:
    """Modulus fixed: the finest γ whose aggregate still fits ``2^bits``, by bisection.

    The range shrinks as γ grows (coarser grid, fewer integer units): bracket, then bisect.
    """
    fits = _FitsModulus(target, bits)
    hi = target.clip
    while not fits(hi):
        hi *= 4.0
        if hi > 1e6 * target.clip:
            raise InfeasibleBudgetError(
                f"modulus_bits = {bits} cannot hold {target.k_stddevs} standard deviations of a "
                f"sum of {target.n_modulus} users at (epsilon = {target.epsilon}, "
                f"delta = {target.delta}); raise modulus_bits"
            )
    # Below this γ a clipped, rounded vector's scaled norm would exceed the encoder's limit.
    floor_gamma = 2.0 * (target.clip + math.sqrt(target.padded_dim)) / MAX_SCALED_NORM
    lo = hi / 4.0
    while lo > floor_gamma and fits(lo):
        hi, lo = lo, lo / 4.0
    if lo <= floor_gamma:
        lo = floor_gamma
        if fits(lo):
            return target.config(lo, fits.sigma_int[lo], bits)
    while hi / lo - 1.0 > 1e-6:
        mid = math.sqrt(lo * hi)
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return target.config(hi, fits.sigma_int[hi], bits)


def calibrate_ddg(
    *,
    epsilon: float,
    delta: float,
    sensitivity: float,
    dim: int,
    n: int,
    clip: float,
    modulus_bits: int | None = None,
    gamma: float | None = None,
    beta: float = DEFAULT_BETA,
    n_modulus: int | None = None,
    k_stddevs: float = DEFAULT_K_STDDEVS,
    rotate: bool = True,
    rotation_seed: bytes = DEFAULT_ROTATION_SEED,
    accountant: str = DEFAULT_ACCOUNTANT,
) -> DDGConfig:
    """A :class:`DDGConfig` meeting (``epsilon``, ``delta``) with ``n`` contributors (design §4.4).

    ``sensitivity`` is capped at the clip's diameter (:func:`clipped_sensitivity`).
    ``n`` is the *fewest* contributors a released aggregate can have (the worst case, ``⌈τ⌉``);
    ``n_modulus`` (default ``n``) the *most* the modulus must hold without wrapping. With
    ``gamma`` given, ``σ_int`` is calibrated and the smallest ``b`` is chosen (or the given
    ``modulus_bits`` is checked); otherwise ``b`` (default 32) is fixed and the finest ``γ`` whose
    aggregate still fits ``k_stddevs`` standard deviations into ``2^b`` is found by bisection.
    ``accountant`` (:data:`ACCOUNTANTS`) is the bound σ_int is calibrated against, recorded in
    the config.
    """
    _real("epsilon", epsilon, low=0.0, low_open=True)
    _delta(delta)
    _real("sensitivity", sensitivity, low=0.0, low_open=True)
    x_clip = _real("clip", clip, low=0.0, low_open=True)
    sens = clipped_sensitivity(sensitivity, x_clip)
    count = _count("n", n)
    n_mod = count if n_modulus is None else _count("n_modulus", n_modulus)
    k = _real("k_stddevs", k_stddevs, low=0.0, low_open=True)
    b = _real("beta", beta, low=0.0, low_open=False, high=1.0)
    if b >= 1.0:
        raise InvalidParameterError(f"beta must be in [0, 1), got {beta}")
    padded = padded_dimension(dim) if rotate else int(dim)
    _check_modulus_bits(modulus_bits)
    target = _CalibrationTarget(
        epsilon=epsilon,
        delta=delta,
        sensitivity=sens,
        clip=x_clip,
        dim=dim,
        padded_dim=padded,
        n=count,
        n_modulus=n_mod,
        k_stddevs=k,
        beta=b,
        rotate=rotate,
        rotation_seed=rotation_seed,
        accountant=check_accountant(accountant),
    )
    if gamma is not None:
        return _config_at_gamma(target, _real("gamma", gamma, low=0.0, low_open=True), modulus_bits)
    bits = DEFAULT_MODULUS_BITS if modulus_bits is None else int(modulus_bits)
    return _config_at_finest_gamma(target, bits)


def ddg_ledger_term(
    config: DDGConfig,
    *,
    delta: float,
    n: int,
    sensitivity: float,
    epsilon: float | None = None,
) -> dict[str, Any]:
    """The DDG aggregation's entry for a privacy ledger, as a plain JSON-safe dict.

    ``{name: "centroid_ddg", epsilon, delta, source, detail}``; ``epsilon`` is *computed* from the
    config at the worst case of ``n`` contributors. If a target ``epsilon`` is given and the
    config does not meet it, :class:`InfeasibleBudgetError` is raised. ``sensitivity`` is capped
    at ``2·config.clip`` (:func:`clipped_sensitivity`); ``detail`` records the Δ used
    (``sensitivity``), the one given (``sensitivity_target``) and whether the cap binds.
    ``detail.sigma_effective``
    is the standard deviation of the decoded SUM's per-coordinate noise in embedding units,
    ``γ·σ_int·√n`` (exact to double precision for σ_int >= 2, an upper bound below).
    """
    if not isinstance(config, DDGConfig):
        raise InvalidParameterError(f"config must be a DDGConfig, got {type(config).__name__}")
    sens = clipped_sensitivity(sensitivity, config.clip)
    acc = ddg_accounting(
        sigma_int=config.sigma_int,
        gamma=config.gamma,
        sensitivity=sens,
        dim_padded=config.padded_dim,
        n=n,
        delta=delta,
        beta=config.beta,
        accountant=config.accountant,
    )
    if epsilon is not None:
        target = _real("epsilon", epsilon, low=0.0, low_open=True)
        if acc.epsilon > target * (1.0 + 1e-9):
            raise InfeasibleBudgetError(
                f"the DDG config gives epsilon = {acc.epsilon:.6g} > target {target:.6g} "
                f"at n = {n} contributors"
            )
    detail = acc.to_dict()
    detail.pop("epsilon")
    detail.pop("delta")
    detail.update(
        {
            "dim": int(config.dim),
            "modulus_bits": int(config.modulus_bits),
            "clip": float(config.clip),
            "sensitivity_target": float(sensitivity),
            "cap_binds": 2.0 * float(config.clip) <= float(sensitivity),
            "rotate": bool(config.rotate),
            "rounding": "conditional" if config.beta > 0 else "unconditional",
            "sigma_effective": config.noise_std(acc.n),
            "target_epsilon": None if epsilon is None else float(epsilon),
            "accountant_bound": (
                "RDP, KLS21 Prop. 14 min of three; conversion CKS20 Prop. 12"
                if acc.bound == RDP_ACCOUNTANT
                else "analytic: sum of discrete Gaussians against a smoothed rounding of the "
                "continuous Gaussian, whose (eps, delta) is the analytic Gaussian mechanism's"
            ),
        }
    )
    return {
        "name": "centroid_ddg",
        "epsilon": acc.epsilon,
        "delta": acc.delta,
        "source": SOURCE,
        "detail": detail,
    }
