"""Public parameters of Fre-E2T (design §3, paper App. A.1), validated once, shared by every party."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from primitives.errors import InvalidParameterError

Rounding = Literal["exact", "paper"]

# Paper defaults (App. A.1) per target epsilon: (p_sample, budget_factor).
PAPER_SETTINGS: dict[float, tuple[float, float]] = {4.0: (0.3, 4.0), 8.0: (0.5, 4.0), 16.0: (0.6, 3.0)}


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FreParams:
    """Everything public that fixes one Fre-E2T release.

    ``epsilon = inf`` is the non-DP reference: sampling is switched off (p_s = 1, τ = t) and no
    noise is added, whatever ``p_sample`` says.

    ``clip`` is C, the public L2 bound of a contribution: every party sums rows projected onto the
    ball of radius C (1 suits unit-norm embeddings), so two contributions never differ by more than
    the diameter 2C and the sensitivity is ``Δ = min(u·r, 2C)`` (design §4.2).
    """

    epsilon: float = 8.0
    delta: float = 1e-6
    radius: float = 0.5
    threshold: int = 100
    k: int = 20
    p_sample: float = 0.5
    budget_factor: float = 4.0
    sensitivity_ratio: float = 2.4
    edge_multiplier: float = 1.0
    rounding: Rounding = "exact"
    clip: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, int | float) and (self.epsilon > 0)) or math.isnan(
            self.epsilon
        ):
            raise InvalidParameterError(f"epsilon must be > 0 (or inf), got {self.epsilon!r}")
        if not (isinstance(self.delta, int | float) and 0 < self.delta < 1):
            raise InvalidParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        _check_positive("radius", self.radius)
        if not isinstance(self.threshold, int) or isinstance(self.threshold, bool) or self.threshold < 1:
            raise InvalidParameterError(f"threshold must be an integer >= 1, got {self.threshold!r}")
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise InvalidParameterError(f"k must be an integer >= 1, got {self.k!r}")
        if not (isinstance(self.p_sample, int | float) and 0 < self.p_sample <= 1):
            raise InvalidParameterError(f"p_sample must be in (0, 1], got {self.p_sample!r}")
        if self.is_dp and self.p_sample >= 1:
            raise InvalidParameterError(
                f"p_sample must be in (0, 1) for finite epsilon, got {self.p_sample!r}"
            )
        _check_positive("budget_factor", self.budget_factor)
        _check_positive("sensitivity_ratio", self.sensitivity_ratio)
        _check_positive("edge_multiplier", self.edge_multiplier)
        if self.rounding not in ("exact", "paper"):
            raise InvalidParameterError(f"rounding must be 'exact' or 'paper', got {self.rounding!r}")
        _check_positive("clip", self.clip)

    # -- derived quantities -------------------------------------------------------------------
    @property
    def is_dp(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def effective_p_sample(self) -> float:
        """p_s actually used: 1 in the non-DP (ε = ∞) mode."""
        return self.p_sample if self.is_dp else 1.0

    @property
    def tau(self) -> float:
        """Release threshold τ = p_s·t on sampled counts (τ = t when ε = ∞)."""
        return self.effective_p_sample * self.threshold

    @property
    def bucket_edge(self) -> float:
        """Grid edge L = m_L · 2r/√k."""
        return self.edge_multiplier * 2.0 * self.radius / math.sqrt(self.k)

    @property
    def sensitivity_target(self) -> float:
        """Lemma 2's target sensitivity u·r: two points farther apart share a bucket only with
        probability δ_sens = f(2/u)^k."""
        return self.sensitivity_ratio * self.radius

    @property
    def diameter(self) -> float:
        """2C, the diameter of the clipped domain: no two contributions differ by more."""
        return 2.0 * self.clip

    @property
    def sensitivity_capped(self) -> bool:
        """True when 2C ≤ u·r: Δ = 2C holds with certainty and δ_sens = 0 (design §4.2)."""
        return self.diameter <= self.sensitivity_target

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of a bucket sum, Δ = min(u·r, 2C) (design §4.2).

        It holds with certainty when the cap binds, else except with probability δ_sens.
        """
        return min(self.sensitivity_target, self.diameter)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["epsilon"] = "inf" if not self.is_dp else self.epsilon
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FreParams:
        """Inverse of :meth:`to_dict`. Records written before C was a parameter have no ``clip``
        and load with the default C = 1, which the protocol's DDG encoder already clipped to."""
        data = dict(data)
        if data.get("epsilon") in ("inf", "Infinity", None):
            data["epsilon"] = math.inf
        return cls(**data)

    @classmethod
    def paper(cls, epsilon: float, **overrides: Any) -> FreParams:
        """The paper's setting for ε ∈ {4, 8, 16, inf} (δ = 1e-6, r = 0.5, t = 100, k = 20, u = 2.4)."""
        if math.isinf(epsilon):
            return cls(epsilon=math.inf, p_sample=1.0, **overrides)
        if float(epsilon) not in PAPER_SETTINGS:
            raise InvalidParameterError(
                f"epsilon must be one of {sorted(PAPER_SETTINGS)} or inf for the paper's setting, got {epsilon!r}"
            )
        p_s, v = PAPER_SETTINGS[float(epsilon)]
        return cls(epsilon=float(epsilon), p_sample=p_s, budget_factor=v, **overrides)
