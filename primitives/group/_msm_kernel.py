# mypy: ignore-errors
"""The numba kernel behind :mod:`primitives.group.msm_numba` (imported only when it is used).

Field elements of GF(2^255 - 19) are tuples of five uint64 limbs in radix 2^51. The field
operations are numba intrinsics written in LLVM IR with 128-bit intermediates (numba has no
128-bit integer type), so a multiplication compiles to the same 25 wide multiplies as the 64-bit
C implementations. Limb bounds: every multiplication input is a sum of at most a few reduced
values (limbs < 2^55), so each 128-bit column sum stays below 2^117; subtraction adds 4p first so
limbs never go negative.

Points are edwards25519 points in extended coordinates (RFC 8032 §5.1.4), decoded from ristretto255
encodings as RFC 9496 §4.3.1 prescribes. Nothing here is constant time: it only sees public data.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from primitives.group import ristretto255_pure as ref

MASK51 = (1 << 51) - 1
FE = types.UniTuple(types.uint64, 5)
_I64 = ir.IntType(64)
_I128 = ir.IntType(128)
# 4p, limb by limb: added before a subtraction so that no limb goes negative.
_FOUR_P = (4 * (MASK51 - 18), 4 * MASK51, 4 * MASK51, 4 * MASK51, 4 * MASK51)


def limbs(value: int) -> np.ndarray:
    value %= ref.P
    return np.array([(value >> (51 * i)) & MASK51 for i in range(5)], dtype=np.uint64)


_D = limbs(ref.D)
_D2 = limbs(ref.D2)
_SQRT_M1 = limbs(ref.SQRT_M1)
_ONE = limbs(1)
_ZERO = limbs(0)


# -- LLVM IR helpers ---------------------------------------------------------------------------
def _unpack(builder, value):
    return [builder.extract_value(value, i) for i in range(5)]


def _pack(context, builder, values):
    return context.make_tuple(builder, FE, values)


def _const(width, value):
    return ir.Constant(ir.IntType(width), value)


def _carry(builder, r, width):
    """Propagate carries through five ``width``-bit limbs, folding the top carry back ×19."""
    mask = _const(width, MASK51)
    shift = _const(width, 51)
    r = list(r)
    for i in range(4):
        c = builder.lshr(r[i], shift)
        r[i] = builder.and_(r[i], mask)
        r[i + 1] = builder.add(r[i + 1], c)
    c = builder.lshr(r[4], shift)
    r[4] = builder.and_(r[4], mask)
    r[0] = builder.add(r[0], builder.mul(c, _const(width, 19)))
    c = builder.lshr(r[0], shift)
    r[0] = builder.and_(r[0], mask)
    r[1] = builder.add(r[1], c)
    return r


def _reduce128(builder, r):
    return [builder.trunc(x, _I64) for x in _carry(builder, r, 128)]


# -- field intrinsics --------------------------------------------------------------------------
def _wide(builder, values):
    return [builder.zext(x, _I128) for x in values]


@intrinsic
def fmul(typingctx, f, g):
    """f·g mod p: h_k = Σ_{i+j=k} f_i g_j + 19 Σ_{i+j=k+5} f_i g_j, then carries.

    19·g_j is formed in 64 bits (no 128-bit products by a 69-bit operand: a quarter fewer
    instructions), which needs limbs < 2^58 (19·2^58 < 2^64); inputs here stay below 2^55, so
    each 128-bit column stays below 2^123.
    """

    def codegen(context, builder, signature, args):
        a64, b64 = _unpack(builder, args[0]), _unpack(builder, args[1])
        a, b = _wide(builder, a64), _wide(builder, b64)
        b19 = _wide(builder, [builder.mul(x, _const(64, 19)) for x in b64])
        r = []
        for k in range(5):
            acc = None
            for i in range(5):
                j = (k - i) % 5
                term = builder.mul(a[i], b[j] if i <= k else b19[j])
                acc = term if acc is None else builder.add(acc, term)
            r.append(acc)
        return _pack(context, builder, _reduce128(builder, r))

    return FE(FE, FE), codegen


@intrinsic
def fsq(typingctx, f):
    """f² mod p with the symmetric products counted once and the factors 2 and 19 applied to
    64-bit operands (15 wide multiplications and nothing else wide); limbs < 2^58 as for fmul."""

    def codegen(context, builder, signature, args):
        a64 = _unpack(builder, args[0])
        a = _wide(builder, a64)
        d = _wide(builder, [builder.add(x, x) for x in a64])
        a19_3, a19_4 = _wide(builder, [builder.mul(a64[k], _const(64, 19)) for k in (3, 4)])
        m, add = builder.mul, builder.add
        r0 = add(add(m(a[0], a[0]), m(d[1], a19_4)), m(d[2], a19_3))
        r1 = add(add(m(d[0], a[1]), m(d[2], a19_4)), m(a[3], a19_3))
        r2 = add(add(m(d[0], a[2]), m(a[1], a[1])), m(d[3], a19_4))
        r3 = add(add(m(d[0], a[3]), m(d[1], a[2])), m(a[4], a19_4))
        r4 = add(add(m(d[0], a[4]), m(d[1], a[3])), m(a[2], a[2]))
        return _pack(context, builder, _reduce128(builder, [r0, r1, r2, r3, r4]))

    return FE(FE), codegen


@intrinsic
def fadd(typingctx, f, g):
    """f + g limb by limb, not carried (inputs are reduced or short sums of reduced values)."""

    def codegen(context, builder, signature, args):
        a, b = _unpack(builder, args[0]), _unpack(builder, args[1])
        return _pack(context, builder, [builder.add(x, y) for x, y in zip(a, b, strict=True)])

    return FE(FE, FE), codegen


@intrinsic
def fsub(typingctx, f, g):
    """f + 4p - g limb by limb: non-negative for g < 4p limb-wise."""

    def codegen(context, builder, signature, args):
        a, b = _unpack(builder, args[0]), _unpack(builder, args[1])
        out = [
            builder.sub(builder.add(x, _const(64, q)), y)
            for x, y, q in zip(a, b, _FOUR_P, strict=True)
        ]
        return _pack(context, builder, out)

    return FE(FE, FE), codegen


@intrinsic
def fneg(typingctx, f):
    def codegen(context, builder, signature, args):
        a = _unpack(builder, args[0])
        out = [builder.sub(_const(64, q), x) for x, q in zip(a, _FOUR_P, strict=True)]
        return _pack(context, builder, out)

    return FE(FE), codegen


@intrinsic
def canonical(typingctx, f):
    """The limbs of the representative in [0, p)."""

    def codegen(context, builder, signature, args):
        r = _carry(builder, _carry(builder, _unpack(builder, args[0]), 64), 64)
        # q = 1 exactly when the value is >= p: add 19 and look at the carry out of bit 255.
        shift = _const(64, 51)
        q = builder.lshr(builder.add(r[0], _const(64, 19)), shift)
        for i in range(1, 5):
            q = builder.lshr(builder.add(r[i], q), shift)
        r[0] = builder.add(r[0], builder.mul(q, _const(64, 19)))
        mask = _const(64, MASK51)
        for i in range(4):
            c = builder.lshr(r[i], shift)
            r[i] = builder.and_(r[i], mask)
            r[i + 1] = builder.add(r[i + 1], c)
        r[4] = builder.and_(r[4], mask)
        return _pack(context, builder, r)

    return FE(FE), codegen


# -- field helpers in numba ------------------------------------------------------------------
@njit(cache=True, nogil=True)
def const(a):
    return (a[0], a[1], a[2], a[3], a[4])


@njit(cache=True, nogil=True)
def fsqn(f, n):
    for _ in range(n):
        f = fsq(f)
    return f


@njit(cache=True, nogil=True)
def is_negative(f):
    return (canonical(f)[0] & np.uint64(1)) != np.uint64(0)


@njit(cache=True, nogil=True)
def is_zero(f):
    c = canonical(f)
    return (c[0] | c[1] | c[2] | c[3] | c[4]) == np.uint64(0)


@njit(cache=True, nogil=True)
def feq(f, g):
    return is_zero(fsub(f, g))


@njit(cache=True, nogil=True)
def fabs(f):
    if is_negative(f):
        return fneg(f)
    return f


@njit(cache=True, nogil=True)
def pow22523(z):
    """z^((p-5)/8) = z^(2^252 - 3), by the usual addition chain."""
    t0 = fsq(z)
    t1 = fmul(z, fsqn(t0, 2))
    t0 = fsq(fmul(t0, t1))
    t0 = fmul(t1, t0)  # z^(2^5 - 1)
    t0 = fmul(fsqn(t0, 5), t0)  # 2^10 - 1
    t1 = fmul(fsqn(t0, 10), t0)  # 2^20 - 1
    t1 = fmul(fsqn(t1, 20), t1)  # 2^40 - 1
    t0 = fmul(fsqn(t1, 10), t0)  # 2^50 - 1
    t1 = fmul(fsqn(t0, 50), t0)  # 2^100 - 1
    t1 = fmul(fsqn(t1, 100), t1)  # 2^200 - 1
    t0 = fmul(fsqn(t1, 50), t0)  # 2^250 - 1
    return fmul(fsqn(t0, 2), z)  # 2^252 - 3


@njit(cache=True, nogil=True)
def sqrt_ratio_m1(u, v):
    """RFC 9496 §4.2 SQRT_RATIO_M1: (was_square, non-negative root)."""
    v3 = fmul(fsq(v), v)
    v7 = fmul(fsq(v3), v)
    r = fmul(fmul(u, v3), pow22523(fmul(u, v7)))
    check = fmul(v, fsq(r))
    correct = feq(check, u)
    flipped = feq(check, fneg(u))
    flipped_i = feq(check, fmul(fneg(u), const(_SQRT_M1)))
    if flipped or flipped_i:
        r = fmul(r, const(_SQRT_M1))
    return correct or flipped, fabs(r)


@njit(cache=True, nogil=True)
def decode(s):
    """RFC 9496 §4.3.1 Decode of a canonical non-negative s: (ok, x, y, t), affine (Z = 1)."""
    one = const(_ONE)
    ss = fsq(s)
    u1 = fsub(one, ss)
    u2 = fadd(one, ss)
    u2_sqr = fsq(u2)
    v = fsub(fneg(fmul(const(_D), fsq(u1))), u2_sqr)
    was_square, invsqrt = sqrt_ratio_m1(one, fmul(v, u2_sqr))
    den_x = fmul(invsqrt, u2)
    den_y = fmul(fmul(invsqrt, den_x), v)
    x = fabs(fmul(fadd(s, s), den_x))
    y = fmul(u1, den_y)
    t = fmul(x, y)
    ok = was_square and not is_negative(t) and not is_zero(y)
    return ok, x, y, t


# -- points --------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def identity():
    return (const(_ZERO), const(_ONE), const(_ONE), const(_ZERO))


@njit(cache=True, nogil=True)
def add_niels(p, yp, ym, t2d):
    """Extended + affine point given as (y+x, y-x, 2d·t): 7 multiplications."""
    x1, y1, z1, t1 = p
    a = fmul(fsub(y1, x1), ym)
    b = fmul(fadd(y1, x1), yp)
    c = fmul(t1, t2d)
    dd = fadd(z1, z1)
    e = fsub(b, a)
    f = fsub(dd, c)
    g = fadd(dd, c)
    h = fadd(b, a)
    return (fmul(e, f), fmul(g, h), fmul(f, g), fmul(e, h))


@njit(cache=True, nogil=True)
def add(p, q):
    """Extended + extended (complete on edwards25519): 9 multiplications."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = fmul(fsub(y1, x1), fsub(y2, x2))
    b = fmul(fadd(y1, x1), fadd(y2, x2))
    c = fmul(fmul(t1, const(_D2)), t2)
    zz = fmul(z1, z2)
    dd = fadd(zz, zz)
    e = fsub(b, a)
    f = fsub(dd, c)
    g = fadd(dd, c)
    h = fadd(b, a)
    return (fmul(e, f), fmul(g, h), fmul(f, g), fmul(e, h))


@njit(cache=True, nogil=True, inline="always")
def dbl(x1, y1, z1):
    """2·(X:Y:Z) as completed (e, f, g, h): 4 squarings (dbl-2008-hwcd, a = -1); the extended
    point is (e·f, g·h, f·g, e·h), and a following doubling needs only its first three."""
    a = fsq(x1)
    b = fsq(y1)
    zz = fsq(z1)
    c = fadd(zz, zz)
    h = fadd(a, b)
    e = fsub(h, fsq(fadd(x1, y1)))
    g = fsub(a, b)
    f = fadd(c, g)
    return e, f, g, h


@njit(cache=True, nogil=True)
def double(p):
    e, f, g, h = dbl(p[0], p[1], p[2])
    return (fmul(e, f), fmul(g, h), fmul(f, g), fmul(e, h))


@njit(cache=True, nogil=True)
def get(arr, i, j):
    return (arr[i, j, 0], arr[i, j, 1], arr[i, j, 2], arr[i, j, 3], arr[i, j, 4])


@njit(cache=True, nogil=True)
def put(arr, i, j, f):
    for k in range(5):
        arr[i, j, k] = f[k]


@njit(cache=True, nogil=True)
def get_point(arr, i):
    return (get(arr, i, 0), get(arr, i, 1), get(arr, i, 2), get(arr, i, 3))


@njit(cache=True, nogil=True)
def put_point(arr, i, p):
    for j in range(4):
        put(arr, i, j, p[j])


@njit(cache=True, nogil=True)
def msm(s_limbs, digits, window, out):
    """Σ_i Σ_w digits[i, w]·2^(window·w)·P_i for points P_i decoded from ``s_limbs``.

    ``s_limbs`` (n, 5) are the field elements s of the encodings; ``digits`` (n, windows) the
    signed radix-2^window digits of the scalars, each in [-2^(window-1), 2^(window-1)].
    Returns -1 and the canonical extended coordinates in ``out`` (4, 5), or the index of the
    first encoding that does not decode.
    """
    n = s_limbs.shape[0]
    n_windows = digits.shape[1]
    niels = np.empty((n, 3, 5), dtype=np.uint64)
    for i in range(n):
        s = (s_limbs[i, 0], s_limbs[i, 1], s_limbs[i, 2], s_limbs[i, 3], s_limbs[i, 4])
        ok, x, y, t = decode(s)
        if not ok:
            return i
        put(niels, i, 0, fadd(y, x))
        put(niels, i, 1, fsub(y, x))
        put(niels, i, 2, fmul(t, const(_D2)))
    half = 1 << (window - 1)
    buckets = np.empty((half + 1, 4, 5), dtype=np.uint64)
    acc = identity()
    for w in range(n_windows - 1, -1, -1):
        for _ in range(window):
            acc = double(acc)
        for j in range(half + 1):
            put_point(buckets, j, identity())
        for i in range(n):
            digit = digits[i, w]
            if digit > 0:
                p = add_niels(get_point(buckets, digit), get(niels, i, 0), get(niels, i, 1),
                              get(niels, i, 2))  # fmt: skip
                put_point(buckets, digit, p)
            elif digit < 0:
                p = add_niels(get_point(buckets, -digit), get(niels, i, 1), get(niels, i, 0),
                              fneg(get(niels, i, 2)))  # fmt: skip
                put_point(buckets, -digit, p)
        running = identity()
        total = identity()
        for j in range(half, 0, -1):
            running = add(running, get_point(buckets, j))
            total = add(total, running)
        acc = add(acc, total)
    for j in range(4):
        c = canonical(acc[j])
        for k in range(5):
            out[j, k] = c[k]
    return -1
