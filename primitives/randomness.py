"""Randomness sources: one cryptographic stream type, keyed either by the OS or by a recorded seed.

Every randomized function in fre-e2t takes a :class:`RandomSource`. Both modes draw from the same
AES-256-CTR keystream (``cryptography``, AES-NI; zero nonce, counter from 0); they differ only in
where the key comes from:

* ``RandomSource.cryptographic()`` keys the stream from ``os.urandom`` — the default for keys,
  blinds, masks, shuffles and DP noise;
* ``RandomSource.seeded(seed, label)`` derives the key from an explicit seed — test mode and
  public randomness. The mode is visible as ``source.mode`` so runs can record it.

A source is named by its *path*: a tuple of label components. ``seeded(seed, label)`` and
``cryptographic(label)`` start the one-component path ``(label,)`` (the default label ``""`` is a
component too), and ``child(label)`` appends one component. A component is any string; a ``"/"``
inside it is an ordinary character, so ``seeded(s, "a").child("b/c")``,
``seeded(s, "a/b").child("c")`` and ``seeded(s, "a/b/c")`` are three different streams.
``source.label`` shows the path joined with ``"/"`` for reading only; it is not what keys the
stream (``source.path`` is).

Seeded derivation (version 2), all lengths and integers big-endian:

1. Seed material ``M = SHA-256("fre-e2t/seed/v2" || tag || body)``, where an int ``n >= 0`` has
   tag ``"i"`` and body the minimal-length unsigned encoding of ``n`` (one byte ``00`` for 0), a
   ``bytes``/``bytearray`` has tag ``"b"`` and body the bytes, and a ``str`` has tag ``"s"`` and
   body its UTF-8 encoding. So ``1``, ``b"\\x01"`` and ``"\\x01"`` are three seeds. Booleans and
   negative integers are rejected.
2. Path encoding ``P = len_8(c_1) || c_1 || ... || len_8(c_k) || c_k`` over the path's components,
   each ``c_i`` UTF-8 encoded and ``len_8`` its byte length in 8 bytes. Each component's length
   comes before it, so ``P`` decodes back to exactly one path: different paths never share it.
3. Stream key ``K = HKDF-SHA256(IKM = M, salt = "fre-e2t/random-source/v2", info = P, L = 32)``.
4. The stream is the AES-256-CTR keystream under ``K`` with the 16-byte counter block starting at
   zero.

A seeded child keeps its parent's ``M`` and extends the path, so it is reproducible from the seed
and the full path and independent of its siblings. A cryptographic source (and every child of one)
uses 32 fresh bytes from ``os.urandom`` as ``M`` instead, so it never repeats.

Version 1 hashed the untagged seed bytes and used the ``"/"``-joined label as ``info``; runs
recorded under it do not replay under version 2.
"""

from __future__ import annotations

import hashlib
import os
from typing import Literal

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from primitives.binomial import binomial_from_uniforms
from primitives.errors import InvalidParameterError

Mode = Literal["crypto", "seeded"]
Path = tuple[str, ...]

SEED_DOMAIN = b"fre-e2t/seed/v2"
HKDF_SALT = b"fre-e2t/random-source/v2"

_TWO_POW_MINUS_53 = 2.0**-53
_CHUNK = 1 << 20


def _tagged_seed(seed: int | bytes | str) -> bytes:
    """``tag || body`` of step 1 in the module docstring: the seed's type is part of the seed."""
    if isinstance(seed, bool):
        raise InvalidParameterError(
            f"seed must be a non-negative int, bytes or str, got bool {seed!r}"
        )
    if isinstance(seed, int):
        if seed < 0:
            raise InvalidParameterError(f"seed must be a non-negative integer, got {seed}")
        return b"i" + seed.to_bytes(max(1, (seed.bit_length() + 7) // 8), "big")
    if isinstance(seed, str):
        return b"s" + seed.encode("utf-8")
    if isinstance(seed, bytes | bytearray):
        return b"b" + bytes(seed)
    raise InvalidParameterError(
        f"seed must be a non-negative int, bytes or str, got {type(seed).__name__}"
    )


def _check_label(label: object) -> str:
    if not isinstance(label, str):
        raise InvalidParameterError(f"label must be a str, got {type(label).__name__}")
    return label


def _encode_path(path: Path) -> bytes:
    """Step 2: each component as its 8-byte big-endian UTF-8 length, then its UTF-8 bytes."""
    out = bytearray()
    for component in path:
        data = component.encode("utf-8")
        out += len(data).to_bytes(8, "big")
        out += data
    return bytes(out)


def _hkdf(material: bytes, path: Path) -> bytes:
    """Step 3: the stream key for ``path`` under seed material ``material``."""
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=HKDF_SALT, info=_encode_path(path)
    ).derive(material)


class RandomSource:
    """A keyed AES-256-CTR stream with vectorized draws (bytes, integers, floats, normals...)."""

    __slots__ = ("_material", "_path", "mode", "_encryptor")

    def __init__(self, key_material: bytes, path: Path, mode: Mode) -> None:
        self._material = key_material
        self._path: Path = path
        self.mode: Mode = mode
        key = _hkdf(key_material, path)
        self._encryptor = Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor()

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def cryptographic(cls, label: str = "") -> RandomSource:
        """A stream keyed by 32 bytes from the operating system's CSPRNG."""
        return cls(os.urandom(32), (_check_label(label),), "crypto")

    @classmethod
    def seeded(cls, seed: int | bytes | str, label: str = "") -> RandomSource:
        """A reproducible stream for tests and public randomness. Record the seed with the run."""
        material = hashlib.sha256(SEED_DOMAIN + _tagged_seed(seed)).digest()
        return cls(material, (_check_label(label),), "seeded")

    def child(self, label: str) -> RandomSource:
        """An independent stream for a sub-task, one path component further down (``label`` is
        one component even if it contains "/"); seeded children are reproducible from the path."""
        path = (*self._path, _check_label(label))
        if self.mode == "crypto":
            return RandomSource(os.urandom(32), path, "crypto")
        return RandomSource(self._material, path, "seeded")

    @property
    def path(self) -> Path:
        """The label components that (with the seed) key this stream."""
        return self._path

    @property
    def label(self) -> str:
        """The path joined with "/", for reading only: different paths may show the same label."""
        return "/".join(self._path)

    def __repr__(self) -> str:  # never shows key material
        return f"RandomSource(mode={self.mode!r}, label={self.label!r})"

    # -- raw output -------------------------------------------------------------------------
    def random_bytes(self, n: int) -> bytes:
        if n < 0:
            raise InvalidParameterError(f"n must be >= 0, got {n}")
        if n <= _CHUNK:
            return self._encryptor.update(bytes(n))
        # Large single updates run at a third of the speed of 1 MiB pieces; the stream is the same.
        out = bytearray(n)
        zeros = bytes(_CHUNK)
        view = memoryview(out)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            view[start:stop] = self._encryptor.update(zeros[: stop - start])
        return bytes(out)

    def uint64(self, n: int) -> np.ndarray:
        """``n`` independent uniform 64-bit unsigned integers."""
        return np.frombuffer(self.random_bytes(8 * n), dtype="<u8").copy()

    def uint32(self, n: int) -> np.ndarray:
        return np.frombuffer(self.random_bytes(4 * n), dtype="<u4").copy()

    # -- derived distributions --------------------------------------------------------------
    def uniform(self, n: int) -> np.ndarray:
        """``n`` floats uniform on [0, 1) with 53 random bits each."""
        # Values below 2^53 convert exactly either way; numpy converts signed integers to float
        # about twice as fast as unsigned ones.
        top = np.frombuffer(self.random_bytes(8 * n), dtype="<u8") >> np.uint64(11)
        return top.view(np.int64).astype(np.float64) * _TWO_POW_MINUS_53

    def bernoulli(self, p: float, n: int) -> np.ndarray:
        """``n`` booleans, each True with probability ``p`` (exactly True for p = 1)."""
        if not 0.0 <= p <= 1.0:
            raise InvalidParameterError(f"p must be in [0, 1], got {p}")
        return self.uniform(n) < p

    def binomial(self, n: npt.ArrayLike, p: npt.ArrayLike) -> np.ndarray:
        """Binomial(n, p) draws (int64), one per entry of ``n`` and ``p`` broadcast together.

        One 53-bit uniform per draw, inverted through the binomial's distribution function
        (:func:`primitives.binomial.binomial_from_uniforms`): exact up to floating-point rounding
        of the probabilities, at O(sqrt(n·p·(1−p))) work per draw.
        """
        shape = np.broadcast_shapes(np.shape(n), np.shape(p))
        u = self.uniform(int(np.prod(shape))).reshape(shape)
        return binomial_from_uniforms(n, p, u)

    def integers_below(self, bound: int, n: int) -> np.ndarray:
        """``n`` integers uniform on {0, ..., bound-1} without modulo bias (rejection)."""
        if not 1 <= bound <= 1 << 64:
            raise InvalidParameterError(f"bound must be in [1, 2^64], got {bound}")
        if bound == 1 << 64:
            return self.uint64(n)
        limit = np.uint64(((1 << 64) // bound) * bound - 1) if bound & (bound - 1) else None
        out = np.empty(n, dtype=np.uint64)
        filled = 0
        while filled < n:
            draw = self.uint64(int((n - filled) * 1.05) + 8)
            if limit is not None:
                draw = draw[draw <= limit]
            take = min(n - filled, draw.size)
            out[filled : filled + take] = draw[:take] % np.uint64(bound)
            filled += take
        return out

    def normal(self, shape: int | tuple[int, ...]) -> np.ndarray:
        """Standard normal float64 draws (Box-Muller on 53-bit uniforms)."""
        size = int(np.prod(shape))
        half = (size + 1) // 2
        u1 = 1.0 - self.uniform(half)  # (0, 1]: log is finite
        u2 = self.uniform(half)
        radius = np.sqrt(-2.0 * np.log(u1))
        angle = 2.0 * np.pi * u2
        z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])[:size]
        return z.reshape(shape)

    def permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation of ``range(n)`` (Fisher-Yates, unbiased indices)."""
        perm = np.arange(n, dtype=np.int64)
        if n < 2:
            return perm
        # j_i uniform on {0..i} for i = n-1..1, drawn in one vectorized batch per bound range.
        bounds = np.arange(n, 1, -1, dtype=np.uint64)  # i + 1 for i = n-1 .. 1
        raw = self.uint64(bounds.size)
        # 64-bit draws reduced mod (i+1): bias <= n / 2^64, below any statistical resolution.
        js = (raw % bounds).astype(np.int64)
        for idx, i in enumerate(range(n - 1, 0, -1)):
            j = js[idx]
            perm[i], perm[j] = perm[j], perm[i]
        return perm
