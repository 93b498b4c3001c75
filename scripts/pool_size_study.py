"""The public pool size study: ``fre-e2t bench-inversion`` at several ``--pool-max``, one table.

Each size runs in its own process (so its peak memory is its own) with its own empty embedding
cache (so the pool's index time is that of a cold first run), one after the other; a size whose
``bench.json`` exists is not run again. The fluency judge is fixed (``--fixed-judge``): its news
sentences are withheld from every pool, so all sizes are judged by the same judge. The guided
inverter's retrieval seeds are scored as rows of their own (``--seed-rows``).

    python scripts/pool_size_study.py --out DIR --sizes 6000,24000,96000,all \\
        --json docs/results/pool-size.json -- --targets-from healthtweets-second-half --seed 1 \\
        --singles 16 --centroids 6

Everything after ``--`` goes to every ``bench-inversion`` run. The summary (``--json``) holds per
size and per row kind ("guided", "seed"): weighted means over the targets of rules pass, E5 gain,
guide cosine and the share above the news p90 NLL, for all targets and for centroids (noise-free
and noisy) alone; seconds per centroid; pool build and index time and the index's memory; and the
E5 gain's difference from the ``--paired-against`` size, target by target (mean and standard error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fre_protocol.text.inversion_bench import weighted_mean

ROOT = Path(__file__).resolve().parents[1]
METRICS = {
    "rules_pass": "rules_pass",
    "e5_gain": "e5_gain",
    "guide_cosine": "cosine_mean",
    "guide_gain": "guide_gain",
    "share_above_news_p90": "kn_share_above_news_p90",
}


def summarise(size: str, bench: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    guided = next(k for k in bench["inverters"] if k.startswith("guided"))
    about = bench["inverters"][guided]
    out: dict[str, Any] = {
        "pool_max": size,
        "pool_texts": bench["pool"]["texts"],
        "pool_counts": bench["pool"]["counts"],
        "withheld_for_judge": bench["pool"].get("withheld_for_judge", 0),
        "pool_build_seconds": bench["pool"]["build_seconds"],
        "index_seconds": about["index_seconds"],
        "index_texts_computed": about.get("index_texts_computed"),
        "vocabulary_words": about["vocabulary_words"],
        "vocabulary_seconds": about["vocabulary_seconds"],
        "index_mib": (about["index_bytes"] + about["vocabulary_bytes"]) / 2**20,
        "peak_rss_gib": bench["peak_rss_bytes"] / 2**30,
        "held_out_available": bench["pool"]["held_out_available"],
        "seconds_wall": bench["seconds_wall"],
        "load_average_before_after": [run.get("load_before"), run.get("load_after")],
    }
    for who, label in ((guided, "guided"), (f"{guided} seed", "seed")):
        rows = [r for r in bench["rows"] if r["inverter"] == who]
        cents = [r for r in rows if r["target"] != "single"]
        out[label] = {
            "all": {name: weighted_mean(rows, key) for name, key in METRICS.items()} | {"n": sum(r["n"] for r in rows)},
            "centroids": {name: weighted_mean(cents, key) for name, key in METRICS.items()} | {"n": sum(r["n"] for r in cents)},
        }
        if label == "guided":
            out["seconds_per_centroid"] = weighted_mean(cents, "seconds_per_target")
            out["seconds_per_single"] = weighted_mean([r for r in rows if r["target"] == "single"], "seconds_per_target")
    return out


def by_kind(scores: dict[str, dict[str, list[float]]], metric: str) -> dict[str, list[float]]:
    """Per row kind ("guided", "seed"): ``metric`` of every target (one guided inverter a run)."""
    out: dict[str, list[float]] = {"guided": [], "seed": []}
    for label, values in scores.items():
        out["seed" if label.endswith(" seed") else "guided"].extend(values[metric])
    return out


def markdown(doc: dict[str, Any], against: str) -> str:
    """The summary as two markdown tables: quality per size (guided and its seeds), then cost."""
    def f(v: Any, d: int = 3) -> str:
        return "—" if v is None else f"{v:.{d}f}"

    key, cos_key = "e5_gain_minus_" + against, "guide_cosine_minus_" + against
    lines = ["| pool max | texts | rows | rules pass | e5 gain | e5 gain − " + against + " (± s.e.) | guide cos "
             "| guide cos − " + against + " (± s.e.) | > news p90 | e5 gain, centroids | guide cos, centroids |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in doc["sizes"]:
        for label in ("guided", "seed"):
            a, c = e[label]["all"], e[label]["centroids"]
            diff, cdiff = e.get(key, {}).get(label), e.get(cos_key, {}).get(label)
            lines.append(
                f"| {e['pool_max']} | {e['pool_texts']:,} | {label} | {f(a['rules_pass'], 2)} | {f(a['e5_gain'])} | "
                + (f"{diff['mean']:+.3f} ± {diff['se']:.3f}" if diff else "—")
                + f" | {f(a['guide_cosine'])} | "
                + (f"{cdiff['mean']:+.3f} ± {cdiff['se']:.3f}" if cdiff else "—")
                + f" | {f(a['share_above_news_p90'], 2)} | {f(c['e5_gain'])} | {f(c['guide_cosine'])} |"
            )
    lines += ["", "| pool max | texts | s/centroid | s/single | pool build s | index s (texts embedded) | vocabulary "
              "words, s | index + vocabulary MiB | peak RSS GiB | load avg before, after |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for e in doc["sizes"]:
        load = e["load_average_before_after"]
        lines.append(
            f"| {e['pool_max']} | {e['pool_texts']:,} | {f(e['seconds_per_centroid'], 2)} | {f(e['seconds_per_single'], 2)} | "
            f"{f(e['pool_build_seconds'], 1)} | {e['index_seconds']:.0f} ({e['index_texts_computed']:,}) | "
            f"{e['vocabulary_words']:,}, {e['vocabulary_seconds']:.0f} | {e['index_mib']:.0f} | {e['peak_rss_gib']:.2f} | "
            + (f"{load[0]:.1f}, {load[1]:.1f}" if None not in load else "—") + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="one sub-folder per size (bench output and its cache)")
    parser.add_argument("--sizes", default="6000,24000,96000,all", help="--pool-max values, comma-separated")
    parser.add_argument("--json", help="write the summary here (default: OUT/pool-size.json)")
    parser.add_argument("--missing", action="append", default=[], metavar="SIZE=REASON",
                        help="a size not measured, and why (recorded in the summary; repeatable)")
    parser.add_argument("--paired-against", default="24000",
                        help="the size every other is compared with, target by target (E5 gain; default 24000)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    summary: list[dict[str, Any]] = []
    for size in sizes:
        run_dir = out / f"pool-{size}"
        record = run_dir / "run.json"
        if not (run_dir / "bench.json").is_file():
            cmd = [sys.executable, "-m", "fre_protocol.cli", "bench-inversion", "--out", str(run_dir),
                   "--pool-max", size, "--inverters", "guided", "--seed-rows", "--fixed-judge",
                   "--cache-dir", str(out / f"cache-{size}"), "--no-progress", *extra]
            print(f"[pool {size}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            load_before = os.getloadavg()[0]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
            run = {"load_before": load_before, "load_after": os.getloadavg()[0],
                   "seconds": time.perf_counter() - t0}
            record.write_text(json.dumps(run), encoding="utf-8")
        run = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
        bench = json.loads((run_dir / "bench.json").read_text(encoding="utf-8"))
        summary.append(summarise(size, bench, run))
        print(json.dumps(summary[-1], indent=1), file=sys.stderr, flush=True)
    if args.paired_against in sizes:
        from fre_protocol.text.bench_pairs import paired, per_target_scores

        scores = {size: per_target_scores(json.loads((out / f"pool-{size}" / "bench.json").read_text(encoding="utf-8")),
                                          str(out / f"cache-{size}")) for size in sizes}
        gains = {size: by_kind(scores[size], "e5_gain") for size in sizes}
        base = gains[args.paired_against]
        for entry in summary:
            mine = gains[entry["pool_max"]]
            entry["e5_gain_minus_" + args.paired_against] = {
                label: paired(base[label], mine[label]) for label in ("guided", "seed")
            }
            entry["e5_gains_per_target"] = mine
        cosines = {size: by_kind(scores[size], "guide_cosine") for size in sizes}
        for entry in summary:
            entry["guide_cosine_minus_" + args.paired_against] = {
                label: paired(cosines[args.paired_against][label], cosines[entry["pool_max"]][label])
                for label in ("guided", "seed")
            }
    first = json.loads((out / f"pool-{sizes[0]}" / "bench.json").read_text(encoding="utf-8"))
    doc = {"bench_command_first_size": first["command"].replace(str(out), "DIR"), "bench_config": first["config"],
           "machine": first["machine"], "sizes": summary,
           "missing": dict(m.split("=", 1) for m in args.missing)}
    target = Path(args.json) if args.json else out / "pool-size.json"
    target.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(markdown(doc, args.paired_against))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
