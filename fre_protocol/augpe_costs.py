"""What a distributed Aug-PE would cost each user, beside Fre-E2T's measured user costs (paper
App. B.1, Table 17).

In Aug-PE every private record votes for its nearest candidate, so in a distributed deployment
the vote is computed on the user's device: each of the T iterations, every user downloads the
N_cand = L·N_syn candidates, scans them for its nearest one and uploads its vote, and the next
iteration waits for all of them. Fre-E2T's user pays once (:mod:`fre_protocol.costs`).

Bytes are closed forms; the nearest-neighbour scan is measured here with numpy. Assumptions,
each chosen in Aug-PE's favour and written into the result under ``"assumptions"``:

* candidates travel as float32 embeddings (N_cand·d·4 bytes per iteration). The other option —
  the server sends the texts and users embed them — is given beside it, at ``text_bytes`` per
  candidate and the paper's measured embedding rate (0.29 ms per text on an H100; a phone is
  slower by orders of magnitude);
* a vote is uploaded as the index of the nearest candidate (⌈log2 N_cand / 8⌉ bytes per record)
  to an aggregator trusted to add the noise; the vote vector a secure aggregation would need
  (N_cand counters) is given beside it;
* "per run, incremental" lets users keep the embeddings of candidates that survive selection, so
  after the first iteration they fetch only the (L−1)·N_syn new ones and the kept indices;
* the scan is the cheapest exact one: candidate norms, one matrix-vector product per record and
  an argmin, in float32.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource

#: The paper's Aug-PE setting (App. B.1): N_syn = 3000, L = 7, T = 20, gtr-t5-base's d = 768.
PAPER_SETTING: dict[str, int] = {"n_syn": 3000, "variations": 7, "iterations": 20, "dim": 768}
#: Text embedding on the GPU, amortized at batch size 256 (App. B.1).
PAPER_EMBED_MS_PER_TEXT = 0.29
#: Fre-E2T's per-user download in the paper (App. B.1).
FRE_PAPER_DOWNLOAD_BYTES = 6100.0
FLOAT32_BYTES = 4
#: Aug-PE's 64 completion tokens at about 4 bytes of UTF-8 per BPE token of English.
DEFAULT_TEXT_BYTES = 256
DEFAULT_COUNTER_BYTES = 4

ASSUMPTIONS: tuple[str, ...] = (
    "candidates are downloaded as float32 embeddings, every iteration",
    "text variant: candidates downloaded as text (text_bytes each) and embedded on the device",
    "a vote is uploaded as the index of the nearest candidate to an aggregator that adds the noise",
    "one-hot variant: a vote vector of N_cand counters (counter_bytes each), as secure aggregation needs",
    "incremental: users keep surviving candidates' embeddings and fetch only new ones plus kept indices",
    "scan: candidate norms + one float32 matrix-vector product per record + argmin (numpy)",
)


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameterError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def vote_index_bytes(n_candidates: int) -> int:
    """Bytes of the smallest unsigned integer that can name one of ``n_candidates``."""
    _positive_int("n_candidates", n_candidates)
    return max(1, math.ceil((n_candidates - 1).bit_length() / 8))


def measure_scan(
    n_candidates: int, dim: int, n_private: int = 1, *, repeats: int = 5, seed: int = 0
) -> tuple[float, float]:
    """(wall, CPU) seconds, medians over ``repeats``, of one user's nearest-candidate scan.

    Data are uniform on [−0.5, 0.5) (the scan's cost does not depend on the values); one
    untimed run comes first so page faults and BLAS start-up are not counted. CPU time is the
    process's, summed over BLAS threads.
    """
    _positive_int("n_candidates", n_candidates)
    _positive_int("dim", dim)
    _positive_int("n_private", n_private)
    _positive_int("repeats", repeats)
    rng = RandomSource.seeded(seed, "augpe-costs/scan")
    cand = (rng.uniform(n_candidates * dim).astype(np.float32) - np.float32(0.5)).reshape(n_candidates, dim)
    mine = (rng.uniform(n_private * dim).astype(np.float32) - np.float32(0.5)).reshape(n_private, dim)

    def scan() -> np.ndarray:
        sq = np.einsum("ij,ij->i", cand, cand)
        d2 = sq[:, None] - np.float32(2.0) * (cand @ mine.T)
        nearest: np.ndarray = np.argmin(d2, axis=0)
        return nearest

    scan()
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        scan()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def augpe_user_costs(
    n_syn: int,
    variations: int,
    iterations: int,
    dim: int,
    *,
    n_private_sample: int = 1,
    measure: bool = True,
    repeats: int = 5,
    text_bytes: int = DEFAULT_TEXT_BYTES,
    counter_bytes: int = DEFAULT_COUNTER_BYTES,
    include_paper: bool = True,
) -> dict[str, Any]:
    """One user's cost per iteration and per run of a distributed Aug-PE (module docstring).

    ``n_private_sample`` is the number of private records the user holds (1 in the paper's
    setting); each casts a vote. Keys end in ``_bytes`` or ``_s``; ``measure=False`` leaves the
    scan times NaN. With ``include_paper`` the same figures at :data:`PAPER_SETTING` are under
    ``"paper_setting"`` (when the setting asked for is another one).
    """
    _check_setting(n_syn, variations, iterations, dim, n_private_sample, text_bytes, counter_bytes)
    n_cand = variations * n_syn
    index = vote_index_bytes(n_cand)
    out: dict[str, Any] = {
        "setting": {
            "n_syn": n_syn,
            "variations": variations,
            "iterations": iterations,
            "dim": dim,
            "n_candidates": n_cand,
            "n_private_sample": n_private_sample,
        },
        **_download_costs(n_syn, variations, iterations, dim, index=index, text_bytes=text_bytes),
        **_upload_costs(
            n_cand, iterations, index=index, n_private=n_private_sample, counter_bytes=counter_bytes
        ),
        **_scan_costs(
            n_cand, iterations, dim, n_private=n_private_sample, measure=measure, repeats=repeats
        ),
        "synchronous_rounds": iterations,
        "measured": measure,
        "scan_repeats": repeats if measure else 0,
        "cpus": os.cpu_count(),
        "text_bytes": text_bytes,
        "counter_bytes": counter_bytes,
        "vote_index_bytes": index,
        "assumptions": list(ASSUMPTIONS),
    }
    here = {"n_syn": n_syn, "variations": variations, "iterations": iterations, "dim": dim}
    if include_paper and here != PAPER_SETTING:
        out["paper_setting"] = augpe_user_costs(
            **PAPER_SETTING,
            n_private_sample=n_private_sample,
            measure=measure,
            repeats=repeats,
            text_bytes=text_bytes,
            counter_bytes=counter_bytes,
            include_paper=False,
        )
    return out


def _check_setting(
    n_syn: Any,
    variations: Any,
    iterations: Any,
    dim: Any,
    n_private_sample: Any,
    text_bytes: Any,
    counter_bytes: Any,
) -> None:
    """Reject a setting the closed forms cannot take, naming the first bad argument in the
    signature's order (``variations`` must be at least 2, the others at least 1)."""
    _positive_int("n_syn", n_syn)
    if isinstance(variations, bool) or not isinstance(variations, int) or variations < 2:
        raise InvalidParameterError(f"variations must be an integer >= 2, got {variations!r}")
    _positive_int("iterations", iterations)
    _positive_int("dim", dim)
    _positive_int("n_private_sample", n_private_sample)
    _positive_int("text_bytes", text_bytes)
    _positive_int("counter_bytes", counter_bytes)


def _download_costs(
    n_syn: int, variations: int, iterations: int, dim: int, *, index: int, text_bytes: int
) -> dict[str, Any]:
    """What a user fetches: the candidates as float32 embeddings (every iteration, or
    incrementally: all once, then only the new ones and the survivors' indices), or as text
    with the paper's H100 time to embed them."""
    n_cand = variations * n_syn
    embedding_bytes = n_cand * dim * FLOAT32_BYTES
    new_bytes = (variations - 1) * n_syn * dim * FLOAT32_BYTES + n_syn * index
    return {
        "download_bytes_per_iteration": embedding_bytes,
        "download_bytes_per_run": iterations * embedding_bytes,
        "download_bytes_per_run_incremental": embedding_bytes + (iterations - 1) * new_bytes,
        "download_text_bytes_per_iteration": n_cand * text_bytes,
        "download_text_bytes_per_run": iterations * n_cand * text_bytes,
        "text_embed_s_per_iteration_h100": n_cand * PAPER_EMBED_MS_PER_TEXT / 1e3,
        "text_embed_s_per_run_h100": iterations * n_cand * PAPER_EMBED_MS_PER_TEXT / 1e3,
    }


def _upload_costs(
    n_cand: int, iterations: int, *, index: int, n_private: int, counter_bytes: int
) -> dict[str, Any]:
    """What a user sends: one candidate index per private record, or (for secure aggregation)
    a vote vector of ``n_cand`` counters."""
    return {
        "upload_bytes_per_iteration": n_private * index,
        "upload_bytes_per_run": iterations * n_private * index,
        "upload_one_hot_bytes_per_iteration": n_cand * counter_bytes,
        "upload_one_hot_bytes_per_run": iterations * n_cand * counter_bytes,
    }


def _scan_costs(
    n_cand: int, iterations: int, dim: int, *, n_private: int, measure: bool, repeats: int
) -> dict[str, Any]:
    """The user's nearest-candidate scan, wall and CPU seconds (measured here, or NaN when
    ``measure`` is off), per iteration and per run."""
    if measure:
        scan_s, scan_cpu_s = measure_scan(n_cand, dim, n_private, repeats=repeats)
    else:
        scan_s = scan_cpu_s = math.nan
    return {
        "scan_s_per_iteration": scan_s,
        "scan_s_per_run": iterations * scan_s,
        "scan_cpu_s_per_iteration": scan_cpu_s,
        "scan_cpu_s_per_run": iterations * scan_cpu_s,
    }


# -- beside Fre-E2T -----------------------------------------------------------------------------------
def _fre_bytes(fre: Mapping[str, Any], what: str) -> float:
    """``download``/``upload`` bytes from a :func:`fre_protocol.costs.summarize` result
    (``*_bytes``) or a table of kB figures such as :data:`fre_protocol.costs.PAPER`."""
    if f"{what}_bytes" in fre:
        return float(fre[f"{what}_bytes"])
    if f"{what}_kB" in fre:
        return float(fre[f"{what}_kB"]) * 1000.0
    raise InvalidParameterError(f"fre costs must hold {what}_bytes or {what}_kB, got keys {sorted(fre)}")


def _ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


def cost_comparison(augpe: Mapping[str, Any], fre: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows of Table 17: one user's Aug-PE cost per iteration and per run beside Fre-E2T's
    (paid once), with the ratios Aug-PE / Fre-E2T.

    ``augpe`` is :func:`augpe_user_costs`; ``fre`` is :func:`fre_protocol.costs.summarize` or
    :func:`~fre_protocol.cost_measurement.measure` output (``download_bytes``, ``upload_bytes``,
    ``user_online_ms``) or the paper's kB figures (``download_kB``, ``upload_kB``,
    ``user_online_ms``).
    """
    fre_online_s = float(fre["user_online_ms"]) / 1e3 if "user_online_ms" in fre else math.nan
    specs: Sequence[tuple[str, str, str, float]] = (
        ("user download (candidate embeddings)", "bytes", "download_bytes", _fre_bytes(fre, "download")),
        ("user download (candidate texts, embedded on device)", "bytes", "download_text_bytes",
         _fre_bytes(fre, "download")),
        ("user upload (vote index)", "bytes", "upload_bytes", _fre_bytes(fre, "upload")),
        ("user upload (one-hot vote vector)", "bytes", "upload_one_hot_bytes", _fre_bytes(fre, "upload")),
        ("user online compute (nearest-candidate scan)", "s", "scan_s", fre_online_s),
    )
    rows: list[dict[str, Any]] = []
    for quantity, unit, key, fre_value in specs:
        per_iteration = float(augpe[f"{key}_per_iteration"])
        per_run = float(augpe[f"{key}_per_run"])
        rows.append(
            {
                "quantity": quantity,
                "unit": unit,
                "aug_pe_per_iteration": per_iteration,
                "aug_pe_per_run": per_run,
                "fre_e2t": fre_value,
                "ratio_per_iteration": _ratio(per_iteration, fre_value),
                "ratio_per_run": _ratio(per_run, fre_value),
            }
        )
    return rows


def _fmt(value: float) -> str:
    if not math.isfinite(value):
        return "—"
    if abs(value) >= 1e4:
        return f"{value:.3g}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


def comparison_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """:func:`cost_comparison` rows as a Markdown table."""
    lines = [
        "| per user | unit | Aug-PE, per iteration | Aug-PE, per run | Fre-E2T, per run | "
        "ratio per iteration | ratio per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [r["aug_pe_per_iteration"], r["aug_pe_per_run"], r["fre_e2t"], r["ratio_per_iteration"], r["ratio_per_run"]]
        lines.append(f"| {r['quantity']} | {r['unit']} | " + " | ".join(_fmt(float(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"
