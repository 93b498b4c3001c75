"""What the compact broadcast changes for a device (issue 32): the same seeded round played twice
in one process, once with each broadcast encoding, and the device's figures side by side.

    .venv/bin/python scripts/bench_compact_broadcast.py --num-users 100000 \\
        --encodings full-list ribbon -- --driver streaming-processes --processes 2 --transcript-mode sizes

Writes the synthetic population of ``scripts/bench_streaming.py`` (clusters of ~1,000 users that
clear the threshold plus 5 % rare users, d = 768) as shards under ``--tmp``, then runs ``fre-e2t
simulate --embeddings SHARDS --seed 1 --epsilon 8`` with the flags after ``--`` (the driver, the
transcript mode), once per encoding (component ``broadcast``), and prints per encoding: released
tags, the broadcast a device downloads (bytes), its whole download, its load-and-query time, its
online time, S_syn's build time and the run's wall time. Same seed, so the same release: the
table checks it. ``--json`` writes the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

KEYS = (
    ("released tags", "n_released_buckets", "{:,.0f}"),
    ("broadcast download (B)", "download_bytes_broadcast", "{:,.0f}"),
    ("device download in all (B)", "download_bytes", "{:,.0f}"),
    ("device: load broadcast + query own tag (ms)", "user_broadcast_ms", "{:.4f}"),
    ("  … one query (µs)", "user_broadcast_query_us", "{:.1f}"),
    ("device online time (ms)", "user_online_ms", "{:.4f}"),
    ("  … phase 2 (ms)", "user_phase2_ms", "{:.4f}"),
    ("S_syn broadcast build (ms)", "broadcast_build_ms", "{:.1f}"),
    ("whole run (s)", "total_s", "{:.1f}"),
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-users", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--encodings", nargs="+", default=["full-list", "ribbon"])
    parser.add_argument("--tmp", type=Path, default=None, help="where the shards go (default: a temporary folder)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from bench_streaming import write_shards

    from fre_protocol.cli import build_parser
    from fre_protocol.cli.simulate import params_from_args, play, protocol_config
    from fre_protocol.inputs import open_embeddings
    from fre_protocol.roles.config import RoundSpec, RunOptions
    from mechanism.seeds import SeedPlan

    tmp = Path(args.tmp or tempfile.mkdtemp(prefix="fre-compact-bench-"))
    shards = tmp / f"pop-{args.num_users}-{args.dim}"
    if not shards.exists():
        write_shards(args.num_users, args.dim, 1, shards)
    sim = build_parser().parse_args(
        ["simulate", "--embeddings", str(shards), "--seed", "1", "--epsilon", "8", "--out", str(tmp / "unused"), *extra]
    )
    x = open_embeddings(sim.embeddings)
    out: dict[str, Any] = {}
    for name in args.encodings:
        spec = RoundSpec(
            params=params_from_args(sim), seeds=SeedPlan.from_seed(1), config=protocol_config(sim),
            noise=True, workers=sim.workers, components={"broadcast": name},
        )
        started = time.perf_counter()
        result, driver = play(sim, x, spec, RunOptions(out_dir=tmp / f"run-{name}", transcript=sim.transcript_mode),
                              users=None)
        costs = dict(result.costs)
        costs["wall_s_measured"] = time.perf_counter() - started
        costs["release_ids"] = result.release.ids
        out[name] = {"driver": driver, **{k: costs.get(k) for _, k, _ in KEYS}, "release_ids": result.release.ids}
        print(f"{name}: done ({driver}, {costs['wall_s_measured']:.0f} s)", file=sys.stderr)
    names = list(out)
    print(f"N = {args.num_users:,}, d = {args.dim}, driver {out[names[0]]['driver']}")
    print("| figure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for title, key, fmt in KEYS:
        cells = [fmt.format(out[n][key]) if isinstance(out[n][key], int | float) else "—" for n in names]
        print(f"| {title} | " + " | ".join(cells) + " |")
    same = all(out[n]["release_ids"] == out[names[0]]["release_ids"] for n in names)
    print(f"same released ids in every run: {same}")
    if args.json:
        args.json.write_text(json.dumps({n: {k: v for k, v in d.items() if k != "release_ids"} for n, d in out.items()},
                                        indent=2, sort_keys=True))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
