"""The noise plan: how many contributors each released bucket's DDG noise is sized for, and each
user's σ_int there (design §4.4, count-calibrated contributions).

A function of the broadcast's released counts and of public parameters only, so every party
computes the same plan (:func:`~fre_protocol.roles.round.phase2_plan` builds it with the rest of
phase 2's plan) and ``fre-e2t audit`` recomputes it from the published counts. Under
``noise_calibration = "floor"`` every tag's m_h is ⌈τ⌉ and its σ_int the DDG configuration's
(exactly the protocol before the plan existed); under ``"count"``, m_h = max(⌈τ⌉, ⌊(1 − f)·n_h⌋)
and σ_int,h is the least σ_int, at the configuration's γ, for which the noise of
``honest_contributors(m_h, dishonest_fraction)`` users meets the DDG term.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fre_protocol.roles.config import (
    COUNT_CALIBRATION,
    FLOOR_CALIBRATION,
    ProtocolConfig,
    honest_contributors,
    sized_contributors,
)
from mechanism.fre_e2t import release_threshold
from mechanism.params import FreParams


@dataclass(frozen=True, slots=True, kw_only=True)
class NoisePlan:
    """Per released tag: ``users`` m_h (the contributions S_tag needs before it sends the tag's
    aggregate without top-up, and what the DDG term is evaluated at) and ``sigma_int`` σ_int,h
    (each contributor's discrete Gaussian, integer units). ``floor`` is ⌈τ⌉ and
    ``default_sigma`` the DDG configuration's σ_int, which stand for a tag the plan does not
    name."""

    calibration: str
    floor: int
    default_sigma: float
    dropout_allowance: float
    dishonest_fraction: float
    users: Mapping[bytes, int] = field(default_factory=dict)
    sigma_int: Mapping[bytes, float] = field(default_factory=dict)

    def needed(self, tag: bytes) -> int:
        """m_h: never below the release floor."""
        return max(self.floor, int(self.users.get(tag, self.floor)))

    def sigma(self, tag: bytes) -> float:
        return float(self.sigma_int.get(tag, self.default_sigma))

    def per_tag(self) -> dict[str, dict[str, Any]]:
        """JSON-safe, by tag hex (sorted): m_h, the honest count the DDG term counts on, σ_int,h."""
        return {
            t.hex(): {
                "m": int(self.users[t]),
                "n_honest": honest_contributors(int(self.users[t]), self.dishonest_fraction),
                "sigma_int": float(self.sigma_int[t]),
            }
            for t in sorted(self.users)
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class CountSizing:
    """The one map from a released count to its noise (design §4.4): n_h → m_h → σ_int,h, at
    the round's public parameters and DDG configuration. The servers' :class:`NoisePlan` applies
    it to every released tag; a device applies it to the count it reads for its own tag from the
    compact broadcast (:mod:`fre_protocol.roles.broadcast`), so it never needs the list."""

    params: FreParams
    cfg: ProtocolConfig
    ddg_config: Any

    @property
    def floor(self) -> int:
        return release_threshold(self.params)

    @property
    def calibration(self) -> str:
        """Outside DP runs (ε = ∞) there is no noise to size: every tag gets the floor."""
        return self.cfg.noise_calibration if self.params.is_dp else FLOOR_CALIBRATION

    def users(self, count: int) -> int:
        """m_h for a released count n_h."""
        return sized_contributors(int(count), self.floor, self.calibration, self.cfg.dropout_allowance)

    def sigma(self, count: int) -> float:
        """σ_int,h for a released count n_h (the floor's: the DDG configuration's)."""
        m = self.users(count)
        if m == self.floor:
            return float(self.ddg_config.sigma_int)
        return sigma_for(self.params, self.cfg, self.ddg_config, m)


def noise_plan(
    params: FreParams, cfg: ProtocolConfig, ddg_config: Any, released: Mapping[bytes, int]
) -> NoisePlan:
    """The noise plan of a round whose broadcast released ``released`` (tag → count), with the
    DDG configuration ``ddg_config`` (γ and the modulus: calibrated at the floor, unchanged):
    :class:`CountSizing` applied to every released tag. Outside DP runs (ε = ∞) there is no noise
    to size: every tag gets the floor (and σ_int 0). A round played without noise (the
    equivalence setting) keeps the same plan, so S_tag's threshold m_h does not depend on
    whether the users add their noise."""
    sizing = CountSizing(params=params, cfg=cfg, ddg_config=ddg_config)
    users = {t: sizing.users(c) for t, c in released.items()}
    sigmas: dict[bytes, float] = {}
    memo: dict[int, float] = {}
    for tag, c in released.items():
        m = users[tag]
        if m not in memo:
            memo[m] = sizing.sigma(c)
        sigmas[tag] = memo[m]
    return NoisePlan(
        calibration=sizing.calibration, floor=sizing.floor, default_sigma=float(ddg_config.sigma_int),
        dropout_allowance=float(cfg.dropout_allowance), dishonest_fraction=float(cfg.dishonest_fraction), users=users,
        sigma_int=sigmas,
    )


def sigma_for(params: FreParams, cfg: ProtocolConfig, ddg_config: Any, m: int) -> float:
    """σ_int for a bucket whose noise is sized for ``m`` contributors: the least σ_int that meets
    the aggregation budget at the honest count of ``m``, at the configuration's γ, d' and β (the
    bisection of :func:`primitives.ddg.calibrate_sigma_int`, or its exact scaling where the
    accountant allows, :func:`_calibrated`). The floor's is the configuration's σ_int."""
    if m == release_threshold(params) or not params.is_dp:
        return float(ddg_config.sigma_int)
    from fre_protocol.roles.ledger import aggregation_budget, dummy_parameters

    eps_agg, delta_agg = aggregation_budget(params, dummy_parameters(params, cfg))
    budget = (eps_agg, delta_agg, float(params.sensitivity), float(ddg_config.clip), float(ddg_config.gamma),
              int(ddg_config.padded_dim), float(ddg_config.beta), str(ddg_config.accountant))
    floor = honest_contributors(release_threshold(params), cfg.dishonest_fraction)
    return _calibrated(budget, honest_contributors(int(m), cfg.dishonest_fraction), (floor, float(ddg_config.sigma_int)))


@functools.lru_cache(maxsize=1 << 14)
def _calibrated(budget: tuple[float, float, float, float, float, int, float, str], n: int, ref: tuple[int, float]) -> float:
    """σ_int for ``n`` honest contributors, once per distinct (budget, γ, d', n): every party of a
    process (and the audit) computes the same plans, and many tags share a count.

    Where the accountant depends on σ_int and n only through n·σ_int² (σ_int above ~8.7, as in
    every ring of 16 bits or more: :func:`primitives.ddg.accounting.scales_exactly`), the least
    σ_int for n is the floor's (``ref``: its honest count and σ_int, itself the bisection's) times
    √(n_ref/n): one evaluation of the accountant (raised by 1e-12 relative steps if rounding
    left it a hair above the budget) instead of a bisection of ~50. Elsewhere, the bisection."""
    from primitives.ddg import calibrate_sigma_int, clipped_sensitivity, ddg_epsilon
    from primitives.ddg.accounting import scales_exactly

    eps, delta, sensitivity, clip, gamma, padded, beta, accountant = budget
    sens = clipped_sensitivity(sensitivity, clip)
    n_ref, sigma_ref = ref
    guess = sigma_ref * math.sqrt(n_ref / n)
    if sigma_ref > 0 and scales_exactly(sigma_ref, n_ref, accountant) and scales_exactly(guess, n, accountant):
        for _ in range(64):
            if ddg_epsilon(sigma_int=guess, gamma=gamma, sensitivity=sens, dim_padded=padded, n=n, delta=delta,
                           beta=beta, accountant=accountant) <= eps:
                return guess
            guess *= 1.0 + 1e-12
    return calibrate_sigma_int(
        epsilon=eps, delta=delta, sensitivity=sens, gamma=gamma, padded_dim=padded, n=n, beta=beta,
        accountant=accountant,
    )


__all__ = ["COUNT_CALIBRATION", "FLOOR_CALIBRATION", "CountSizing", "NoisePlan", "noise_plan", "sigma_for"]
