"""``fre-e2t audit RUN``: what each party saw, leak checks, the release recomputed from S_syn's
view, and the run's privacy ledger. Exits 1 when a check fails."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "audit a recorded protocol run: per-party views, leak checks, release recomputation, ledger"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "run", metavar="RUN",
        help="run directory (with transcript.sqlite, or a deployment's transcripts/ with one store per party) "
        "or the transcript file",
    )
    parser.add_argument(
        "--embeddings", metavar="X.npy",
        help="the run's embeddings: enables the exact search for raw embeddings and bucket indices "
        "(default: none; that search is skipped)",
    )
    parser.add_argument(
        "--user-ids", metavar="FILE",
        help="text file, one user identifier per line, that must not appear in any server/proxy view "
        "(default: none; that check is skipped)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    from fre_protocol.audit import audit_run, render
    from fre_protocol.cli.common import load_embeddings

    x = load_embeddings(args.embeddings) if args.embeddings else None
    user_ids = None
    if args.user_ids:
        lines = Path(args.user_ids).read_text(encoding="utf-8").splitlines()
        user_ids = [line.strip().encode("utf-8") for line in lines if len(line.strip()) >= 4]
    from mechanism.run_files import TRANSCRIPT_FILE, TRANSCRIPTS_DIR

    run_dir = Path(args.run)
    if (run_dir / TRANSCRIPTS_DIR).is_dir() and not (run_dir / TRANSCRIPT_FILE).exists():
        # A deployment: one store per party.
        from fre_protocol.drivers.net.transcript import audit_deployment

        report = audit_deployment(run_dir, embeddings=x, user_ids=user_ids)
    else:
        report = audit_run(args.run, embeddings=x, user_ids=user_ids)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        sys.stdout.write(render(report))
    return 0 if report.passed else 1
