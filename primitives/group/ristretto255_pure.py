"""ristretto255 written from RFC 9496 in Python integers — a reference to cross-check libsodium.

Points are edwards25519 points in extended coordinates ``(X, Y, Z, T)`` with ``x = X/Z``,
``y = Y/Z``, ``xy = T/Z``; scalars are Python ints in ``[0, L)``. Nothing here runs in constant
time and it is about a hundred times slower than libsodium: use it for tests and cross-checks, not
for secrets in production (``releases_gil`` is False, so the suite will not thread it either).

Sections: field helpers and SQRT_RATIO_M1 (RFC 9496 §4.2), Decode (§4.3.1), Encode (§4.3.2),
Equals (§4.3.3), the one-way map (§4.3.4), and the edwards25519 group law of RFC 8032 §5.1.4.
"""

from __future__ import annotations

from collections.abc import Sequence

from primitives.errors import DecodeError, InvalidInputError
from primitives.group import (
    CURVE25519_PRIME,
    ELEMENT_SIZE,
    RISTRETTO255_ORDER,
    SCALAR_SIZE,
    UNIFORM_BYTES,
)
from primitives.group.expand import expand_message_xmd
from primitives.randomness import RandomSource

Point = tuple[int, int, int, int]

P = CURVE25519_PRIME
L = RISTRETTO255_ORDER
#: Edwards d = -121665/121666 (RFC 9496 §4.1).
D = -121665 * pow(121666, -1, P) % P
D2 = 2 * D % P
#: sqrt(-1) = 2^((p-1)/4), the root RFC 9496 §4.1 lists.
SQRT_M1 = pow(2, (P - 1) // 4, P)
# The remaining constants as printed in RFC 9496 §4.1 (their defining equations are tested).
SQRT_AD_MINUS_ONE = 25063068953384623474111414158702152701244531502492656460079210482610430750235
INVSQRT_A_MINUS_D = 54469307008909316920995813868745141605393597292927456921205312896311721017578
ONE_MINUS_D_SQ = 1159843021668779879193775521855586647937357759715417654439879720876111806838
D_MINUS_ONE_SQ = 40440834346308536858101042469323190826248399146238708352240133220865137265952

IDENTITY: Point = (0, 1, 1, 0)
# The ed25519 base point (RFC 8032 §5.1): y = 4/5, x the even root.
_BY = 4 * pow(5, -1, P) % P
_BX = 15112221349535400772501151409588531511454012693041857206046113283949847762202
GENERATOR: Point = (_BX, _BY, 1, _BX * _BY % P)


# -- field helpers (RFC 9496 §4.2) -----------------------------------------------------------
def is_negative(x: int) -> bool:
    """IS_NEGATIVE: the low bit of the canonical representative."""
    return bool(x % P & 1)


def ct_abs(x: int) -> int:
    """CT_ABS (not constant time here): the non-negative one of ``x`` and ``-x``."""
    x %= P
    return P - x if x & 1 else x


def sqrt_ratio_m1(u: int, v: int) -> tuple[bool, int]:
    """SQRT_RATIO_M1(u, v): ``(was_square, r)`` with r = sqrt(u/v) or sqrt(i*u/v), r non-negative."""
    u %= P
    v %= P
    v3 = v * v % P * v % P
    v7 = v3 * v3 % P * v % P
    r = u * v3 % P * pow(u * v7 % P, (P - 5) // 8, P) % P
    check = v * r % P * r % P
    correct_sign = check == u
    flipped_sign = check == (-u) % P
    flipped_sign_i = check == (-u) * SQRT_M1 % P
    if flipped_sign or flipped_sign_i:
        r = r * SQRT_M1 % P
    return correct_sign or flipped_sign, ct_abs(r)


# -- edwards25519 group law (extended coordinates, a = -1) -----------------------------------
def point_add(p1: Point, p2: Point) -> Point:
    """Unified addition (Hisil-Wong-Carter-Dawson 2008, "add-2008-hwcd-3")."""
    x1, y1, z1, t1 = p1
    x2, y2, z2, t2 = p2
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * D2 % P * t2 % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def point_double(p1: Point) -> Point:
    """Doubling ("dbl-2008-hwcd" with a = -1)."""
    x1, y1, z1, _ = p1
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    e = h - (x1 + y1) * (x1 + y1) % P
    g = a - b
    f = c + g
    return e * f % P, g * h % P, f * g % P, e * h % P


def point_neg(p1: Point) -> Point:
    x1, y1, z1, t1 = p1
    return (-x1) % P, y1, z1, (-t1) % P


def point_mul(scalar: int, point: Point) -> Point:
    """``scalar * point`` by a fixed 4-bit window (variable time)."""
    scalar %= L
    table = [IDENTITY, point]
    for _ in range(14):
        table.append(point_add(table[-1], point))
    acc = IDENTITY
    for shift in range(252, -1, -4):
        acc = point_double(point_double(point_double(point_double(acc))))
        digit = (scalar >> shift) & 15
        if digit:
            acc = point_add(acc, table[digit])
    return acc


def point_equal(p1: Point, p2: Point) -> bool:
    """Equals (RFC 9496 §4.3.3): equality of the ristretto classes, not of the edwards points."""
    x1, y1, _, _ = p1
    x2, y2, _, _ = p2
    return (x1 * y2 - y1 * x2) % P == 0 or (y1 * y2 - x1 * x2) % P == 0


# -- Decode / Encode (RFC 9496 §4.3.1, §4.3.2) -----------------------------------------------
def decode(data: bytes) -> Point:
    """Decode: DecodeError for a wrong length, a non-canonical or negative ``s``, or a non-point."""
    if len(data) != ELEMENT_SIZE:
        raise DecodeError(f"element must be {ELEMENT_SIZE} bytes long, got {len(data)}")
    s = int.from_bytes(data, "little")
    if s >= P:
        raise DecodeError("element encoding must be canonical (s < p, high bit clear)")
    if s & 1:
        raise DecodeError("element encoding must be non-negative (s even), got an odd s")
    ss = s * s % P
    u1 = (1 - ss) % P
    u2 = (1 + ss) % P
    u2_sqr = u2 * u2 % P
    v = (-(D * u1 % P * u1) - u2_sqr) % P
    was_square, invsqrt = sqrt_ratio_m1(1, v * u2_sqr % P)
    den_x = invsqrt * u2 % P
    den_y = invsqrt * den_x % P * v % P
    x = ct_abs(2 * s * den_x)
    y = u1 * den_y % P
    t = x * y % P
    if not was_square or is_negative(t) or y == 0:
        raise DecodeError("element encoding must decode to a ristretto255 point")
    return x, y, 1, t


def encode(point: Point) -> bytes:
    """Encode: the canonical 32-byte string of the point's ristretto class."""
    x0, y0, z0, t0 = point
    u1 = (z0 + y0) * (z0 - y0) % P
    u2 = x0 * y0 % P
    _, invsqrt = sqrt_ratio_m1(1, u1 * u2 % P * u2 % P)
    den1 = invsqrt * u1 % P
    den2 = invsqrt * u2 % P
    z_inv = den1 * den2 % P * t0 % P
    if is_negative(t0 * z_inv):
        x, y = y0 * SQRT_M1 % P, x0 * SQRT_M1 % P
        den_inv = den1 * INVSQRT_A_MINUS_D % P
    else:
        x, y, den_inv = x0, y0, den2
    if is_negative(x * z_inv):
        y = (-y) % P
    s = ct_abs(den_inv * (z0 - y))
    return s.to_bytes(ELEMENT_SIZE, "little")


# -- the one-way map (RFC 9496 §4.3.4) -------------------------------------------------------
def map_to_point(t: int) -> Point:
    """MAP(t), Elligator 2 on the Jacobi quartic, returned as an extended edwards point."""
    r = SQRT_M1 * t % P * t % P
    u = (r + 1) * ONE_MINUS_D_SQ % P
    v = (-1 - r * D) * (r + D) % P
    was_square, s = sqrt_ratio_m1(u, v)
    s_prime = (-ct_abs(s * t)) % P
    if was_square:
        c = P - 1
    else:
        s, c = s_prime, r
    n = (c * (r - 1) % P * D_MINUS_ONE_SQ - v) % P
    w0 = 2 * s * v % P
    w1 = n * SQRT_AD_MINUS_ONE % P
    w2 = (1 - s * s) % P
    w3 = (1 + s * s) % P
    return w0 * w3 % P, w2 * w1 % P, w1 * w3 % P, w0 * w2 % P


def from_uniform_bytes(data: bytes) -> Point:
    """Element derivation from 64 bytes: MAP of each half (high bit masked, reduced mod p), added."""
    if len(data) != UNIFORM_BYTES:
        raise InvalidInputError(
            f"uniform bytes must be {UNIFORM_BYTES} bytes long, got {len(data)}"
        )
    mask = (1 << 255) - 1
    t1 = (int.from_bytes(data[:32], "little") & mask) % P
    t2 = (int.from_bytes(data[32:], "little") & mask) % P
    return point_add(map_to_point(t1), map_to_point(t2))


class PureRistretto255:
    """ristretto255 (RFC 9496) in pure Python; elements are extended points, scalars ints."""

    __slots__ = ()

    name = "ristretto255-pure"
    order = L
    element_size = ELEMENT_SIZE
    scalar_size = SCALAR_SIZE
    releases_gil = False

    def __repr__(self) -> str:
        return "PureRistretto255()"

    # -- elements ---------------------------------------------------------------------------
    def identity(self) -> Point:
        return IDENTITY

    def generator(self) -> Point:
        return GENERATOR

    def element_from_uniform_bytes(self, uniform: bytes) -> Point:
        return from_uniform_bytes(uniform)

    def hash_to_group(self, msg: bytes, dst: bytes) -> Point:
        """hash_to_ristretto255 (RFC 9380 App. B; RFC 9497 §4.1)."""
        return from_uniform_bytes(expand_message_xmd(msg, dst, UNIFORM_BYTES))

    def add(self, a: Point, b: Point) -> Point:
        return point_add(a, b)

    def sub(self, a: Point, b: Point) -> Point:
        return point_add(a, point_neg(b))

    def scalar_mult(self, s: int, a: Point) -> Point:
        return point_mul(s, a)

    def multi_scalar_mult(self, scalars: Sequence[int], elements: Sequence[Point]) -> Point:
        """``Σ scalars[i] * elements[i]`` (one multiplication per term; variable time)."""
        if len(scalars) != len(elements):
            raise InvalidInputError(
                f"scalars and elements must have equal lengths, got {len(scalars)} "
                f"and {len(elements)}"
            )
        total = IDENTITY
        for s, a in zip(scalars, elements, strict=True):
            total = point_add(point_mul(s, a), total)
        return total

    def scalar_mult_base(self, s: int) -> Point:
        return point_mul(s, GENERATOR)

    def is_identity(self, a: Point) -> bool:
        return point_equal(a, IDENTITY)

    def equal(self, a: Point, b: Point) -> bool:
        return point_equal(a, b)

    def serialize_element(self, a: Point) -> bytes:
        return encode(a)

    def deserialize_element(self, data: bytes) -> Point:
        """RFC 9496 §4.3.1 Decode plus the identity check of RFC 9497 §4.1."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"element must be bytes, got {type(data).__name__}")
        point = decode(bytes(data))
        if point_equal(point, IDENTITY):
            raise DecodeError("element must not be the identity")
        return point

    # -- scalars ----------------------------------------------------------------------------
    def hash_to_scalar(self, msg: bytes, dst: bytes) -> int:
        return int.from_bytes(expand_message_xmd(msg, dst, UNIFORM_BYTES), "little") % L

    def random_scalar(self, rng: RandomSource) -> int:
        while True:
            value = int.from_bytes(rng.random_bytes(UNIFORM_BYTES), "little") % L
            if value:
                return value

    def scalar_from_int(self, value: int) -> int:
        return value % L

    def scalar_to_int(self, s: int) -> int:
        return s

    def scalar_add(self, a: int, b: int) -> int:
        return (a + b) % L

    def scalar_sub(self, a: int, b: int) -> int:
        return (a - b) % L

    def scalar_mul(self, a: int, b: int) -> int:
        return a * b % L

    def scalar_neg(self, a: int) -> int:
        return (-a) % L

    def scalar_inverse(self, a: int) -> int:
        if a % L == 0:
            raise InvalidInputError("scalar must be non-zero to be inverted, got zero")
        return pow(a, -1, L)

    def scalar_is_zero(self, a: int) -> bool:
        return a % L == 0

    def serialize_scalar(self, s: int) -> bytes:
        return (s % L).to_bytes(SCALAR_SIZE, "little")

    def deserialize_scalar(self, data: bytes) -> int:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise DecodeError(f"scalar must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) != SCALAR_SIZE:
            raise DecodeError(f"scalar must be {SCALAR_SIZE} bytes long, got {len(data)}")
        value = int.from_bytes(data, "little")
        if value >= L:
            raise DecodeError("scalar must be < the group order L, got a value >= L")
        return value
