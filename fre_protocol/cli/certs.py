"""``fre-e2t certs``: a local CA and one certificate per party for a TEST deployment over TLS."""

from __future__ import annotations

import argparse

from fre_protocol.cli.common import positive_int

HELP = "write a test CA and TLS certificates for S_tag, S_syn, the proxy and the operator"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", required=True, help="directory for the PEM files (empty or absent)")
    parser.add_argument("--host", metavar="H", action="append", default=None,
                        help="a DNS name or IP address the serving certificates (S_tag, S_syn, proxy) are "
                             "valid for (the operator's, a client's, names none); repeat for "
                             "several (default: localhost and 127.0.0.1)")
    parser.add_argument("--days", type=positive_int, default=7, help="validity in days (default 7)")
    parser.add_argument("--force", action="store_true", help="write into a non-empty folder, replacing files")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from fre_protocol.drivers.net.certs import make_test_pki

    hosts = tuple(args.host) if args.host else ("localhost", "127.0.0.1")
    paths = make_test_pki(Path(args.out), hosts=hosts, valid_days=args.days, overwrite=args.force)
    print(f"CA certificate: {paths.ca}")
    print(f"CA key:         {paths.ca.with_suffix('.key')}")
    for role in paths.cert:
        cert, key = paths.for_role(role)
        print(f"{role + ':':<16}{cert} {key}")
    print(f"valid {args.days} day(s) for: {', '.join(hosts)}")
    print("These keys are unencrypted and for a TEST deployment only; do not use them in production.")
    return 0
