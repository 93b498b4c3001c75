"""``fre-e2t deploy-local``: S_tag, S_syn and the proxy as HTTPS services on localhost (fresh
test certificates), N users played against them, the release collected into DIR."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fre_protocol.cli.common import (
    add_component_flag,
    add_dropout_flags,
    add_embedder_flag,
    add_noise_flags,
    add_param_flags,
    add_users_flags,
    load_embeddings,
    non_negative_int,
    params_from_args,
    positive_int,
    prepare_out_dir,
    round_embedder,
    users_and_unit,
)

#: The built web client the proxy serves the join page from (``npm run build:web`` in clients/web).
WEB_ROOT = Path(__file__).resolve().parents[2] / "clients" / "web" / "dist"

HELP = "run one round with each party as its own HTTPS service on localhost, and the users as clients"


def add_round_flags(parser: argparse.ArgumentParser) -> None:
    """The public round settings (shared with `fre-e2t users`)."""
    add_param_flags(parser)
    parser.add_argument("--seed", type=non_negative_int, default=None,
                        help="seeded test mode (every party's secrets reproducible; recorded); default: cryptographic")
    parser.add_argument("--noise", choices=["on", "off"], default="on",
                        help="'off' adds no DDG noise (testing only: not DP)")
    parser.add_argument("--round-id", default=None, help="the round's id (default: a fresh one)")
    parser.add_argument("--window", type=positive_int, default=1024, metavar="COUNT",
                        help="the proxy forwards a shuffled batch every COUNT requests (default 1024)")
    parser.add_argument("--window-seconds", type=float, default=0.5, metavar="S",
                        help="... or after S seconds, whichever first (default 0.5)")
    parser.add_argument("--proof-batch", type=positive_int, default=1, metavar="B",
                        help="blinded elements per DLEQ proof (default 1)")
    add_noise_flags(parser)
    add_dropout_flags(parser, simulated=False)
    add_component_flag(parser)
    add_embedder_flag(parser, absent="the packaged all-MiniLM-L6-v2 for 384-dimensional embeddings, none for others")


def settings_from_args(args: argparse.Namespace, dim: int, unit: object = None) -> object:
    """The round's public settings; ``unit`` (a PrivacyUnit) defaults to one text per user."""
    import secrets

    from fre_protocol.components import component_names
    from fre_protocol.drivers.net.round import RoundSettings
    from fre_protocol.roles.config import ProtocolConfig
    from mechanism.contributions import TEXT_UNIT
    from mechanism.seeds import SeedPlan

    seeds = SeedPlan.fresh() if args.seed is None else SeedPlan.from_seed(args.seed)
    return RoundSettings(
        round_id=args.round_id or f"round-{time.strftime('%Y%m%d')}-{secrets.token_hex(4)}",
        params=params_from_args(args), public_seed=seeds.public_seed, rng_mode=seeds.rng_mode, dim=dim,
        noise=args.noise == "on",
        protocol=ProtocolConfig(
            proof_batch_size=args.proof_batch, noise_calibration=args.noise_calibration,
            dropout_allowance=args.dropout_allowance, ddg_accountant=args.ddg_accountant,
            dropout_policy=args.dropout_policy,
        ),
        window_count=args.window, window_seconds=args.window_seconds, unit=unit or TEXT_UNIT,
        components=component_names(getattr(args, "components", None)),
        embedder=round_embedder(getattr(args, "embedder", None), dim),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embeddings", required=True, metavar="X.npy", help="(N, d) float array, one row per text")
    add_round_flags(parser)
    add_users_flags(parser)
    parser.add_argument("--concurrency", type=positive_int, default=64,
                        help="users' requests in flight at once (default 64)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--web", nargs="?", const=str(WEB_ROOT), default=None, metavar="DIR",
                        help="the proxy also serves the join page at / from the built web client DIR "
                             "(default clients/web/dist; build it with `npm run build:web` in clients/web)")
    parser.add_argument("--web-wait", type=float, default=0.0, metavar="S",
                        help="with --web: hold phase 1 open S seconds after the services start, for people "
                             "joining from the page (their credentials: DIR/web-credentials.private.txt), "
                             "and phase 2 until their shares are in or S more seconds pass (default 0)")
    parser.add_argument("--web-credentials", type=positive_int, default=4, metavar="K",
                        help="with --web: K credentials for the page, beyond the simulated users' (default 4)")


def run(args: argparse.Namespace) -> int:
    from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local
    from mechanism.seeds import SeedPlan

    x = load_embeddings(args.embeddings)
    # --cap auto's estimate is the operator's, drawn from the test seed or cryptographically.
    seeds = SeedPlan.fresh() if args.seed is None else SeedPlan.from_seed(args.seed)
    users, unit = users_and_unit(args, int(x.shape[0]), seeds, log=lambda m: print(m, file=sys.stderr))
    settings = settings_from_args(args, int(x.shape[1]), unit)
    out = prepare_out_dir(args.out)
    t0 = time.perf_counter()
    web_root = None if args.web is None else Path(args.web)
    options = DeployOptions(test_seed=args.seed, concurrency=args.concurrency, web_root=web_root)
    on_phase = None if web_root is None else _page_hold(Path(out), _n_users(x, users), args.web_credentials, args.web_wait)
    summary = deploy_local(x, settings, Path(out), options, users=users, on_phase=on_phase)  # type: ignore[arg-type]
    lo = summary["loopback_bytes"]
    lines = [
        f"fre-e2t deploy-local: {summary['n_users']} users ({summary['n_texts']} texts), d = {summary['dim']}, "
        f"round {summary['round_id']}",
        f"  embedder named in the round document: {settings.embedder or 'none'}",  # type: ignore[attr-defined]
        f"  unit of privacy: {unit.kind}" + (f" (c = {unit.cap} buckets per user)" if unit.kind == "user" else
                                              " (each text is treated as a separate user)"),
        f"  released {summary['released']} centroids; wall {summary['wall_seconds']:.1f} s "
        f"(+ {summary['setup_seconds']:.1f} s starting the services)",
        "  CPU seconds: " + ", ".join(f"{r} {s:.1f}" for r, s in summary["cpu_seconds"].items()),
        f"  on the wire (loopback, all parties): {lo / 1e6:.1f} MB" if lo is not None else "  on the wire: n/a",
        f"  users: requests {summary['users']['requests']}, failures {summary['users']['failures'] or 'none'}",
        f"  wrote {out}/centroids.npy, release.json (publishable); transcripts/ (per party), metrics/, "
        f"deployment.private.json, diagnostics.private.json (operator-private) ({time.perf_counter() - t0:.1f} s)",
    ]
    print("\n".join(lines), file=sys.stdout)
    return 0


def _n_users(x: object, users: object) -> int:
    """How many users the deployment plays (credentials u0 … u{n-1} are theirs)."""
    import numpy as np

    return int(np.asarray(x).shape[0]) if users is None else len(np.unique(np.asarray(users)))


def _page_hold(out: Path, n: int, spare: int, wait_s: float) -> object:
    """The deployment's phase hook for --web: at the start, the page's address and K spare
    credentials (operator-private file); before phase 1 closes, ``wait_s`` seconds from the start;
    before phase 2 closes, until every phase-1 request's pair of phase-2 messages is in (or
    ``wait_s`` more seconds)."""
    import os

    from fre_protocol.drivers.net.deploy import credentials_for, proxy_items

    started = [0.0]

    def hook(dep: object, step: str) -> None:
        if step == "started":
            started[0] = time.monotonic()
            spare_tokens = credentials_for(dep, n + spare)[n:]  # type: ignore[arg-type]
            path = out / "web-credentials.private.txt"
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write("\n".join(spare_tokens) + "\n")
            print(f"fre-e2t deploy-local: the join page is at {dep.url('proxy')}/ (CA to choose there: "  # type: ignore[attr-defined]
                  f"{dep.pki / 'ca.pem'}; credentials: {path}); phase 1 closes in {wait_s:g} s", file=sys.stderr)  # type: ignore[attr-defined]
        elif step == "phase1_submitted":
            time.sleep(max(0.0, started[0] + wait_s - time.monotonic()))
        elif step == "phase2_sent":
            end = time.monotonic() + wait_s
            while time.monotonic() < end:
                items = proxy_items(dep)  # type: ignore[arg-type]
                if items.get("phase2", 0) >= 2 * items.get("phase1", 0):
                    break
                time.sleep(0.2)

    return hook

