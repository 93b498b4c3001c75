"""Truncated shifted discrete Laplace (TSDLap) dummy counts (design §4.5).

TSDLap(ε0, δ0, Δ0) lives on ``{0, ..., 2n}`` with ``P[X = x] = A·r^|x - n|``, ``r = e^-ε0``,
``A = (1 - r) / (1 + r - 2 r^(n+1))`` (the normaliser of ``r^|k|`` over ``|k| <= n``). The shift
``n`` is the smallest integer ``>= Δ0`` whose tail mass beyond a shift of ``Δ0`` is at most
``δ0``: ``A · Σ_{j=n-Δ0+1}^{n} r^j <= δ0``. Adding ``X`` to a count of sensitivity ``Δ0`` is then
``(ε0·Δ0, δ0)``-DP for the count, and with ``Δ0 = 1`` it is ``(ε0, δ0)``-DP.

Use in the protocol (design §4.5, §6 step 2): for each count level ``c`` in ``{1, ..., ⌈τ⌉ - 1}``
S_tag's dummy user draws ``Z_c ~ TSDLap(ε0, δ0, 1)`` fresh random tags and submits each of them
``c`` times. A dummy tag therefore ends with count ``c < τ`` and is never released. Adding or
removing one user moves one real tag from level ``c`` to ``c ± 1``, changing at most two level
counts by one each, so the padded level histogram is ``(2ε0, 2δ0)``-DP (:func:`tsdlap_privacy`).
Expected dummy submissions: ``n · L (L + 1) / 2`` with ``L = ⌈τ⌉ - 1`` (``n τ (τ - 1) / 2`` for
integer ``τ``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from numbers import Real
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

#: Bytes of a dummy tag by default: the same as a real tag, 32 bytes (the protocol's tags are the
#: first 32 bytes of an RFC 9497 ristretto255-SHA512 output); callers pass their tag size.
DEFAULT_TAG_SIZE = 32


def _check_params(epsilon0: float, delta0: float, sensitivity: int) -> None:
    if isinstance(epsilon0, bool) or not isinstance(epsilon0, Real):
        raise InvalidParameterError(f"epsilon0 must be a number, got {type(epsilon0).__name__}")
    if not (math.isfinite(float(epsilon0)) and epsilon0 > 0):
        raise InvalidParameterError(f"epsilon0 must be finite and > 0, got {epsilon0}")
    if isinstance(delta0, bool) or not isinstance(delta0, Real):
        raise InvalidParameterError(f"delta0 must be a number, got {type(delta0).__name__}")
    if not 0 < delta0 < 1:
        raise InvalidParameterError(f"delta0 must be in (0, 1), got {delta0}")
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise InvalidParameterError(f"sensitivity must be an int >= 1, got {sensitivity!r}")


def _log_tail(n: int, epsilon0: float, sensitivity: int) -> float:
    """``log(A · Σ_{j=n-Δ0+1}^{n} r^j)`` in log space (no underflow for large ``n``).

    The geometric sum is ``r^(n-Δ0+1) (1 - r^Δ0) / (1 - r)``; its ``(1 - r)`` cancels ``A``'s.
    """
    log_r_power = -epsilon0 * (n - sensitivity + 1)
    log_one_minus = math.log(-math.expm1(-epsilon0 * sensitivity))
    log_denominator = math.log1p(math.exp(-epsilon0) - 2.0 * math.exp(-epsilon0 * (n + 1)))
    return log_r_power + log_one_minus - log_denominator


def tsdlap_shift(epsilon0: float, delta0: float, sensitivity: int = 1) -> int:
    """The TSDLap shift ``n`` (design §4.5): the smallest ``n >= Δ0`` with tail mass ``<= δ0``.

    The tail mass is decreasing in ``n``. Dropping the ``-2 r^(n+1)`` term from ``A``'s
    denominator under-estimates the tail, so the closed-form root of that simpler inequality is
    a lower bound from which we step up to the exact answer.
    """
    _check_params(epsilon0, delta0, sensitivity)
    log_delta = math.log(delta0)
    log_one_minus = math.log(-math.expm1(-epsilon0 * sensitivity))
    bound = (
        sensitivity - 1 + (log_one_minus - math.log1p(math.exp(-epsilon0)) - log_delta) / epsilon0
    )
    n = max(sensitivity, math.ceil(bound) - 1)
    while n > sensitivity and _log_tail(n - 1, epsilon0, sensitivity) <= log_delta:
        n -= 1
    while _log_tail(n, epsilon0, sensitivity) > log_delta:
        n += 1
    return n


def tsdlap_privacy(epsilon0: float, delta0: float) -> tuple[float, float]:
    """``(eps_unre, delta_unre) = (2 ε0, 2 δ0)`` of the padded level histogram (design §4.5)."""
    _check_params(epsilon0, delta0, 1)
    return 2.0 * epsilon0, 2.0 * delta0


def count_levels(tau: float) -> int:
    """``L = ⌈τ⌉ - 1``: the number of sub-threshold count levels ``1 .. L`` (all ``< τ``)."""
    if isinstance(tau, bool) or not isinstance(tau, Real) or not math.isfinite(tau):
        raise InvalidParameterError(f"tau must be a finite number, got {tau!r}")
    if tau <= 0:
        raise InvalidParameterError(f"tau must be > 0, got {tau}")
    return max(0, math.ceil(tau) - 1)


@dataclass(frozen=True, slots=True)
class TSDLapDummyGenerator:
    """TSDLap(ε0, δ0, Δ0) sampler and S_tag's per-level dummy plan (design §4.5)."""

    name: ClassVar[str] = "tsdlap"
    epsilon0: float
    delta0: float
    sensitivity: int = 1
    shift: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "shift", tsdlap_shift(self.epsilon0, self.delta0, self.sensitivity)
        )

    @classmethod
    def for_budget(cls, epsilon: float, delta: float) -> TSDLapDummyGenerator:
        """The generator whose dummy plan costs ``(epsilon, delta)``: ``ε0 = ε/2``, ``δ0 = δ/2``."""
        return cls(epsilon / 2.0, delta / 2.0, 1)

    # -- distribution ------------------------------------------------------------------------
    @property
    def ratio(self) -> float:
        """``r = e^-ε0``."""
        return math.exp(-self.epsilon0)

    @property
    def normaliser(self) -> float:
        """``A = (1 - r) / (1 + r - 2 r^(n+1))``."""
        r = self.ratio
        return -math.expm1(-self.epsilon0) / (1.0 + r - 2.0 * r ** (self.shift + 1))

    def pmf(self, x: int) -> float:
        """``P[X = x] = A r^|x - n|`` on ``{0, ..., 2n}``, 0 elsewhere."""
        if (
            isinstance(x, bool)
            or not isinstance(x, int | np.integer)
            or not 0 <= x <= 2 * self.shift
        ):
            return 0.0
        return self.normaliser * math.exp(-self.epsilon0 * abs(int(x) - self.shift))

    def pmf_vector(self, xs: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """:meth:`pmf` over an integer array."""
        arr = np.asarray(xs, dtype=np.int64)
        inside = (arr >= 0) & (arr <= 2 * self.shift)
        values = self.normaliser * np.exp(-self.epsilon0 * np.abs(arr - self.shift))
        return np.where(inside, values, 0.0)

    def sample(self, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
        """``size`` draws of ``n + G1 - G2``, ``G1, G2 ~ Geometric(1 - e^-ε0)`` (failures).

        ``G1 - G2`` is the two-sided geometric law ``∝ r^|k|`` on the integers; rejecting draws
        with ``|G1 - G2| > n`` leaves exactly ``∝ r^|k|`` on ``{-n..n}``, i.e. TSDLap after the
        shift. Geometrics come from the inverse CDF ``G = floor(ln U / ln r)`` with ``U`` uniform
        on ``(0, 1]`` (53-bit floats): ``P[G >= k] = P[U <= r^k] = r^k``. The rejection rate is
        ``2 r^(n+1) / (1 + r)``, at most about ``δ0``, so the loop almost never repeats.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidParameterError(f"size must be an int >= 0, got {size!r}")
        out = np.empty(size, dtype=np.int64)
        filled = 0
        while filled < size:
            want = size - filled + 8
            diff = self._geometric(want, rng) - self._geometric(want, rng)
            diff = diff[np.abs(diff) <= self.shift]
            take = min(size - filled, diff.size)
            out[filled : filled + take] = diff[:take] + self.shift
            filled += take
        return out

    def _geometric(self, size: int, rng: RandomSource) -> npt.NDArray[np.int64]:
        u = 1.0 - rng.uniform(size)  # (0, 1]: the log is finite
        return np.floor(np.log(u) / -self.epsilon0).astype(np.int64)

    # -- the protocol's use ------------------------------------------------------------------
    def dummy_plan(self, tau: float, rng: RandomSource) -> dict[int, int]:
        """``{c: Z_c}`` for ``c = 1 .. ⌈τ⌉ - 1`` with fresh ``Z_c ~ TSDLap(ε0, δ0, 1)``.

        Each of the ``Z_c`` dummy tags of level ``c`` is to be submitted exactly ``c`` times, so
        no dummy tag reaches ``τ``. The plan's counts are drawn with ``Δ0 = 1`` whatever this
        generator's ``sensitivity``: one user changes a level count by at most one.
        """
        levels = count_levels(tau)
        generator = (
            self if self.sensitivity == 1 else TSDLapDummyGenerator(self.epsilon0, self.delta0)
        )
        draws = generator.sample(levels, rng)
        return {c: int(draws[c - 1]) for c in range(1, levels + 1)}

    def expected_dummy_tags(self, tau: float) -> float:
        """``E[Σ_c Z_c] = n L`` (the TSDLap mean is its shift ``n``)."""
        return float(tsdlap_shift(self.epsilon0, self.delta0) * count_levels(tau))

    def expected_dummy_submissions(self, tau: float) -> float:
        """``E[Σ_c c Z_c] = n L (L + 1) / 2`` — ``n τ (τ - 1) / 2`` for integer ``τ``."""
        levels = count_levels(tau)
        return float(tsdlap_shift(self.epsilon0, self.delta0) * levels * (levels + 1) // 2)

    def privacy(self) -> tuple[float, float]:
        """``(2 ε0, 2 δ0)`` for the dummy-padded level histogram (design §4.5)."""
        return tsdlap_privacy(self.epsilon0, self.delta0)


def dummy_submissions(
    plan: Mapping[int, int], rng: RandomSource, *, tag_size: int = DEFAULT_TAG_SIZE
) -> list[bytes]:
    """The dummy user's submissions for ``plan``: each fresh random tag repeated ``c`` times.

    Tags are uniform ``tag_size``-byte strings, the length of a real tag, so a dummy is
    indistinguishable from a real tag by its bytes; a collision with a real tag has probability
    ``2^-(8·tag_size)`` per pair. The list is grouped by tag: mix it with the real submissions
    through the shuffler.
    """
    if isinstance(tag_size, bool) or not isinstance(tag_size, int) or tag_size < 1:
        raise InvalidParameterError(f"tag_size must be an int >= 1, got {tag_size!r}")
    out: list[bytes] = []
    for level, count in sorted(plan.items()):
        if level < 1 or count < 0:
            raise InvalidParameterError(
                f"plan entries must be level >= 1 -> count >= 0, got {level} -> {count}"
            )
        raw = rng.random_bytes(count * tag_size)
        for k in range(count):
            out.extend([raw[k * tag_size : (k + 1) * tag_size]] * level)
    return out
