"""``fre-e2t serve tag|syn|proxy --config FILE``: run one party as an HTTPS service."""

from __future__ import annotations

import argparse
import dataclasses
import threading

from fre_protocol.cli.common import (
    add_component_flag,
    add_embedder_flag,
    with_components,
    with_embedder,
)

HELP = "run one party (S_tag, S_syn or the proxy) as an HTTPS service for one round"
ROLES = {"tag": "S_tag", "syn": "S_syn", "proxy": "proxy", "S_tag": "S_tag", "S_syn": "S_syn"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("role", choices=["tag", "syn", "proxy"], help="which party this process plays")
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="the service configuration (JSON; see `fre-e2t deploy-local` for examples)")
    parser.add_argument("--workers", type=int, default=2, help="worker threads for the role's crypto (default 2)")
    parser.add_argument("--max-head-bytes", type=int, default=16 << 10, metavar="N",
                        help="largest request line plus headers, in bytes (default 16384; more: 431)")
    parser.add_argument("--head-timeout", type=float, default=10.0, metavar="S",
                        help="seconds a request's line and headers may take to arrive (default 10; then 408)")
    parser.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                        help="seconds a user's body may take to arrive after its headers (default 30; then 408)")
    parser.add_argument("--max-user-connections", type=int, default=1024, metavar="N",
                        help="open connections without a client certificate (users), lowered to fit the "
                             "file-descriptor limit (default 1024; more: 503)")


    add_component_flag(parser, what="overrides the configuration's round settings (every party and the users "
                       "must be given the same; a user refuses a round document that differs): ",
                       absent="the configuration's names")
    add_embedder_flag(parser, absent="the configuration's round settings' embedder; every party must be given the same")


def run(args: argparse.Namespace) -> int:
    from fre_protocol.drivers.net.listener import ConnectionLimits, serve
    from fre_protocol.drivers.net.round import ServiceConfig
    from primitives.errors import InvalidParameterError

    config = ServiceConfig.load(args.config)
    config = dataclasses.replace(config, round=with_embedder(with_components(config.round, args), args))
    limits = ConnectionLimits(max_head_bytes=args.max_head_bytes, head_timeout_s=args.head_timeout,
                              body_timeout_s=args.body_timeout, max_user_connections=args.max_user_connections)
    role = ROLES[args.role]
    if config.role != role:
        raise InvalidParameterError(f"config file is for {config.role!r}, not {role!r}")
    if role == "proxy":
        from fre_protocol.drivers.net.proxy_service import ProxyService

        proxy = ProxyService(config, workers=args.workers)
        # The round document needs both servers' keys: assembled once they answer.
        threading.Thread(target=proxy.start, name="proxy-start", daemon=True).start()
        try:
            serve(proxy, require_client_cert=False, limits=limits)
        finally:
            proxy.stop()
        return 0
    if role == "S_tag":
        from fre_protocol.drivers.net.tag_service import TagService

        service = TagService(config, workers=args.workers)
    else:
        from fre_protocol.drivers.net.syn_service import SynService

        service = SynService(config, workers=args.workers)
    serve(service, require_client_cert=True, limits=limits)
    return 0
