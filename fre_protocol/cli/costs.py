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
    add_progress_flag(parser, default=False)


def run(args: argparse.Namespace) -> int:
    import tempfile

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
