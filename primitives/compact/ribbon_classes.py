"""``ribbon-classes``: the standard ribbon of :mod:`primitives.compact.ribbon` with one bit-packed
slot array holding each released tag's fingerprint and its *count class*
(:mod:`primitives.compact.count_classes`), and the classes' floors in the broadcast itself.

Why: at 32-bit fingerprints and exact counts (``ribbon-32``) a tag costs ~50 bits, 85.6 kB for
the 13,812 tags of 10^7 users. Here a tag costs ``fingerprint_bits + class_bits`` bits (27 + 8 by
default) times ~1.03 slots per tag: 62.4 kB there, 6.3 kB for 1,372 tags. A device reads its
class's floor, at most its exact count, and sizes its noise from it (more noise than the exact
count asks for, never less; with 8 class bits the floors are the exact counts for most tags, the
rest at most ~2.6 % below them).

A key's value is ``fingerprint | class << fingerprint_bits``; the query XORs the selected slots,
checks the low ``fingerprint_bits`` against the key's fingerprint (an unreleased tag passes with
probability 2^-fingerprint_bits) and reads the class above them; a class index past the table
is an unreleased tag's garbage and answers None.

Byte format ``RCC1`` (integers little-endian):

======  ====  ==============================================================================
offset  size  field
======  ====  ==============================================================================
0       4     magic ``RCC1``
4       1     fingerprint bits: 1-32
5       1     class bits: 1-16
6       1     ribbon width: 64
7       1     reserved: 0
8       8     seed (u64)
16      4     n (u32): number of tags
20      4     m (u32): slots, >= 64 (0 when n = 0)
24      ...   the floors table (:func:`~primitives.compact.count_classes.encode_floors`)
...     ...   m slots of ``fingerprint_bits + class_bits`` bits, packed: slot i is bits
              [i·r, (i+1)·r) of the section, bit j of the section being bit j mod 8 of its
              byte j div 8 (least significant first); zero bits pad the last byte
======  ====  ==============================================================================

Each byte string has one reading and each broadcast one byte string: the loader refuses
non-zero padding bits and a floor not in its shortest varint.
"""

from __future__ import annotations

import struct
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from primitives.compact import _fuse_core as core
from primitives.compact.broadcast import (
    Released,
    _as_bytes,
    builder_inputs,
    exact_counts,
)
from primitives.compact.count_classes import (
    check_class_bits,
    class_floors,
    decode_floors,
    encode_floors,
    rounded_counts,
)
from primitives.compact.fuse import attempt_seed
from primitives.compact.ribbon import (
    RIBBON_WIDTH,
    LoadedRibbon,
    construct,
    fingerprint_of,
    xor_of,
)
from primitives.errors import DecodeError, InvalidParameterError

MAGIC = b"RCC1"
HEADER = struct.Struct("<4sBBBBQII")
MAX_FINGERPRINT_BITS = 32


def check_slot_bits(fingerprint_bits: int, class_bits: int) -> tuple[int, int]:
    if (
        isinstance(fingerprint_bits, bool)
        or not isinstance(fingerprint_bits, int)
        or not 1 <= fingerprint_bits <= MAX_FINGERPRINT_BITS
    ):
        raise InvalidParameterError(
            f"fingerprint_bits must be an integer in [1, {MAX_FINGERPRINT_BITS}], got {fingerprint_bits!r}"
        )
    return fingerprint_bits, check_class_bits(class_bits)


def pack_slots(values: npt.NDArray[np.uint64], bits: int) -> bytes:
    """``values`` (each below 2^bits) as consecutive ``bits``-bit fields, least significant first."""
    shifts = np.arange(bits, dtype=np.uint64)
    fields = ((values[:, None] >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(fields.reshape(-1), bitorder="little").tobytes()


def unpack_slots(data: bytes, count: int, bits: int) -> npt.NDArray[np.uint64]:
    """The inverse of :func:`pack_slots`."""
    fields = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")[: count * bits]
    weights = np.uint64(1) << np.arange(bits, dtype=np.uint64)
    values: npt.NDArray[np.uint64] = (fields.reshape(count, bits).astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return values


class RibbonClassesReleased(LoadedRibbon):
    """A loaded ``ribbon-classes`` broadcast. Its false-positive rate, 2^-fingerprint_bits, is an
    upper bound: a fingerprint match whose class is past the table is refused too."""

    __slots__ = ("class_bits", "floors", "slots")

    def __init__(
        self, *, seed: int, n: int, m: int, fingerprint_bits: int, class_bits: int, floors: list[int],
        slots: npt.NDArray[np.uint64], size: int,
    ) -> None:
        super().__init__(seed=seed, n=n, m=m, fingerprint_bits=fingerprint_bits, size=size)
        self.class_bits, self.floors, self.slots = class_bits, floors, slots

    def query(self, tag: bytes) -> int | None:
        """The floor of the tag's count class, or None if the tag was not released."""
        row = self.row(tag)
        if row is None:
            return None
        hash_, selected = row
        value, f = xor_of(self.slots, selected), self.fingerprint_bits
        if value & ((1 << f) - 1) != fingerprint_of(hash_, f):
            return None
        index = value >> f
        return self.floors[index] if index < len(self.floors) else None


class RibbonClassesBroadcast:
    """The released tags as one ribbon of packed (fingerprint, count class) slots."""

    __slots__ = ("fingerprint_bits", "class_bits")
    name: ClassVar[str] = "ribbon-classes"

    def __init__(self, fingerprint_bits: int = 27, class_bits: int = 8) -> None:
        self.fingerprint_bits, self.class_bits = check_slot_bits(fingerprint_bits, class_bits)

    def heard_counts(self, released: Released) -> dict[bytes, int]:
        """What a device reads for each released tag: its count's class floor."""
        pairs = exact_counts(released)
        return dict(zip(pairs, rounded_counts(pairs.values(), self.class_bits), strict=True))

    def build(self, released: Released, seed: bytes) -> bytes:
        keys, counts, _, public_seed = builder_inputs(released, seed)
        f, c = self.fingerprint_bits, self.class_bits
        floors = class_floors(counts.tolist(), c)
        if keys.size == 0:
            return HEADER.pack(MAGIC, f, c, RIBBON_WIDTH, 0, attempt_seed(public_seed, 0), 0, 0) + encode_floors([])
        # class_of for every count at once: the largest floor at or below it.
        classes = (np.searchsorted(np.array(floors, dtype=np.uint64), counts, side="right") - 1).astype(np.uint64)
        seed_, m, z = construct(keys, public_seed, lambda hashes: core.fingerprints(hashes, f) | (classes << np.uint64(f)))
        header = HEADER.pack(MAGIC, f, c, RIBBON_WIDTH, 0, seed_, int(keys.size), m)
        return header + encode_floors(floors) + pack_slots(z, f + c)

    def load(self, data: bytes) -> RibbonClassesReleased:
        data = _as_bytes(data, "ribbon-classes broadcast")
        if len(data) < HEADER.size:
            raise DecodeError(f"ribbon-classes broadcast must be at least {HEADER.size} bytes (its header), got {len(data)}")
        magic, f, c, width, reserved, seed, n, m = HEADER.unpack_from(data)
        if magic != MAGIC:
            raise DecodeError(f"ribbon-classes broadcast magic must be {MAGIC!r}, got {magic!r}")
        try:
            check_slot_bits(f, c)
        except InvalidParameterError as exc:
            raise DecodeError(f"ribbon-classes broadcast: {exc}") from None
        if width != RIBBON_WIDTH or reserved != 0:
            raise DecodeError(f"ribbon-classes broadcast width and reserved must be {RIBBON_WIDTH} and 0, got {width} and {reserved}")
        if (n == 0) != (m == 0) or (n > 0 and m < RIBBON_WIDTH):
            raise DecodeError(f"ribbon-classes broadcast of {n} tags must have 0 slots if empty, else at least {RIBBON_WIDTH}, got {m}")
        floors, offset = decode_floors(data, HEADER.size, 1 << c)
        if (n > 0) != bool(floors):
            raise DecodeError(f"ribbon-classes broadcast of {n} tags must have floors if and only if it has tags, got {len(floors)}")
        bits = f + c
        expected = offset + (m * bits + 7) // 8
        if len(data) != expected:
            raise DecodeError(
                f"ribbon-classes broadcast must be {expected} bytes (header, floors and {m} slots of {bits} bits), got {len(data)}"
            )
        if m * bits % 8 and data[-1] >> (m * bits % 8):
            raise DecodeError("ribbon-classes broadcast padding bits after the last slot must be 0")
        return RibbonClassesReleased(
            seed=seed, n=n, m=m, fingerprint_bits=f, class_bits=c, floors=floors,
            slots=unpack_slots(data[offset:], m, bits), size=len(data),
        )

    def __repr__(self) -> str:
        return f"RibbonClassesBroadcast(fingerprint_bits={self.fingerprint_bits}, class_bits={self.class_bits})"


__all__ = ["RibbonClassesBroadcast", "RibbonClassesReleased", "pack_slots", "unpack_slots"]
