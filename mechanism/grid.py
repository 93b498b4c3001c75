"""Public randomness of Fre-E2T: the Gaussian projection, the shifted grid, the bucket encoding.

design §3 steps 1-2 (paper §4.1, Algorithm 1, Step 1). Every party recomputes the projection
``Z ∈ R^{d×k}`` and the offsets ``o ∈ [0, L)^k`` from the public seed, then maps a user's embedding
``x`` to the bucket ``b = floor((x Z/√k − o)/L) ∈ Z^k``.

Canonical buckets. The centralized mechanism buckets a million rows in one batched matrix
product, while a user of the distributed protocol buckets one row; floating-point results of the
two differ in their last bits (BLAS picks a different kernel and summation order), which would move
a row that sits on a grid boundary into a neighbouring bucket on one path only. So the bucket of a
row is *defined* on exact arithmetic, independent of batching:

* the row is rounded to float32 (the dtype of ``Z``), so every product ``x_p·Z_pj`` is exact in
  float64 (24 + 24 significand bits);
* ``s_j`` is the correctly rounded float64 value of ``Σ_p x_p Z_pj`` (what ``math.fsum`` returns);
* ``b_j = floor(((s_j / √k) − o_j) / L)`` with float64 operations in exactly this order.

The fast path computes ``ŝ`` with a float32 BLAS product, whose forward error is bounded
rigorously (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1:
``|ŝ − s| ≤ γ_d Σ|x_p Z_pj| ≤ γ_d ‖x‖‖Z_j‖``, ``γ_d = d·u/(1 − d·u)``, for any summation order,
with or without FMA), and works in cell units ``v = ŝ/(√k·L) − o/L`` in float32. Where the
fractional part of ``v`` is farther from 0 and 1 than that bound plus the float32 rounding of
``v`` itself, ``floor(v)`` is the canonical cell. The rows with an entry closer than that (about
5 % of the rows at d = 768, k = 20) are recomputed in float64 — with its much smaller bound and the
monotone map ``s ↦ floor(((s/√k) − o)/L)`` applied to both ends of ``ŝ ± bound`` — and any
entry still ambiguous with ``math.fsum``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.errors import DecodeError, InvalidInputError, InvalidParameterError

PROJECTION_LABEL = "projection"
OFFSETS_LABEL = "offsets"

# Rows per block. A float32 block is a view of the input (no copy) and the temporaries are
# (rows × k), so blocks can be large: few BLAS calls, which matters on busy machines where every
# call pays a thread hand-off. Other dtypes are converted block by block, capped at ~64 MiB.
DEFAULT_CHUNK_ROWS = 65536
_CONVERT_BYTES = 1 << 26

_U32 = 2.0**-24  # unit roundoff of float32
_U64 = 2.0**-53  # unit roundoff of float64
# Bucket indices beyond this magnitude would overflow int64 arithmetic downstream.
_INDEX_LIMIT = 2.0**62


def single_threaded_blas() -> AbstractContextManager[object]:
    """BLAS limited to one thread (threadpoolctl) while our own threads split the work, so the
    two do not oversubscribe the cores; a no-op without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional at run time: then BLAS and our threads share the cores
        return nullcontext()
    limits: AbstractContextManager[object] = threadpool_limits(limits=1, user_api="blas")
    return limits


def _gamma(n: int, unit: float) -> float:
    """Higham's γ_n = n·u/(1 − n·u), the relative error bound of an n-term dot product."""
    nu = n * unit
    if nu >= 0.5:
        raise InvalidInputError(f"embedding dimension {n} is too large for a float error bound")
    return nu / (1.0 - nu)


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicGrid:
    """The projection matrix and the shifted grid of one release (design §3 steps 1-2)."""

    projection: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.float64]
    edge: float

    def __post_init__(self) -> None:
        z = np.asarray(self.projection)
        o = np.asarray(self.offsets)
        if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1 or z.dtype != np.float32:
            raise InvalidParameterError(
                f"projection must be a non-empty 2-D float32 array (d, k), got shape "
                f"{tuple(z.shape)} and dtype {z.dtype}"
            )
        if o.shape != (z.shape[1],) or o.dtype != np.float64:
            raise InvalidParameterError(
                f"offsets must be a float64 array of shape ({z.shape[1]},), got shape "
                f"{tuple(o.shape)} and dtype {o.dtype}"
            )
        if not (isinstance(self.edge, float | int) and math.isfinite(self.edge) and self.edge > 0):
            raise InvalidParameterError(f"edge must be a finite number > 0, got {self.edge!r}")
        if not (np.all(o >= 0) and np.all(o < self.edge)):
            raise InvalidParameterError(f"offsets must lie in [0, edge={self.edge}), got {o}")
        if not np.isfinite(z).all():
            raise InvalidParameterError("projection must be finite")
        # Read-only: a grid is shared by every party and must not drift.
        z = z.copy()
        o = o.copy()
        z.flags.writeable = False
        o.flags.writeable = False
        object.__setattr__(self, "projection", z)
        object.__setattr__(self, "offsets", o)
        object.__setattr__(self, "edge", float(self.edge))

    @classmethod
    def derive(cls, seeds: SeedPlan, dim: int, params: FreParams) -> PublicGrid:
        """Z ~ N(0, 1)^{d×k} from ``seeds.public("projection")``; o ~ U[0, L)^k from "offsets"."""
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
        z = seeds.public(PROJECTION_LABEL).normal((dim, params.k)).astype(np.float32)
        edge = params.bucket_edge
        offsets = np.asarray(seeds.public(OFFSETS_LABEL).uniform(params.k), dtype=np.float64) * edge
        # uniform() < 1, but u·L can round up to L itself; keep the half-open interval.
        offsets = np.minimum(offsets, np.nextafter(edge, 0.0))
        return cls(projection=z, offsets=offsets, edge=edge)

    # -- shapes ------------------------------------------------------------------------------
    @property
    def dim(self) -> int:
        return int(self.projection.shape[0])

    @property
    def k(self) -> int:
        return int(self.projection.shape[1])

    def _check_rows(self, x: npt.ArrayLike) -> npt.NDArray[np.floating]:
        arr = np.asarray(x)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise InvalidInputError(
                f"embeddings must have shape (n, {self.dim}), got {tuple(np.shape(x))}"
            )
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise InvalidInputError(f"embeddings must hold real numbers, got dtype {arr.dtype}")
        return arr

    def _blocks(self, n: int, chunk_rows: int) -> Iterator[tuple[int, int]]:
        if chunk_rows < 1:
            raise InvalidParameterError(f"chunk_rows must be >= 1, got {chunk_rows}")
        for start in range(0, n, chunk_rows):
            yield start, min(n, start + chunk_rows)

    # -- projection --------------------------------------------------------------------------
    def project(
        self, x: npt.ArrayLike, *, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> npt.NDArray[np.float64]:
        """``Y = X Z/√k`` (n, k), float32 products in row blocks, returned as float64.

        For display and diagnostics; bucketing uses :meth:`bucket_indices`, which is exact.
        """
        arr = self._check_rows(x)
        out = np.empty((arr.shape[0], self.k), dtype=np.float64)
        scale = math.sqrt(self.k)
        for start, stop in self._blocks(arr.shape[0], chunk_rows):
            block = np.asarray(arr[start:stop], dtype=np.float32)
            out[start:stop] = np.matmul(block, self.projection).astype(np.float64) / scale
        return out

    def _cells(self, s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """floor(((s/√k) − o)/L) as floats, with the operation order fixed (module docstring)."""
        return np.floor(((s / math.sqrt(self.k)) - self.offsets) / self.edge)

    def _bracket(
        self, s: npt.NDArray[np.float64], bound: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
        """Cells of ``s ± bound`` and where the two ends disagree (the canonical cell is unknown)."""
        # The bound is widened by relative and absolute slack so that rounding of s ± bound itself
        # cannot shrink the interval below the true error.
        widened = bound * (1.0 + 1e-6) + np.abs(s) * 4 * _U64 + np.finfo(np.float64).tiny
        lo = self._cells(s - widened)
        hi = self._cells(s + widened)
        return lo, lo != hi

    def bucket_indices(
        self,
        x: npt.ArrayLike,
        *,
        chunk_rows: int | None = None,
        on_rows: Callable[[int], None] | None = None,
        workers: int = 2,
    ) -> npt.NDArray[np.int64]:
        """Canonical bucket index ``b_i`` (n, k) of every row; independent of batching (see above).

        ``on_rows(count)`` is called after each block (progress reporting); ``workers`` threads
        process blocks in parallel.
        """
        arr = self._check_rows(x)
        n, d = arr.shape
        if chunk_rows is None:
            chunk_rows = DEFAULT_CHUNK_ROWS
            if arr.dtype != np.float32:
                chunk_rows = max(1, min(chunk_rows, _CONVERT_BYTES // (4 * d)))
        out = np.empty((n, self.k), dtype=np.int64)
        z32 = self.projection
        z64 = z32.astype(np.float64)
        z_norm = np.sqrt(np.einsum("ij,ij->j", z64, z64))
        # float32 row norms are computed with relative error <= γ_d; 1e-3 covers it with room.
        g32 = _gamma(d + 2, _U32) * (1.0 + 1e-3)
        g64 = _gamma(d + 2, _U64) * (1.0 + 1e-3)
        # Fast path in float32 cell units: v = ŝ·a + b with a = 1/(√k·L), b = −o/L. Its distance
        # from the exact G(s) = (s/√k − o)/L is at most γ_d·‖x‖‖Z_j‖·a (the product) plus a few
        # float32 roundings of |ŝ|·a ≤ ‖x‖‖Z_j‖·a and of |b| (16·u each is generous). Where the
        # fractional part of v is farther than that from 0 and 1, floor(v) is the canonical cell.
        scale = 1.0 / (math.sqrt(self.k) * self.edge)
        a32 = np.float32(scale)
        b32 = (-self.offsets / self.edge).astype(np.float32)
        row_coef = float(z_norm.max()) * scale * (g32 + 16 * _U32) * (1.0 + 1e-3)
        row_base = 16 * _U32 * (float(np.abs(b32).max()) + 2.0) + 1e-9
        def bucket_block(start: int, stop: int) -> None:
            block = np.asarray(arr[start:stop], dtype=np.float32)
            with np.errstate(invalid="ignore", over="ignore"):  # bad rows are reported below
                v = np.matmul(block, z32)
                norms = np.sqrt(np.einsum("ij,ij->i", block, block))
            # A NaN or infinite entry (or one whose square overflows) makes its row's norm
            # non-finite: one check on n numbers instead of a pass over the block.
            if not np.isfinite(norms).all():
                bad = start + int(np.flatnonzero(~np.isfinite(norms))[0])
                raise InvalidInputError(
                    f"embeddings contain NaN, infinite or overflowing values (row {bad})"
                )
            v *= a32
            v += b32
            cells = np.floor(v)
            v -= cells  # fractional part in [0, 1]; 0 whenever |v| >= 2^23 (then "unsure")
            margin = (norms.astype(np.float64) * row_coef + row_base).astype(np.float32)[:, None]
            unsure = (v < margin) | (v > 1 - margin)
            out[start:stop] = cells
            rows = np.flatnonzero(unsure.any(axis=1))
            if rows.size:
                out[start + rows] = self._exact_cells(block[rows], z64, g64 * norms[rows], z_norm)

        blocks = list(self._blocks(n, chunk_rows))
        if workers > 1 and len(blocks) > 1:
            # Blocks are independent and numpy releases the GIL in the product and the elementwise
            # passes, so two threads with single-threaded BLAS also parallelize the exactness work
            # that a multithreaded BLAS call alone leaves on one core. Results do not depend on it.
            with single_threaded_blas(), ThreadPoolExecutor(workers) as pool:
                pending = [pool.submit(bucket_block, start, stop) for start, stop in blocks]
                for (start, stop), future in zip(blocks, pending, strict=True):
                    future.result()  # re-raises the first bad block's error, in row order
                    if on_rows is not None:
                        on_rows(stop - start)
        else:
            for start, stop in blocks:
                bucket_block(start, stop)
                if on_rows is not None:
                    on_rows(stop - start)
        return out

    def _exact_cells(
        self,
        rows: npt.NDArray[np.float32],
        z64: npt.NDArray[np.float64],
        row_bound: npt.NDArray[np.float32],
        z_norm: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.int64]:
        """Canonical cells of a few rows: float64 product with its error bound, then math.fsum
        (correctly rounded) for any entry still within the bound of a boundary."""
        s64 = np.matmul(rows.astype(np.float64), z64)
        magnitude = row_bound.astype(np.float64)[:, None] * z_norm[None, :]
        cells, unsure = self._bracket(s64, magnitude)
        for r, j in zip(*np.nonzero(unsure), strict=True):
            exact = math.fsum((rows[r].astype(np.float64) * z64[:, j]).tolist())
            cells[r, j] = math.floor(
                ((exact / math.sqrt(self.k)) - float(self.offsets[j])) / self.edge
            )
        if not np.abs(cells).max(initial=0.0) < _INDEX_LIMIT:
            raise InvalidInputError(
                "embeddings are too large for the grid: a bucket index is beyond ±2^62"
            )
        return cells.astype(np.int64)


# -- canonical bucket encoding -----------------------------------------------------------------
def _as_index_array(index: npt.ArrayLike, ndim: int) -> npt.NDArray[np.int64]:
    arr = np.asarray(index)
    if arr.ndim != ndim or (ndim == 1 and arr.size == 0):
        raise InvalidInputError(
            f"bucket index must be a non-empty {ndim}-D integer array, got shape {arr.shape}"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"bucket index must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise InvalidInputError("bucket index entries must fit a signed 64-bit integer")
    return arr.astype(np.int64, copy=False)


def encode_bucket(index: npt.ArrayLike) -> bytes:
    """The canonical bytes of one bucket: its k indices as signed 64-bit big-endian integers.

    This is the VOPRF input of the protocol (design §6 step 2) and, hex-encoded, the bucket id of a
    mechanism release. Equal buckets give equal bytes; distinct buckets distinct bytes.
    """
    return _as_index_array(index, 1).astype(">i8").tobytes()


def encode_buckets(indices: npt.ArrayLike) -> list[bytes]:
    """:func:`encode_bucket` of every row of an (n, k) array, in row order (one vectorized copy)."""
    arr = _as_index_array(indices, 2)
    n, k = arr.shape
    if k == 0:
        raise InvalidInputError(f"bucket indices must have k >= 1 columns, got shape {arr.shape}")
    raw = np.ascontiguousarray(arr.astype(">i8")).tobytes()
    width = 8 * k
    return [raw[i * width : (i + 1) * width] for i in range(n)]


def decode_bucket(data: bytes, k: int | None = None) -> npt.NDArray[np.int64]:
    """Inverse of :func:`encode_bucket`; ``k`` (if given) is checked against the length."""
    if not isinstance(data, bytes | bytearray) or len(data) == 0 or len(data) % 8:
        raise DecodeError(
            f"bucket encoding must be a non-empty multiple of 8 bytes, got "
            f"{len(data) if isinstance(data, bytes | bytearray) else type(data).__name__}"
        )
    if k is not None and len(data) != 8 * k:
        raise DecodeError(f"bucket encoding must be {8 * k} bytes for k = {k}, got {len(data)}")
    return np.frombuffer(bytes(data), dtype=">i8").astype(np.int64)
