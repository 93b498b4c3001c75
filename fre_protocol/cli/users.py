"""``fre-e2t users``: play N users (one row of X.npy each, or the authors ``--user-labels`` names under a
round whose unit of privacy is the user) against a deployment's proxy."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fre_protocol.cli.common import (
    add_component_flag,
    add_deprecated_alias,
    load_embeddings,
    positive_int,
    with_components,
)
from fre_protocol.inputs import load_user_labels

HELP = "play N users against a running deployment (the proxy's URL, CA and round settings in FILE)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="JSON with 'proxy' (URL), 'ca' (CA certificate file), 'round' (the expected "
                        "round settings) and 'test_seed' (test mode only)")
    parser.add_argument("--embeddings", required=True, metavar="X.npy", help="(N, d) float array, one row per user")
    parser.add_argument("--credentials", required=True, metavar="FILE", help="one user credential per line, N lines")
    parser.add_argument("--user-labels", metavar="FILE", default=None,
                        help="under a user-unit round: whose each row is (.npy, .txt, or .jsonl/.csv with --user-field); "
                        "one credential per user, in order of first appearance (default: none, for a round whose "
                        "unit is the text)")
    add_deprecated_alias(parser, "--users", "--user-labels")
    parser.add_argument("--user-field", metavar="NAME", default=None,
                        help="the column of a .jsonl/.csv --user-labels file (default: none; a .npy/.txt has no columns)")
    parser.add_argument("--concurrency", type=positive_int, default=64, help="requests in flight at once (default 64)")
    parser.add_argument("--deadline", type=float, default=900.0, metavar="S",
                        help="give up on a request (that user aborts) after S seconds (default 900)")
    parser.add_argument("--transcript-file", default=None, metavar="FILE",
                        help="record the users' view in this transcript store (default: not recorded)")
    add_deprecated_alias(parser, "--transcript", "--transcript-file")
    add_component_flag(parser, what="overrides the configuration's expected round settings (the proxy's round "
                       "document must name the same): ", absent="the configuration's names")


def run(args: argparse.Namespace) -> int:
    from fre_protocol.drivers.net.round import RoundSettings
    from fre_protocol.drivers.net.users_client import UsersOptions, UsersTarget, play_users
    from primitives.errors import InvalidParameterError

    try:
        config = json.loads(Path(args.config).read_text())
        settings = RoundSettings.from_dict(config["round"])
        proxy, ca = str(config["proxy"]), Path(config["ca"])
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidParameterError(f"--config {args.config!r} is not a users configuration: {exc}") from None
    settings = with_components(settings, args)
    x = load_embeddings(args.embeddings)
    users = None if args.user_labels is None else load_user_labels(args.user_labels, int(x.shape[0]), field=args.user_field)
    if (users is None) != (settings.unit.kind == "text"):
        raise InvalidParameterError(
            f"the round's unit of privacy is {settings.unit.kind!r}: --user-labels must be given exactly under a user unit"
        )
    credentials = Path(args.credentials).read_text().split()
    target = UsersTarget(
        proxy_url=proxy, ca=ca, settings=settings, credentials=credentials, test_seed=config.get("test_seed")
    )
    options = UsersOptions(
        transcript=None if args.transcript_file is None else Path(args.transcript_file),
        concurrency=args.concurrency, deadline_s=args.deadline,
    )
    report = play_users(x, target, options, users=users)
    print(
        f"fre-e2t users: {report.n_users} users; requests {report.requests}; failures {report.failures or 'none'}; "
        f"status {report.status}",
        file=sys.stdout,
    )
    return 0
