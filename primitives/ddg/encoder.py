"""The distributed discrete Gaussian encoder and its server-side decoder (design §4.4; KLS21).

Client side, for each user vector ``x ∈ R^d`` (vectorized over users, chunked over rows):

1. clip to ``‖x‖₂ ≤ clip`` (projection onto the ball: 1-Lipschitz, so it never increases the
   distance between two users' vectors and the sensitivity analysis is unaffected);
2. zero-pad to ``d' = 2^⌈log2 d⌉`` and rotate, ``R x = H D x/√d'`` (public signs, :mod:`.hadamard`);
3. scale by ``1/γ`` and round randomly to ``Z^{d'}``, conditioned on the norm bound (:mod:`.rounding`);
4. add i.i.d. ``N_Z(0, σ_int²)`` noise per coordinate (``σ_int`` in integer units);
5. reduce modulo ``M = 2^b`` (stored as ``uint64``, ``b <= 63``).

Server side: the modular sum of the users' encodings is centred into ``[−M/2, M/2)``, multiplied
by ``γ``, rotated back and cut to ``d`` coordinates — an estimate of the *sum* of the clipped
inputs whose per-coordinate noise has standard deviation ``γ·σ_int·√n`` (the rotation is
orthogonal, so it leaves i.i.d. noise variance per coordinate unchanged). The caller divides by
the released count ``n_h``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from primitives.ddg.hadamard import is_power_of_two, padded_dimension, rotation_signs
from primitives.ddg.hadamard import rotate as _rotate
from primitives.ddg.hadamard import unrotate as _unrotate
from primitives.ddg.rounding import randomized_round, rounded_l2_bound
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.noise import DiscreteGaussianSampler
from primitives.noise.fast import MAX_SIGMA, FastDiscreteGaussian
from primitives.randomness import RandomSource

# KLS21's value for conditional rounding (the reference implementation uses it too): a rounding
# attempt fails with probability at most e^{-1/2} ≈ 0.61, typically far less.
KLS21_BETA = math.exp(-0.5)
# Default: unconditional rounding. Fre-E2T's neighbours *replace* a user; coupling both users'
# rounding coins makes the rounded difference a randomized rounding of (x − x')/γ, so its norm is
# below Δ/γ + √d' with certainty. Conditioning each vector on its own norm (β > 0) bounds single
# vectors — KLS21's add/remove setting — not differences. At 32 bits the cost is ~1e-6 in σ.
DEFAULT_BETA = 0.0
# Public, fixed default for the rotation signs. The rotation is public randomness by design; a
# deployment may derive its own from the run's public seed.
DEFAULT_ROTATION_SEED = b"fre-e2t/ddg/rotation/v1"
# Scaled inputs must stay where float64 represents every integer and int64 cannot overflow.
MAX_SCALED_NORM = float(1 << 50)
# Rows per chunk are chosen so one chunk holds about this many float64 coordinates (512 KiB):
# the encoder makes several temporaries per chunk, and chunks that stay in cache encode 1.7x
# faster per row than 16 MiB ones (measured at d' = 1024).
CHUNK_ELEMENTS = 1 << 16
# The accountants that turn σ_int into (ε, δ) (design §4.4): KLS21's RDP bound alone, or the
# smaller ε of it and the analytic bound (the sum compared pointwise with a smoothed rounding of
# the continuous Gaussian, whose curve is the analytic Gaussian mechanism's).
RDP_ACCOUNTANT = "rdp"
ANALYTIC_ACCOUNTANT = "analytic"
ACCOUNTANTS = (ANALYTIC_ACCOUNTANT, RDP_ACCOUNTANT)
DEFAULT_ACCOUNTANT = ANALYTIC_ACCOUNTANT


def check_accountant(value: object) -> str:
    """The accountant's name, or InvalidParameterError naming the choices."""
    if value not in ACCOUNTANTS:
        raise InvalidParameterError(f"accountant must be one of {list(ACCOUNTANTS)}, got {value!r}")
    return str(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True, kw_only=True)
class DDGConfig:
    """Public parameters of one DDG aggregation (all parties must agree on them).

    ``accountant`` names the bound that calibrated ``sigma_int`` and that the ledger evaluates
    (:data:`ACCOUNTANTS`, design §4.4).

    ``sigma_int`` is the scale of each user's discrete Gaussian in *integer* (post-scaling) units;
    in embedding units a user's noise has scale ``gamma * sigma_int``. ``clip`` is the public L2
    clip of raw vectors; ``beta`` the conditional-rounding parameter (0, the default, =
    unconditional rounding; see :data:`DEFAULT_BETA` for why).
    """

    dim: int
    padded_dim: int
    gamma: float
    sigma_int: float
    modulus_bits: int
    clip: float
    beta: float = DEFAULT_BETA
    rotation_seed: bytes = DEFAULT_ROTATION_SEED
    rotate: bool = True
    accountant: str = DEFAULT_ACCOUNTANT

    def __post_init__(self) -> None:
        check_accountant(self.accountant)
        if not _is_int(self.dim) or self.dim < 1:
            raise InvalidParameterError(f"dim must be an integer >= 1, got {self.dim!r}")
        if not isinstance(self.rotate, bool):
            raise InvalidParameterError(f"rotate must be a bool, got {self.rotate!r}")
        if not _is_int(self.padded_dim) or self.padded_dim < self.dim:
            raise InvalidParameterError(
                f"padded_dim must be an integer >= dim = {self.dim}, got {self.padded_dim!r}"
            )
        if self.rotate and not is_power_of_two(int(self.padded_dim)):
            raise InvalidParameterError(
                "padded_dim must be a power of two when rotate is true "
                f"(2^ceil(log2 {self.dim}) = {padded_dimension(self.dim)}), got {self.padded_dim}"
            )
        if not _is_real(self.gamma) or not math.isfinite(self.gamma) or self.gamma <= 0:
            raise InvalidParameterError(f"gamma must be a finite number > 0, got {self.gamma!r}")
        if not _is_real(self.sigma_int) or not 0 <= self.sigma_int <= MAX_SIGMA:
            raise InvalidParameterError(
                f"sigma_int must be a number in [0, 2^40], got {self.sigma_int!r}"
            )
        if not _is_int(self.modulus_bits) or not 2 <= self.modulus_bits <= 63:
            raise InvalidParameterError(
                f"modulus_bits must be an integer in [2, 63], got {self.modulus_bits!r}"
            )
        if not _is_real(self.clip) or not math.isfinite(self.clip) or self.clip <= 0:
            raise InvalidParameterError(f"clip must be a finite number > 0, got {self.clip!r}")
        if not _is_real(self.beta) or not 0.0 <= self.beta < 1.0:
            raise InvalidParameterError(f"beta must be in [0, 1), got {self.beta!r}")
        if not isinstance(self.rotation_seed, bytes) or not self.rotation_seed:
            raise InvalidParameterError("rotation_seed must be non-empty bytes")
        if self.clip / self.gamma + math.sqrt(self.padded_dim) > MAX_SCALED_NORM:
            raise InvalidParameterError(
                f"gamma must be >= clip / 2^50 = {self.clip / MAX_SCALED_NORM:.3g} so scaled "
                f"inputs stay exact in float64, got {self.gamma}"
            )

    @property
    def modulus(self) -> int:
        """``M = 2^b``."""
        return 1 << int(self.modulus_bits)

    @property
    def norm_bound(self) -> float:
        """``c = clip/γ``: the L2 bound of a scaled user vector, in integer units."""
        return float(self.clip) / float(self.gamma)

    @property
    def rounding_bound(self) -> float:
        """The L2 bound every rounded user vector satisfies (conditional rounding, design §4.4)."""
        return rounded_l2_bound(self.norm_bound, int(self.padded_dim), float(self.beta))

    def noise_std(self, count: int) -> float:
        """Std of the per-coordinate noise of a decoded sum of ``count`` users: ``γσ_int√n``.

        Exact to double precision for ``σ_int >= 2``; below, the discrete Gaussian's variance is
        under ``σ_int²`` and this is an upper bound.
        """
        return float(self.gamma) * float(self.sigma_int) * math.sqrt(count)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (the seed as hex)."""
        return {
            "dim": int(self.dim),
            "padded_dim": int(self.padded_dim),
            "gamma": float(self.gamma),
            "sigma_int": float(self.sigma_int),
            "modulus_bits": int(self.modulus_bits),
            "clip": float(self.clip),
            "beta": float(self.beta),
            "rotation_seed": self.rotation_seed.hex(),
            "rotate": bool(self.rotate),
            "accountant": str(self.accountant),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DDGConfig:
        """Inverse of :meth:`to_dict`."""
        try:
            fields = dict(data)
            fields["rotation_seed"] = bytes.fromhex(str(fields["rotation_seed"]))
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, InvalidParameterError):
                raise
            raise InvalidInputError(f"not a DDGConfig dict: {exc}") from exc


@runtime_checkable
class Encoder(Protocol):
    """What the protocol calls on a DDG encoder: the ``ddg_encoder`` family's contract.

    Factory convention: the registry entry is called as ``factory(config, sampler)`` with the
    round's :class:`DDGConfig` and the run's ``discrete_gaussian`` component. Users call
    :meth:`encode` (integers mod ``2^b``, ``b = config.modulus_bits``, which the sharing scheme
    then splits); S_syn calls :meth:`decode_sum` — or, for many buckets at once, centres the sums
    itself and calls :meth:`unrotate` — and withholds sums longer than :meth:`sum_norm_bound`.
    """

    @property
    def config(self) -> DDGConfig: ...

    def encode(
        self, x: npt.ArrayLike, rng: RandomSource, *, noise: bool = True, sigma_int: npt.ArrayLike | None = None
    ) -> npt.NDArray[np.uint64]:
        """``(n, d)`` vectors → ``(n, d')`` integers in ``[0, 2^b)``."""
        ...

    def decode_sum(self, total: npt.ArrayLike, count: int) -> npt.NDArray[np.float64]:
        """``(d',)`` sum mod ``2^b`` of ``count`` encodings → ``(d,)`` estimated sum of inputs."""
        ...

    def unrotate(self, y: npt.ArrayLike, *, scale: float = 1.0) -> npt.NDArray[np.float64]:
        """The inverse of the encoder's rotation times ``scale``, cut to ``d`` coordinates."""
        ...

    def sum_norm_bound(
        self, count: int, noise_users: int, *, tail: float = 8.0, sigma_int: float | None = None
    ) -> float:
        """The L2 norm an honest decoded sum exceeds with probability below ``exp(−tail²/2)``."""
        ...


class DDGEncoder:
    """Client encoder and server decoder of the distributed discrete Gaussian (design §4.4).

    ``sampler`` defaults to :class:`~primitives.noise.fast.FastDiscreteGaussian`; pass
    ``ExactDiscreteGaussian()`` for exact noise (slow). Registry name ``"ddg"``.
    """

    name = "ddg"

    def __init__(self, config: DDGConfig, sampler: DiscreteGaussianSampler | None = None) -> None:
        if not isinstance(config, DDGConfig):
            raise InvalidParameterError(f"config must be a DDGConfig, got {type(config).__name__}")
        self.config = config
        self.sampler: DiscreteGaussianSampler = sampler or FastDiscreteGaussian()
        self._signs = (
            rotation_signs(config.rotation_seed, int(config.padded_dim)) if config.rotate else None
        )
        self._bound = config.rounding_bound if config.beta > 0 else None
        self.chunk_rows = max(1, CHUNK_ELEMENTS // int(config.padded_dim))

    @property
    def modulus(self) -> int:
        return self.config.modulus

    # -- pieces, exposed for tests and for callers that stream their own chunks ----------------
    def _check_rows(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        arr = np.asarray(x, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self.config.dim:
            raise InvalidInputError(f"x must have shape (n, {self.config.dim}), got {np.shape(x)}")
        if not np.all(np.isfinite(arr)):
            raise InvalidInputError("x must be finite (found NaN or infinity)")
        return arr

    def clip_rows(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Rows scaled down to L2 norm ``clip`` where longer (projection onto the ball)."""
        arr = self._check_rows(x)
        norms = np.sqrt(np.einsum("ij,ij->i", arr, arr))
        factor = np.minimum(1.0, float(self.config.clip) / np.maximum(norms, 1e-300))
        out: npt.NDArray[np.float64] = arr * factor[:, None]
        return out

    def rotate(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Pad rows to ``d'`` and apply the public rotation (identity if ``rotate`` is false)."""
        arr = np.asarray(x, dtype=np.float64)
        padded = np.zeros((arr.shape[0], int(self.config.padded_dim)), dtype=np.float64)
        padded[:, : arr.shape[1]] = arr
        if self._signs is None:
            return padded
        return _rotate(padded, self._signs)

    def unrotate(self, y: npt.ArrayLike, *, scale: float = 1.0) -> npt.NDArray[np.float64]:
        """Inverse of :meth:`rotate` times ``scale``, cut back to ``d`` coordinates; rows or a
        single vector."""
        arr = np.asarray(y, dtype=np.float64)
        single = arr.ndim == 1
        rows = arr[None, :] if single else arr
        if self._signs is None:
            back = rows * scale if scale != 1.0 else rows
        else:
            back = _unrotate(rows, self._signs, scale)
        out = back[:, : self.config.dim]
        return out[0] if single else out

    def quantize(self, x: npt.ArrayLike, rng: RandomSource) -> npt.NDArray[np.int64]:
        """Clip, rotate, scale by ``1/γ`` and round (conditionally) — steps 1–3, no noise."""
        z = self.rotate(self.clip_rows(x)) * (1.0 / float(self.config.gamma))
        return randomized_round(z, rng, bound=self._bound, beta=float(self.config.beta))

    # -- the contract ------------------------------------------------------------------------
    def encode(
        self, x: npt.ArrayLike, rng: RandomSource, *, noise: bool = True, sigma_int: npt.ArrayLike | None = None
    ) -> npt.NDArray[np.uint64]:
        """``(n, d)`` vectors → ``(n, d')`` encodings in ``[0, 2^b)`` (one row per user).

        Rows are processed in chunks of :attr:`chunk_rows`; for each chunk the rounding coins are
        drawn from ``rng`` first, then the noise. ``noise=False`` skips step 4 (equivalence tests).
        ``sigma_int`` (one number, or one per row) replaces the configuration's σ_int: each user's
        noise sized for its own bucket (design §4.4). A chunk's rows of one σ draw their noise
        together, the σ in the order of their first row, so rows that all carry the
        configuration's σ_int draw exactly what they draw without the override.
        """
        arr = self._check_rows(x)
        n = arr.shape[0]
        width = int(self.config.padded_dim)
        out = np.empty((n, width), dtype=np.uint64)
        mask = np.int64(self.modulus - 1)
        sigmas = self._row_sigmas(sigma_int, n)
        for start in range(0, n, self.chunk_rows):
            stop = min(n, start + self.chunk_rows)
            q = self.quantize(arr[start:stop], rng)
            if noise:
                self._add_noise(q, sigmas[start:stop], rng)
            # Two's-complement AND with 2^b − 1 is reduction mod 2^b, negatives included.
            out[start:stop] = (q & mask).astype(np.uint64)
        return out

    def _row_sigmas(self, sigma_int: npt.ArrayLike | None, n: int) -> npt.NDArray[np.float64]:
        if sigma_int is None:
            return np.full(n, float(self.config.sigma_int))
        sig = np.asarray(sigma_int, dtype=np.float64)
        if sig.ndim == 0:
            sig = np.full(n, float(sig))
        if sig.shape != (n,) or not np.all(np.isfinite(sig)) or bool(np.any(sig < 0)) or bool(np.any(sig > MAX_SIGMA)):
            raise InvalidParameterError(f"sigma_int must be one number or {n} numbers in [0, 2^40]")
        return sig

    def _add_noise(self, q: npt.NDArray[np.int64], sigmas: npt.NDArray[np.float64], rng: RandomSource) -> None:
        """Step 4 on one chunk ``q`` (rows in place), row i at ``sigmas[i]``."""
        first = float(sigmas[0]) if sigmas.size else 0.0
        if sigmas.size and bool(np.all(sigmas == first)):
            if first > 0:
                q += self.sampler.sample(first, q.size, rng).reshape(q.shape)
            return
        levels, at = np.unique(sigmas, return_index=True)
        for level in levels[np.argsort(at)]:
            rows = np.flatnonzero(sigmas == level)
            if level > 0:
                q[rows] += self.sampler.sample(float(level), rows.size * q.shape[1], rng).reshape(rows.size, -1)

    def aggregate(self, encoded: npt.ArrayLike) -> npt.NDArray[np.uint64]:
        """Sum of encodings ``(n, d')`` modulo ``2^b`` (what the two servers jointly obtain)."""
        arr = np.asarray(encoded)
        if arr.ndim != 2 or arr.shape[1] != self.config.padded_dim:
            raise InvalidInputError(
                f"encoded must have shape (n, {self.config.padded_dim}), got {arr.shape}"
            )
        if not np.issubdtype(arr.dtype, np.unsignedinteger):
            raise InvalidInputError(f"encoded must be unsigned integers, got dtype {arr.dtype}")
        # uint64 addition wraps mod 2^64, and 2^b divides 2^64, so the residue mod 2^b is exact.
        total = arr.astype(np.uint64).sum(axis=0, dtype=np.uint64)
        out: npt.NDArray[np.uint64] = total & np.uint64(self.modulus - 1)
        return out

    def decode_sum(self, total: npt.ArrayLike, count: int) -> npt.NDArray[np.float64]:
        """``(d',)`` modular sum of ``count`` encodings → ``(d,)`` estimated sum of the inputs.

        Centre into ``[−M/2, M/2)``, multiply by ``γ``, undo the rotation, drop the padding. The
        caller divides by the released count.
        """
        if not _is_int(count) or count < 0:
            raise InvalidParameterError(f"count must be an integer >= 0, got {count!r}")
        arr = np.asarray(total)
        width = int(self.config.padded_dim)
        if arr.shape != (width,):
            raise InvalidInputError(f"total must have shape ({width},), got {arr.shape}")
        if not np.issubdtype(arr.dtype, np.integer):
            raise InvalidInputError(f"total must be integers, got dtype {arr.dtype}")
        m = self.modulus
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= m):
            raise InvalidInputError(f"total must lie in [0, 2^{self.config.modulus_bits})")
        centred = arr.astype(np.int64)
        centred = np.where(centred >= m // 2, centred - m, centred)
        return self.unrotate(centred.astype(np.float64), scale=float(self.config.gamma))

    def sum_norm_bound(
        self, count: int, noise_users: int, *, tail: float = 8.0, sigma_int: float | None = None
    ) -> float:
        """L2 norm a decoded sum of ``count`` honest users (noise of ``noise_users``) exceeds
        with probability below ``exp(−tail²/2)`` (1.3e-14 at the default).

        Each clipped input has norm at most ``clip``; rounding moves the sum by at most
        :meth:`quantization_bound`; the noise is a sum of ``noise_users`` discrete Gaussians per
        coordinate, sub-Gaussian with variance proxy ``noise_users·σ_int²`` (CKS20), whose norm
        over d' coordinates exceeds ``γσ_int√noise_users·(√d' + tail)`` with at most that
        probability (Gaussian concentration of the norm, a 1-Lipschitz function). The rotation
        is orthogonal, so none of this changes in the rotated basis. ``sigma_int`` replaces the
        configuration's (a bucket whose users sized their noise for its count).
        """
        if not _is_int(noise_users) or noise_users < 0:
            raise InvalidParameterError(f"noise_users must be an integer >= 0, got {noise_users!r}")
        if not (isinstance(tail, int | float) and math.isfinite(tail) and tail > 0):
            raise InvalidParameterError(f"tail must be a finite number > 0, got {tail!r}")
        width = int(self.config.padded_dim)
        sigma = float(self.config.sigma_int) if sigma_int is None else float(sigma_int)
        noise = float(self.config.gamma) * sigma * math.sqrt(noise_users)
        return int(count) * float(self.config.clip) + self.quantization_bound(count) + noise * (math.sqrt(width) + tail)

    def quantization_bound(self, count: int) -> float:
        """L2 bound on ``‖decode_sum − Σ clipped inputs‖`` for ``count`` users encoded without noise.

        Randomized rounding moves each coordinate by less than 1, so each user's error has norm
        below ``√d'`` (``√d`` without rotation, where padding rounds exactly) in integer units, i.e.
        ``γ√d'`` after decoding; the rotation is orthogonal. Plus a float64 slack far below it.
        Assumes the true aggregate fits the modulus (no wrap-around).
        """
        if not _is_int(count) or count < 0:
            raise InvalidParameterError(f"count must be an integer >= 0, got {count!r}")
        width = int(self.config.padded_dim) if self.config.rotate else int(self.config.dim)
        per_user = float(self.config.gamma) * math.sqrt(width)
        slack = 1e-12 * (float(self.config.clip) + per_user) * math.log2(2 * width)
        return int(count) * (per_user + slack)
