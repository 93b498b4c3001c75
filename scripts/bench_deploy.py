"""Benchmark: one round through ``deploy-local`` beside the in-process runner, same population,
same machine, same run.

    .venv/bin/python scripts/bench_deploy.py --num-users 100000 --dim 768 --out runs/bench-deploy

The in-process runner runs twice: for the release alone, and writing what deploy-local writes
(``centroids.npy``, ``release.json`` and a transcript of every party's view with each message's
bytes), so that the second ratio compares the same job. A CPU sampler reads every party's CPU
seconds while the round runs, and the report tables each users' step beside each party's mean
busy cores (which party the step waits on), with each service's own step timings.

Writes ``OUT/bench.json`` and ``OUT/bench.md``: wall time of both drivers and their ratios, each
service's CPU seconds, the per-operation cost table of both (the deployment's from the parties'
own meters), and bytes on the wire — the loopback interface's counter over the deployment
(TCP/IP, TLS and HTTP included) beside the HTTP bodies and the in-process message sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np

from fre_protocol.roles.config import RoundSpec, RunOptions


def population(n: int, dim: int, seed: int) -> np.ndarray:
    """Clusters of ~1,000 users that clear the threshold, plus 5% rare users."""
    from mechanism.population import synthetic_population
    from primitives.randomness import RandomSource

    rare = n // 20
    clusters = max(1, (n - rare) // 1000)
    sizes = [(n - rare) // clusters + (1 if j < (n - rare) % clusters else 0) for j in range(clusters)]
    pop = synthetic_population(clusters, sizes, rare, dim, 0.5, RandomSource.seeded(seed, "bench/deploy"), spread=0.02)
    return np.asarray(pop.embeddings, dtype=np.float32)


class CpuSampler:
    """Each party's CPU seconds, read every ``period_s`` from a thread of this process: the
    services' from /proc, the users' client's (this process) from getrusage."""

    def __init__(self, period_s: float = 0.5) -> None:
        self.period_s = period_s
        self.t0 = 0.0
        self.pids: dict[str, int] = {}
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self, pids: dict[str, int]) -> None:
        self.t0, self.pids = time.perf_counter(), pids
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()

    def _read(self) -> dict[str, float]:
        from fre_protocol.drivers.net.deploy import cpu_seconds, own_cpu_seconds

        out = {"users": own_cpu_seconds()}
        for role, pid in self.pids.items():
            try:
                out[role] = cpu_seconds(pid)
            except OSError:  # stopped: it spends nothing more
                if self.samples and role in self.samples[-1][1]:
                    out[role] = self.samples[-1][1][role]
        return out

    def _run(self) -> None:
        self.samples.append((0.0, self._read()))
        while not self._done.wait(self.period_s):
            self.samples.append((time.perf_counter() - self.t0, self._read()))

    def cores(self, start: float, end: float) -> dict[str, float]:
        """Each party's mean busy cores over [start, end] (seconds since start()), from the
        samples that bracket it."""
        before = [s for s in self.samples if s[0] <= start]
        after = [s for s in self.samples if s[0] >= end]
        if not before or not after:
            return {}
        (ta, a), (tb, b) = before[-1], after[0]
        return {role: (b[role] - a[role]) / (tb - ta) for role in a if role in b and tb > ta}


def step_table(spans: list, sampler: CpuSampler) -> list[dict]:
    """Per users' step: its wall seconds and each party's mean busy cores meanwhile."""
    rows = []
    for step, start, end in spans:
        cores = sampler.cores(start, end)
        rows.append({"step": step, "wall_s": round(end - start, 2), "cores": {k: round(v, 2) for k, v in cores.items()}})
    return rows


def phase_seconds(metrics_dir: Path) -> dict[str, dict[str, float]]:
    """Each service's ``fre_phase_seconds_total`` by step, from the metrics deploy-local scraped."""
    out: dict[str, dict[str, float]] = {}
    for prom in sorted(metrics_dir.glob("*.prom")):
        for m in re.finditer(r'^fre_phase_seconds_total\{step="([^"]+)"\} (\S+)$', prom.read_text(), re.MULTILINE):
            out.setdefault(prom.stem, {})[m.group(1)] = round(float(m.group(2)), 2)
    return out


def merged_meter(meters: list[dict]) -> object:
    from fre_protocol.roles.base import Meter

    meter = Meter()
    for m in meters:
        for name, secs in m.get("seconds", {}).items():
            meter.add(name, secs, int(m.get("counts", {}).get(name, 0)))
        for name, secs in m.get("wall", {}).items():
            meter.add_wall(name, secs)
        for name, n in m.get("bytes", {}).items():
            meter.add_bytes(name, n)
    return meter


def main() -> int:
    from fre_protocol.cli.common import add_deprecated_alias

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-users", type=int, default=100_000)
    add_deprecated_alias(parser, "--users", "--num-users")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from fre_protocol.costs import cost_table, summarize
    from fre_protocol.drivers.inprocess import run_protocol
    from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local
    from fre_protocol.drivers.net.round import RoundSettings
    from fre_protocol.roles.config import ProtocolConfig
    from mechanism.params import FreParams
    from mechanism.release import Release
    from mechanism.seeds import SeedPlan

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    x = population(args.num_users, args.dim, 7)
    params = FreParams.paper(args.epsilon)
    report: dict = {"n_users": args.num_users, "dim": args.dim, "epsilon": args.epsilon, "cpus": os.cpu_count()}

    inproc = None
    if not args.skip_in_process:
        # Twice: the release alone, and writing what deploy-local writes (centroids.npy,
        # release.json and a transcript of every party's view with each message's bytes).
        for key, out_dir in (("in_process", None), ("in_process_files", out / "in-process")):
            t0 = time.perf_counter()
            result = run_protocol(x, RoundSpec(params=params, seeds=SeedPlan.fresh(), noise=True, workers=2), RunOptions(progress=False, out_dir=out_dir))
            report[key] = {"wall_seconds": time.perf_counter() - t0, "released": len(result.release)}
            print(f"{key}: {report[key]['wall_seconds']:.1f} s", file=sys.stderr)
            if out_dir is None:
                inproc = {**result.costs, "epsilon": args.epsilon}
            else:
                shutil.rmtree(out_dir)  # ~9 kB a user

    seeds = SeedPlan.fresh()
    settings = RoundSettings(
        round_id=f"bench-{args.num_users}", params=params, public_seed=seeds.public_seed, rng_mode="crypto",
        dim=args.dim, protocol=ProtocolConfig(), window_count=args.window, window_seconds=0.5,
    )
    sampler = CpuSampler()

    def on_phase(dep, step: str) -> None:
        if step == "started":
            sampler.start({role: proc.pid for role, proc in dep.processes.items()})

    t0 = time.perf_counter()
    try:
        summary = deploy_local(
            x, settings, out / "deploy", DeployOptions(concurrency=args.concurrency), on_phase=on_phase
        )
    finally:
        sampler.stop()
    report["steps"] = step_table(summary["users"]["spans"], sampler)
    from mechanism.run_files import METRICS_DIR

    report["service_steps"] = phase_seconds(out / "deploy" / METRICS_DIR)
    report["deploy_local"] = {**summary, "total_seconds": time.perf_counter() - t0}
    release = Release.load(out / "deploy")
    meter = merged_meter([summary["users"]["meter"], *summary["servers"].values()])
    info = {**release.info, "n_users": args.num_users, **release.diagnostics}
    deployed = {**summarize(meter, info, workers=2), "epsilon": args.epsilon}
    n = args.num_users
    lo = summary["loopback_bytes"]
    wire = {
        "loopback_bytes_per_user": None if lo is None else lo / n,
        "http_body_bytes_up_per_user": summary["users"]["http_body_bytes_up"] / n,
        "http_body_bytes_down_per_user": summary["users"]["http_body_bytes_down"] / n,
    }
    report["wire"] = wire
    report["cost_in_process"], report["cost_deploy"] = inproc, deployed
    if inproc is not None:
        report["wall_ratio"] = summary["wall_seconds"] / report["in_process"]["wall_seconds"]
        report["wall_ratio_files"] = summary["wall_seconds"] / report["in_process_files"]["wall_seconds"]
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str) + "\n")

    lines = [f"# deploy-local against the in-process runner: N = {n}, d = {args.dim}, ε = {args.epsilon}, "
             f"{os.cpu_count()} CPUs", ""]
    if inproc is not None:
        lines.append(f"- wall: deploy-local {summary['wall_seconds']:.1f} s (+ {summary['setup_seconds']:.1f} s starting "
                     f"the services); in-process, writing what deploy-local writes (centroids, release, every party's "
                     f"view with each message's bytes) {report['in_process_files']['wall_seconds']:.1f} s (ratio "
                     f"{report['wall_ratio_files']:.2f}); in-process, the release alone "
                     f"{report['in_process']['wall_seconds']:.1f} s (ratio {report['wall_ratio']:.2f})")
    else:
        lines.append(f"- wall: deploy-local {summary['wall_seconds']:.1f} s")
    lines.append("- CPU seconds per service: " + ", ".join(f"{r} {s:.1f}" for r, s in summary["cpu_seconds"].items()))
    lines.append(f"- users' steps (wall s): {json.dumps({k: round(v, 1) for k, v in summary['users']['wall'].items()})}")
    lines.append(f"- on the wire per user: loopback {wire['loopback_bytes_per_user'] or float('nan'):.0f} B "
                 f"(all parties, TCP/IP + TLS + HTTP); HTTP bodies up {wire['http_body_bytes_up_per_user']:.0f} B, "
                 f"down {wire['http_body_bytes_down_per_user']:.0f} B")
    parties = ["users", "proxy", "S_tag", "S_syn"]
    lines += ["", "Where each users' step spends its wall time: each party's mean busy cores meanwhile "
              f"(sampled every {sampler.period_s} s; {os.cpu_count()} cores in all):", "",
              "| step | wall s | " + " | ".join(parties) + " | all |", "|---|---:|" + "---:|" * (len(parties) + 1)]
    for row in report["steps"]:
        cores = row["cores"]
        lines.append(f"| {row['step']} | {row['wall_s']:.1f} | " + " | ".join(f"{cores.get(p, float('nan')):.2f}" for p in parties)
                     + f" | {sum(cores.values()):.2f} |")
    lines += ["", "Each service's own steps (wall s, its metrics' `fre_phase_seconds_total`): "
              + "; ".join(f"{role} " + json.dumps(steps) for role, steps in report["service_steps"].items())]
    lines += ["", cost_table(inproc or deployed, others=[("deploy-local (parties' meters)", deployed)] if inproc else ())]
    (out / "bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
