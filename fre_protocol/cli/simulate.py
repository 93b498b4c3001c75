"""``fre-e2t simulate``: the distributed protocol, every party in one process, with transcripts.

Writes the same ``DIR/centroids.npy`` + ``DIR/release.json`` contract as ``fre-e2t mechanism``,
plus ``DIR/transcript.sqlite`` (every message in the receiver's and the proxy's view; with
``--transcript-mode sizes`` each message's size instead of its bytes) and, with ``--jsonl``, its JSONL
export.

``--driver`` picks how the parties are played: ``runner`` (every user at once), ``streaming``
(windows of users, threads), ``streaming-processes`` (the same, users' devices in ``--processes``
worker processes), ``dask`` (the streaming run on a Dask cluster) or ``auto``.

Each embedding row is one user unless ``--user-labels FILE`` names every row's author; each author then
contributes to at most ``--cap`` buckets, and the run's summary states whom the guarantee protects.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from fre_protocol.cli.common import (
    add_component_flag,
    add_deprecated_alias,
    add_dropout_flags,
    add_noise_flags,
    add_param_flags,
    add_progress_flag,
    add_users_flags,
    components_of,
    fraction,
    non_negative_int,
    params_from_args,
    positive_int,
    prepare_out_dir,
    users_and_unit,
)

#: From this many users ``--driver auto`` streams: the runner holds about 10 kB a user at
#: d = 768 (0.7 GiB at 50,000), the streaming driver's memory stays near its window's.
STREAMING_FROM = 50_000
DRIVERS = ("auto", "runner", "streaming", "streaming-processes", "dask")
#: --processes when not given (streaming-processes: user processes; dask: local cluster workers).
DEFAULT_PROCESSES = 2

HELP = "run the two-server, two-phase protocol (all parties simulated) and record every party's view"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--embeddings", metavar="X.npy|DIR",
        help="(N, d) float array, one row per user, memory-mapped; or a directory of .npy shards (rows in file-name order)",
    )
    source.add_argument("--demo", action="store_true",
                        help="instead of --embeddings: the built-in synthetic population of `fre-e2t mechanism --demo`")
    add_param_flags(parser)
    add_users_flags(parser)
    parser.add_argument(
        "--seed", type=non_negative_int, default=None,
        help="seeded test mode: public randomness, coins, keys and noise reproducible from this "
        "integer (secrets are then recorded in the transcript); default: fresh and cryptographic",
    )
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="output directory (centroids.npy, release.json, transcript.sqlite, diagnostics.private.json)")
    parser.add_argument(
        "--noise", choices=["on", "off"], default="on",
        help="'off' runs every step but adds no DDG noise (testing only: not DP)",
    )
    add_dropout_flags(parser, simulated=True)
    parser.add_argument("--cover-traffic", action=argparse.BooleanOptionalAction, default=True,
                        help="every user online in phase 2 sends two messages of the same sizes, its "
                        "shares or cover, so the proxy cannot tell who is in a released bucket (default on)")
    parser.add_argument("--proof-batch", type=positive_int, default=1, metavar="B",
                        help="blinded elements per DLEQ proof (default 1: per-user proofs)")
    parser.add_argument("--modulus-bits", type=positive_int, default=24, metavar="b",
                        help="shares live in Z_{2^b} (default 24)")
    parser.add_argument("--dishonest-fraction", type=fraction, default=0.0, metavar="F",
                        help="size the users' DDG noise so that the honest (1 - F) of the release floor's "
                        "contributors meet the DDG term (design §4.4; default 0: every contributor honest)")
    add_noise_flags(parser)
    parser.add_argument(
        "--driver", choices=DRIVERS, default="auto",
        help="'runner' holds every user at once; 'streaming' plays windows of users, so memory does not "
        "grow with N (same release in seeded mode); 'streaming-processes' plays the users' devices in "
        "--processes local worker processes instead of threads (same release); 'dask' plays the streaming "
        "run on a Dask cluster: users' chunks as tasks, each server as an actor on its own worker (needs "
        f"the dask extra); 'auto' (default) is runner below {STREAMING_FROM:,} users, streaming from there",
    )
    parser.add_argument("--processes", type=positive_int, default=None, metavar="K",
                        help="worker processes of --driver streaming-processes (the users' devices) or dask "
                        f"(the local cluster started for the run) (default: {DEFAULT_PROCESSES})")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="--driver dask: the scheduler to use (default: a local cluster of --processes workers "
                        "started for the run)")
    parser.add_argument("--window-chunks", type=positive_int, default=None, metavar="W",
                        help="streaming drivers: chunks of 1024 users per window (default 16)")
    parser.add_argument("--workers", type=positive_int, default=2, help="worker threads (default 2)")
    parser.add_argument("--jsonl", action="store_true", help="also export the transcript as DIR/transcript.jsonl")
    parser.add_argument("--transcript-mode", choices=["full", "sizes"], default="full",
                        help="what the transcript keeps of each message: its bytes (full) or, for paper-scale "
                        "runs, only its sender, receiver, type and size (~10 kB a user less on disk; the audit "
                        "then checks counts and sizes but cannot re-read payloads)")
    add_component_flag(parser)
    add_progress_flag(parser, default=False)
    add_old_driver_flags(parser)


def add_old_driver_flags(parser: argparse.ArgumentParser) -> None:
    """``--engine``, ``--user-processes`` and ``--dask-workers``, kept for one release: together
    they made what ``--driver``/``--processes`` now say, so they are settled after parsing."""

    def keep(dest: str) -> Any:
        return lambda _parser, namespace, value: setattr(namespace, dest, value)

    add_deprecated_alias(
        parser, "--engine", "--driver", choices=["inprocess", "dask"], act=keep("old_engine"),
        use=lambda v: "--driver dask" if v == "dask" else "--driver runner, streaming or auto (each runs in this process)",
    )
    add_deprecated_alias(parser, "--user-processes", "--driver", type=non_negative_int, act=keep("old_user_processes"),
                         use="--driver streaming-processes --processes K")
    add_deprecated_alias(parser, "--dask-workers", "--processes", type=positive_int, act=keep("old_dask_workers"))
    add_deprecated_alias(parser, "--transcript", "--transcript-mode")
    parser.settle.append(settle_old_driver_flags)  # type: ignore[attr-defined]


def settle_old_driver_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The old combinations as the new choices: ``--engine dask`` = ``--driver dask`` (with
    ``--dask-workers K`` = ``--processes K``); ``--user-processes K`` (K > 0) = ``--driver
    streaming-processes --processes K``; ``--engine inprocess`` and ``--user-processes 0`` were the
    defaults. What the old flags refused together is still refused."""
    engine = vars(args).pop("old_engine", None)
    user_processes = vars(args).pop("old_user_processes", None)
    dask_workers = vars(args).pop("old_dask_workers", None)
    if engine == "dask":
        if args.driver not in ("auto", "streaming", "dask") or user_processes:
            parser.error(f"--engine dask plays the streaming driver on Dask, got --driver {args.driver}"
                         + (f" --user-processes {user_processes}" if user_processes else ""))
        args.driver = "dask"
    if user_processes:
        if args.driver not in ("auto", "streaming", "streaming-processes"):
            parser.error(f"--user-processes plays the streaming driver's users in worker processes, got --driver {args.driver}")
        args.driver, args.processes = "streaming-processes", user_processes
    if dask_workers is not None and args.driver == "dask":  # ignored by the other drivers, as before
        args.processes = dask_workers


def play(args: argparse.Namespace, x: Any, spec: Any, options: Any, *, users: Any) -> tuple[Any, str]:
    """Run the protocol with the driver ``args`` chose (``auto`` by the population's size); the
    result and the driver's name for the summary."""
    from fre_protocol.drivers.inprocess import run_protocol
    from fre_protocol.drivers.streaming import DEFAULT_WINDOW_CHUNKS, run_streaming
    from primitives.errors import InvalidParameterError

    driver = args.driver
    if driver == "auto":
        driver = "streaming" if x.shape[0] >= STREAMING_FROM else "runner"
    if args.processes is not None and driver not in ("streaming-processes", "dask"):
        raise InvalidParameterError(
            f"--processes applies to --driver streaming-processes or dask, got --driver {args.driver}"
            + (f" (= {driver} at {x.shape[0]:,} users)" if args.driver == "auto" else "")
        )
    processes = args.processes or DEFAULT_PROCESSES
    if driver == "dask":
        from fre_protocol.drivers.dask import DaskCluster, run_dask

        window = args.window_chunks or DEFAULT_WINDOW_CHUNKS
        result = run_dask(
            x, spec, options, users=users, window_chunks=window,
            cluster=DaskCluster(scheduler=args.scheduler, workers=processes),
        )
        driver = "streaming (dask)"
    elif driver in ("streaming", "streaming-processes"):
        window = args.window_chunks or DEFAULT_WINDOW_CHUNKS
        players = None
        if driver == "streaming-processes":
            from fre_protocol.drivers.user_processes import in_worker_processes

            players = in_worker_processes(processes)
            driver = f"streaming ({processes} user processes)"
        result = run_streaming(x, spec, options, users=users, window_chunks=window, players=players)
    else:
        result = run_protocol(x, spec, options, users=users)
    return result, driver


def protocol_config(args: argparse.Namespace) -> Any:
    """The ProtocolConfig the flags choose."""
    from fre_protocol.roles.config import ProtocolConfig

    return ProtocolConfig(
        proof_batch_size=args.proof_batch,
        modulus_bits=args.modulus_bits,
        dropout_policy=args.dropout_policy,
        cover_traffic=args.cover_traffic,
        dishonest_fraction=args.dishonest_fraction,
        noise_calibration=args.noise_calibration,
        dropout_allowance=args.dropout_allowance,
        ddg_accountant=args.ddg_accountant,
    )


def run(args: argparse.Namespace) -> int:
    from fre_protocol.inputs import open_embeddings
    from fre_protocol.roles.config import RoundSpec, RunOptions
    from mechanism.run_files import DIAGNOSTICS_FILE, TRANSCRIPT_JSONL_FILE
    from mechanism.seeds import SeedPlan

    params = params_from_args(args)
    seeds = SeedPlan.fresh() if args.seed is None else SeedPlan.from_seed(args.seed)
    out_dir = prepare_out_dir(args.out)
    config = protocol_config(args)
    if args.demo:
        from fre_protocol.cli.mechanism_cmd import DEMO_SEED, demo_population

        x = demo_population(params.radius).embeddings
        source = f"demo population (seed {DEMO_SEED!r})"
    else:
        x = open_embeddings(args.embeddings)
        source = Path(args.embeddings).name
    users, unit = users_and_unit(args, int(x.shape[0]), seeds, log=lambda m: print(m, file=sys.stderr))
    started = time.perf_counter()
    spec = RoundSpec(
        params=params, seeds=seeds, config=config, unit=unit, noise=args.noise == "on", dropout=args.dropout,
        workers=args.workers, components=components_of(args),
    )
    options = RunOptions(out_dir=out_dir, progress=args.progress, transcript=args.transcript_mode)
    result, driver = play(args, x, spec, options, users=users)
    release = result.release
    if args.jsonl and result.transcript_path is not None:
        from transcripts import TranscriptStore

        with TranscriptStore.open(result.transcript_path) as store:
            store.export_jsonl(out_dir / TRANSCRIPT_JSONL_FILE)
    elapsed = time.perf_counter() - started
    info, diag, costs = release.info, release.diagnostics, result.costs
    eps = "inf (non-DP)" if not params.is_dp else f"{release.ledger.epsilon:.4g}"
    who = f"{x.shape[0]} users" if users is None else f"{x.shape[0]} texts of {diag['n_users']} users (c = {unit.cap})"
    lines = [
        f"fre-e2t simulate: {who}, d = {x.shape[1]}, k = {params.k}, {source}, {driver} driver",
        f"  phase 1: {diag['n_real_submissions']} tag submissions + "
        f"{(diag['dummies'] or {}).get('dummy_submissions', 0)} dummy; released {info['n_released_tags']} tags "
        f"(count >= {info['release_floor']})",
        f"  phase 2: {diag['n_participants']} participants ({diag['n_dropped_out']} dropped out); "
        f"centroids for {info['n_released']} tags" + (f", {len(info['withheld'])} withheld" if info["withheld"] else ""),
    ]
    if len(release):
        counts = release.counts
        lines.append(f"  counts n_h: min {int(counts.min())}, median {int(np.median(counts))}, max {int(counts.max())}")
    lines.append(
        f"  epsilon {eps}, delta {release.ledger.delta:.3g}, DDG sigma (n = ⌈τ⌉) {release.ledger.sigma:.4g}"
        + ("" if release.noise else "  [noise OFF: not differentially private]")
    )
    if release.ledger.unit is not None:
        lines.append(f"  unit of privacy: {release.ledger.unit['statement']}")
    if diag["rejections"]:
        lines.append(f"  rejected messages: {diag['rejections']}")
    lines.append(
        f"  user: online {costs['user_online_ms']:.3g} ms, upload {costs['upload_kB']:.3g} kB, "
        f"download {costs['download_kB']:.3g} kB"
    )
    tasks = {k.removeprefix("dask.task."): v for k, v in costs["meter"]["seconds"].items() if k.startswith("dask.task.")}
    if tasks:  # each kind's number of tasks and mean compute time (operator-facing, never published)
        counts = costs["meter"]["counts"]
        lines.append("  dask tasks: " + ", ".join(
            f"{kind} {counts['dask.task.' + kind]} × {1e3 * s / counts['dask.task.' + kind]:.0f} ms" for kind, s in tasks.items()
        ))
    lines.append(f"  seeds: {seeds.rng_mode} (public seed {seeds.public_seed.hex()[:16]}…)")
    lines.append(
        f"  wrote {out_dir / 'centroids.npy'}, {out_dir / 'release.json'} (publishable) and "
        f"{result.transcript_path}" + (" (sizes only)" if args.transcript_mode == "sizes" else "")
        + f", {out_dir / DIAGNOSTICS_FILE} (operator-private)"
        + (" (+ transcript.jsonl)" if args.jsonl else "") + f" ({elapsed:.1f} s)"
    )
    print("\n".join(lines), file=sys.stdout)
    return 0
