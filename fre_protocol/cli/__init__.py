"""``fre-e2t`` command line: one sub-command per module in this package, imported lazily.

Each sub-command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Errors of fre-e2t become a one-line message and exit status 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from fre_protocol.cli.common import CliParser
from fre_protocol.gc_policy import relax_for_rounds
from primitives.errors import FreError

# sub-command -> module (kept explicit so `fre-e2t --help` needs no heavy import)
COMMANDS: dict[str, str] = {
    "account": "fre_protocol.cli.account",
    "mechanism": "fre_protocol.cli.mechanism_cmd",
    "simulate": "fre_protocol.cli.simulate",
    "audit": "fre_protocol.cli.audit",
    "costs": "fre_protocol.cli.costs",
    "synthesize": "fre_protocol.cli.synthesize",
    "invert": "fre_protocol.cli.invert",
    "bench-inversion": "fre_protocol.cli.bench_inversion",
    "experiment": "fre_protocol.cli.experiment",
    "setup-data": "fre_protocol.cli.setup_data",
    "certs": "fre_protocol.cli.certs",
    "serve": "fre_protocol.cli.serve",
    "users": "fre_protocol.cli.users",
    "join": "fre_protocol.cli.join",
    "deploy-local": "fre_protocol.cli.deploy_local",
    "components": "fre_protocol.cli.components_cmd",
    "web-assets": "fre_protocol.cli.web_assets",
}


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(
        prog="fre-e2t",
        description="Differentially private text synthesis with the Fre-E2T two-server protocol. "
        "The flags every command shares are listed in docs/cli.md.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CliParser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    args._argv = tuple(given)  # the exact command line, for the commands that record it
    relax_for_rounds()
    try:
        return int(args._run(args) or 0)
    except FreError as exc:
        print(f"fre-e2t {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"fre-e2t {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
