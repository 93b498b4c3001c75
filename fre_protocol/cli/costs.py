"""``fre-e2t costs``: the per-operation cost table (paper App. B.1 / Table 17, design §9) from a
protocol run on a synthetic population, printed beside the paper's figures."""

from __future__ import annotations

import argparse
import sys

from fre_protocol.cli.common import (
    add_component_flag,
    add_deprecated_alias,
    add_progress_flag,
    components_of,
    non_negative_int,
    parse_epsilon,
    positive_int,
)

HELP = "per-operation cost table of the protocol on a synthetic population (paper App. B.1)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--num-users", type=positive_int, default=100_000, metavar="N",
                        help="number of users of the synthetic population (default 100000)")
    add_deprecated_alias(parser, "--n", "--num-users")
    parser.add_argument("--dim", type=positive_int, default=768, help="embedding dimension (default 768)")
    parser.add_argument("--epsilon", type=parse_epsilon, default=8.0, help="total ε; the paper's settings are 4, 8, 16 or inf")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic population and the run (seeded test mode)")
    parser.add_argument("--workers", type=positive_int, default=2, help="server worker threads (default 2)")
    parser.add_argument("--user-workers", type=positive_int, default=1,
                        help="threads playing the users' devices (default 1: each device's time is "
                             "measured without another device's work beside it)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="output directory for costs.json and costs.md (and the run's transcript) "
                        "(default: none; the table is printed and the run's files are discarded)")
    parser.add_argument("--no-transcript", action="store_true", help="do not record the transcript (its writing time is then not measured)")
    parser.add_argument("--batched-run", type=non_negative_int, default=1024, metavar="B",
                        help="also run the same population with one DLEQ proof per B elements and "
                             "show it beside the default per-user proofs (0 or 1: skip; default 1024)")
    parser.add_argument("--no-cover-run", action="store_true",
                        help="skip the third run of the same population without phase-2 cover traffic")
    add_component_flag(parser)
    parser.add_argument("--compare", metavar="FAMILY=A,B", default=None,
                        help="run the cost table for two implementations of one component family "
                             "(e.g. channel=sealed-box,hpke) in this process on the same population, "
                             "and print both columns and the ratio B/A (only same-run ratios compare; "
                             "the batched and no-cover runs are skipped; default: none, one cost table)")
    add_progress_flag(parser, default=False)


def run(args: argparse.Namespace) -> int:
    import tempfile

    if args.compare:
        return run_compare(args)

    from fre_protocol.cost_measurement import measure
    from fre_protocol.costs import cost_table, write_reports

    with tempfile.TemporaryDirectory(prefix="fre-e2t-costs-") as tmp:
        run_dir = args.out if args.out else tmp
        costs = measure(
            args.num_users, args.dim, seed=args.seed, epsilon=args.epsilon, workers=args.workers,
            out_dir=run_dir, progress=args.progress, batched_run=args.batched_run,
            record=not args.no_transcript, user_workers=args.user_workers, no_cover_run=not args.no_cover_run,
            components=components_of(args),
        )
        sys.stdout.write(cost_table(costs, batched=costs.get("batched_run"), no_cover=costs.get("no_cover_run")))
        if args.out:
            json_path, md_path = write_reports(costs, args.out)
            print(f"wrote {json_path} and {md_path}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    """``--compare FAMILY=A,B``: a warm-up run (a tenth of the population, at most 500 users, with
    A, so one-off costs such as JIT compilation fall on neither column), then A and B on the same
    population, one after the other in this process."""
    import json
    from pathlib import Path

    from fre_protocol.cost_measurement import measure
    from fre_protocol.costs import compare_table, parse_compare
    from primitives.jsonsafe import json_safe

    family, a, b = parse_compare(args.compare)
    common = dict(
        dim=args.dim, seed=args.seed, epsilon=args.epsilon, workers=args.workers, progress=args.progress,
        batched_run=0, record=False, user_workers=args.user_workers, no_cover_run=False,
    )
    others = {f: n for f, n in (components_of(args) or {}).items() if f != family}  # --component, the rest
    measure(max(20, min(500, args.num_users // 10)), components={**others, family: a}, **common)
    columns = tuple(measure(args.num_users, components={**others, family: name}, **common) for name in (a, b))
    table = compare_table(family, (a, b), columns)
    sys.stdout.write(table)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        data = {"family": family, "A": a, "B": b, "runs": {a: columns[0], b: columns[1]}}
        (out / "costs-compare.json").write_text(json.dumps(json_safe(data), indent=2) + "\n", encoding="utf-8")
        (out / "costs-compare.md").write_text(table, encoding="utf-8")
        print(f"wrote {out / 'costs-compare.json'} and {out / 'costs-compare.md'}")
    return 0
