"""Known answers for float results that hold on every CPU.

NumPy and the BLAS under it choose their SIMD kernels by CPU (AVX2, AVX-512): a sum or a
transcendental function may differ in its last bits from one machine to the next, so a SHA-256 of
float bytes is a known answer for one kind of machine only. A :func:`fingerprint` keeps what is
exact — integers, strings, shapes and structure — in a SHA-256, and reduces every float to a few
fixed integer-weighted sums, each taken exactly (``math.fsum``). :func:`assert_matches` compares
those sums with a relative tolerance (1e-6) fifty times what other kernels change (numpy limited
to SSE, ``NPY_DISABLE_CPU_FEATURES=X86_V3``, moved the releases' sums by up to 2e-8: float32
values differ in their last bits) and far below a real change: a different draw, order or
formula moves them by much more, and so does changing one value by 1e-3.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SUMS = 4
TOLERANCE = 1e-6
_WEIGHT_SEED = 20261206  # integer weights: Generator.integers is exact and the same on every platform


def fingerprint(*parts: Any) -> tuple[str, tuple[float, ...]]:
    """SHA-256 of the exact content of ``parts`` (nested dicts, lists, arrays, scalars), and
    :data:`SUMS` integer-weighted sums of their finite floats, taken in order."""
    h = hashlib.sha256()
    floats: list[np.ndarray] = []
    for part in parts:
        _walk(part, h, floats)
    values = np.concatenate(floats) if floats else np.zeros(0)
    weights = np.random.default_rng(_WEIGHT_SEED).integers(-8, 9, size=(SUMS, values.size))
    return h.hexdigest(), tuple(math.fsum((w * values).tolist()) for w in weights)


def assert_matches(got: tuple[str, tuple[float, ...]], expected: tuple[str, tuple[float, ...]]) -> None:
    assert got[0] == expected[0], f"exact content differs: {got[0]} != {expected[0]}"
    assert np.allclose(got[1], expected[1], rtol=TOLERANCE, atol=TOLERANCE), f"float sums differ: {got[1]} != {expected[1]}"


def _walk(x: Any, h: Any, floats: list[np.ndarray]) -> None:
    if isinstance(x, np.ndarray):
        h.update(f"array{x.shape}{x.dtype.kind}".encode())
        if x.dtype.kind == "f":
            _floats(x.astype(np.float64).ravel(), h, floats)
        else:
            h.update(np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<")).tobytes())
    elif isinstance(x, (float, np.floating)):
        _floats(np.array([float(x)]), h, floats)
    elif isinstance(x, Mapping):
        h.update(b"{")
        for key in sorted(x, key=str):
            h.update(json.dumps(str(key)).encode())
            _walk(x[key], h, floats)
        h.update(b"}")
    elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        h.update(b"[")
        for v in x:
            _walk(v, h, floats)
        h.update(b"]")
    else:  # int, bool, str, None: exact
        h.update(json.dumps(x.item() if isinstance(x, np.generic) else x).encode())


def _floats(values: np.ndarray, h: Any, floats: list[np.ndarray]) -> None:
    """Finite values go to the sums; where a value is not finite, and which, is exact content."""
    finite = np.isfinite(values)
    h.update(b"f" + np.packbits(finite).tobytes() + repr(values[~finite].tolist()).encode())
    floats.append(values[finite])
