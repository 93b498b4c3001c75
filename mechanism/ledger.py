"""The privacy ledger: every term of a release's guarantee, its source, and how they compose.

Modelled on immutable privacy events (google dp_accounting): the accountant
(:mod:`mechanism.accounting`) emits :class:`LedgerTerm` objects, and a :class:`PrivacyLedger` records
them with the composed total (design §4.3: basic composition; design §4.5: the histogram terms of the
protocol combine by max). The ledger is written into every release and transcript, so
:meth:`PrivacyLedger.to_dict` is JSON-safe: non-finite floats become the strings ``"inf"``,
``"-inf"`` and ``"nan"`` (strict JSON has no such numbers), by the canonical
:func:`primitives.jsonsafe.json_safe` (imported here, so ``mechanism.ledger.json_safe`` still works).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mechanism.params import FreParams
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.jsonsafe import json_safe as json_safe  # re-exported: callers import it from here

# Names of terms with a fixed meaning in the flat view of a ledger (design §4.1-§4.3).
HEAVY_HITTERS = "heavy_hitters"
SENSITIVITY_FAILURE = "sensitivity_failure"
CENTROID_GAUSSIAN = "centroid_gaussian"

FLAT_KEYS: tuple[str, ...] = (
    "epsilon",
    "delta",
    "tau",
    "eps_fre",
    "delta_fre",
    "delta_sens",
    "eps_agg",
    "delta_agg",
    "sensitivity",
    "sigma",
    "noise_multiplier",
    "bucket_edge",
)


def parse_float(value: Any) -> float:
    """Inverse of :func:`json_safe` for one number: accepts ``"inf"``, ``"-inf"``, ``"nan"``."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("inf", "infinity", "+inf"):
            return math.inf
        if text in ("-inf", "-infinity"):
            return -math.inf
        if text == "nan":
            return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"expected a number or 'inf'/'nan', got {value!r}") from None


def _budget(name: str, what: str, value: Any, *, upper: float | None = None) -> float:
    """``value`` as a float in [0, upper]; numpy scalars are accepted (accountants return them)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        raise InvalidParameterError(f"{name}.{what} must be a number >= 0, got {value!r}")
    v = float(value)
    if v < 0 or (upper is not None and v > upper):
        bound = f"in [0, {upper}]" if upper is not None else ">= 0"
        raise InvalidParameterError(f"{name}.{what} must be {bound}, got {value!r}")
    return v


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerTerm:
    """One (ε, δ) term of a guarantee with the result it comes from and its inputs.

    ``detail`` holds JSON-safe inputs and intermediates (p_s, v, q, τ, the multiplier, ...).
    """

    name: str
    epsilon: float
    delta: float
    source: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidParameterError(f"term name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "epsilon", _budget(self.name, "epsilon", self.epsilon))
        object.__setattr__(self, "delta", _budget(self.name, "delta", self.delta, upper=1.0))
        if not isinstance(self.source, str) or not self.source:
            raise InvalidParameterError(
                f"{self.name}.source must name a result, got {self.source!r}"
            )
        # A private copy: a caller mutating its dict afterwards cannot change the ledger. (A plain
        # dict rather than a mapping proxy so ledgers pickle into worker processes.)
        object.__setattr__(self, "detail", dict(self.detail))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": json_safe(self.epsilon),
            "delta": json_safe(self.delta),
            "source": self.source,
            "detail": json_safe(dict(self.detail)),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerTerm:
        try:
            return cls(
                name=str(data["name"]),
                epsilon=parse_float(data["epsilon"]),
                delta=parse_float(data["delta"]),
                source=str(data["source"]),
                detail=dict(data.get("detail", {})),
            )
        except KeyError as exc:
            raise InvalidInputError(f"ledger term is missing the key {exc.args[0]!r}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivacyLedger:
    """A release's whole guarantee: its terms, the composed total and the noise it implies.

    ``aggregation`` names the term that pays for the centroids (``centroid_gaussian`` in the
    centralized mechanism, the DDG term in the protocol); the flat ``eps_agg``/``delta_agg`` keys
    of :meth:`to_dict` read it. ``params`` is ``FreParams.to_dict()`` of the release.
    """

    terms: tuple[LedgerTerm, ...]
    epsilon: float
    delta: float
    sigma: float
    noise_multiplier: float
    composition: str
    params: Mapping[str, Any]
    aggregation: str = CENTROID_GAUSSIAN
    # Who (ε, δ) protects: ``mechanism.contributions.PrivacyUnit.to_dict(ε, δ)`` (kind, cap,
    # user_field, the per-user ε and δ, a statement); None for ledgers written before it existed.
    unit: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple(self.terms))
        if self.unit is not None:
            object.__setattr__(self, "unit", dict(self.unit))
        names = [t.name for t in self.terms]
        if len(set(names)) != len(names):
            raise InvalidParameterError(f"ledger term names must be unique, got {names}")
        object.__setattr__(self, "epsilon", _budget("ledger", "epsilon", self.epsilon))
        object.__setattr__(self, "delta", _budget("ledger", "delta", self.delta, upper=1.0))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "sigma", float(self.sigma))
        object.__setattr__(self, "noise_multiplier", float(self.noise_multiplier))

    def term(self, name: str) -> LedgerTerm:
        for t in self.terms:
            if t.name == name:
                return t
        raise KeyError(f"no ledger term named {name!r}; terms: {[t.name for t in self.terms]}")

    def has_term(self, name: str) -> bool:
        return any(t.name == name for t in self.terms)

    def _fre_params(self) -> FreParams | None:
        # Only a complete parameter record counts: from_dict would fill gaps with defaults. The
        # clip C came later; records without it are complete for everything but Δ (see flat).
        if not set(FreParams.__dataclass_fields__) - {"clip"} <= set(self.params):
            return None
        try:
            return FreParams.from_dict(dict(self.params))
        except (TypeError, ValueError):
            return None

    def _sensitivity(self, params: FreParams | None) -> float:
        """The Δ the terms were computed with: recorded by the sensitivity term, else by the
        aggregation term (a local randomiser has no sensitivity term, and its Δ is 2C), else from
        params (ledgers written before the cap recorded u·r there, which their params no longer
        give)."""
        for name in (SENSITIVITY_FAILURE, self.aggregation):
            if self.has_term(name):
                recorded = self.term(name).detail.get("sensitivity")
                if isinstance(recorded, int | float) and not isinstance(recorded, bool):
                    return float(recorded)
        return params.sensitivity if params is not None else math.nan

    def flat(self) -> dict[str, float]:
        """The flat quantities (``FLAT_KEYS``) as floats; missing ones are NaN."""
        p = self._fre_params()
        nan = math.nan

        def term_value(name: str, which: str) -> float:
            if not self.has_term(name):
                return nan
            t = self.term(name)
            return float(t.epsilon if which == "epsilon" else t.delta)

        return {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "tau": p.tau if p is not None else nan,
            "eps_fre": term_value(HEAVY_HITTERS, "epsilon"),
            "delta_fre": term_value(HEAVY_HITTERS, "delta"),
            "delta_sens": term_value(SENSITIVITY_FAILURE, "delta"),
            "eps_agg": term_value(self.aggregation, "epsilon"),
            "delta_agg": term_value(self.aggregation, "delta"),
            "sensitivity": self._sensitivity(p),
            "sigma": float(self.sigma),
            "noise_multiplier": float(self.noise_multiplier),
            "bucket_edge": p.bucket_edge if p is not None else nan,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the flat keys, then ``composition``, ``unit`` (when known), ``aggregation``,
        ``params``, ``terms``."""
        out: dict[str, Any] = {k: json_safe(v) for k, v in self.flat().items()}
        out["composition"] = self.composition
        if self.unit is not None:
            out["unit"] = json_safe(dict(self.unit))
        out["aggregation"] = self.aggregation
        out["params"] = json_safe(dict(self.params))
        out["terms"] = [t.to_dict() for t in self.terms]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrivacyLedger:
        """Rebuild a ledger written by :meth:`to_dict` (flat keys are recomputed, not read)."""
        try:
            return cls(
                terms=tuple(LedgerTerm.from_dict(t) for t in data["terms"]),
                epsilon=parse_float(data["epsilon"]),
                delta=parse_float(data["delta"]),
                sigma=parse_float(data["sigma"]),
                noise_multiplier=parse_float(data["noise_multiplier"]),
                composition=str(data["composition"]),
                params=dict(data["params"]),
                aggregation=str(data.get("aggregation", CENTROID_GAUSSIAN)),
                unit=dict(data["unit"]) if isinstance(data.get("unit"), Mapping) else None,
            )
        except KeyError as exc:
            raise InvalidInputError(f"ledger is missing the key {exc.args[0]!r}") from None
