"""ristretto255 over the system libsodium (≥ 1.0.18) through a thin ctypes binding.

Why not pysodium: it binds the same functions, but adds a Python wrapper, argument checks and
buffer copies per call; the server multiplies thousands of elements per batch, so we call the
shared library directly. ``ctypes.CDLL`` releases the GIL for the duration of each call, which lets
a thread pool run scalar multiplications on every core.

Elements and scalars are their canonical 32-byte encodings (RFC 9496 §4.3, RFC 9497 §4.1).
libsodium accepts the identity encoding and reduces scalars ≥ L silently; both are rejected here,
before libsodium sees the bytes, together with every non-canonical element encoding
(RFC 9496 §4.3.1: s ≥ p, the high bit set, or s negative).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from primitives.errors import DecodeError, FreError, InvalidInputError
from primitives.group import (
    CURVE25519_PRIME,
    ELEMENT_SIZE,
    GENERATOR_ENCODING,
    RISTRETTO255_ORDER,
    SCALAR_SIZE,
    UNIFORM_BYTES,
    msm_numba,
)
from primitives.group.expand import expand_message_xmd
from primitives.randomness import RandomSource

#: Batches at least this long use the bucket multi-scalar multiplication (below, the JIT-compiled
#: path gains little over libsodium and the first call would pay the compilation).
MSM_THRESHOLD = 32

_L = RISTRETTO255_ORDER
_P = CURVE25519_PRIME
_IDENTITY = bytes(ELEMENT_SIZE)
_REQUIRED = (
    "crypto_core_ristretto255_from_hash",
    "crypto_core_ristretto255_is_valid_point",
    "crypto_core_ristretto255_add",
    "crypto_core_ristretto255_sub",
    "crypto_core_ristretto255_scalar_add",
    "crypto_core_ristretto255_scalar_sub",
    "crypto_core_ristretto255_scalar_mul",
    "crypto_core_ristretto255_scalar_negate",
    "crypto_core_ristretto255_scalar_invert",
    "crypto_core_ristretto255_scalar_random",
    "crypto_scalarmult_ristretto255",
    "crypto_scalarmult_ristretto255_base",
)


@lru_cache(maxsize=1)
def load_libsodium() -> ctypes.CDLL:
    """The process-wide libsodium handle, initialised; a clear error when it is missing or old."""
    candidates = [ctypes.util.find_library("sodium"), "libsodium.so.23", "libsodium.so"]
    lib: ctypes.CDLL | None = None
    for candidate in candidates:
        if not candidate:
            continue
        try:
            lib = ctypes.CDLL(candidate)
        except OSError:
            continue
        break
    if lib is None:
        raise FreError(
            "libsodium must be installed (>= 1.0.18, e.g. the libsodium23 package), got none"
        )
    missing = [name for name in _REQUIRED if not hasattr(lib, name)]
    if missing:
        raise FreError(f"libsodium must be >= 1.0.18 (ristretto255 API), got one lacking {missing}")
    if lib.sodium_init() < 0:
        raise FreError("libsodium must initialise, got sodium_init() < 0")
    return lib


class SodiumRistretto255:
    """ristretto255 (RFC 9496) on libsodium; elements and scalars are 32-byte encodings."""

    __slots__ = (
        "_accelerate",
        "_from_hash",
        "_is_valid",
        "_add",
        "_sub",
        "_sadd",
        "_ssub",
        "_smul",
        "_sneg",
        "_sinv",
        "_srandom",
        "_mult",
        "_mult_base",
    )

    name = "ristretto255-sodium"
    order = RISTRETTO255_ORDER
    element_size = ELEMENT_SIZE
    scalar_size = SCALAR_SIZE
    releases_gil = True

    def __init__(self, *, accelerate: bool = True) -> None:
        """``accelerate`` lets :meth:`multi_scalar_mult` use the JIT-compiled bucket method."""
        self._accelerate = bool(accelerate)
        lib = load_libsodium()
        # Bound once: attribute lookups on the CDLL are slow compared to the calls themselves.
        self._from_hash: Any = lib.crypto_core_ristretto255_from_hash
        self._is_valid: Any = lib.crypto_core_ristretto255_is_valid_point
        self._add: Any = lib.crypto_core_ristretto255_add
        self._sub: Any = lib.crypto_core_ristretto255_sub
        self._sadd: Any = lib.crypto_core_ristretto255_scalar_add
        self._ssub: Any = lib.crypto_core_ristretto255_scalar_sub
        self._smul: Any = lib.crypto_core_ristretto255_scalar_mul
        self._sneg: Any = lib.crypto_core_ristretto255_scalar_negate
        self._sinv: Any = lib.crypto_core_ristretto255_scalar_invert
        self._srandom: Any = lib.crypto_core_ristretto255_scalar_random
        self._mult: Any = lib.crypto_scalarmult_ristretto255
        self._mult_base: Any = lib.crypto_scalarmult_ristretto255_base

    def __repr__(self) -> str:
        return f"SodiumRistretto255(accelerate={self._accelerate})"

    @property
    def accelerate(self) -> bool:
        """Whether public-scalar work may use the JIT-compiled kernels (False: libsodium only)."""
        return self._accelerate

    # -- elements ---------------------------------------------------------------------------
    def identity(self) -> bytes:
        return _IDENTITY

    def generator(self) -> bytes:
        return GENERATOR_ENCODING

    def element_from_uniform_bytes(self, uniform: bytes) -> bytes:
        """The one-way map of RFC 9496 §4.3.4 on 64 bytes (libsodium ``from_hash``)."""
        if len(uniform) != UNIFORM_BYTES:
            raise InvalidInputError(
                f"uniform bytes must be {UNIFORM_BYTES} bytes long, got {len(uniform)}"
            )
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        self._from_hash(out, uniform)
        return out.raw

    def hash_to_group(self, msg: bytes, dst: bytes) -> bytes:
        """hash_to_ristretto255 (RFC 9380 App. B; RFC 9497 §4.1)."""
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        self._from_hash(out, expand_message_xmd(msg, dst, UNIFORM_BYTES))
        return out.raw

    def add(self, a: bytes, b: bytes) -> bytes:
        # libsodium returns -1 only when an input does not decode; ours were validated, and the
        # identity (all zeros) decodes in libsodium, so a sum that is the identity is fine.
        # An addition in libsodium decodes both operands and encodes the sum (three field
        # exponentiations, ~20 µs): an identity operand is answered without it.
        if a == _IDENTITY:
            return b
        if b == _IDENTITY:
            return a
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        if self._add(out, a, b) != 0:
            raise DecodeError("element operands must be valid ristretto255 encodings")
        return out.raw

    def sub(self, a: bytes, b: bytes) -> bytes:
        if b == _IDENTITY:
            return a
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        if self._sub(out, a, b) != 0:
            raise DecodeError("element operands must be valid ristretto255 encodings")
        return out.raw

    def scalar_mult(self, s: bytes, a: bytes) -> bytes:
        """``s * a``; the identity when the product is the identity (libsodium reports -1 then)."""
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        if self._mult(out, s, a) != 0:
            if a != _IDENTITY and self._is_valid(a) != 1:
                raise DecodeError("element operand must be a valid ristretto255 encoding")
            return _IDENTITY
        return out.raw

    def multi_scalar_mult(self, scalars: Sequence[bytes], elements: Sequence[bytes]) -> bytes:
        """``Σ scalars[i] * elements[i]`` in VARIABLE time: for public scalars only.

        Batches of at least :data:`MSM_THRESHOLD` go to the bucket multi-scalar multiplication of
        :mod:`primitives.group.msm_numba` (when numba is importable and ``accelerate`` is on);
        smaller ones, or all without numba, are one libsodium multiplication and addition each.
        Elements must be canonical encodings (from :meth:`deserialize_element` or an operation).
        """
        if len(scalars) != len(elements):
            raise InvalidInputError(
                f"scalars and elements must have equal lengths, got {len(scalars)} "
                f"and {len(elements)}"
            )
        if self._accelerate and len(elements) >= MSM_THRESHOLD and msm_numba.SWITCH.usable():
            try:
                return msm_numba.multi_scalar_mult(b"".join(scalars), b"".join(elements))
            except DecodeError:
                raise
            except Exception as exc:  # a JIT that fails to build must not take the suite down
                msm_numba.SWITCH.disable(exc)
        # Accumulate from the first product: no libsodium addition of the identity (a full
        # decode/encode round trip), so one element costs exactly one scalar multiplication.
        total = _IDENTITY
        for s, a in zip(scalars, elements, strict=True):
            total = self.add(self.scalar_mult(s, a), total)
        return total

    def scalar_mult_base(self, s: bytes) -> bytes:
        out = ctypes.create_string_buffer(ELEMENT_SIZE)
        if self._mult_base(out, s) != 0:
            return _IDENTITY
        return out.raw

    def is_identity(self, a: bytes) -> bool:
        return a == _IDENTITY

    def equal(self, a: bytes, b: bytes) -> bool:
        # Encodings are canonical, so equality of elements is equality of bytes (RFC 9496 §4.3.3).
        return a == b

    def serialize_element(self, a: bytes) -> bytes:
        return a

    def deserialize_element(self, data: bytes) -> bytes:
        """RFC 9496 §4.3.1 Decode plus the identity check of RFC 9497 §4.1."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"element must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) != ELEMENT_SIZE:
            raise DecodeError(f"element must be {ELEMENT_SIZE} bytes long, got {len(data)}")
        s = int.from_bytes(data, "little")
        if s >= _P:
            raise DecodeError("element encoding must be canonical (s < p, high bit clear)")
        if s & 1:
            raise DecodeError("element encoding must be non-negative (s even), got an odd s")
        if s == 0:
            raise DecodeError("element must not be the identity")
        if self._is_valid(data) != 1:
            raise DecodeError("element encoding must decode to a ristretto255 point")
        return data

    # -- scalars ----------------------------------------------------------------------------
    def hash_to_scalar(self, msg: bytes, dst: bytes) -> bytes:
        uniform = expand_message_xmd(msg, dst, UNIFORM_BYTES)
        return (int.from_bytes(uniform, "little") % _L).to_bytes(SCALAR_SIZE, "little")

    def random_scalar(self, rng: RandomSource) -> bytes:
        # 64 bytes reduced mod L: the bias is below 2^-250 (RFC 9497 §4.7, RFC 9380 §5).
        while True:
            value = int.from_bytes(rng.random_bytes(UNIFORM_BYTES), "little") % _L
            if value:
                return value.to_bytes(SCALAR_SIZE, "little")

    def scalar_from_int(self, value: int) -> bytes:
        return (value % _L).to_bytes(SCALAR_SIZE, "little")

    def scalar_to_int(self, s: bytes) -> int:
        return int.from_bytes(s, "little")

    def scalar_add(self, a: bytes, b: bytes) -> bytes:
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        self._sadd(out, a, b)
        return out.raw

    def scalar_sub(self, a: bytes, b: bytes) -> bytes:
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        self._ssub(out, a, b)
        return out.raw

    def scalar_mul(self, a: bytes, b: bytes) -> bytes:
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        self._smul(out, a, b)
        return out.raw

    def scalar_neg(self, a: bytes) -> bytes:
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        self._sneg(out, a)
        return out.raw

    def scalar_inverse(self, a: bytes) -> bytes:
        """``a^-1 mod L`` as ``u · (a·u)^-1`` for a fresh uniform non-zero mask ``u``.

        libsodium inverts by a constant-time exponentiation (~40 µs); Python's extended-Euclid
        ``pow(x, -1, L)`` takes a few µs but runs in variable time, so it only ever sees ``a·u``,
        which is uniform and independent of ``a`` (``u`` comes from libsodium's CSPRNG and never
        leaves this call). The result is exact and deterministic: the mask cancels.
        """
        mask = ctypes.create_string_buffer(SCALAR_SIZE)
        self._srandom(mask)
        masked = ctypes.create_string_buffer(SCALAR_SIZE)
        self._smul(masked, a, mask)
        value = int.from_bytes(masked.raw, "little")
        if value == 0:  # a·u = 0 with u ≠ 0 exactly when a = 0 (mod L)
            raise InvalidInputError("scalar must be non-zero to be inverted, got zero")
        out = ctypes.create_string_buffer(SCALAR_SIZE)
        self._smul(out, pow(value, -1, _L).to_bytes(SCALAR_SIZE, "little"), mask)
        return out.raw

    def scalar_is_zero(self, a: bytes) -> bool:
        return a == bytes(SCALAR_SIZE)

    def serialize_scalar(self, s: bytes) -> bytes:
        return s

    def deserialize_scalar(self, data: bytes) -> bytes:
        """Little-endian, exactly 32 bytes, value < L (RFC 9497 §4.1; top three bits zero)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"scalar must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) != SCALAR_SIZE:
            raise DecodeError(f"scalar must be {SCALAR_SIZE} bytes long, got {len(data)}")
        if int.from_bytes(data, "little") >= _L:
            raise DecodeError("scalar must be < the group order L, got a value >= L")
        return data
