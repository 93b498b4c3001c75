"""How spread out a corpus is under each embedder: the cosine of random pairs of its texts and the
norm of its mean vector (unit rows: 0 for directions spread evenly, 1 for all alike). Table 7
transfers r between embedders by matching nearest-neighbour quantiles on public texts; an
anisotropic model (every text in a narrow cone) keeps those quantiles but puts far more of the
corpus within r' of a cluster's mean, which this shows. Reads the embedding cache (a model not
cached embeds the corpus first).

    python scripts/embedder_geometry.py --embedders all-MiniLM-L6-v2,MODELS/all-mpnet-base-v2,multilingual-e5-small
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fre_protocol.text.corpora import load_corpus  # noqa: E402
from fre_protocol.text.embedder import load_embedder  # noqa: E402


def geometry(x: np.ndarray, pairs: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    i, j = rng.integers(0, len(x), pairs), rng.integers(0, len(x), pairs)
    cos = np.sum(x[i] * x[j], axis=1)
    return {"pair_cosine_mean": float(cos.mean()), "pair_cosine_p10": float(np.quantile(cos, 0.1)),
            "pair_cosine_p90": float(np.quantile(cos, 0.9)), "mean_vector_norm": float(np.linalg.norm(x.mean(axis=0)))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedders", required=True, help="comma-separated model names or folders")
    p.add_argument("--corpus", default="healthtweets")
    p.add_argument("--pairs", type=int, default=5000, help="random pairs (with replacement)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pair draw (public)")
    args = p.parse_args(argv)
    texts = list(load_corpus(corpus=args.corpus).texts)
    out = {"corpus": args.corpus, "texts": len(texts), "pairs": args.pairs, "seed": args.seed, "embedders": {}}
    for name in args.embedders.split(","):
        embedder = load_embedder(name)
        out["embedders"][embedder.model_id] = geometry(embedder.embed(texts), args.pairs, args.seed)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
