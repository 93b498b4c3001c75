"""Benchmark: the embedder in float32 and in bfloat16 side by side, same model, same texts, one run.

    .venv/bin/python scripts/bench_embedding.py --out runs/bench-embedding

Texts per second of each precision on healthtweets and on the default public pool (rounds
interleaved, A B A B, so drift on a shared machine hits both), the cosine between the two
precisions' embeddings of the first 1,000 tweets, and, with ``--release-texts N``, the seeded
centralized release (synthesize's MiniLM defaults at ε = 8, seed 1) on the first N tweets
embedded each way: how many released buckets the two share and how far their counts differ.
Writes ``OUT/bench.json`` and ``OUT/bench.md``; nothing is cached (every text is embedded anew).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

PRECISIONS = ("fp32", "bf16")


def rate(embedder: Any, texts: list[str]) -> float:
    start = time.perf_counter()
    embedder.embed(texts)
    return len(texts) / (time.perf_counter() - start)


def compare_releases(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """The seeded mechanism on both embeddings: shared buckets and count differences."""
    from fre_protocol.text.tuning import minilm_params
    from mechanism.fre_e2t import run_mechanism
    from mechanism.seeds import SeedPlan

    params = minilm_params(8.0)
    releases = [run_mechanism(x, params, SeedPlan.from_seed(1)) for x in (a, b)]
    counts = [{bucket.id: bucket.count for bucket in r.buckets} for r in releases]
    shared = sorted(set(counts[0]) & set(counts[1]))
    diffs = [abs(counts[0][i] - counts[1][i]) / counts[0][i] for i in shared]
    return {
        "params": params.to_dict(),
        "released_fp32": len(counts[0]),
        "released_bf16": len(counts[1]),
        "shared": len(shared),
        "max_relative_count_difference": max(diffs, default=0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory (bench.json, bench.md)")
    parser.add_argument("--tweets", type=int, default=4000, help="tweets timed per round (default 4000)")
    parser.add_argument("--pool", type=int, default=2000, help="public-pool texts timed per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per precision (default 2)")
    parser.add_argument("--release-texts", type=int, default=0,
                        help="also compare seeded releases on this many tweets (default 0: skip)")
    args = parser.parse_args()

    from fre_protocol.text.corpora import load_corpus
    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.public_pool import build_pool

    corpus = list(load_corpus(corpus="healthtweets").texts)
    sets = {"healthtweets": corpus[: args.tweets], "pool": list(build_pool(max_texts=args.pool).texts)}
    embedders = {p: SentenceTransformerEmbedder(device="cpu", precision=p, cache=False) for p in PRECISIONS}
    for e in embedders.values():
        e.embed(corpus[:64])  # load and warm up outside the clock
    rates: dict[str, dict[str, list[float]]] = {name: {p: [] for p in PRECISIONS} for name in sets}
    for _ in range(args.rounds):
        for name, texts in sets.items():
            for p, e in embedders.items():
                rates[name][p].append(rate(e, texts))
                print(f"{name:12s} {p}: {rates[name][p][-1]:7.1f} texts/s", flush=True)
    head = corpus[:1000]
    cos = (embedders["fp32"].embed(head) * embedders["bf16"].embed(head)).sum(axis=1)
    report: dict[str, Any] = {
        "command": "scripts/bench_embedding.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
        "machine": {"cores": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "texts_per_second": rates,
        "ratio_bf16_over_fp32": {n: float(np.mean(r["bf16"]) / np.mean(r["fp32"])) for n, r in rates.items()},
        "cosine_fp32_bf16_1000_tweets": {"min": float(cos.min()), "mean": float(cos.mean())},
    }
    if args.release_texts:
        texts = corpus[: args.release_texts]
        report["release"] = compare_releases(embedders["fp32"].embed(texts, progress=True),
                                             embedders["bf16"].embed(texts, progress=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = ["| texts | fp32 texts/s | bf16 texts/s | ratio |", "|---|---:|---:|---:|"]
    for name, r in rates.items():
        lines.append(f"| {name} | {np.mean(r['fp32']):.0f} | {np.mean(r['bf16']):.0f} | "
                     f"{report['ratio_bf16_over_fp32'][name]:.2f}× |")
    lines.append(f"\ncosine fp32 vs bf16, 1,000 tweets: min {cos.min():.5f}, mean {cos.mean():.6f}")
    if "release" in report:
        lines.append(f"release on {args.release_texts} tweets: {json.dumps(report['release'] | {'params': '…'})}")
    (out / "bench.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
