# mypy: ignore-errors
"""The numba kernel behind :mod:`primitives.group.msm_numba` (imported only when it is used).

Field elements of GF(2^255 - 19) are tuples of ten signed int64 limbs in radix 2^25.5 (limb ``i``
has weight ``2^ceil(25.5·i)``); limb products summed with the reduction factors stay below 2^61,
so no 128-bit type is needed. Carries are signed (ref10 style), additions and subtractions are
not carried: every multiplication input is a sum of at most four carried values (limbs below
2^27), which keeps each limb product sum below 2^62.
Points are edwards25519 points in extended coordinates (RFC 8032 §5.1.4); decoding follows
RFC 9496 §4.3.1. Nothing here is constant time: it only ever sees public scalars.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from primitives.group import ristretto255_pure as ref

OFFSETS = (0, 26, 51, 77, 102, 128, 153, 179, 204, 230)
WIDTHS = (26, 25, 26, 25, 26, 25, 26, 25, 26, 25)


def _limbs(value: int) -> np.ndarray:
    value %= ref.P
    return np.array(
        [(value >> off) & ((1 << w) - 1) for off, w in zip(OFFSETS, WIDTHS, strict=True)],
        dtype=np.int64,
    )


_D = _limbs(ref.D)
_D2 = _limbs(ref.D2)
_SQRT_M1 = _limbs(ref.SQRT_M1)
_ONE = _limbs(1)
_ZERO = _limbs(0)


@njit(cache=True, nogil=True)
def const(a):
    return (a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9])


@njit(cache=True, nogil=True)
def carry(h0, h1, h2, h3, h4, h5, h6, h7, h8, h9):
    c0 = (h0 + (1 << 25)) >> 26
    h1 += c0
    h0 -= c0 << 26
    c4 = (h4 + (1 << 25)) >> 26
    h5 += c4
    h4 -= c4 << 26
    c1 = (h1 + (1 << 24)) >> 25
    h2 += c1
    h1 -= c1 << 25
    c5 = (h5 + (1 << 24)) >> 25
    h6 += c5
    h5 -= c5 << 25
    c2 = (h2 + (1 << 25)) >> 26
    h3 += c2
    h2 -= c2 << 26
    c6 = (h6 + (1 << 25)) >> 26
    h7 += c6
    h6 -= c6 << 26
    c3 = (h3 + (1 << 24)) >> 25
    h4 += c3
    h3 -= c3 << 25
    c7 = (h7 + (1 << 24)) >> 25
    h8 += c7
    h7 -= c7 << 25
    c4 = (h4 + (1 << 25)) >> 26
    h5 += c4
    h4 -= c4 << 26
    c8 = (h8 + (1 << 25)) >> 26
    h9 += c8
    h8 -= c8 << 26
    c9 = (h9 + (1 << 24)) >> 25
    h0 += c9 * 19
    h9 -= c9 << 25
    c0 = (h0 + (1 << 25)) >> 26
    h1 += c0
    h0 -= c0 << 26
    return (h0, h1, h2, h3, h4, h5, h6, h7, h8, h9)


@njit(cache=True, nogil=True)
def fadd(f, g):
    # Not carried: sums of up to four carried elements keep every product below 2^62 in fmul.
    return (
        f[0] + g[0], f[1] + g[1], f[2] + g[2], f[3] + g[3], f[4] + g[4],
        f[5] + g[5], f[6] + g[6], f[7] + g[7], f[8] + g[8], f[9] + g[9],
    )  # fmt: skip


@njit(cache=True, nogil=True)
def fsub(f, g):
    return (
        f[0] - g[0], f[1] - g[1], f[2] - g[2], f[3] - g[3], f[4] - g[4],
        f[5] - g[5], f[6] - g[6], f[7] - g[7], f[8] - g[8], f[9] - g[9],
    )  # fmt: skip


@njit(cache=True, nogil=True)
def fneg(f):
    return (-f[0], -f[1], -f[2], -f[3], -f[4], -f[5], -f[6], -f[7], -f[8], -f[9])


@njit(cache=True, nogil=True)
def fmul(f, g):
    f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 = f
    g0, g1, g2, g3, g4, g5, g6, g7, g8, g9 = g
    # Limb products; a factor 2 when both limbs have odd index (radix 2^25.5), 19 on wrap.
    h0 = (
        f0 * g0
        + 38 * f1 * g9
        + 19 * f2 * g8
        + 38 * f3 * g7
        + 19 * f4 * g6
        + 38 * f5 * g5
        + 19 * f6 * g4
        + 38 * f7 * g3
        + 19 * f8 * g2
        + 38 * f9 * g1
    )  # noqa: E501
    h1 = (
        f0 * g1
        + f1 * g0
        + 19 * f2 * g9
        + 19 * f3 * g8
        + 19 * f4 * g7
        + 19 * f5 * g6
        + 19 * f6 * g5
        + 19 * f7 * g4
        + 19 * f8 * g3
        + 19 * f9 * g2
    )  # noqa: E501
    h2 = (
        f0 * g2
        + 2 * f1 * g1
        + f2 * g0
        + 38 * f3 * g9
        + 19 * f4 * g8
        + 38 * f5 * g7
        + 19 * f6 * g6
        + 38 * f7 * g5
        + 19 * f8 * g4
        + 38 * f9 * g3
    )  # noqa: E501
    h3 = (
        f0 * g3
        + f1 * g2
        + f2 * g1
        + f3 * g0
        + 19 * f4 * g9
        + 19 * f5 * g8
        + 19 * f6 * g7
        + 19 * f7 * g6
        + 19 * f8 * g5
        + 19 * f9 * g4
    )  # noqa: E501
    h4 = (
        f0 * g4
        + 2 * f1 * g3
        + f2 * g2
        + 2 * f3 * g1
        + f4 * g0
        + 38 * f5 * g9
        + 19 * f6 * g8
        + 38 * f7 * g7
        + 19 * f8 * g6
        + 38 * f9 * g5
    )  # noqa: E501
    h5 = (
        f0 * g5
        + f1 * g4
        + f2 * g3
        + f3 * g2
        + f4 * g1
        + f5 * g0
        + 19 * f6 * g9
        + 19 * f7 * g8
        + 19 * f8 * g7
        + 19 * f9 * g6
    )  # noqa: E501
    h6 = (
        f0 * g6
        + 2 * f1 * g5
        + f2 * g4
        + 2 * f3 * g3
        + f4 * g2
        + 2 * f5 * g1
        + f6 * g0
        + 38 * f7 * g9
        + 19 * f8 * g8
        + 38 * f9 * g7
    )  # noqa: E501
    h7 = (
        f0 * g7
        + f1 * g6
        + f2 * g5
        + f3 * g4
        + f4 * g3
        + f5 * g2
        + f6 * g1
        + f7 * g0
        + 19 * f8 * g9
        + 19 * f9 * g8
    )  # noqa: E501
    h8 = (
        f0 * g8
        + 2 * f1 * g7
        + f2 * g6
        + 2 * f3 * g5
        + f4 * g4
        + 2 * f5 * g3
        + f6 * g2
        + 2 * f7 * g1
        + f8 * g0
        + 38 * f9 * g9
    )  # noqa: E501
    h9 = (
        f0 * g9
        + f1 * g8
        + f2 * g7
        + f3 * g6
        + f4 * g5
        + f5 * g4
        + f6 * g3
        + f7 * g2
        + f8 * g1
        + f9 * g0
    )  # noqa: E501
    return carry(h0, h1, h2, h3, h4, h5, h6, h7, h8, h9)  # fmt: skip


@njit(cache=True, nogil=True)
def fsq(f):
    f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 = f
    h0 = f0 * f0 + 76 * f1 * f9 + 38 * f2 * f8 + 76 * f3 * f7 + 38 * f4 * f6 + 38 * f5 * f5
    h1 = 2 * f0 * f1 + 38 * f2 * f9 + 38 * f3 * f8 + 38 * f4 * f7 + 38 * f5 * f6
    h2 = 2 * f0 * f2 + 2 * f1 * f1 + 76 * f3 * f9 + 38 * f4 * f8 + 76 * f5 * f7 + 19 * f6 * f6
    h3 = 2 * f0 * f3 + 2 * f1 * f2 + 38 * f4 * f9 + 38 * f5 * f8 + 38 * f6 * f7
    h4 = 2 * f0 * f4 + 4 * f1 * f3 + f2 * f2 + 76 * f5 * f9 + 38 * f6 * f8 + 38 * f7 * f7
    h5 = 2 * f0 * f5 + 2 * f1 * f4 + 2 * f2 * f3 + 38 * f6 * f9 + 38 * f7 * f8
    h6 = 2 * f0 * f6 + 4 * f1 * f5 + 2 * f2 * f4 + 2 * f3 * f3 + 76 * f7 * f9 + 19 * f8 * f8
    h7 = 2 * f0 * f7 + 2 * f1 * f6 + 2 * f2 * f5 + 2 * f3 * f4 + 38 * f8 * f9
    h8 = 2 * f0 * f8 + 4 * f1 * f7 + 2 * f2 * f6 + 4 * f3 * f5 + f4 * f4 + 38 * f9 * f9
    h9 = 2 * f0 * f9 + 2 * f1 * f8 + 2 * f2 * f7 + 2 * f3 * f6 + 2 * f4 * f5
    return carry(h0, h1, h2, h3, h4, h5, h6, h7, h8, h9)  # fmt: skip


@njit(cache=True, nogil=True)
def fsqn(f, n):
    for _ in range(n):
        f = fsq(f)
    return f


@njit(cache=True, nogil=True)
def canonical(f):
    """The limbs of the representative in [0, p) (the reduction of ref10's fe_tobytes)."""
    h0, h1, h2, h3, h4, h5, h6, h7, h8, h9 = carry(
        f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]
    )
    q = (19 * h9 + (1 << 24)) >> 25
    q = (h0 + q) >> 26
    q = (h1 + q) >> 25
    q = (h2 + q) >> 26
    q = (h3 + q) >> 25
    q = (h4 + q) >> 26
    q = (h5 + q) >> 25
    q = (h6 + q) >> 26
    q = (h7 + q) >> 25
    q = (h8 + q) >> 26
    q = (h9 + q) >> 25
    h0 += 19 * q
    c = h0 >> 26
    h1 += c
    h0 -= c << 26
    c = h1 >> 25
    h2 += c
    h1 -= c << 25
    c = h2 >> 26
    h3 += c
    h2 -= c << 26
    c = h3 >> 25
    h4 += c
    h3 -= c << 25
    c = h4 >> 26
    h5 += c
    h4 -= c << 26
    c = h5 >> 25
    h6 += c
    h5 -= c << 25
    c = h6 >> 26
    h7 += c
    h6 -= c << 26
    c = h7 >> 25
    h8 += c
    h7 -= c << 25
    c = h8 >> 26
    h9 += c
    h8 -= c << 26
    c = h9 >> 25
    h9 -= c << 25
    return (h0, h1, h2, h3, h4, h5, h6, h7, h8, h9)


@njit(cache=True, nogil=True)
def is_negative(f):
    return canonical(f)[0] & 1


@njit(cache=True, nogil=True)
def is_zero(f):
    c = canonical(f)
    acc = 0
    for i in range(10):
        acc |= c[i]
    return acc == 0


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
    """z^((p-5)/8) = z^(2^252 - 3), the addition chain of ref10."""
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
def load(row):
    """Limbs of a 32-byte little-endian string, top bit ignored (callers checked it)."""
    w0 = np.uint64(0)
    w1 = np.uint64(0)
    w2 = np.uint64(0)
    w3 = np.uint64(0)
    for k in range(8):
        w0 |= np.uint64(row[k]) << np.uint64(8 * k)
        w1 |= np.uint64(row[8 + k]) << np.uint64(8 * k)
        w2 |= np.uint64(row[16 + k]) << np.uint64(8 * k)
        w3 |= np.uint64(row[24 + k]) << np.uint64(8 * k)
    w3 &= np.uint64(0x7FFFFFFFFFFFFFFF)
    mask26 = np.uint64((1 << 26) - 1)
    mask25 = np.uint64((1 << 25) - 1)
    return (
        np.int64(w0 & mask26),
        np.int64((w0 >> np.uint64(26)) & mask25),
        np.int64(((w0 >> np.uint64(51)) | (w1 << np.uint64(13))) & mask26),
        np.int64((w1 >> np.uint64(13)) & mask25),
        np.int64((w1 >> np.uint64(38)) & mask26),
        np.int64(w2 & mask25),
        np.int64((w2 >> np.uint64(25)) & mask26),
        np.int64(((w2 >> np.uint64(51)) | (w3 << np.uint64(13))) & mask25),
        np.int64((w3 >> np.uint64(12)) & mask26),
        np.int64((w3 >> np.uint64(38)) & mask25),
    )


@njit(cache=True, nogil=True)
def decode(row):
    """RFC 9496 §4.3.1 Decode of a canonical non-negative s: (ok, x, y, t) affine, Z = 1."""
    s = load(row)
    ss = fsq(s)
    u1 = fsub(const(_ONE), ss)
    u2 = fadd(const(_ONE), ss)
    u2_sqr = fsq(u2)
    v = fsub(fneg(fmul(const(_D), fsq(u1))), u2_sqr)
    was_square, invsqrt = sqrt_ratio_m1(const(_ONE), fmul(v, u2_sqr))
    den_x = fmul(invsqrt, u2)
    den_y = fmul(fmul(invsqrt, den_x), v)
    x = fabs(fmul(fadd(s, s), den_x))
    y = fmul(u1, den_y)
    t = fmul(x, y)
    ok = was_square and not is_negative(t) and not is_zero(y)
    return ok, x, y, t


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
    """Extended + extended (complete for edwards25519): 9 multiplications."""
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


@njit(cache=True, nogil=True)
def double(p):
    x1, y1, z1, _ = p
    a = fsq(x1)
    b = fsq(y1)
    zz = fsq(z1)
    c = fadd(zz, zz)
    h = fadd(a, b)
    e = fsub(h, fsq(fadd(x1, y1)))
    g = fsub(a, b)
    f = fadd(c, g)
    return (fmul(e, f), fmul(g, h), fmul(f, g), fmul(e, h))


@njit(cache=True, nogil=True)
def get(arr, i, j):
    return (
        arr[i, j, 0], arr[i, j, 1], arr[i, j, 2], arr[i, j, 3], arr[i, j, 4],
        arr[i, j, 5], arr[i, j, 6], arr[i, j, 7], arr[i, j, 8], arr[i, j, 9],
    )  # fmt: skip


@njit(cache=True, nogil=True)
def put(arr, i, j, f):
    for k in range(10):
        arr[i, j, k] = f[k]


@njit(cache=True, nogil=True)
def get_point(arr, i):
    return (get(arr, i, 0), get(arr, i, 1), get(arr, i, 2), get(arr, i, 3))


@njit(cache=True, nogil=True)
def put_point(arr, i, p):
    for j in range(4):
        put(arr, i, j, p[j])


@njit(cache=True, nogil=True)
def identity():
    return (const(_ZERO), const(_ONE), const(_ONE), const(_ZERO))


@njit(cache=True, nogil=True)
def msm(scalars, elements, window, out):
    """Σ scalars[i]·elements[i]; -1 on success (coordinates in ``out``), else a bad index."""
    n = elements.shape[0]
    niels = np.empty((n, 3, 10), dtype=np.int64)
    for i in range(n):
        ok, x, y, t = decode(elements[i])
        if not ok:
            return i
        put(niels, i, 0, fadd(y, x))
        put(niels, i, 1, fsub(y, x))
        put(niels, i, 2, fmul(t, const(_D2)))
    # Signed digits in (-2^(w-1), 2^(w-1)]: half as many buckets.
    n_windows = (254 + window - 1) // window
    digits = np.zeros((n, n_windows), dtype=np.int64)
    half = 1 << (window - 1)
    full = 1 << window
    for i in range(n):
        c = 0
        for w in range(n_windows):
            value = c
            base = w * window
            for b in range(window):
                bit = base + b
                if bit < 256:
                    value += ((scalars[i, bit >> 3] >> (bit & 7)) & 1) << b
            if value > half:
                digits[i, w] = value - full
                c = 1
            else:
                digits[i, w] = value
                c = 0
    buckets = np.empty((half + 1, 4, 10), dtype=np.int64)
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
        for k in range(10):
            out[j, k] = c[k]
    return -1
