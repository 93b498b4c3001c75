"""``deploy-local``: the three services on localhost, each its own process with fresh test
certificates, the users played against them, the release collected.

The run directory gets the same ``centroids.npy`` / ``release.json`` contract as ``simulate``
(plus the operator-private diagnostics), one transcript store per party under ``transcripts/``,
each service's metrics in Prometheus text under ``metrics/``, and ``deployment.private.json`` with the
wall time, each service's CPU seconds and what crossed the loopback interface. Service processes
are started with :func:`start_service` and can be killed and restarted (the fault tests do).

Everything in the run directory is the operator's (counts of users in the transcripts, metrics and
summaries, the test seed in the configurations, keys): it is written under umask 077, so
directories are 0700 and files 0600, the services' own files included (they inherit the umask).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.drivers.net.round import SERVICE_ROLES, RoundSettings, ServiceConfig
from mechanism.contributions import dense_users
from mechanism.run_files import DEPLOYMENT_FILE, METRICS_DIR, TRANSCRIPT_FILE, TRANSCRIPTS_DIR
from primitives.errors import InvalidParameterError, ProtocolStateError

CONFIG_DIR, STATE_DIR, PKI_DIR = "config", "state", "pki"
CREDENTIAL_KEY = "credential.key"
#: The label of what a deployment writes that counts users or requests (never published).
OPERATOR_PRIVATE = (
    "OPERATOR-PRIVATE: counts of users, requests and refusals of this round (not covered by the DP "
    "guarantee); never publish this file"
)


#: The umask of everything deploy-local writes, itself and through the services it starts.
PRIVATE_UMASK = 0o077


@contextmanager
def private_files(out: Path | None = None) -> Iterator[None]:
    """Write under :data:`PRIVATE_UMASK` (restored after); ``out``, when given, is made 0700.
    The umask is the process's: this suits a command's main thread, as deploy-local runs."""
    old = os.umask(PRIVATE_UMASK)
    try:
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            out.chmod(0o700)
        yield
    finally:
        os.umask(old)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free local ports: every socket stays bound until all are chosen, since
    ports picked one at a time can repeat (a service given another's port then answers that
    one's readiness check, and the deployment hangs instead of failing)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]


@dataclass
class Deployment:
    """A local deployment's files and processes."""

    out: Path
    settings: RoundSettings
    test_seed: int | None
    configs: dict[str, Path] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def pki(self) -> Path:
        return self.out / PKI_DIR

    def url(self, role: str) -> str:
        return f"https://localhost:{self.ports[role]}"

    def config(self, role: str) -> ServiceConfig:
        return ServiceConfig.load(self.configs[role])


def write_configs(out: Path, settings: RoundSettings, *, test_seed: int | None, web_root: Path | None = None) -> Deployment:
    """Fresh certificates, a credential key and one configuration file per service (0600, in
    0700 directories: the configurations name key files and, in test mode, the test seed);
    ``web_root`` (the built web client) has the proxy serve the join page."""
    with private_files(out):
        return _write_configs(out, settings, test_seed=test_seed, web_root=web_root)


def _write_configs(out: Path, settings: RoundSettings, *, test_seed: int | None, web_root: Path | None) -> Deployment:
    from fre_protocol.drivers.net.certs import make_test_pki

    dep = Deployment(out=out, settings=settings, test_seed=test_seed)
    paths = make_test_pki(dep.pki, overwrite=True)
    key_path = dep.pki / CREDENTIAL_KEY
    fd = os.open(key_path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(32))
    dep.ports = dict(zip(SERVICE_ROLES, free_ports(len(SERVICE_ROLES)), strict=True))
    (out / CONFIG_DIR).mkdir(parents=True, exist_ok=True)
    for role in SERVICE_ROLES:
        cert, key = paths.for_role(role)
        config = ServiceConfig(
            role=role, host="127.0.0.1", port=dep.ports[role], state_dir=out / STATE_DIR / role,
            ca=paths.ca, cert=cert, key=key,
            peers={r: dep.url(r) for r in SERVICE_ROLES if r != role},
            round=settings, test_seed=test_seed,
            credential_key=key_path if role == "proxy" else None,
            web_root=web_root if role == "proxy" else None,
        )
        path = out / CONFIG_DIR / f"{role}.json"
        path.write_text(json.dumps(config.to_dict(), indent=2) + "\n")
        dep.configs[role] = path
    # What `fre-e2t users` reads: where the proxy is, which CA to trust, which round to expect.
    users = {"proxy": dep.url("proxy"), "ca": str(paths.ca), "round": settings.to_dict(), "test_seed": test_seed}
    (out / CONFIG_DIR / "users.json").write_text(json.dumps(users, indent=2) + "\n")
    return dep


def start_service(
    dep: Deployment, role: str, *, log: Path | None = None, args: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``fre-e2t serve ROLE --config FILE [ARGS]`` as a child process; returns once it is ready."""
    log_path = log or dep.out / "logs" / f"{role}.log"
    command = {"S_tag": "tag", "S_syn": "syn", "proxy": "proxy"}[role]
    with private_files(), open(_private_parent(log_path), "ab") as fh:  # the child inherits the umask
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "fre_protocol.cli", "serve", command, "--config", str(dep.configs[role]), *args],
            stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    dep.processes[role] = proc
    wait_ready(dep, role, proc)
    return proc


def _private_parent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def operator_client(dep: Deployment) -> Any:
    import httpx

    from fre_protocol.drivers.net.peers import tls_client_context

    cert, key = dep.pki / "operator.pem", dep.pki / "operator.key"
    return httpx.Client(verify=tls_client_context(dep.pki / "ca.pem", cert=cert, key=key), timeout=600)


def wait_ready(dep: Deployment, role: str, proc: subprocess.Popen[bytes], *, timeout_s: float = 120.0) -> None:
    import httpx

    end = time.monotonic() + timeout_s
    with operator_client(dep) as client:
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise ProtocolStateError(
                    f"{role} exited with status {proc.returncode} while starting (see {dep.out / 'logs' / (role + '.log')})"
                )
            try:
                if client.get(dep.url(role) + "/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise ProtocolStateError(f"{role} was not ready within {timeout_s:.0f} s")


def stop_service(dep: Deployment, role: str, *, kill: bool = False) -> None:
    proc = dep.processes.pop(role, None)
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_all(dep: Deployment, *, kill: bool = False) -> None:
    """Stop every service, callers before callees: a server still holding a peer's keep-alive
    connections waits out uvicorn's graceful-shutdown timeout before it exits."""
    for role in ("proxy", "S_syn", "S_tag"):
        stop_service(dep, role, kill=kill)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process (where deploy-local plays the users)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def loopback_bytes() -> int | None:
    """Bytes the loopback interface has carried (TCP/IP, TLS and HTTP included); None off Linux."""
    try:
        for line in Path("/proc/net/dev").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                values = rest.split()
                return int(values[0]) + int(values[8])
    except OSError:
        return None
    return None


def credentials_for(dep: Deployment, n: int) -> list[str]:
    from fre_protocol.drivers.net.proxy_admission import credential_token

    key = (dep.pki / CREDENTIAL_KEY).read_bytes()
    return [credential_token(key, dep.settings.round_id, f"u{i}") for i in range(n)]


def proxy_items(dep: Deployment) -> dict[str, int]:
    """The proxy's admitted items by kind (operator-only status: counts of requests)."""
    with operator_client(dep) as client:
        return dict(client.get(dep.url("proxy") + "/v1/admin/status").json()["items"])


def close_phase(dep: Deployment, phase: int) -> bytes:
    from fre_protocol.drivers.net.peers import call_with_retries

    with operator_client(dep) as client:
        return call_with_retries(
            lambda: client.post(dep.url("proxy") + "/v1/admin/close", params={"phase": str(phase)}),
            what=f"close phase {phase}", deadline_s=600,
        )


def collect(dep: Deployment) -> Any:
    """The release from S_syn (with the operator's diagnostics), written as ``simulate`` does."""
    from fre_protocol.drivers.net.wire import decode_batch
    from mechanism.release import Release

    with operator_client(dep) as client:
        document, centroids = decode_batch(client.get(dep.url("S_syn") + "/v1/release").content)
        diagnostics = client.get(dep.url("S_syn") + "/v1/diagnostics").json()
    doc = json.loads(document)
    dim = int(doc["info"]["dim"])
    array = np.frombuffer(centroids, dtype="<f8").reshape(-1, dim).astype(np.float64)
    release = Release.from_json(doc, array, diagnostics)
    release.save(dep.out)
    return release


def scrape_metrics(dep: Deployment) -> dict[str, str]:
    out: dict[str, str] = {}
    (dep.out / METRICS_DIR).mkdir(parents=True, exist_ok=True)
    with operator_client(dep) as client:
        for role in SERVICE_ROLES:
            text = client.get(dep.url(role) + "/metrics").text
            (dep.out / METRICS_DIR / f"{role}.prom").write_text(f"# {OPERATOR_PRIVATE}\n{text}")
            out[role] = text
    return out


def gather_transcripts(dep: Deployment) -> dict[str, Path]:
    """Copy each service's store into ``transcripts/`` (the users' is written there directly)."""
    target = dep.out / TRANSCRIPTS_DIR
    target.mkdir(parents=True, exist_ok=True)
    stores = {}
    for role in SERVICE_ROLES:
        source = dep.out / STATE_DIR / role / dep.settings.round_id / TRANSCRIPT_FILE
        if source.is_file():
            shutil.copyfile(source, target / f"{role}.sqlite")
            stores[role] = target / f"{role}.sqlite"
    users = target / "users.sqlite"
    if users.is_file():
        stores["users"] = users
    return stores


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployOptions:
    """How a local deployment plays its round: the test seed (test mode only), the users' requests
    in flight at once, each users' step's deadline, and ``dropout``, the users (one flag each) that
    go offline between the phases (the in-process drivers' ``RoundSpec.dropout``, as a mask)."""

    test_seed: int | None = None
    concurrency: int = 64
    deadline_s: float = 1800.0
    dropout: npt.NDArray[np.bool_] | None = None
    #: The built web client (clients/web/dist): the proxy serves the join page from it.
    web_root: Path | None = None


def deploy_local(
    x: npt.ArrayLike,
    settings: RoundSettings,
    out: Path,
    options: DeployOptions | None = None,
    *,
    users: npt.ArrayLike | None = None,
    on_phase: Callable[[Deployment, str], None] | None = None,
) -> dict[str, Any]:
    """Run one round on localhost; returns the deployment summary (also in deployment.private.json).

    ``users`` (one label per row) groups the rows by user when the round's unit of privacy is
    ``user``; ``options.dropout`` then marks users, not rows.

    ``on_phase(deployment, step)`` is called at ``"started"`` (services up, no user request
    yet), ``"phase1_submitted"`` and ``"phase2_sent"`` (the fault tests kill and restart
    services there, or start a thread that does it while the users send).
    """
    options = options if options is not None else DeployOptions()
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[1] != settings.dim:
        raise InvalidParameterError(f"embeddings must be (N, {settings.dim}), got shape {arr.shape}")
    n_users = int(arr.shape[0]) if users is None else dense_users(users, int(arr.shape[0]))[1]
    out = Path(out)
    if options.web_root is not None:
        from fre_protocol.drivers.net.web_static import check_web_root

        check_web_root(options.web_root)  # before anything starts: an unbuilt page is named at once
    with private_files(out):
        dep = write_configs(out, settings, test_seed=options.test_seed, web_root=options.web_root)
        lo0, t0 = loopback_bytes(), time.perf_counter()
        try:
            played = _play_round(dep, arr, n_users, options, users=users, on_phase=on_phase)
        finally:
            stop_all(dep)
        summary = _summary(dep, arr, n_users, played, setup_seconds=played.started - t0, lo0=lo0)
        labelled = {"label": OPERATOR_PRIVATE, **summary}
        (out / DEPLOYMENT_FILE).write_text(json.dumps(labelled, indent=2, sort_keys=True) + "\n")
        return summary


@dataclass
class _Played:
    """What one round played on a local deployment left: the users' report, the release, the
    wall seconds from the services' start, the CPU seconds per party and the servers' meters."""

    report: Any
    release: Any
    started: float
    wall: float
    cpu: dict[str, float]
    meters: dict[str, Any]


def _play_round(
    dep: Deployment, arr: npt.NDArray[Any], n_users: int, options: DeployOptions, *,
    users: npt.ArrayLike | None, on_phase: Callable[[Deployment, str], None] | None,
) -> _Played:
    """Start the services, play the users (phase 1 closed between their phases), close phase 2,
    collect the release and the parties' costs; the services are left running."""
    from fre_protocol.drivers.net.users_client import UsersOptions, UsersTarget, play_users

    cpu: dict[str, float] = {}
    for role in ("S_tag", "S_syn", "proxy"):
        start_service(dep, role)
    started = time.perf_counter()
    own0 = own_cpu_seconds()
    if on_phase is not None:
        on_phase(dep, "started")

    def between() -> None:
        if on_phase is not None:
            on_phase(dep, "phase1_submitted")
        close_phase(dep, 1)

    target = UsersTarget(
        proxy_url=dep.url("proxy"), ca=dep.pki / "ca.pem", settings=dep.settings,
        credentials=credentials_for(dep, n_users), test_seed=options.test_seed,
    )
    users_options = UsersOptions(
        transcript=dep.out / TRANSCRIPTS_DIR / "users.sqlite", concurrency=options.concurrency,
        deadline_s=options.deadline_s,
    )
    dropout = options.dropout
    report = play_users(
        arr, target, users_options, users=users, active=None if dropout is None else ~dropout, between_phases=between
    )
    cpu["users (client process)"] = own_cpu_seconds() - own0
    if on_phase is not None:
        on_phase(dep, "phase2_sent")
    with report.timed("close_phase2"):
        close_phase(dep, 2)
    release = collect(dep)
    wall = time.perf_counter() - started
    scrape_metrics(dep)
    for role, proc in dep.processes.items():
        cpu[role] = cpu_seconds(proc.pid)
    with operator_client(dep) as client:
        meters = {r: client.get(dep.url(r) + "/v1/costs").json() for r in ("S_tag", "S_syn")}
    return _Played(report=report, release=release, started=started, wall=wall, cpu=dict(sorted(cpu.items())),
                   meters=meters)


def _summary(
    dep: Deployment, arr: npt.NDArray[Any], n_users: int, played: _Played, *, setup_seconds: float, lo0: int | None
) -> dict[str, Any]:
    """The deployment summary (operator-private): sizes, times, CPU, bytes, the users' report."""
    stores = gather_transcripts(dep)
    lo1 = loopback_bytes()
    report, started = played.report, played.started
    return {
        "n_users": n_users,
        "n_texts": int(arr.shape[0]),
        "dim": int(arr.shape[1]),
        "round_id": dep.settings.round_id,
        "wall_seconds": played.wall,
        "setup_seconds": setup_seconds,
        "cpu_seconds": played.cpu,
        "loopback_bytes": None if lo0 is None or lo1 is None else lo1 - lo0,
        "users": {
            "wall": report.wall, "requests": report.requests, "failures": report.failures, "retries": report.retries,
            "http_body_bytes_up": report.bytes_up, "http_body_bytes_down": report.bytes_down,
            "status": report.status, "meter": report.meter,
            # Seconds since the services were up (the on_phase "started" call), in order.
            "spans": [(step, round(a - started, 4), round(b - started, 4)) for step, a, b in report.spans],
        },
        "servers": played.meters,
        "released": len(played.release),
        "transcripts": {k: str(v.relative_to(dep.out)) for k, v in stores.items()},
    }


def stores_of(run: Path) -> Mapping[str, Path]:
    d = run / TRANSCRIPTS_DIR
    return {p.stem: p for p in sorted(d.glob("*.sqlite"))} if d.is_dir() else {}


__all__ = [
    "DeployOptions",
    "Deployment",
    "close_phase",
    "collect",
    "deploy_local",
    "gather_transcripts",
    "proxy_items",
    "start_service",
    "stop_all",
    "stop_service",
    "write_configs",
]
