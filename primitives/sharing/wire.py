"""Canonical wire form of a share vector and input validation shared by the constructions.

A share of dimension ``d`` over a modulus ``M`` is ``d`` little-endian words of
``w = ceil(bitlen(M - 1) / 8)`` bytes each (``M = 2^32`` → 4 bytes per coordinate), with no
header: the receiver knows ``d`` and ``M`` from the public parameters, so the length is checked
exactly and every word must be ``< M``. One encoding per value keeps transcripts comparable.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from primitives.errors import DecodeError, InvalidInputError

_NATIVE = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}


def word_bytes(modulus: int) -> int:
    """Bytes per coordinate for residues in ``[0, modulus)``."""
    return max(1, ((modulus - 1).bit_length() + 7) // 8)


def modulus_text(modulus: int) -> str:
    """``2^b`` for powers of two, the decimal value otherwise (for error messages)."""
    if modulus & (modulus - 1) == 0:
        return f"2^{modulus.bit_length() - 1}"
    return str(modulus)


def as_residues(
    values: npt.ArrayLike, modulus: int, *, name: str, ndim: int | None = None
) -> npt.NDArray[np.uint64]:
    """``values`` as a uint64 array after checking it holds integers in ``[0, modulus)``.

    Accepts any integer dtype (and Python ints); floats and bools are refused rather than cast,
    because a silent cast would turn an encoding bug into a wrong aggregate.
    """
    # Python sequences go through object dtype: numpy would turn [2^64 - 1, 3] into floats.
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    if ndim is not None and arr.ndim != ndim:
        raise InvalidInputError(f"{name} must be a {ndim}-D array, got shape {arr.shape}")
    if arr.dtype == object:
        # Python ints beyond int64 (e.g. 64-bit ring elements) arrive as object arrays.
        if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in arr.flat):
            raise InvalidInputError(f"{name} must hold integers, got non-integer objects")
        if any(not 0 <= int(v) < modulus for v in arr.flat):
            raise InvalidInputError(f"{name} must hold integers in [0, {modulus_text(modulus)})")
        return np.array([int(v) for v in arr.flat], dtype=np.uint64).reshape(arr.shape)
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"{name} must hold integers, got dtype {arr.dtype}")
    # One pass for unsigned input (no lower bound to check), none when uint64 meets 2^64.
    if arr.size and not (arr.dtype == np.uint64 and modulus == 1 << 64):
        low = int(arr.min()) if arr.dtype.kind == "i" else 0
        high = int(arr.max())
        if low < 0 or high >= modulus:
            # The values are private inputs: report how many are off, never which values.
            off = int(np.count_nonzero(arr < 0)) if arr.dtype.kind == "i" else 0
            if high >= modulus:
                off += int(np.count_nonzero(arr >= np.uint64(modulus)))
            raise InvalidInputError(
                f"{name} must hold integers in [0, {modulus_text(modulus)}), "
                f"got {off} of {arr.size} entries outside it"
            )
    return arr.astype(np.uint64, copy=False)


def check_out(out: object, shape: tuple[int, ...]) -> npt.NDArray[np.uint64]:
    """An ``out=`` buffer: a uint64 array of ``shape``, or InvalidInputError saying what came."""
    if not isinstance(out, np.ndarray) or out.dtype != np.uint64 or out.shape != tuple(shape):
        got = f"{out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise InvalidInputError(f"out must be a uint64 array of shape {tuple(shape)}, got {got}")
    return out


def pack_words(row: npt.NDArray[np.uint64], width: int) -> bytes:
    """Little-endian ``width``-byte words of a 1-D uint64 array (values must already fit)."""
    if width in _NATIVE:
        return row.astype(_NATIVE[width], copy=False).tobytes()
    as_bytes = row.astype("<u8", copy=False).view(np.uint8).reshape(row.size, 8)
    return np.ascontiguousarray(as_bytes[:, :width]).tobytes()


def unpack_words(
    data: bytes, dim: int, width: int, modulus: int, *, what: str = "share"
) -> npt.NDArray[np.uint64]:
    """Inverse of :func:`pack_words` with exact length and range checks (:class:`DecodeError`).

    Messages say what was expected and what came, but never the offending value: a share word
    is secret material.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"{what} must be bytes, got {type(data).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise DecodeError(f"{what} dimension must be a positive int, got {dim!r}")
    expected = dim * width
    if len(data) != expected:
        raise DecodeError(
            f"{what} must be {expected} bytes ({dim} words of {width} bytes), got {len(data)} bytes"
        )
    if width in _NATIVE:
        out = np.frombuffer(bytes(data), dtype=_NATIVE[width]).astype(np.uint64)
    else:
        padded = np.zeros((dim, 8), dtype=np.uint8)
        padded[:, :width] = np.frombuffer(bytes(data), dtype=np.uint8).reshape(dim, width)
        out = padded.view("<u8").reshape(dim).astype(np.uint64)
    if modulus < 1 << (8 * width):
        bad = np.flatnonzero(out >= np.uint64(modulus))
        if bad.size:
            raise DecodeError(
                f"{what} word {int(bad[0])} is out of range: expected < {modulus_text(modulus)}"
                f" ({bad.size} of {dim} words out of range)"
            )
    return out


def words_from_stream(raw: bytes, count: int, bits: int) -> npt.NDArray[np.uint64]:
    """``count`` uniform residues mod ``2^bits`` from a uniform byte string.

    Uses the smallest native word (1, 2, 4 or 8 bytes) holding ``bits`` and masks the excess high
    bits; since ``2^bits`` divides ``2^(8 w)`` the result is exactly uniform. ``raw`` must hold
    ``count * stream_word_bytes(bits)`` bytes.
    """
    width = stream_word_bytes(bits)
    if len(raw) != count * width:
        raise InvalidInputError(f"need {count * width} stream bytes, got {len(raw)}")
    words = np.frombuffer(raw, dtype=_NATIVE[width]).astype(np.uint64)
    if bits < 64:
        words &= np.uint64((1 << bits) - 1)
    return words


def stream_word_bytes(bits: int) -> int:
    """Bytes of keystream consumed per residue mod ``2^bits`` (1, 2, 4 or 8)."""
    for width in (1, 2, 4, 8):
        if bits <= 8 * width:
            return width
    raise InvalidInputError(f"bits must be <= 64, got {bits}")
