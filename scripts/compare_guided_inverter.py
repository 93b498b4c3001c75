"""The guided inverter of a baseline commit against the working tree's, in one process.

A speed change is shown by a ratio against a baseline measured in the same run: both inverters
load side by side, share the embedder, the public pool and the held-out targets
(``bench-inversion``'s, a pure function of ``--targets`` and ``--seed``), are warmed up on one
target each, then invert every target in the order baseline, tree, tree, baseline, so that both
see the same load. The baseline drafts its seeds with the learned generator as it was at its
commit too. Printed (and written with ``--json``): seconds per target of each call, the
ratio tree / baseline of their sums, and the share of targets whose first text is the same.

    OMP_NUM_THREADS=2 python scripts/compare_guided_inverter.py --baseline b5eb353 --targets 12
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODULE = "fre_protocol/text/inverter_guided.py"
GENERATOR = "fre_protocol/text/prefix_generator.py"  # the drafts the search starts from
GENERATOR_NAMES = ("PrefixInverter", "trained_for")  # what MODULE imports from GENERATOR


def module_at(rev: str, path: str) -> ModuleType:
    """The module at ``path`` as it was at ``rev``, imported under another name."""
    try:
        source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as exc:
        sys.exit(f"--baseline: git has no {path} at {rev!r} ({exc.stderr.strip()})")
    module = ModuleType(f"{Path(path).stem}_baseline")
    sys.modules[module.__name__] = module  # dataclasses look their module up while it loads
    module.__file__ = str(ROOT / path)  # package data (the generator's weights) is read beside it
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)  # noqa: S102 - the project's own source at rev
    return module


def baseline_module(rev: str) -> ModuleType:
    """``inverter_guided`` as it was at ``rev``, drafting with the generator as it was at ``rev``
    (its functions read these names from the module's globals when called)."""
    module = module_at(rev, MODULE)
    if all(hasattr(module, name) for name in GENERATOR_NAMES):  # revisions before the generator lack them
        generator = module_at(rev, GENERATOR)
        for name in GENERATOR_NAMES:
            setattr(module, name, getattr(generator, name))
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="git revision whose guided inverter is the baseline")
    ap.add_argument("--targets", type=int, default=12, help="held-out healthtweets targets (default 12)")
    ap.add_argument("--seed", type=int, default=0, help="which held-out targets are drawn (default 0)")
    ap.add_argument("--json", type=Path, help="also write the result here")
    args = ap.parse_args()
    if args.targets < 2:
        ap.error(f"--targets must be >= 2, got {args.targets}")

    from fre_protocol.text import inverter_guided
    from fre_protocol.text.embedder import load_embedder
    from fre_protocol.text.inversion_bench import BenchConfig, bench_targets
    from fre_protocol.text.inverter_retrieval import RetrievalInverter
    from primitives.randomness import RandomSource

    modules = {"baseline": baseline_module(args.baseline), "tree": inverter_guided}
    embedder = load_embedder()
    config = BenchConfig(singles=args.targets, centroids=0, seed=args.seed, inverters=("guided",),
                         targets_from="healthtweets-second-half", progress=False)
    pool, _, targets = bench_targets(config, embedder)
    vectors = targets[0].vectors
    retrieval = RetrievalInverter(embedder, pool)
    inverters = {name: m.GuidedInverter(embedder, retrieval, rng=RandomSource.seeded(1, "compare"))
                 for name, m in modules.items()}
    for inverter in inverters.values():
        inverter.invert(vectors[:1])  # warm-up: models, pool index, vocabulary
    seconds: dict[str, list[float]] = {name: [] for name in inverters}
    first: dict[str, list[str]] = {}
    for name in ("baseline", "tree", "tree", "baseline"):
        t0 = time.perf_counter()
        out = inverters[name].invert(vectors)
        seconds[name].append((time.perf_counter() - t0) / len(vectors))
        first[name] = [o.texts[0] for o in out]
        print(f"{name}: {seconds[name][-1]:.2f} s per target", flush=True)
    tree = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    result = {
        "command": f"python scripts/compare_guided_inverter.py --baseline {args.baseline} --targets {args.targets} --seed {args.seed}",
        "date": time.strftime("%Y-%m-%d"), "tree": tree.stdout.strip() or None,
        "baseline": args.baseline, "targets": len(vectors), "seed": args.seed,
        "seconds_per_target": seconds,
        "ratio_tree_over_baseline": sum(seconds["tree"]) / sum(seconds["baseline"]),
        "same_first_text": float(np.mean([a == b for a, b in zip(first["baseline"], first["tree"], strict=True)])),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
