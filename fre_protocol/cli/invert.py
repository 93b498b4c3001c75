"""``fre-e2t invert``: embeddings in, texts out — the inversion step on its own (design §7).

Reads an (m, d) ``.npy`` array (DP centroids, or any vectors in the embedder's space), inverts
each row with the named inverter and writes one JSON object per row (per text with
``--texts-per-row N``) to ``DIR/texts.jsonl`` (:data:`OUT_FILE`, in ``--out DIR``), written
atomically. Each text is re-embedded with the same embedder, so the file says how close it came (cosine and L2 to the row as given).

Inversion is post-processing: it reads only the vectors, a public text pool and public models.
Nothing heavy is imported at module level.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.cli.common import (
    add_deprecated_alias,
    add_pool_flags,
    add_progress_flag,
    add_seeds_from_flag,
    deprecation_note,
    load_embeddings,
    pool_sources,
    positive_int,
    prepare_out_dir,
)
from fre_protocol.outputs import write_jsonl_atomic
from fre_protocol.text.inverters import DEFAULT_INVERTER, INVERTERS  # light: no model import
from primitives.errors import InvalidInputError, InvalidParameterError

HELP = "invert embeddings (e.g. DP centroids) into texts: one JSON line per row with its cosine"

CHUNK_ROWS = 16  # rows per inverter call: the progress bar advances by this much
OUT_FILE = "texts.jsonl"  # what --out DIR holds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    io = parser.add_argument_group("input and output")
    io.add_argument(
        "--embeddings", required=True, metavar="X.npy",
        help="(m, d) float array, d = the embedder's dimension. Rows need not have unit norm: each "
             "row is inverted as given (the guided inverter normalises it internally; retrieval "
             "ranks unit-norm pool texts by L2 to the row, which is the cosine ranking). An "
             "all-zero row is refused (no direction, cosine undefined)",
    )
    io.add_argument("--out", required=True, metavar="DIR",
                    help=f"output directory, created if absent: the texts go to DIR/{OUT_FILE} (written atomically)")
    add_progress_flag(io, default=True, quiet_alias=True)

    inv = parser.add_argument_group("inversion (post-processing, no privacy cost)")
    inv.add_argument("--inverter", choices=INVERTERS, default=DEFAULT_INVERTER,
                     help="guided (default): SmolLM2 steered by the embedder, from a seed (--seeds-from); "
                          "retrieval: nearest public pool texts; vec2text: local weights, gtr-t5-base only; "
                          "prefix: the learned generator alone (all-MiniLM-L6-v2 only)")
    inv.add_argument("--embedder", metavar="NAME_OR_DIR",
                     help="sentence-transformers model folder or name (default: packaged all-MiniLM-L6-v2); "
                          "must be the model that made the embeddings")
    inv.add_argument("--cache-dir", metavar="D", help="embedding cache (default: $FRE_E2T_CACHE or ~/.cache/fre-e2t)")
    inv.add_argument("--search-budget", metavar="SPEC",
                     help="guided only: the inverter's search budget, a preset (small, default, large) or "
                          "key=value pairs (rounds, beam, top_k, max_tokens, samples, keywords, fluency, finish, plain_fluency, soft_prompt) "
                          "(default: the preset default)")
    add_deprecated_alias(inv, "--budget", "--search-budget")
    add_seeds_from_flag(inv)
    inv.add_argument("--seed", type=int, metavar="S",
                     help="seeded TEST mode: the guided search's sampling is reproducible from S "
                          "(default: cryptographic randomness)")
    inv.add_argument("--texts-per-row", type=positive_int, default=1, metavar="N",
                     help="N texts per row, best first (one JSON line each, with its rank) (default: 1)")
    add_pool_flags(inv)
    inv.add_argument("--vec2text-dir", metavar="DIR",
                     help="local vec2text weights (DIR/inversion, DIR/corrector) (default: none; --inverter vec2text needs it)")
    inv.add_argument("--vec2text-steps", type=int, default=20, help="vec2text correction steps")
    inv.add_argument("--vec2text-beam", type=int, default=0, help="vec2text sequence beam width")


def out_file(path: str) -> Path:
    """``--out DIR``'s :data:`OUT_FILE`. An ``--out FILE.jsonl`` (the spelling of the last release)
    is still written as such, with a deprecation note, when its folder exists."""
    out = Path(path)
    if out.suffix == ".jsonl" and not out.is_dir() and out.parent.is_dir():
        deprecation_note("fre-e2t invert", "--out FILE.jsonl", f"--out DIR (the texts go to DIR/{OUT_FILE})")
        return out
    return prepare_out_dir(out) / OUT_FILE


def check_rows(x: npt.NDArray[np.floating], dim: int) -> None:
    """Rows of the embedder's dimension, none of them all zeros."""
    if x.shape[1] != dim:
        raise InvalidInputError(
            f"--embeddings rows must have the embedder's dimension {dim}, got {x.shape[1]} "
            f"(shape {tuple(x.shape)}); use the --embedder that made them"
        )
    norms = np.linalg.norm(x, axis=1)
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise InvalidInputError(
            f"--embeddings row {int(zero[0])} is all zeros ({zero.size} such rows): it has no "
            "direction, so no text can be chosen for it and its cosine is undefined"
        )


def cosines(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Row-wise cosine of two (m, d) arrays with non-zero rows."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    num = np.einsum("ij,ij->i", a64, b64)
    return num / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1))


def records(
    x: npt.NDArray[np.floating], inversions: Sequence[Any], embedder: Any, *, texts_per_row: int
) -> list[dict[str, Any]]:
    """One record per (row, text): the text, its cosine and L2 to the row, the seed if any."""
    texts = [t for inv in inversions for t in inv.texts]
    seeds = [inv.seed for inv in inversions if inv.seed is not None]
    emb = embedder.embed(texts + seeds).astype(np.float64)
    seed_emb = iter(emb[len(texts):])
    out: list[dict[str, Any]] = []
    at = 0
    for row, inv in enumerate(inversions):
        target = np.asarray(x[row], dtype=np.float64)[None, :]
        e = emb[at : at + len(inv.texts)]
        at += len(inv.texts)
        cos = cosines(e, np.repeat(target, len(e), axis=0))
        dist = np.linalg.norm(e - target, axis=1)
        seed_fields: dict[str, Any] = {}
        if inv.seed is not None:
            s = next(seed_emb)[None, :]
            seed_fields = {"seed": inv.seed, "seed_cosine": float(cosines(s, target)[0])}
            if inv.seed_source is not None:
                seed_fields["seed_source"] = inv.seed_source
        for rank, text in enumerate(inv.texts):
            rec: dict[str, Any] = {"row": row}
            if texts_per_row > 1:
                rec["rank"] = rank + 1
            rec.update(text=text, cosine=float(cos[rank]), distance=float(dist[rank]))
            if inv.sources is not None:
                rec["source"] = inv.sources[rank]
            rec.update(seed_fields)
            out.append(rec)
    return out


def pool_options(args: argparse.Namespace) -> Any:
    """The public pool flags (as ``synthesize`` has them) as :class:`PoolOptions`."""
    from fre_protocol.text.inverters import PoolOptions

    return PoolOptions(
        sources=pool_sources(args), files=tuple(args.pool_file), field_name=args.pool_field,
        max_texts=args.pool_max or None,
    )


def invert_rows(
    inverter: Any, x: npt.NDArray[np.floating], *, num_texts: int, progress: bool
) -> list[Any]:
    """Invert in chunks of :data:`CHUNK_ROWS` rows under one progress bar (the first call may
    embed the pool: its own bar shows that)."""
    from tqdm.auto import tqdm

    out: list[Any] = []
    with tqdm(total=x.shape[0], desc="invert", unit="row", disable=not progress) as bar:
        for start in range(0, x.shape[0], CHUNK_ROWS):
            chunk = np.asarray(x[start : start + CHUNK_ROWS], dtype=np.float64)
            out.extend(inverter.invert(chunk, num_texts=num_texts, progress=progress and start == 0))
            bar.update(chunk.shape[0])
    return out


def run(args: argparse.Namespace) -> int:
    from fre_protocol.text.carriers import require_text_extra
    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.inverters import build_inverter
    from primitives.randomness import RandomSource

    require_text_extra("inversion")
    if args.search_budget is not None and args.inverter != "guided":
        raise InvalidParameterError(
            f"--search-budget applies to --inverter guided only, got --inverter {args.inverter}"
        )
    x = load_embeddings(args.embeddings)
    if args.seed is not None:
        print("note: --seed runs in seeded TEST mode (the search is reproducible); not for deployment",
              file=sys.stderr)
        rng = RandomSource.seeded(args.seed, "invert")
    else:
        rng = RandomSource.cryptographic("invert")
    embedder = SentenceTransformerEmbedder(args.embedder, cache_dir=args.cache_dir)
    check_rows(x, embedder.dim)
    out = out_file(args.out)
    inverter = build_inverter(
        args.inverter, embedder, pool=pool_options(args), budget=args.search_budget, rng=rng,
        vec2text_dir=args.vec2text_dir, vec2text_steps=args.vec2text_steps,
        vec2text_beam=args.vec2text_beam, seeds_from=args.seeds_from,
    )
    inversions = invert_rows(inverter, x, num_texts=args.texts_per_row, progress=args.progress)
    rows = records(x, inversions, embedder, texts_per_row=args.texts_per_row)
    write_jsonl_atomic(out, rows)
    cos = np.array([r["cosine"] for r in rows if r.get("rank", 1) == 1])
    print(
        f"wrote {len(rows)} texts for {x.shape[0]} rows to {str(out)!r} "
        f"({args.inverter}; cosine to the row: mean {cos.mean():.3f}, median {np.median(cos):.3f})",
        file=sys.stderr,
    )
    return 0
