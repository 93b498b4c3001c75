# mypy: ignore-errors
"""The numba kernel behind :mod:`primitives.group.vartime_numba` (imported only when it is used).

It computes, for each of n independent single-element DLEQ proofs (RFC 9497 §2.2.2, m = 1), the
four points a verifier hashes into the challenge::

    M = d0·C,   Z = d0·D,   t2 = s·G + c·pk,   t3 = s·M + c·Z

Every input is public, so the arithmetic is variable time. The field arithmetic (radix 2^51,
products with the constant factors applied to 64-bit operands), the exponentiation and Decode
come from :mod:`primitives.group._msm_kernel`. This file adds the point
formulas in "completed" form, scalar arithmetic mod L, width-w NAF recoding and an encoder. Per
proof (nothing is shared between proofs except the fixed table of the generator G):

* C, D, pk are decoded (RFC 9496 §4.3.1) after a canonical-encoding check.
* C' = 2^128·C and D' = 2^128·D are computed once, so that every multiplication by C or D runs on
  128-bit half scalars: M, Z and t3 then need 128 doublings each instead of 253. t3 is computed
  directly from C and D as (s·d0)·C + (c·d0)·D, equal to s·M + c·Z in the prime-order group.
* Straus/Shamir multi-scalar chains with signed width-5 NAF digits over per-point tables of odd
  multiples (1..15)·P in "cached" form (Y+X, Y-X, 2Z, 2d·T); s·G uses a width-8 NAF over a
  process-wide affine table of (1..127)·G.
* Encoding (RFC 9496 §4.3.2) needs an inverse square root per point. The chains compute
  Q = (k/2)·P instead of k·P, and 2Q is encoded with the inverse square root obtained from a plain
  inversion (see :func:`encode_doubles`); the four inversions share one exponentiation
  (Montgomery's trick).

Points: P2 = (X, Y, Z) projective, P3 = (X, Y, Z, T) extended (RFC 8032 §5.1.4), "completed"
(e, f, g, h) stands for the extended point (e·f, g·h, f·g, e·h): doublings and additions produce
it, and a doubling only needs its P2 part (3 multiplications instead of 4).

Limb bounds: every product input is reduced (limbs < 2^52), a sum of two reduced values, or a
difference a + 4p - b of reduced values plus at most one more reduced value, so limbs stay below
2^54; every subtrahend is reduced, so a difference never goes negative (the _msm_kernel rules).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from primitives.group import ristretto255_pure as ref
from primitives.group._msm_kernel import (
    canonical,
    const,
    dbl,
    decode,
    fabs,
    fadd,
    fmul,
    fneg,
    fsq,
    fsqn,
    fsub,
    is_negative,
    is_zero,
    limbs,
    pow22523,
)

_ONE = limbs(1)
_ZERO = limbs(0)
_D2 = limbs(ref.D2)
_SQRT_M1 = limbs(ref.SQRT_M1)
_INVSQRT_A_MINUS_D = limbs(ref.INVSQRT_A_MINUS_D)

#: Window of the per-point tables (8 odd multiples) and of the generator table (64 of them).
WINDOW = 5
BASE_WINDOW = 8
#: NAF digits kept per scalar: a b-bit scalar has at most b + 1 (b <= 253 here).
NAF_LEN = 256

# Status flags, one bit per element that fails the canonical check or Decode.
BAD_PK = 1
BAD_C = 2
BAD_D = 4

# -- scalar constants (mod L, 32-bit limbs in uint64 so that products fit) -----------------------
_MASK32 = (1 << 32) - 1
_R = 1 << 256


def _limbs32(value: int) -> np.ndarray:
    return np.array([(value >> (32 * i)) & _MASK32 for i in range(8)], dtype=np.uint64)


_L32 = _limbs32(ref.L)
#: -L^-1 mod 2^32, the Montgomery constant.
_LINV = np.uint64((-pow(ref.L, -1, 1 << 32)) % (1 << 32))
_HALF = (ref.L + 1) // 2  # 1/2 mod L
#: Montgomery multiplication by these gives x/2 (times 1 and times R respectively).
_HALF_R = _limbs32(_HALF * _R % ref.L)
_HALF_R2 = _limbs32(_HALF * _R * _R % ref.L)


def base_table() -> np.ndarray:
    """(64, 3, 5) limbs of (y+x, y-x, 2d·x·y) for the odd multiples (2j+1)·G, j < 64.

    Built once per process with the reference arithmetic (Python integers), affine so that an
    addition costs one multiplication less than with a per-proof table.
    """
    p = ref.P
    g = ref.GENERATOR
    g2 = ref.point_double(g)
    out = np.empty((1 << (BASE_WINDOW - 2), 3, 5), dtype=np.uint64)
    cur = g
    for j in range(out.shape[0]):
        x, y, z, _ = cur
        zi = pow(z, -1, p)
        x, y = x * zi % p, y * zi % p
        out[j, 0] = limbs(y + x)
        out[j, 1] = limbs(y - x)
        out[j, 2] = limbs(ref.D2 * x * y)
        cur = ref.point_add(cur, g2)
    return out


# -- bytes <-> field elements ----------------------------------------------------------------------
@njit(cache=True, nogil=True)
def load_word(b, i, k):
    w = np.uint64(0)
    for j in range(8):
        w |= np.uint64(b[i, 8 * k + j]) << np.uint64(8 * j)
    return w


@njit(cache=True, nogil=True)
def load_fe(b, i):
    """(ok, limbs) of the 32-byte field element in row i; ok = canonical (s < p, top bit clear)
    and non-negative (s even), as RFC 9496 §4.3.1 requires before decoding."""
    m = np.uint64((1 << 51) - 1)
    w0 = load_word(b, i, 0)
    w1 = load_word(b, i, 1)
    w2 = load_word(b, i, 2)
    w3 = load_word(b, i, 3)
    high = (w3 >> np.uint64(63)) != np.uint64(0)
    f = (
        w0 & m,
        ((w0 >> np.uint64(51)) | (w1 << np.uint64(13))) & m,
        ((w1 >> np.uint64(38)) | (w2 << np.uint64(26))) & m,
        ((w2 >> np.uint64(25)) | (w3 << np.uint64(39))) & m,
        (w3 >> np.uint64(12)) & m,
    )
    c = canonical(f)
    same = True
    for k in range(5):
        if c[k] != f[k]:
            same = False
    ok = same and not high and (f[0] & np.uint64(1)) == np.uint64(0)
    return ok, f


@njit(cache=True, nogil=True)
def store_fe(out, i, j, f):
    """The canonical 32 little-endian bytes of f into out[i, j]."""
    c = canonical(f)
    acc = np.uint64(0)
    bits = 0
    pos = 0
    for k in range(5):
        acc |= c[k] << np.uint64(bits)
        bits += 51
        while bits >= 8 and pos < 32:
            out[i, j, pos] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            bits -= 8
            pos += 1
    while pos < 32:
        out[i, j, pos] = np.uint8(acc & np.uint64(0xFF))
        acc >>= np.uint64(8)
        pos += 1


@njit(cache=True, nogil=True)
def load_point(b, i):
    """(ok, P3) for the encoding in row i: canonical check, then Decode (RFC 9496 §4.3.1)."""
    ok, s = load_fe(b, i)
    if not ok:
        return False, (const(_ZERO), const(_ONE), const(_ONE), const(_ZERO))
    ok, x, y, t = decode(s)
    return ok, (canonical(x), canonical(y), const(_ONE), canonical(t))


# -- field inversion and the four encodings -----------------------------------------------------
@njit(cache=True, nogil=True)
def finv(z):
    """z^(p-2) = (z^(2^252-3))^8 · z^3; zero maps to zero."""
    return fmul(fsqn(pow22523(z), 3), fmul(fsq(z), z))


@njit(cache=True, nogil=True)
def encode_doubles(pts, work, out, i):
    """Encodings of 2·Q_j for the P2 points pts[j] (RFC 9496 §4.3.2), one inversion in all.

    With E = 2XY, F = Y²-X², G = Y²+X², H = 2Z²-F, 2Q = (EH, FG, FH, EG). The Encode input is then
    u1·u2² = F⁴E²G²H²·(H²-G²) and, on the curve, H²-G² = (a-d)·E², so
    1/sqrt(u1·u2²) = ±INVSQRT_A_MINUS_D / (F²E²GH): a plain inversion instead of an inverse square
    root. The rest follows Encode step by step with invsqrt = CT_ABS of that value. A zero
    denominator means E = 0, i.e. 2Q is the identity class, whose encoding is all zeros (as
    Encode gives for invsqrt = 0).
    """
    one = const(_ONE)
    acc = one
    count = pts.shape[0]
    for j in range(count):
        x = (pts[j, 0, 0], pts[j, 0, 1], pts[j, 0, 2], pts[j, 0, 3], pts[j, 0, 4])
        y = (pts[j, 1, 0], pts[j, 1, 1], pts[j, 1, 2], pts[j, 1, 3], pts[j, 1, 4])
        z = (pts[j, 2, 0], pts[j, 2, 1], pts[j, 2, 2], pts[j, 2, 3], pts[j, 2, 4])
        xx = fsq(x)
        yy = fsq(y)
        e = fmul(fadd(x, x), y)
        f = fsub(yy, xx)
        g = fadd(yy, xx)
        zz = fsq(z)
        h = fadd(fsub(fadd(zz, zz), yy), xx)  # 2Z² - F, without subtracting an unreduced F
        den = fmul(fmul(fsq(f), fsq(e)), fmul(g, h))
        zero = is_zero(den)
        if zero:
            den = one
        for k in range(5):
            work[j, 0, k] = e[k]
            work[j, 1, k] = f[k]
            work[j, 2, k] = g[k]
            work[j, 3, k] = h[k]
            work[j, 4, k] = den[k]
            work[j, 5, k] = acc[k]  # product of the denominators before j
        work[j, 6, 0] = np.uint64(1) if zero else np.uint64(0)
        acc = fmul(acc, den)
    inv = finv(acc)
    for j in range(count - 1, -1, -1):
        prefix = (work[j, 5, 0], work[j, 5, 1], work[j, 5, 2], work[j, 5, 3], work[j, 5, 4])
        den = (work[j, 4, 0], work[j, 4, 1], work[j, 4, 2], work[j, 4, 3], work[j, 4, 4])
        inv_j = fmul(inv, prefix)
        inv = fmul(inv, den)
        if work[j, 6, 0] != np.uint64(0):
            for k in range(32):
                out[i, j, k] = np.uint8(0)
            continue
        e = (work[j, 0, 0], work[j, 0, 1], work[j, 0, 2], work[j, 0, 3], work[j, 0, 4])
        f = (work[j, 1, 0], work[j, 1, 1], work[j, 1, 2], work[j, 1, 3], work[j, 1, 4])
        g = (work[j, 2, 0], work[j, 2, 1], work[j, 2, 2], work[j, 2, 3], work[j, 2, 4])
        h = (work[j, 3, 0], work[j, 3, 1], work[j, 3, 2], work[j, 3, 3], work[j, 3, 4])
        x0 = fmul(e, h)
        y0 = fmul(f, g)
        z0 = fmul(f, h)
        t0 = fmul(e, g)
        invsqrt = canonical(fabs(fmul(const(_INVSQRT_A_MINUS_D), inv_j)))
        u1 = fmul(fadd(z0, y0), fsub(z0, y0))
        u2 = fmul(x0, y0)
        den1 = fmul(invsqrt, u1)
        den2 = fmul(invsqrt, u2)
        z_inv = fmul(fmul(den1, den2), t0)
        if is_negative(fmul(t0, z_inv)):
            xr = fmul(y0, const(_SQRT_M1))
            yr = fmul(x0, const(_SQRT_M1))
            den_inv = fmul(den1, const(_INVSQRT_A_MINUS_D))
        else:
            xr = x0
            yr = y0
            den_inv = den2
        if is_negative(fmul(xr, z_inv)):
            yr = canonical(fneg(yr))
        s = fabs(fmul(den_inv, fsub(z0, yr)))
        store_fe(out, i, j, s)


# -- point formulas ------------------------------------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def to_p3(r):
    e, f, g, h = r
    return fmul(e, f), fmul(g, h), fmul(f, g), fmul(e, h)


@njit(cache=True, nogil=True, inline="always")
def to_p2(r):
    e, f, g, h = r
    return fmul(e, f), fmul(g, h), fmul(f, g)


@njit(cache=True, nogil=True, inline="always")
def tget(tabs, t, j, k):
    return (tabs[t, j, k, 0], tabs[t, j, k, 1], tabs[t, j, k, 2], tabs[t, j, k, 3],
            tabs[t, j, k, 4])  # fmt: skip


@njit(cache=True, nogil=True, inline="always")
def add_cached(p, tabs, t, j, negate):
    """P3 + ±tabs[t, j] (cached (Y+X, Y-X, 2Z, 2d·T)) as completed: 4 multiplications."""
    x1, y1, z1, t1 = p
    if negate:
        yp = tget(tabs, t, j, 1)
        ym = tget(tabs, t, j, 0)
    else:
        yp = tget(tabs, t, j, 0)
        ym = tget(tabs, t, j, 1)
    a = fmul(fsub(y1, x1), ym)
    b = fmul(fadd(y1, x1), yp)
    c = fmul(t1, tget(tabs, t, j, 3))
    dd = fmul(z1, tget(tabs, t, j, 2))
    if negate:
        return fsub(b, a), fadd(dd, c), fsub(dd, c), fadd(b, a)
    return fsub(b, a), fsub(dd, c), fadd(dd, c), fadd(b, a)


@njit(cache=True, nogil=True, inline="always")
def add_affine(p, base, j, negate):
    """P3 + ±base[j] (affine (y+x, y-x, 2d·t)) as completed: 3 multiplications."""
    x1, y1, z1, t1 = p
    if negate:
        yp = (base[j, 1, 0], base[j, 1, 1], base[j, 1, 2], base[j, 1, 3], base[j, 1, 4])
        ym = (base[j, 0, 0], base[j, 0, 1], base[j, 0, 2], base[j, 0, 3], base[j, 0, 4])
    else:
        yp = (base[j, 0, 0], base[j, 0, 1], base[j, 0, 2], base[j, 0, 3], base[j, 0, 4])
        ym = (base[j, 1, 0], base[j, 1, 1], base[j, 1, 2], base[j, 1, 3], base[j, 1, 4])
    t2d = (base[j, 2, 0], base[j, 2, 1], base[j, 2, 2], base[j, 2, 3], base[j, 2, 4])
    a = fmul(fsub(y1, x1), ym)
    b = fmul(fadd(y1, x1), yp)
    c = fmul(t1, t2d)
    dd = fadd(z1, z1)
    if negate:
        return fsub(b, a), fadd(dd, c), fsub(dd, c), fadd(b, a)
    return fsub(b, a), fsub(dd, c), fadd(dd, c), fadd(b, a)


@njit(cache=True, nogil=True)
def put_cached(tabs, t, j, p):
    x, y, z, tt = p
    vals = (fadd(y, x), fsub(y, x), fadd(z, z), fmul(tt, const(_D2)))
    for k in range(4):
        v = vals[k]
        for m in range(5):
            tabs[t, j, k, m] = v[m]


@njit(cache=True, nogil=True)
def build_table(p, tabs, t):
    """tabs[t, j] = (2j+1)·P in cached form, j < 8."""
    put_cached(tabs, t, 0, p)
    two = to_p3(dbl(p[0], p[1], p[2]))
    x, y, z, tt = two
    two_c = (fadd(y, x), fsub(y, x), fadd(z, z), fmul(tt, const(_D2)))
    cur = p
    for j in range(1, 8):
        x1, y1, z1, t1 = cur
        a = fmul(fsub(y1, x1), two_c[1])
        b = fmul(fadd(y1, x1), two_c[0])
        c = fmul(t1, two_c[3])
        dd = fmul(z1, two_c[2])
        cur = to_p3((fsub(b, a), fsub(dd, c), fadd(dd, c), fadd(b, a)))
        put_cached(tabs, t, j, cur)


@njit(cache=True, nogil=True)
def times_2_128(p):
    """2^128·P by 128 doublings."""
    x, y, z, _ = p
    for _ in range(127):
        x, y, z = to_p2(dbl(x, y, z))
    return to_p3(dbl(x, y, z))


# -- scalars mod L -----------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def load_scalar(b, i, out, row):
    """32 little-endian bytes b[i] into eight 32-bit limbs out[row]."""
    for k in range(8):
        w = np.uint64(0)
        for j in range(4):
            w |= np.uint64(b[i, 4 * k + j]) << np.uint64(8 * j)
        out[row, k] = w


@njit(cache=True, nogil=True)
def montmul(a, b, out, t):
    """out = a·b·2^-256 mod L (CIOS Montgomery multiplication) for a, b < L; out < L."""
    mask = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    for k in range(10):
        t[k] = np.uint64(0)
    for i in range(8):
        carry = np.uint64(0)
        bi = b[i]
        for j in range(8):
            acc = t[j] + a[j] * bi + carry
            t[j] = acc & mask
            carry = acc >> s32
        acc = t[8] + carry
        t[8] = acc & mask
        t[9] = acc >> s32
        m = (t[0] * _LINV) & mask
        carry = (t[0] + m * _L32[0]) >> s32
        for j in range(1, 8):
            acc = t[j] + m * _L32[j] + carry
            t[j - 1] = acc & mask
            carry = acc >> s32
        acc = t[8] + carry
        t[7] = acc & mask
        t[8] = t[9] + (acc >> s32)
    # Here t < 2L < 2^254 (t[8] = 0): subtract L once when t >= L.
    ge = True
    for k in range(7, -1, -1):
        if t[k] != _L32[k]:
            ge = t[k] > _L32[k]
            break
    if ge:
        borrow = np.int64(0)
        for k in range(8):
            d = np.int64(t[k]) - np.int64(_L32[k]) - borrow
            if d < 0:
                d += np.int64(1) << np.int64(32)
                borrow = np.int64(1)
            else:
                borrow = np.int64(0)
            out[k] = np.uint64(d)
    else:
        for k in range(8):
            out[k] = t[k]


@njit(cache=True, nogil=True)
def naf(k, start, nbits, w, out):
    """Width-w NAF of bits [start, start + nbits) of the 256-bit k (eight 32-bit limbs).

    out[i] are odd digits |d| < 2^(w-1) or 0 with Σ out[i]·2^i equal to that bit range; no two
    non-zero digits lie closer than w. Returns the highest non-zero position (-1 for zero).
    A b-bit value has no digit above position b, so out needs nbits + 1 entries; all of it is
    cleared, so the positions above the top are zero whatever the array held before.
    """
    out[:] = 0
    full = 1 << w
    half = 1 << (w - 1)
    pos = 0
    carry = 0
    top = -1
    while pos <= nbits:
        # The w bits of the range from pos (bits past the range read as 0), plus the carry.
        a = start + pos
        idx = a >> 5
        sh = a & 31
        bits = k[idx] >> np.uint64(sh) if idx < 8 else np.uint64(0)
        if sh > 32 - w and idx + 1 < 8:
            bits |= k[idx + 1] << np.uint64(32 - sh)
        avail = nbits - pos
        if avail < w:
            bits &= (np.uint64(1) << np.uint64(avail)) - np.uint64(1)
        window = int(bits & np.uint64(full - 1)) + carry
        if window & 1 == 0:
            pos += 1
            continue
        if window < half:
            out[pos] = window
            carry = 0
        else:
            out[pos] = window - full
            carry = 1
        top = pos
        pos += w
    return top


# -- Straus chains ---------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def chain(tabs, nafs, rows, tsel, top):
    """Σ_j (Σ_i nafs[rows[j], i]·2^i)·T_j with T_j the point of table tabs[tsel[j]], as P2.

    Shared doublings (Straus): one doubling per bit position, one addition per non-zero digit.
    """
    x = const(_ZERO)
    y = const(_ONE)
    z = const(_ONE)
    for i in range(top, -1, -1):
        if i == top:  # the identity in completed form: nothing to double yet
            r = (const(_ZERO), const(_ONE), const(_ONE), const(_ONE))
        else:
            r = dbl(x, y, z)
        for j in range(len(rows)):
            d = nafs[rows[j], i]
            if d > 0:
                r = add_cached(to_p3(r), tabs, tsel[j], d >> 1, False)
            elif d < 0:
                r = add_cached(to_p3(r), tabs, tsel[j], (-d) >> 1, True)
        x, y, z = to_p2(r)
    return x, y, z


@njit(cache=True, nogil=True)
def chain_base(tabs, nafs, base, row_g, row_p, tsel, top):
    """(Σ nafs[row_g]·2^i)·G over the affine generator table + (Σ nafs[row_p]·2^i)·tabs[tsel]."""
    x = const(_ZERO)
    y = const(_ONE)
    z = const(_ONE)
    for i in range(top, -1, -1):
        if i == top:  # the identity in completed form: nothing to double yet
            r = (const(_ZERO), const(_ONE), const(_ONE), const(_ONE))
        else:
            r = dbl(x, y, z)
        d = nafs[row_g, i]
        if d > 0:
            r = add_affine(to_p3(r), base, d >> 1, False)
        elif d < 0:
            r = add_affine(to_p3(r), base, (-d) >> 1, True)
        d = nafs[row_p, i]
        if d > 0:
            r = add_cached(to_p3(r), tabs, tsel, d >> 1, False)
        elif d < 0:
            r = add_cached(to_p3(r), tabs, tsel, (-d) >> 1, True)
        x, y, z = to_p2(r)
    return x, y, z


@njit(cache=True, nogil=True)
def put_p2(pts, j, p):
    for k in range(3):
        v = p[k]
        for m in range(5):
            pts[j, k, m] = v[m]


# -- the kernels -------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def load_c_d(cc, dd, i):
    """(BAD_C | BAD_D bits, C, D) of proof i's elements."""
    ok_c, p_c = load_point(cc, i)
    ok_d, p_d = load_point(dd, i)
    flags = 0
    if not ok_c:
        flags |= BAD_C
    if not ok_d:
        flags |= BAD_D
    return flags, p_c, p_d


@njit(cache=True, nogil=True)
def clear_row(out, i):
    """Zero encodings for a proof whose elements did not decode."""
    for j in range(out.shape[1]):
        for k in range(32):
            out[i, j, k] = np.uint8(0)


@njit(cache=True, nogil=True)
def proof_points(pk, cc, dd, d0, ch, s, base, status, out):
    """M, Z, t2, t3 of n single-element proofs: out[i, 0..3] their encodings.

    ``pk, cc, dd`` (n, 32) uint8 element encodings, ``d0, ch, s`` (n, 32) uint8 scalars < L
    (little-endian), ``base`` from :func:`base_table`. status[i] is 0, or the BAD_* bits of the
    encodings of proof i that are not canonical and non-negative or do not decode (out[i] is then
    zero).
    """
    n = pk.shape[0]
    tabs = np.empty((5, 8, 4, 5), dtype=np.uint64)
    nafs = np.zeros((8, NAF_LEN), dtype=np.int64)
    sc = np.empty((8, 8), dtype=np.uint64)
    t = np.empty(10, dtype=np.uint64)
    pts = np.empty((4, 3, 5), dtype=np.uint64)
    work = np.empty((4, 7, 5), dtype=np.uint64)
    for i in range(n):
        ok_pk, p_pk = load_point(pk, i)
        flags, p_c, p_d = load_c_d(cc, dd, i)
        if not ok_pk:
            flags |= BAD_PK
        status[i] = flags
        if flags:
            clear_row(out, i)
            continue
        # Scalars, halved for encode_doubles: rows 0 d0, 1 c, 2 s; 3 d0/2, 4 d0·R/2,
        # 5 s·d0/2, 6 c·d0/2, 7 s/2 (then c/2 into row 4 once d0·R/2 is used).
        load_scalar(d0, i, sc, 0)
        load_scalar(ch, i, sc, 1)
        load_scalar(s, i, sc, 2)
        montmul(sc[0], _HALF_R, sc[3], t)
        montmul(sc[0], _HALF_R2, sc[4], t)
        montmul(sc[2], sc[4], sc[5], t)
        montmul(sc[1], sc[4], sc[6], t)
        montmul(sc[2], _HALF_R, sc[7], t)
        montmul(sc[1], _HALF_R, sc[4], t)
        top_m = max(naf(sc[3], 0, 128, WINDOW, nafs[0]), naf(sc[3], 128, 128, WINDOW, nafs[1]))
        top_3 = max(
            max(naf(sc[5], 0, 128, WINDOW, nafs[2]), naf(sc[5], 128, 128, WINDOW, nafs[3])),
            max(naf(sc[6], 0, 128, WINDOW, nafs[4]), naf(sc[6], 128, 128, WINDOW, nafs[5])),
        )
        top_2 = max(naf(sc[7], 0, 253, BASE_WINDOW, nafs[6]), naf(sc[4], 0, 253, WINDOW, nafs[7]))
        # Tables: 0 C, 1 2^128·C, 2 D, 3 2^128·D, 4 pk.
        build_table(p_c, tabs, 0)
        build_table(times_2_128(p_c), tabs, 1)
        build_table(p_d, tabs, 2)
        build_table(times_2_128(p_d), tabs, 3)
        build_table(p_pk, tabs, 4)
        put_p2(pts, 0, chain(tabs, nafs, (0, 1), (0, 1), top_m))
        put_p2(pts, 1, chain(tabs, nafs, (0, 1), (2, 3), top_m))
        put_p2(pts, 2, chain_base(tabs, nafs, base, 6, 7, 4, top_2))
        put_p2(pts, 3, chain(tabs, nafs, (2, 3, 4, 5), (0, 1, 2, 3), top_3))
        encode_doubles(pts, work, out, i)


@njit(cache=True, nogil=True)
def composite_points(cc, dd, d0, status, out):
    """M = d0·C and Z = d0·D of n single-element proofs: out[i, 0..1] their encodings.

    What a prover needs besides its secret-key products (RFC 9497 GenerateProof, m = 1: Z = k·M
    equals d0·D for D = k·C). ``cc, dd`` (n, 32) uint8 element encodings, ``d0`` (n, 32) uint8
    scalars < L; status[i] is 0, or the BAD_C | BAD_D bits (out[i] is then zero).
    """
    n = cc.shape[0]
    tabs = np.empty((2, 8, 4, 5), dtype=np.uint64)
    nafs = np.zeros((1, NAF_LEN), dtype=np.int64)
    sc = np.empty((2, 8), dtype=np.uint64)
    t = np.empty(10, dtype=np.uint64)
    pts = np.empty((2, 3, 5), dtype=np.uint64)
    work = np.empty((2, 7, 5), dtype=np.uint64)
    for i in range(n):
        flags, p_c, p_d = load_c_d(cc, dd, i)
        status[i] = flags
        if flags:
            clear_row(out, i)
            continue
        # The chains compute (d0/2)·P and encode_doubles encodes its double.
        load_scalar(d0, i, sc, 0)
        montmul(sc[0], _HALF_R, sc[1], t)
        top = naf(sc[1], 0, 253, WINDOW, nafs[0])
        build_table(p_c, tabs, 0)
        build_table(p_d, tabs, 1)
        put_p2(pts, 0, chain(tabs, nafs, (0,), (0,), top))
        put_p2(pts, 1, chain(tabs, nafs, (0,), (1,), top))
        encode_doubles(pts, work, out, i)
