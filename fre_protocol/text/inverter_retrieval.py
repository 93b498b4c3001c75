"""Retrieval inversion: each centroid becomes the nearest texts of a *public* pool (design §7).

The offline default inverter. It works with any embedder: the pool (see
:mod:`fre_protocol.text.public_pool`) is embedded once with the same embedder (cached on disk by
the embedder), held as an (n, d) matrix with its squared norms, and each centroid is answered by
exact nearest-neighbour search in L2, ``‖c − p‖² = ‖c‖² + ‖p‖² − 2⟨c, p⟩``, blocked over centroids
so memory stays at ``block × n`` floats. ``num_texts > 1`` returns the next-nearest pool texts too
(a paraphrase-free way to get several texts per cluster).

Privacy: only pool texts can come out. The private corpus is never part of the index (the pool is
built from public sources only, and the pipeline refuses a pool file that is the private input),
so the output is a function of the DP centroid and public data alone: post-processing.

Optional refinement (``refine=True``): centroids are averages, and a single pool sentence is often
farther from an average than two neighbouring sentences joined together. For each centroid the
``refine_candidates`` nearest texts are paired (``"a b"``), the pairs are embedded, and the joined
text replaces the single nearest one when it is closer to the centroid. It needs the embedder at
inversion time (a few embeddings per centroid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.text import Inversion, check_centroids, check_num_texts
from fre_protocol.text.embedder import Embedder
from fre_protocol.text.public_pool import PublicPool
from primitives.errors import InvalidInputError, InvalidParameterError


class RetrievalInverter:
    """Nearest public-pool texts to each centroid (exact search, blocked)."""

    name = "retrieval"

    def __init__(
        self,
        embedder: Embedder | None,
        pool: PublicPool,
        *,
        pool_embeddings: npt.NDArray[np.floating] | None = None,
        refine: bool = False,
        refine_candidates: int = 4,
        block: int = 256,
    ) -> None:
        if embedder is None and pool_embeddings is None:
            raise InvalidParameterError("give an embedder or the pool's embeddings")
        if refine and embedder is None:
            raise InvalidParameterError("refine=True needs the embedder")
        if isinstance(block, bool) or block < 1:
            raise InvalidParameterError(f"block must be an integer >= 1, got {block!r}")
        if isinstance(refine_candidates, bool) or refine_candidates < 2:
            raise InvalidParameterError(f"refine_candidates must be an integer >= 2, got {refine_candidates!r}")
        self.embedder = embedder
        self.pool = pool
        self.refine = refine
        self.refine_candidates = refine_candidates
        self.block = block
        self._matrix: npt.NDArray[np.float32] | None = None
        self._sqnorms: npt.NDArray[np.float32] | None = None
        if pool_embeddings is not None:
            self._set_index(pool_embeddings)

    # -- index -----------------------------------------------------------------------------------
    def _set_index(self, embeddings: npt.NDArray[np.floating]) -> None:
        e = np.asarray(embeddings, dtype=np.float32)
        if e.ndim != 2 or e.shape[0] != len(self.pool):
            raise InvalidInputError(
                f"pool embeddings must have shape ({len(self.pool)}, d), got {tuple(e.shape)}"
            )
        if not np.isfinite(e).all():
            raise InvalidInputError("pool embeddings contain NaN or infinite values")
        self._matrix = np.ascontiguousarray(e)
        self._sqnorms = np.einsum("ij,ij->i", e, e).astype(np.float32)

    def index(self, *, progress: bool = False) -> npt.NDArray[np.float32]:
        """The pool's embeddings (computed through the embedder's cache on first use)."""
        if self._matrix is None:
            assert self.embedder is not None
            self._set_index(self.embedder.embed(list(self.pool.texts), progress=progress))
        assert self._matrix is not None
        return self._matrix

    @property
    def dim(self) -> int:
        return int(self.index().shape[1])

    # -- search ------------------------------------------------------------------------------------
    def nearest(
        self, centroids: npt.NDArray[np.floating], k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Indices (m, k) into the pool and L2 distances (m, k), nearest first."""
        matrix = self.index()
        assert self._sqnorms is not None
        c = check_centroids(centroids, matrix.shape[1]).astype(np.float32)
        m = c.shape[0]
        k = min(k, matrix.shape[0])
        idx = np.empty((m, k), dtype=np.int64)
        dist = np.empty((m, k), dtype=np.float64)
        for start in range(0, m, self.block):
            cb = c[start : start + self.block]
            d2 = self._sqnorms[None, :] - 2.0 * (cb @ matrix.T)  # + ‖c‖², added below
            if k < d2.shape[1]:
                part = np.argpartition(d2, k - 1, axis=1)[:, :k]
            else:
                part = np.tile(np.arange(d2.shape[1]), (d2.shape[0], 1))
            vals = np.take_along_axis(d2, part, axis=1)
            order = np.argsort(vals, axis=1, kind="stable")
            top = np.take_along_axis(part, order, axis=1)
            top_d2 = np.take_along_axis(vals, order, axis=1).astype(np.float64)
            top_d2 += np.einsum("ij,ij->i", cb, cb).astype(np.float64)[:, None]
            idx[start : start + len(cb)] = top
            dist[start : start + len(cb)] = np.sqrt(np.maximum(top_d2, 0.0))
        return idx, dist

    def invert(
        self, centroids: npt.NDArray[np.floating], *, num_texts: int = 1, progress: bool = False
    ) -> list[Inversion]:
        check_num_texts(num_texts)
        c = check_centroids(centroids)
        if c.shape[0] == 0:
            return []
        self.index(progress=progress)
        want = max(num_texts, self.refine_candidates if self.refine else 1)
        idx, dist = self.nearest(c, want)
        out: list[Inversion] = []
        for row in range(c.shape[0]):
            picks = idx[row, :num_texts]
            texts = [self.pool.texts[i] for i in picks]
            dists = [float(d) for d in dist[row, :num_texts]]
            sources = [self.pool.sources[i] for i in picks]
            out.append(Inversion(texts=tuple(texts), distances=tuple(dists), sources=tuple(sources)))
        if self.refine:
            out = self._refine(c, idx, out)
        return out

    def _refine(
        self,
        c: npt.NDArray[np.float64],
        idx: npt.NDArray[np.int64],
        inversions: list[Inversion],
    ) -> list[Inversion]:
        assert self.embedder is not None
        pairs: list[str] = []
        owner: list[int] = []
        for row in range(c.shape[0]):
            cand = [self.pool.texts[i] for i in idx[row, : self.refine_candidates]]
            for a in range(len(cand)):
                for b in range(a + 1, len(cand)):
                    pairs.append(f"{cand[a]} {cand[b]}")
                    owner.append(row)
        if not pairs:
            return inversions
        emb = self.embedder.embed(pairs).astype(np.float64)
        d = np.linalg.norm(emb - c[np.asarray(owner)], axis=1)
        best: dict[int, tuple[float, str]] = {}
        for j, row in enumerate(owner):
            if row not in best or d[j] < best[row][0]:
                best[row] = (float(d[j]), pairs[j])
        out: list[Inversion] = []
        for row, inv in enumerate(inversions):
            assert inv.distances is not None and inv.sources is not None
            if row in best and best[row][0] < inv.distances[0]:
                out.append(
                    Inversion(
                        texts=(best[row][1],) + inv.texts[1:],
                        distances=(best[row][0],) + inv.distances[1:],
                        sources=("pool-pair",) + inv.sources[1:],
                    )
                )
            else:
                out.append(inv)
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool_texts": len(self.pool),
            "pool_sources": self.pool.counts(),
            "refine": self.refine,
        }


def contains_only_pool_texts(inversions: Sequence[Inversion], pool: PublicPool) -> bool:
    """True iff every returned text is a pool text (or a refinement pair of pool texts)."""
    texts = set(pool.texts)
    for inv in inversions:
        for t, s in zip(inv.texts, inv.sources or ("",) * len(inv.texts), strict=True):
            if s != "pool-pair" and t not in texts:
                return False
    return True
