"""The per-operation cost table of a protocol run, beside the paper's figures (App. B.1, design §9).

:func:`summarize` turns a run's :class:`~fre_protocol.roles.base.Meter` into per-operation
figures; :func:`cost_table` lays them out beside the paper's numbers and our targets;
:func:`fre_protocol.cost_measurement.measure` runs the protocol on a synthetic population (N
users, d dimensions) twice, with the two proof layouts side by side: one DLEQ proof per user (the default: a user's download and
verification stay constant) and one proof per batch of B elements (S_tag's cheapest evaluation,
the layout of the server target of design §9, paid for by every user downloading and verifying its
whole batch).

A user's work is split into offline preparation (what needs neither its data nor a server
message: the blind and its inverse, the key material of its sealed boxes) and online work
(everything else); "user online time" is the latter, and the table shows both.

Times are measured inside the run: "core" figures are summed over worker threads (CPU cost per
operation), "wall" figures divide the wall-clock time of a parallel step by its operations (the
throughput both cores reach). Bytes are encoded message sizes on the wire (envelopes included).
"""

from __future__ import annotations

import json
import math
import os
import platform
import resource
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fre_protocol.roles.base import Meter
from primitives.jsonsafe import json_safe

#: The paper's figures (App. B.1; AMD EPYC 9554, 124 cores) and our 2-core targets (design §9).
PAPER: dict[str, float] = {
    "voprf_eval_us": 89.5,
    "tag_count_us": 1.05,
    "share_accumulate_us": 10.7,
    "reconstruct_us": 60.5,
    "user_online_ms": 0.4,
    "upload_kB": 8.3,
    "download_kB": 6.1,
    "dummy_messages": 1710,
    "dummy_kB": 113,
}
TARGETS: dict[str, float] = {
    "voprf_eval_us": 45.0,
    "tag_count_us": 0.1,
    "share_accumulate_us": 1.0,
    "reconstruct_us": 10.0,
    "user_online_ms": 0.4,
    "upload_kB": 4.5,
    "download_kB": 6.1,
    "total_s": 300.0,
    "peak_memory_GiB": 8.0,
}


def _per(meter: Meter, name: str, scale: float = 1e6) -> float:
    n = meter.counts.get(name, 0)
    return meter.seconds.get(name, 0.0) / n * scale if n else math.nan


def _sum_per(meter: Meter, names: tuple[str, ...], scale: float = 1e6) -> float:
    secs = sum(meter.seconds.get(k, 0.0) for k in names)
    n = sum(meter.counts.get(k, 0) for k in names)
    return secs / n * scale if n else math.nan


def _per_or_zero(meter: Meter, name: str, scale: float = 1e6) -> float:
    return _per(meter, name, scale) if meter.counts.get(name, 0) else 0.0


def _bytes_per(meter: Meter, name: str, count: int) -> float:
    return meter.bytes.get(name, 0) / count if count else math.nan


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if platform.system() == "Darwin" else 1024)


def summarize(
    meter: Meter, info: Mapping[str, Any], *, peak_bytes: int | None = None, workers: int = 2
) -> dict[str, Any]:
    """Per-operation costs of one run (see the module docstring for core vs wall).

    The sections are merged in the order of ``costs.json``; the unit conversions come last.
    """
    n_users = int(info.get("n_users", 0))
    out: dict[str, Any] = {
        **_run_shape(meter, info, n_users=n_users, workers=workers),
        **_server_costs(meter),
        **_user_time_costs(meter),
        **_cover_costs(meter),
        **_user_traffic(meter, n_users=n_users),
        **_dummy_traffic(meter),
        **_whole_run(meter, peak_bytes),
    }
    out["upload_kB"] = out["upload_bytes"] / 1000.0
    out["download_kB"] = out["download_bytes"] / 1000.0
    out["download_broadcast_kB"] = out["download_bytes_broadcast"] / 1000.0
    out["dummy_kB"] = out["dummy_bytes"] / 1000.0
    out["peak_memory_GiB"] = out["peak_memory_bytes"] / 2**30
    return out


def _run_shape(
    meter: Meter, info: Mapping[str, Any], *, n_users: int, workers: int
) -> dict[str, Any]:
    """What was run (population, dimensions, ring, threads, proof layout) and how much was
    released, so every cost row can be read against its run."""
    ddg = info.get("ddg") or {}
    return {
        "n_users": n_users,
        "dim": info.get("dim"),
        "padded_dim": ddg.get("padded_dim"),
        "modulus_bits": ddg.get("modulus_bits"),
        "workers": workers,
        "user_workers": info.get("user_workers", workers),
        "proof_batch_size": info.get("proof_batch_size"),
        "noise_calibration": info.get("noise_calibration"),
        "n_released_buckets": int(meter.counts.get("S_syn.reconstruct", 0)),
        "n_participants": int(meter.counts.get("user.ddg_encode", 0)),
    }


def _server_costs(meter: Meter) -> dict[str, Any]:
    """S_tag's and S_syn's per-operation times (µs); the VOPRF evaluation is reported both as
    wall time per element (the throughput) and as core time."""
    evals = int(meter.counts.get("S_tag.voprf_eval", 0))
    eval_wall = meter.wall.get("S_tag.voprf_eval", math.nan)
    recon = _per(meter, "S_syn.reconstruct")
    decode = _per(meter, "S_syn.decode")
    return {
        # S_tag
        "voprf_eval_us": eval_wall / evals * 1e6 if evals else math.nan,
        "voprf_eval_core_us": _per(meter, "S_tag.voprf_eval"),
        "voprf_evaluations": evals,
        # S_syn
        "tag_count_us": _per(meter, "S_syn.count"),
        "broadcast_build_ms": meter.seconds.get("S_syn.broadcast_build", math.nan) * 1e3,
        "tags_counted": int(meter.counts.get("S_syn.count", 0)),
        "share_accumulate_us": _sum_per(meter, ("S_tag.accumulate", "S_syn.accumulate")),
        "share_decode_us": _sum_per(meter, ("S_tag.decode_share", "S_syn.decode_share")),
        "open_sealed_us": _sum_per(meter, ("S_tag.open", "S_syn.open")),
        "reconstruct_us": recon + decode,
        "reconstruct_ring_us": recon,
        "reconstruct_decode_us": decode,
        # The proxy: decode each envelope, rate-limit, shuffle each recipient's batch.
        "proxy_forward_us": _per(meter, "proxy.forward"),
    }


def _user_time_costs(meter: Meter) -> dict[str, Any]:
    """A participating user's CPU time (ms), split into offline preparation and the online
    work of each phase (the split the module docstring defines)."""
    phase1 = (
        _sum_per(meter, ("user.blind",), 1e3) + _per(meter, "user.seal", 1e3) + _per(meter, "user.finalize", 1e3)
    )
    submit = _per(meter, "user.submit", 1e3)
    # Hearing the broadcast: each device loads it once and queries its own tag (0 where a run
    # metered neither, e.g. one recorded before the compact broadcast).
    broadcast = _per_or_zero(meter, "user.broadcast_load", 1e3) + _per_or_zero(meter, "user.broadcast_query", 1e3)
    phase2 = (
        broadcast + _per(meter, "user.ddg_encode", 1e3) + _per(meter, "user.share", 1e3)
        + _per(meter, "user.seal_shares", 1e3)
    )
    # Per participating user: its blind scalar and four seals' key material.
    offline = _per(meter, "user.offline.blind_scalar", 1e3) + 4 * _per(meter, "user.offline.seal_keys", 1e3)
    return {
        "user_online_ms": phase1 + submit + phase2,
        "user_offline_ms": offline,
        "user_total_ms": phase1 + submit + phase2 + offline,
        "user_phase1_ms": phase1,
        "user_submit_ms": submit,
        "user_phase2_ms": phase2,
        "user_blind_ms": _per(meter, "user.blind", 1e3),
        "user_finalize_ms": _per(meter, "user.finalize", 1e3),
        "user_seal_ms": _per(meter, "user.seal", 1e3),
        "user_seal_phase1_ms": _per(meter, "user.seal", 1e3) + submit,
        "user_broadcast_ms": broadcast,
        "user_broadcast_query_us": _per(meter, "user.broadcast_query"),
        "user_ddg_encode_ms": _per(meter, "user.ddg_encode", 1e3),
        "user_share_ms": _per(meter, "user.share", 1e3),
        "user_seal_shares_ms": _per(meter, "user.seal_shares", 1e3),
    }


def _cover_costs(meter: Meter) -> dict[str, Any]:
    """Phase-2 cover traffic (users outside the released buckets send two sealed covers) and
    what phase 2 costs the servers with it: the sealed messages opened and its wall time."""
    n_cover = int(meter.counts.get("user.seal_cover", 0))
    return {
        "n_cover_users": n_cover,
        "user_seal_cover_ms": _per(meter, "user.seal_cover", 1e3),
        "cover_upload_kB": _bytes_per(meter, "user.upload.cover", n_cover) / 1000.0,
        "cover_kB": meter.bytes.get("user.upload.cover", 0) / 1000.0,
        "messages_opened": int(meter.counts.get("S_tag.open", 0)) + int(meter.counts.get("S_syn.open", 0)),
        "phase2_wall_s": meter.wall.get("phase2_shares", math.nan),
    }


def _user_traffic(meter: Meter, *, n_users: int) -> dict[str, Any]:
    """A user's upload and download (bytes), per phase; each message kind is divided by the
    users who sent or received it (all users, submitters, or participants)."""
    upload_blind = _bytes_per(meter, "user.upload.blind_request", n_users)
    upload_tag = _bytes_per(meter, "user.upload.tag_submission", int(meter.counts.get("user.submit", 0)))
    upload_shares = _bytes_per(meter, "user.upload.shares", int(meter.counts.get("user.ddg_encode", 0)))
    download_eval = _bytes_per(meter, "user.download.evaluation", n_users)
    download_broadcast = float(meter.bytes.get("user.download.broadcast", 0))
    return {
        "upload_bytes": upload_blind + upload_tag + upload_shares,
        "upload_bytes_phase1": upload_blind + upload_tag,
        "upload_bytes_phase2": upload_shares,
        "download_bytes": download_eval + download_broadcast,
        "download_bytes_evaluation": download_eval,
        "download_bytes_broadcast": download_broadcast,
    }


def _dummy_traffic(meter: Meter) -> dict[str, Any]:
    """The dummy messages and their bytes, in all."""
    return {
        "dummy_messages": int(meter.counts.get("dummy.messages", 0)),
        "dummy_bytes": int(meter.bytes.get("dummy.bytes", 0)),
    }


def _whole_run(meter: Meter, peak_bytes: int | None) -> dict[str, Any]:
    """Wall time per phase and in all, peak memory (tracemalloc's figure when the caller
    measured one, else the process's peak RSS), and the raw meter."""
    return {
        "wall_s": dict(meter.wall),
        "total_s": meter.wall.get("total", math.nan),
        "peak_memory_bytes": peak_bytes if peak_bytes is not None else peak_rss_bytes(),
        "peak_memory_kind": "tracemalloc" if peak_bytes is not None else "process peak RSS",
        "meter": meter.to_dict(),
    }


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


ROWS: tuple[tuple[str, str, str], ...] = (
    ("VOPRF evaluation (S_tag, wall per element)", "voprf_eval_us", "µs"),
    ("  … core time per element", "voprf_eval_core_us", "µs"),
    ("tag counting (S_syn)", "tag_count_us", "µs/tag"),
    ("share accumulation (per server)", "share_accumulate_us", "µs/share"),
    ("  … share decode/expand (per server)", "share_decode_us", "µs/share"),
    ("  … opening a sealed message", "open_sealed_us", "µs/msg"),
    ("bucket reconstruction (ring + DDG decode)", "reconstruct_us", "µs/bucket"),
    ("proxy forwarding (decode, rate-limit, shuffle)", "proxy_forward_us", "µs/msg"),
    ("users' broadcast build (S_syn, once)", "broadcast_build_ms", "ms"),
    ("user online time (participating user, CPU time of its thread)", "user_online_ms", "ms"),
    ("  … phase 1: hash + blind", "user_blind_ms", "ms"),
    ("  … phase 1: verify proof + unblind", "user_finalize_ms", "ms"),
    ("  … phase 1: seal request, seal tag submission", "user_seal_phase1_ms", "ms"),
    ("  … phase 2: load the broadcast, query its own tag", "user_broadcast_ms", "ms"),
    ("  … phase 2: DDG encode", "user_ddg_encode_ms", "ms"),
    ("  … phase 2: share", "user_share_ms", "ms"),
    ("  … phase 2: seal both shares", "user_seal_shares_ms", "ms"),
    ("user offline preparation (blind scalar, 4 seals' key material)", "user_offline_ms", "ms"),
    ("users sending phase-2 cover (not in a released bucket)", "n_cover_users", "users"),
    ("  … such a user's sealing of its two covers", "user_seal_cover_ms", "ms"),
    ("  … such a user's cover upload", "cover_upload_kB", "kB"),
    ("  … cover traffic in all", "cover_kB", "kB"),
    ("sealed messages the servers opened", "messages_opened", "msgs"),
    ("phase 2 (shares and cover: send, open, keep)", "phase2_wall_s", "s"),
    ("user total CPU (offline + online)", "user_total_ms", "ms"),
    ("user upload", "upload_kB", "kB"),
    ("user download", "download_kB", "kB"),
    ("  … of which the broadcast of released tags", "download_broadcast_kB", "kB"),
    ("dummy messages", "dummy_messages", "msgs"),
    ("dummy traffic", "dummy_kB", "kB"),
    ("whole run", "total_s", "s"),
    ("peak memory", "peak_memory_GiB", "GiB"),
)


def cost_table(
    costs: Mapping[str, Any],
    *,
    batched: Mapping[str, Any] | None = None,
    no_cover: Mapping[str, Any] | None = None,
    others: Sequence[tuple[str, Mapping[str, Any]]] = (),
) -> str:
    """A Markdown table: operation, ours (per-user proofs with cover traffic; with ``batched``,
    the run with one proof per batch; with ``no_cover``, the run without cover traffic; then
    each ``(title, costs)`` of ``others``, e.g. a networked deployment), the paper's figure, our
    target."""
    columns: list[tuple[str, Mapping[str, Any]]] = [("ours, per-user proofs", costs)]
    if batched:
        columns.append(
            (f"ours, one proof per {batched.get('proof_batch_size')} (N = {batched.get('n_users')})", batched)
        )
    if no_cover:
        columns.append(("ours, per-user proofs, no cover traffic", no_cover))
    columns += list(others)
    lines = [
        f"Per-operation costs, N = {costs.get('n_users')}, d = {costs.get('dim')} "
        f"(d' = {costs.get('padded_dim')}, ring 2^{costs.get('modulus_bits')}), ε = {costs.get('epsilon')}, "
        f"{costs.get('workers')} server threads, {costs.get('user_workers')} user-device thread(s), "
        f"{os.cpu_count()} CPUs",
        "",
        "| operation |" + "".join(f" {title} |" for title, _ in columns) + " paper (App. B.1) | target | unit |",
        "|---|" + "---|" * len(columns) + "---|---|---|",
    ]
    for label, key, unit in ROWS:
        ours = "".join(f" {_fmt(col.get(key))} |" for _, col in columns)
        lines.append(
            f"| {label} |{ours} {_fmt(PAPER.get(key))} | "
            f"{'≤ ' + _fmt(TARGETS[key]) if key in TARGETS else ''} | {unit} |"
        )
    for title, col in columns:
        lines += ["", f"Wall time per phase (s), {title.removeprefix('ours, ')}:", ""]
        lines += [f"- {name}: {_fmt(secs)}" for name, secs in col.get("wall_s", {}).items()]
    return "\n".join(lines) + "\n"


def parse_compare(spec: str) -> tuple[str, str, str]:
    """``"FAMILY=A,B"`` → ``(family, A, B)``; both names are checked against the registry, and
    the family must be one a run is built from (:data:`fre_protocol.components.DEFAULT_COMPONENTS`)."""
    from fre_protocol.components import component_names
    from primitives.errors import InvalidParameterError

    family, sep, names = spec.partition("=")
    parts = [p.strip() for p in names.split(",")] if sep else []
    if not family or len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise InvalidParameterError(f"--compare must be FAMILY=A,B with two different names, got {spec!r}")
    for name in parts:
        component_names({family.strip(): name})
    return family.strip(), parts[0], parts[1]


def _ratio(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or isinstance(a, bool):
        return "—"
    if math.isnan(a) or math.isnan(b) or a == 0:
        return "—"
    return f"{b / a:.2f}×"


def compare_table(family: str, names: tuple[str, str], columns: tuple[Mapping[str, Any], Mapping[str, Any]]) -> str:
    """A Markdown table of two runs that differ only in ``family``'s component: every row of
    :data:`ROWS` with both columns and the ratio B/A. Only ratios from the same invocation
    compare (same process, machine, population and seed); absolute figures of a small population
    are dominated by fixed costs."""
    a, b = columns
    lines = [
        f"Costs side by side: {family} = {names[0]} (A) vs {names[1]} (B); N = {a.get('n_users')}, "
        f"d = {a.get('dim')} (d' = {a.get('padded_dim')}, ring 2^{a.get('modulus_bits')}), ε = {a.get('epsilon')}, "
        f"{a.get('workers')} server threads, {os.cpu_count()} CPUs",
        "",
        "Both runs: one process, the same population and seed, after a warm-up run; every other "
        "component the default. Only ratios within this table compare: times from another run, "
        "machine or load do not.",
        "",
        f"| operation | A: {names[0]} | B: {names[1]} | B/A | unit |",
        "|---|---|---|---|---|",
    ]
    for label, key, unit in ROWS:
        lines.append(f"| {label} | {_fmt(a.get(key))} | {_fmt(b.get(key))} | {_ratio(a.get(key), b.get(key))} | {unit} |")
    same = a.get("released_buckets") == b.get("released_buckets")
    lines += ["", f"Released buckets: A {a.get('released_buckets')}, B {b.get('released_buckets')}"
              f"{'' if same else ' (differ: the runs are not comparable)'}."]
    return "\n".join(lines) + "\n"


def write_reports(costs: Mapping[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """``costs.json`` and ``costs.md`` in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "costs.json", out / "costs.md"
    json_path.write_text(json.dumps(json_safe(dict(costs)), indent=2) + "\n", encoding="utf-8")
    md_path.write_text(
        cost_table(costs, batched=costs.get("batched_run"), no_cover=costs.get("no_cover_run")), encoding="utf-8"
    )
    return json_path, md_path


__all__ = [
    "PAPER",
    "TARGETS",
    "compare_table",
    "cost_table",
    "parse_compare",
    "peak_rss_bytes",
    "summarize",
    "write_reports",
]
