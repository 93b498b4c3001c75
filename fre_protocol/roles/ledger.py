"""The protocol's privacy ledger, written once for every driver (design §4.4–4.5).

The dummies' budget, what is left for the DDG centroid sums, the DDG configuration that meets
it, the ledger's terms (including the zero-cost terms that record the dishonest-contributor
allowance and the dropout policy's outcome). A function of public parameters and of the
dropout outcome, which is itself public (the broadcast minus the centroids).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from fre_protocol.roles.config import (
    COUNT_CALIBRATION,
    ProtocolConfig,
    check_dishonest_fraction,
    honest_contributors,
)
from mechanism.accounting import calibrate_noise, histogram_release_cost, protocol_ledger
from mechanism.fre_e2t import release_threshold
from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from primitives.errors import InfeasibleBudgetError, InvalidParameterError

#: The ledger term that records the dropout policy's outcome (zero cost).
DROPOUTS_TERM = "dropouts"

def _budget(params: FreParams) -> dict[str, Any]:
    return calibrate_noise(params).to_dict()

def dummy_parameters(params: FreParams, config: ProtocolConfig) -> tuple[float, float]:
    """(ε0, δ0) of the TSDLap dummies: half of Lemma 1's (eps_fre, delta_fre) by default."""
    flat = _budget(params)
    eps0 = config.dummy_epsilon0 if config.dummy_epsilon0 is not None else float(flat["eps_fre"]) / 2
    delta0 = config.dummy_delta0 if config.dummy_delta0 is not None else float(flat["delta_fre"]) / 2
    return float(eps0), float(delta0)

def aggregation_budget(params: FreParams, dummy: tuple[float, float]) -> tuple[float, float]:
    """(ε, δ) left for the DDG centroid sums once S_syn's view of all counts is paid for
    (:func:`mechanism.accounting.histogram_release_cost`, dummies at (2ε0, 2δ0)) and the
    sensitivity failure: CalibrateNoise's (eps_agg, delta_agg) less what the histogram costs
    beyond Lemma 1's term."""
    flat = _budget(params)
    eps_fre, delta_fre = float(flat["eps_fre"]), float(flat["delta_fre"])
    eps0, delta0 = dummy
    hist_eps, hist_delta = histogram_release_cost(eps_fre, delta_fre, params.p_sample, 2 * eps0, 2 * delta0)
    eps_agg = float(flat["eps_agg"]) - (hist_eps - eps_fre)
    delta_agg = float(flat["delta_agg"]) - (hist_delta - delta_fre)
    if not (eps_agg > 0 and delta_agg > 0):
        raise InfeasibleBudgetError(
            f"the dummies leave no aggregation budget: (eps_agg, delta_agg) = ({eps_agg:.6g}, {delta_agg:.4g})"
        )
    return eps_agg, delta_agg

def _check_dummy_budget(params: FreParams, dummy: tuple[float, float]) -> None:
    """The dummies' (2ε0, 2δ0) must fit under Lemma 1's (eps_fre, delta_fre): the aggregation
    already spends the rest of the budget, so more would exceed (ε, δ). Checked before any work."""
    flat = _budget(params)
    eps_fre, delta_fre = float(flat["eps_fre"]), float(flat["delta_fre"])
    eps0, delta0 = dummy
    if 2 * eps0 > eps_fre * (1 + 1e-9) or 2 * delta0 > delta_fre * (1 + 1e-9):
        raise InfeasibleBudgetError(
            f"dummy (2·epsilon0, 2·delta0) = ({2 * eps0:.6g}, {2 * delta0:.4g}) must not exceed the "
            f"heavy-hitter term (eps_fre, delta_fre) = ({eps_fre:.6g}, {delta_fre:.4g}) of the budget"
        )

def ddg_clip(params: FreParams, config: ProtocolConfig) -> float:
    """The DDG encoder's clip: C = ``params.clip``, which the accountant's cap assumed. A config
    naming another clip would void the cap (or waste noise), so it is refused."""
    if config.clip is not None and float(config.clip) != float(params.clip):
        raise InvalidParameterError(
            f"ProtocolConfig.clip must equal FreParams.clip (the C of Δ = min(u·r, 2C)) or be None, "
            f"got clip {config.clip!r} against FreParams.clip {params.clip!r}"
        )
    return float(params.clip)

def ddg_config_for(
    params: FreParams, dim: int, config: ProtocolConfig, *, n_modulus: int
) -> Any:
    """The DDG configuration: σ_int calibrated (``config.ddg_accountant``, design §4.4) to :func:`aggregation_budget`
    at the worst case of ⌈τ⌉ contributors, of whom only :func:`honest_contributors` add noise
    (all of them at the default f = 0); the modulus
    holds ``modulus_stddevs`` standard deviations of an aggregate of ``n_modulus`` users."""
    from primitives.ddg import DDGConfig, calibrate_ddg, padded_dimension

    floor = release_threshold(params)
    n_mod = max(int(n_modulus), floor)
    clip = ddg_clip(params, config)
    if not params.is_dp:
        # No noise: the finest γ whose noiseless aggregate fits the ring (KLS21 §4.4 range with
        # σ = 0, plus the rounding term).
        # range(γ) = 2k·sqrt(A + nγ²/4)/γ ≤ 2^b with A = c²n²/d'  ⇔  γ ≥ 2k·sqrt(A)/sqrt(4^b − k²n).
        padded = padded_dimension(dim)
        k = float(config.modulus_stddevs)
        room = float(1 << config.modulus_bits) ** 2 - k * k * n_mod
        if room <= 0:
            raise InvalidParameterError(
                f"modulus_bits = {config.modulus_bits} cannot hold {n_mod} users' rounding; raise it"
            )
        gamma = 1.01 * 2.0 * k * math.sqrt(clip**2 * n_mod * n_mod / padded) / math.sqrt(room)
        return DDGConfig(
            dim=dim,
            padded_dim=padded,
            gamma=gamma,
            sigma_int=0.0,
            modulus_bits=config.modulus_bits,
            clip=clip,
        )
    eps_agg, delta_agg = aggregation_budget(params, dummy_parameters(params, config))
    return calibrate_ddg(
        epsilon=eps_agg,
        delta=delta_agg,
        sensitivity=params.sensitivity,
        dim=dim,
        n=honest_contributors(floor, config.dishonest_fraction),
        clip=clip,
        modulus_bits=config.modulus_bits,
        n_modulus=n_mod,
        k_stddevs=config.modulus_stddevs,
        accountant=config.ddg_accountant,
    )

def aggregation_term(
    params: FreParams, ddg_config: Any, dummy: tuple[float, float], *, dishonest_fraction: float = 0.0,
    plan: Any = None,
) -> LedgerTerm:
    """The DDG term of the ledger (primitives.ddg's plain dict wrapped as a LedgerTerm), computed
    at the honest contributors' count (⌈τ⌉ at f = 0). With a count-calibrated noise ``plan``
    (:class:`~fre_protocol.roles.noise_plan.NoisePlan`) it is computed per released tag at its
    own m_h and σ_int,h (:func:`count_term`)."""
    if plan is not None and plan.calibration == COUNT_CALIBRATION and plan.users and params.is_dp:
        return count_term(params, ddg_config, dummy, plan)
    if not params.is_dp:
        return LedgerTerm(
            name="centroid_ddg",
            epsilon=math.inf,
            delta=0.0,
            source="no noise: epsilon = inf (non-DP reference)",
            detail={"sigma_effective": 0.0, "ddg": ddg_config.to_dict()},
        )
    from primitives.ddg import ddg_ledger_term

    eps_agg, delta_agg = aggregation_budget(params, dummy)
    term = ddg_ledger_term(
        ddg_config,
        delta=delta_agg,
        n=honest_contributors(release_threshold(params), dishonest_fraction),
        sensitivity=params.sensitivity,
        epsilon=eps_agg,
    )
    return LedgerTerm(
        name=str(term["name"]),
        epsilon=float(term["epsilon"]),
        delta=float(term["delta"]),
        source=str(term["source"]),
        detail=dict(term["detail"]),
    )

def count_term(params: FreParams, ddg_config: Any, dummy: tuple[float, float], plan: Any) -> LedgerTerm:
    """The DDG term under count-calibrated contributions (design §4.4): each released tag's sum
    is its own mechanism (disjoint buckets compose in parallel), the noise of
    ``honest_contributors(m_h, f_dis)`` users at σ_int,h, each meeting (eps_agg, delta_agg) by
    construction; the term is the largest ε of them (evaluated once per distinct m_h). Its
    detail is that tag's accountant's, with every released tag's m_h and σ_int (public: a
    function of the released counts and the configuration)."""
    from primitives.ddg import ddg_ledger_term

    eps_agg, delta_agg = aggregation_budget(params, dummy)
    terms: dict[int, dict[str, Any]] = {}
    for tag, m in sorted(plan.users.items()):
        if m not in terms:
            config = dataclasses.replace(ddg_config, sigma_int=float(plan.sigma(tag)))
            terms[m] = ddg_ledger_term(
                config, delta=delta_agg, n=honest_contributors(m, plan.dishonest_fraction),
                sensitivity=params.sensitivity, epsilon=eps_agg,
            )
    worst = max(terms.values(), key=lambda t: float(t["epsilon"]))
    detail = dict(worst["detail"])
    detail.update({
        "noise_calibration": plan.calibration,
        "dropout_allowance": float(plan.dropout_allowance),
        "release_floor": int(plan.floor),
        "per_tag": plan.per_tag(),
    })
    return LedgerTerm(
        name=str(worst["name"]),
        epsilon=float(worst["epsilon"]),
        delta=float(worst["delta"]),
        source=(
            f"{worst['source']}; per released tag at m_h = max(⌈τ⌉, ⌊(1 − f)·n_h⌋) contributors "
            "(count-calibrated, design §4.4), the largest ε over the tags (parallel composition)"
        ),
        detail=detail,
    )


def build_ledger(
    params: FreParams,
    ddg_config: Any,
    dummy: tuple[float, float],
    extra: tuple[LedgerTerm, ...] = (),
    *,
    dishonest_fraction: float = 0.0,
    plan: Any = None,
) -> PrivacyLedger:
    """protocol_ledger with the dummies' (2ε0, 2δ0) and the DDG term; ``extra`` zero-cost terms
    record what happened (dropouts) without changing the totals. With ``dishonest_fraction``
    f > 0 the DDG term is computed at the honest count and a zero-cost term states f and what
    it costs in σ (at f = 0 the ledger is exactly what it was before f existed). ``plan``: the
    round's noise plan (count-calibrated: the DDG term per released tag, :func:`count_term`)."""
    eps0, delta0 = dummy
    if params.is_dp:
        ledger = protocol_ledger(
            params,
            dummy_epsilon=2 * eps0,
            dummy_delta=2 * delta0,
            aggregation=aggregation_term(
                params, ddg_config, dummy, dishonest_fraction=dishonest_fraction, plan=plan
            ),
            strict=True,
        )
        if check_dishonest_fraction(dishonest_fraction) > 0:
            extra = (dishonest_term(params, ddg_config, dummy, dishonest_fraction), *extra)
    else:
        ledger = protocol_ledger(
            params, dummy_epsilon=math.inf, dummy_delta=0.0, aggregation=aggregation_term(params, ddg_config, dummy)
        )
    if extra:
        ledger = dataclasses.replace(ledger, terms=tuple(ledger.terms) + tuple(extra))
    return ledger

DISHONEST_TERM = "dishonest_contributors"

def dishonest_term(params: FreParams, ddg_config: Any, dummy: tuple[float, float], f: float) -> LedgerTerm:
    """A zero-cost term: the DDG noise is sized for a fraction f of dishonest contributors, and
    the σ that costs against f = 0 (recalibrated at ⌈τ⌉ with everything else equal)."""
    from primitives.ddg import calibrate_sigma_int, clipped_sensitivity

    floor = release_threshold(params)
    honest = honest_contributors(floor, f)
    eps_agg, delta_agg = aggregation_budget(params, dummy)
    at_zero = calibrate_sigma_int(
        epsilon=eps_agg, delta=delta_agg, sensitivity=clipped_sensitivity(params.sensitivity, ddg_config.clip),
        gamma=ddg_config.gamma, padded_dim=ddg_config.padded_dim, n=floor, beta=ddg_config.beta,
        accountant=ddg_config.accountant,
    )
    return LedgerTerm(
        name=DISHONEST_TERM,
        epsilon=0.0,
        delta=0.0,
        source=(
            "design §4.4: the users' DDG noise is calibrated so that the honest ⌊(1 − f)·⌈τ⌉⌋ of the "
            "release floor's contributors meet the DDG term; up to f·⌈τ⌉ of them may add no noise"
        ),
        detail={
            "dishonest_fraction": float(f),
            "release_floor": floor,
            "n_honest": honest,
            "gamma": float(ddg_config.gamma),
            "sigma_int": float(ddg_config.sigma_int),
            "sigma_int_at_f0": float(at_zero),
            # Per user, in embedding units (γ·σ_int): what f costs each device's noise.
            "sigma_user": float(ddg_config.gamma * ddg_config.sigma_int),
            "sigma_user_at_f0": float(ddg_config.gamma * at_zero),
            "sigma_ratio": float(ddg_config.sigma_int) / float(at_zero),
        },
    )

@dataclass(frozen=True, slots=True)
class DropoutOutcome:
    """What the dropout policy did: the tags withheld (with the rule) and topped up, for the
    release and the ledger, and the below-floor contributor counts, for the operator only."""

    policy: str
    withheld: dict[str, str]
    topped_up: list[str]
    below_floor_contributors: dict[str, int]
    #: m_h of each topped-up tag when its noise was sized for its count (empty under "floor").
    sized_for: dict[str, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def of_reconstruction(cls, result: Any, floor: int, policy: str, plan: Any = None) -> DropoutOutcome:
        """The outcome as S_syn saw it (``result``: its
        :class:`~fre_protocol.roles.synthesis_server.Reconstruction`): the tags it withheld, and
        those it released from fewer contributors than their m_h (the release floor ``floor``,
        or the noise ``plan``'s m_h), which S_tag can only have sent topped up (it refuses such
        an aggregate otherwise). A deployed S_syn holds nothing else, so every driver derives
        the outcome this way."""
        counted = plan is not None and plan.calibration == COUNT_CALIBRATION

        def needed(t: bytes) -> int:
            return max(floor, int(plan.needed(t))) if counted else floor

        below = {t: c for t, c in sorted(result.contributors.items()) if c < needed(t)}
        return cls(
            policy=policy,
            withheld={t.hex(): why for t, why in sorted(result.withheld.items())},
            topped_up=sorted(t.hex() for t in below),
            below_floor_contributors={t.hex(): c for t, c in below.items()},
            sized_for={t.hex(): needed(t) for t in below} if counted else {},
        )

    def ledger_term(self) -> LedgerTerm:
        """A zero-cost term that states the policy and what each affected tag cost.

        Withheld: S_tag sent no aggregate (design §6), so nothing of the tag's users left S_tag.
        Topped up: S_tag added the missing users' discrete Gaussian noise before sending, so the
        sum carries the noise of ⌈τ⌉ users and the DDG term, computed at ⌈τ⌉, covers it.
        """
        tags: dict[str, dict[str, Any]] = {
            t: {"outcome": "withheld", "why": why, "epsilon": 0.0, "delta": 0.0} for t, why in self.withheld.items()
        }
        for t in self.topped_up:
            tags[t] = {"outcome": "topped_up", "epsilon": 0.0, "delta": 0.0,
                       "why": "covered by the DDG term at the release floor"}
            if t in self.sized_for:
                tags[t]["why"] = f"covered by the DDG term at m_h = {self.sized_for[t]} (the tag's count-sized noise)"
                tags[t]["m"] = self.sized_for[t]
        return LedgerTerm(
            name=DROPOUTS_TERM,
            epsilon=0.0,
            delta=0.0,
            source=(
                f"dropout policy {self.policy!r} (design §6): S_tag sends no aggregate of fewer than ⌈τ⌉ "
                "contributions (topup: it first adds the missing users' noise) and answers once per tag"
            ),
            detail={"policy": self.policy, "tags": dict(sorted(tags.items()))},
        )
