"""Count classes: the released counts rounded down to one of at most 2^bits public floors, so a
compact broadcast stores a class index of ``bits`` bits per tag instead of the count itself.

A device reads its tag's class and takes the class's floor as its count. Rounding *down* is
what keeps privacy: the noise plan sizes each bucket's noise from the floor
(:class:`~fre_protocol.roles.noise_plan.CountSizing`), so each contributor adds at least the
noise its exact count would ask for, never less. What it costs is accuracy: a bucket whose count
is ``n`` carries ``n / floor(n)`` times the noise variance it needs.

The floors are a function of the released counts only (DP outputs), so they are public and are
sent in the broadcast itself: a device never recomputes them. They are the distinct counts
themselves when there are at most 2^bits of them (every count exact); otherwise, for
``k = 0 … K−1`` (``K = 2^bits``), the largest released count at or below the geometric point
``lo^((K−1−k)/(K−1)) · hi^(k/(K−1))`` between the smallest and largest counts. The points are
found with integer arithmetic (``x^(K−1) ≤ lo^(K−1−k)·hi^k``), so every machine, and the audit,
builds the same floors; the smallest and largest counts are always floors (exact).

Table format (``encode_floors``): a u16 count of floors, then the first floor and the positive
differences between consecutive floors, each an unsigned LEB128 varint.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence

from primitives.errors import DecodeError, InvalidParameterError

#: The most class bits a broadcast may use (2^16 floors).
MAX_CLASS_BITS = 16
_COUNT = struct.Struct("<H")


def check_class_bits(bits: int) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_CLASS_BITS:
        raise InvalidParameterError(f"class_bits must be an integer in [1, {MAX_CLASS_BITS}], got {bits!r}")
    return bits


def _geometric_point(lo: int, hi: int, k: int, last: int) -> int:
    """⌊lo^((last−k)/last) · hi^(k/last)⌋ exactly: the largest x with x^last ≤ lo^(last−k)·hi^k."""
    bound = lo ** (last - k) * hi**k
    low, high = lo, hi  # the point lies between the two counts
    while low < high:
        mid = (low + high + 1) // 2
        if mid**last <= bound:
            low = mid
        else:
            high = mid - 1
    return low


def class_floors(counts: Iterable[int], bits: int) -> list[int]:
    """The public floors (increasing, distinct) of ``counts`` at ``bits`` class bits."""
    k_max = 1 << check_class_bits(bits)
    values = sorted(set(int(c) for c in counts))
    if len(values) <= k_max:
        return values
    lo, hi, last = values[0], values[-1], k_max - 1
    floors: list[int] = []
    for k in range(k_max):
        point = _geometric_point(lo, hi, k, last)
        floor = values[bisect.bisect_right(values, point) - 1]
        if not floors or floor > floors[-1]:
            floors.append(floor)
    return floors


def class_of(count: int, floors: Sequence[int]) -> int:
    """The index of the largest floor at or below ``count`` (``count`` ≥ the first floor)."""
    index = bisect.bisect_right(floors, int(count)) - 1
    if index < 0:
        raise InvalidParameterError(f"count must be at least the smallest floor {floors[0]}, got {count}")
    return index


def rounded_counts(counts: Iterable[int], bits: int) -> list[int]:
    """Each count rounded down to its class floor (what a device reads for it)."""
    counts = [int(c) for c in counts]
    floors = class_floors(counts, bits)
    return [floors[class_of(c, floors)] for c in counts]


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_floors(floors: Sequence[int]) -> bytes:
    """The floors table's bytes (module docstring)."""
    out = bytearray(_COUNT.pack(len(floors)))
    previous = 0
    for floor in floors:
        out += _varint(floor - previous)
        previous = floor
    return bytes(out)


def decode_floors(data: bytes, offset: int, max_floors: int) -> tuple[list[int], int]:
    """(floors, offset after the table) from ``data`` at ``offset``; malformed bytes raise
    :class:`~primitives.errors.DecodeError`."""
    if len(data) < offset + _COUNT.size:
        raise DecodeError("count-class table must start with its u16 length, got too few bytes")
    (k,) = _COUNT.unpack_from(data, offset)
    if k > max_floors:
        raise DecodeError(f"count-class table must hold at most {max_floors} floors, got {k}")
    pos, floors, previous = offset + _COUNT.size, [], 0
    for i in range(k):
        value, shift = 0, 0
        while True:
            # One encoding per table: at most 5 bytes, and no trailing zero group.
            if pos >= len(data) or shift > 28:
                raise DecodeError(f"count-class table floor {i} is truncated or longer than 5 bytes")
            byte = data[pos]
            pos += 1
            if byte == 0 and shift:
                raise DecodeError(f"count-class table floor {i} is not in its shortest encoding")
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if value == 0 and i > 0 or previous + value >= 1 << 32 or (i == 0 and value == 0):
            raise DecodeError(f"count-class floors must increase from 1 below 2^32, got {previous + value} at {i}")
        previous += value
        floors.append(previous)
    return floors, pos


__all__ = [
    "MAX_CLASS_BITS", "check_class_bits", "class_floors", "class_of", "decode_floors", "encode_floors",
    "rounded_counts",
]
