"""``report.html``: one self-contained page per synthesis run (plots embedded as base64 PNG).

Sections: the run (command, corpus, parameters, stage timings), the privacy ledger (every term with
its source), the released clusters with their synthetic texts, and — in a separately framed and
labelled section — the evaluation that reads the private data: precision / recall / F1 / L2 at
centroid and text level against the frequent set (design §8), the histogram of the distance from
each private text to its nearest synthetic text, frequent vs infrequent (paper Fig. 2), and the
empirical SSP curve δ*(r*) for r* = ψ·r (paper Fig. 4). The evaluation is not covered by the DP
guarantee: it is for the operator who holds the data, and must not be published with the release.

matplotlib (Agg backend) is imported inside the plotting functions.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mechanism.release import Release

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;color:#222;line-height:1.4}
h1{font-size:1.6em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em} td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4} td.num{text-align:right;font-variant-numeric:tabular-nums}
.eval{border:3px solid #c0392b;border-radius:6px;padding:0 1em 1em;margin-top:2em;background:#fff8f7}
.eval h2{color:#c0392b} .label{font-weight:bold;color:#c0392b}
.warn{background:#fff3cd;border:1px solid #e0c36b;padding:.5em 1em;border-radius:4px}
.muted{color:#777;font-size:.9em} code{background:#f3f3f3;padding:0 .2em}
details{margin:.4em 0} img{max-width:100%}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, str):
        return _e(value)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        v = float(value)
        if math.isnan(v):
            return "n/a"
        if math.isinf(v):
            return "∞"
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
            return f"{v:.3e}"
        return f"{v:.{digits}g}"
    return _e(value)


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for v in row:
            cls = ' class="num"' if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls}>{_fmt(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{b64}">'


def plot_nearest_histogram(evaluation: Mapping[str, Any], radius: float) -> str | None:
    """Paper Fig. 2: distance from each private text to its nearest output, frequent vs infrequent."""
    levels = [lv for lv in ("text", "centroid") if "nearest_frequent" in evaluation.get(lv, {})]
    if not levels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(levels), figsize=(5.2 * len(levels), 3.6), squeeze=False)
    for ax, level in zip(axes[0], levels, strict=True):
        block = evaluation[level]
        freq = np.asarray(block["nearest_frequent"], dtype=float)
        rare = np.asarray(block["nearest_infrequent"], dtype=float)
        both = np.concatenate([freq, rare]) if freq.size or rare.size else np.zeros(1)
        bins = np.linspace(0.0, float(both.max()) * 1.02 + 1e-9, 40)
        if rare.size:
            ax.hist(rare, bins=bins, density=True, alpha=0.55, color="#c0392b", label=f"infrequent ({rare.size:,})")
        if freq.size:
            ax.hist(freq, bins=bins, density=True, alpha=0.55, color="#2e6fb7", label=f"frequent ({freq.size:,})")
        ax.axvline(radius, color="k", lw=1, ls="--", label=f"r = {radius:g}")
        ax.set_xlabel(f"L2 distance to the nearest synthetic {'text' if level == 'text' else 'centroid'}")
        ax.set_ylabel("density")
        ax.set_title(f"{level} level")
        ax.legend(fontsize=8)
    return _png(fig)


def plot_ssp(evaluation: Mapping[str, Any], radius: float) -> str | None:
    """Paper Fig. 4: empirical δ*(r*) for r* = ψ·r, centroid and text level (log scale)."""
    curves = [(lv, evaluation[lv]["ssp"]) for lv in ("centroid", "text") if "ssp" in evaluation.get(lv, {})]
    if not curves:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    floor = None
    for level, ssp in curves:
        psi = np.array([p for p, _ in ssp], dtype=float)
        delta = np.array([d for _, d in ssp], dtype=float)
        n_rare = max(1, len(evaluation[level].get("nearest_infrequent", [])))
        floor = 0.5 / n_rare
        ax.plot(psi, np.maximum(delta, floor), marker="o", ms=3, label=f"{level} level")
    ax.set_yscale("log")
    ax.axvline(1.0, color="k", lw=1, ls="--")
    ax.set_xlabel(f"ψ  (r* = ψ·r, r = {radius:g})")
    ax.set_ylabel("empirical δ*(r*)")
    if floor is not None:
        ax.set_title(f"points at {floor:.1e} are δ* = 0", fontsize=9)
    ax.legend(fontsize=8)
    return _png(fig)


def plot_bucket_counts(release: Release) -> str | None:
    if len(release) == 0:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = np.sort(release.counts)[::-1]
    fig, ax = plt.subplots(figsize=(5.6, 2.8))
    ax.bar(np.arange(len(counts)), counts, color="#2e6fb7")
    ax.set_xlabel("released cluster (by sampled count)")
    ax.set_ylabel("sampled count n_h")
    return _png(fig)


def _unit_paragraph(unit: Mapping[str, Any] | None) -> str:
    """Whom the guarantee protects (the ledger's ``unit``), first thing in the ledger section."""
    if not unit:
        return ""
    title = "What one user is" + (": one text" if unit.get("kind") == "text" else f": {_e(unit.get('user_field'))}")
    per_user = ""
    if unit.get("kind") == "user":
        per_user = (
            f" Per user: <b>ε = {_fmt(unit.get('epsilon'))}, δ = {_fmt(unit.get('delta'))}</b> "
            f"({_e(unit.get('rule', ''))})."
        )
    return f"<p class='unit'><b>{title}.</b> {_e(unit.get('statement', ''))}.{per_user}</p>"


def _ledger_section(ledger: Mapping[str, Any]) -> str:
    rows = [
        (t.get("name"), t.get("epsilon"), t.get("delta"), t.get("source"))
        for t in ledger.get("terms", [])
    ]
    flat = [
        (k, ledger.get(k))
        for k in ("epsilon", "delta", "tau", "eps_fre", "delta_fre", "delta_sens", "eps_agg", "delta_agg",
                  "sensitivity", "sigma", "noise_multiplier", "bucket_edge")
        if k in ledger
    ]
    return (
        "<h2>Privacy ledger</h2>"
        + _unit_paragraph(ledger.get("unit"))
        + f"<p>Total spent by this run: <b>ε = {_fmt(ledger.get('epsilon'))}, δ = {_fmt(ledger.get('delta'))}</b>"
        + (" per contribution" if (ledger.get("unit") or {}).get("kind") == "user" else "")
        + f". {_e(ledger.get('composition', ''))}</p>"
        + _table(rows, ["term", "ε", "δ", "source"])
        + "<details><summary>all quantities</summary>"
        + _table(flat, ["quantity", "value"])
        + "</details>"
    )


def _distance(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    return f"d = {_fmt(value, 3)}" if value is not None else "d = ?"


def _seed_cell(items: Sequence[Mapping[str, Any]]) -> str:
    """The seed the cluster's search started from (guided inversion), with its distance and source."""
    seeded = next((r for r in items if r.get("seed") is not None), None)
    if seeded is None:
        return "<span class='muted'>—</span>"
    source = f"{_e(seeded['seed_source'])}, " if seeded.get("seed_source") else ""
    return f"{_e(seeded['seed'])} <span class='muted'>({source}{_distance(seeded, 'seed_distance')})</span>"


def _clusters_section(release: Release, records: Sequence[Mapping[str, Any]], limit: int = 200) -> str:
    if len(release) == 0:
        return "<h2>Released clusters</h2><p>None.</p>"
    by_centroid: dict[int, list[Mapping[str, Any]]] = {}
    for r in records:
        by_centroid.setdefault(int(r["centroid_index"]), []).append(r)
    seeds = any(r.get("seed") is not None for r in records)
    order = np.argsort(-release.counts, kind="stable")
    rows = []
    for i in order[:limit].tolist():
        bucket = release.buckets[i]
        items = by_centroid.get(i, [])
        texts = "".join(
            f"<li>{_e(r['text'])} <span class='muted'>({_e(r.get('kind'))}, "
            f"{_distance(r, 'distance_to_centroid')})</span></li>"
            for r in items
        )
        seed = f"<td>{_seed_cell(items)}</td>" if seeds else ""
        rows.append(
            f"<tr><td class='num'>{i}</td><td><code>{_e(bucket.id[:16])}…</code></td>"
            f"<td class='num'>{bucket.count:,}</td><td><ul>{texts}</ul></td>{seed}</tr>"
        )
    more = f"<p class='muted'>{len(release) - limit} more in synthetic.jsonl.</p>" if len(release) > limit else ""
    seed_intro = (
        " Beside them, the seed the guided search started from — the draft of the generator trained "
        "on public text (prefix), or a public-pool text near the centroid (its pool source) — and its "
        "distance: the search did better where d is smaller than the seed's."
        if seeds else ""
    )
    seed_head = "<th>search seed</th>" if seeds else ""
    return (
        f"<h2>Released clusters ({len(release):,})</h2>"
        "<p>Each released cluster: its id (bucket id or VOPRF tag), its sampled count n_h (public, "
        "part of the DP release), and the synthetic texts inverted from its DP centroid, each with "
        f"its L2 distance d to the centroid in embedding space.{seed_intro} Largest first.</p>"
        "<table><thead><tr><th>#</th><th>id</th><th>n_h</th><th>synthetic texts</th>"
        f"{seed_head}</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + more
    )


def _metrics_rows(evaluation: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for level in ("centroid", "text"):
        block = evaluation.get(level, {})
        for key, alpha in (("utility", evaluation.get("alpha", 1.5)), ("utility_strict", 1.0)):
            u = block.get(key)
            if not u:
                continue
            rows.append(
                (
                    level,
                    float(alpha),
                    int(block.get("n_outputs", 0)),
                    u.get("precision"),
                    u.get("recall"),
                    u.get("f1"),
                    u.get("avg_l2"),
                    u.get("avg_l2_reverse"),
                    block.get("delta_star_at_r"),
                    u.get("precision_all", math.nan),
                    u.get("recall_all", math.nan),
                )
            )
    return rows


def _evaluation_section(evaluation: Mapping[str, Any] | None, radius: float) -> str:
    if evaluation is None:
        return "<h2>Evaluation</h2><p>Skipped (<code>--no-eval</code>).</p>"
    parts = [_utility_part(evaluation, radius), _readability_part(evaluation.get("readability")),
             _users_part(evaluation.get("users")), _clusters_part(evaluation.get("clusters")),
             _figures_part(evaluation, radius)]
    return "<div class='eval'>" + "".join(parts) + "</div>"


def _utility_part(evaluation: Mapping[str, Any], radius: float) -> str:
    """The section's warning, the data's size and the utility table against the frequent set."""
    return "".join([
        "<h2>Evaluation against the private data</h2>",
        f"<p class='label'>{_e(evaluation.get('label', ''))}</p>",
        "<p>This section reads every private embedding: it measures the release for the data holder "
        "and is <b>not</b> covered by the differential-privacy guarantee. Do not publish it with the "
        "synthetic texts.</p>",
        _table(
            [
                ("texts N", evaluation.get("n_texts")),
                (f"frequent texts (≥ t = {evaluation.get('threshold')} neighbours within r = {radius:g})",
                 evaluation.get("n_frequent")),
                ("frequent share", evaluation.get("frequent_share")),
                ("hit distance α·r", float(evaluation.get("alpha", 1.5)) * radius),
            ],
            ["quantity", "value"],
        ),
        "<h3>Utility against the frequent set F (design §8)</h3>",
        _table(
            _metrics_rows(evaluation),
            ["level", "α", "outputs", "precision", "recall", "F1", "L2 S→F", "L2 F→S", "δ*(r* = r)",
             "precision vs V", "recall vs V"],
        ),
        "<p class='muted'>A synthetic output is a hit if a frequent text lies within α·r (design §8 uses "
        "α = 1.5; α = 1 is shown too because with unit-norm embeddings α·r can approach the distance "
        "between unrelated texts, ≈ 1.4). L2 S→F: mean distance from each output to the nearest "
        "frequent text; F→S: the other direction. δ*(r): share of infrequent texts with an output "
        "within r. Centroids are averages, so their norm is below 1; noise-free centroids can lie "
        "within r of many texts, which makes centroid-level δ* high at ε = ∞.</p>",
    ])


def _readability_part(readable: Mapping[str, Any] | None) -> str:
    if not readable:
        return ""
    rules_ = readable.get("rules", {})
    flu = readable.get("fluency", {})
    line = (f"<h3>Readability (judges that neither wrote nor steered the texts)</h3><p>Reader's rules "
            f"(finished sentence, no repeated word, no talk about the task, no word list): "
            f"{_fmt(rules_.get('pass_share'), 2)} of {_fmt(rules_.get('n'))} synthetic texts pass "
            f"(private texts: {_fmt(readable.get('rules_real'), 2)}). ")
    if flu:
        line += (f"Fluency under {_e(flu.get('judge', ''))}: median NLL {_fmt(flu.get('nll_median'), 2)} "
                 f"(private texts {_fmt(flu.get('reference_nll_median'), 2)}); share above the private "
                 f"texts' 90th-percentile NLL: {_fmt(flu.get('share_above_cut'), 2)}.")
        news = readable.get("fluency_news")
        if news:  # the strict reference: a model of news finds tweets unlikely
            line += (f" Against public news sentences (median NLL {_fmt(news.get('reference_nll_median'), 2)}): "
                     f"share above their 90th-percentile NLL {_fmt(news.get('share_above_cut'), 2)}.")
    elif "fluency_unavailable" in readable:
        line += f"Fluency judge unavailable: {_e(readable['fluency_unavailable'])}."
    return line + "</p>"


def _users_part(users: Mapping[str, Any] | None) -> str:
    if not users:
        return ""
    rows = []
    for level in ("centroid", "text"):
        block = users.get(level) or {}
        u = block.get("utility") or {}
        rows.append((level, u.get("precision"), u.get("recall"), u.get("f1"), block.get("delta_star_at_r")))
    return (
        f"<h3>Over users ({_fmt(users.get('n_users'))} users; frequent: "
        f"{_e(users.get('frequent_definition', ''))})</h3>"
        + _table(rows, ["level", "precision", "recall (mean per user)", "F1", "δ*(r) over users"])
        + "<p class='muted'>Each person counts once: recall is the mean over users of the share of "
        "their frequent texts with an output nearby; δ* the share of users with a rare text that "
        "has an output within r.</p>"
    )


def _clusters_part(clusters: Mapping[str, Any] | None) -> str:
    if not clusters:
        return ""
    return (
        "<p>Cluster level (central path; heavy = grid buckets with ≥ t texts): "
        f"precision {_fmt(clusters.get('precision'))}, recall {_fmt(clusters.get('recall'))}, "
        f"{_fmt(clusters.get('n_heavy'))} heavy buckets.</p>"
    )


def _figures_part(evaluation: Mapping[str, Any], radius: float) -> str:
    """Figures 2 and 4 of the paper, where the evaluation holds their data."""
    parts = []
    hist = plot_nearest_histogram(evaluation, radius)
    if hist:
        parts.append("<h3>Distance to the nearest synthetic output (paper Fig. 2)</h3>")
        parts.append(_img(hist, "nearest synthetic distance histogram"))
        parts.append(
            "<p class='muted'>Frequent private texts should find a synthetic output nearby; "
            "infrequent ones should not (semantic support protection).</p>"
        )
    ssp = plot_ssp(evaluation, radius)
    if ssp:
        parts.append("<h3>Empirical semantic support protection δ*(r*) (paper Fig. 4)</h3>")
        parts.append(_img(ssp, "empirical delta star curve"))
        parts.append(
            "<p class='muted'>Fraction of infrequent private texts with a released output within r* = ψ·r.</p>"
        )
    return "".join(parts)


def render_report(
    *,
    summary: Mapping[str, Any],
    release: Release,
    records: Sequence[Mapping[str, Any]],
    evaluation: Mapping[str, Any] | None,
    ledger: Mapping[str, Any],
) -> str:
    params = summary.get("params", {})
    radius = float(params.get("radius", release.params.radius))
    timings = summary.get("timings_s", {})
    warn = "".join(f"<p class='warn'>⚠ {_e(w)}</p>" for w in summary.get("warnings", []))
    empty = summary.get("empty_reason")
    if empty:
        warn += f"<p class='warn'><b>Nothing was released.</b> {_e(empty)}</p>"
    run_rows = [
        ("command", summary.get("command") or "—"),
        ("corpus", f"{summary.get('corpus', {}).get('name')} ({_fmt(summary.get('n_texts'))} texts"
                   + (f", {_fmt(summary.get('n_users'))} users by {summary['corpus']['user_field']!r}"
                      if summary.get("corpus", {}).get("user_field") else "")
                   + "; "
                   f"normalization: {summary.get('corpus', {}).get('normalization') or 'none'})"),
        ("embedder", summary.get("embedder")),
        ("release path", summary.get("protocol")),
        ("inverter", (summary.get("inverter") or {}).get("name")),
        ("released clusters", summary.get("n_released")),
        ("synthetic texts", summary.get("n_synthetic")),
        ("rng mode", (summary.get("seeds") or {}).get("rng_mode")),
        ("transcript", summary.get("transcript") or "—"),
        ("peak memory (MiB)", summary.get("peak_memory_mb")),
    ]
    param_rows = [(k, v) for k, v in params.items()]
    timing_rows = [(k, v) for k, v in timings.items()]
    counts_png = plot_bucket_counts(release)
    body = [
        "<h1>fre-e2t synthesis report</h1>",
        warn,
        "<h2>Run</h2>",
        _table(run_rows, ["", ""]),
        "<details open><summary>public parameters</summary>",
        _table(param_rows, ["parameter", "value"]),
        "</details>",
        "<details><summary>wall time per stage (s)</summary>",
        _table(timing_rows, ["stage", "seconds"]),
        "</details>",
        _ledger_section(ledger),
        _clusters_section(release, records),
        _img(counts_png, "released cluster sizes") if counts_png else "",
        _evaluation_section(evaluation, radius),
    ]
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<title>fre-e2t synthesis report</title>"
        f"<style>{_CSS}</style></head><body>" + "".join(body) + "</body></html>\n"
    )


def write_report(path: Path, **kwargs: Any) -> None:
    import os
    import tempfile

    text = render_report(**kwargs)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def summary_table(summary: Mapping[str, Any]) -> str:
    """The plain-text table printed at the end of ``fre-e2t synthesize``."""
    lines: list[str] = []

    def row(key: str, value: Any) -> None:
        lines.append(f"  {key:<34} {value}")

    def num(v: Any, digits: int = 4) -> str:
        return html.unescape(_fmt(v, digits))

    lines.append("fre-e2t synthesize — summary")
    corpus = summary.get("corpus", {})
    by_user = f", {summary.get('n_users'):,} users by {corpus['user_field']!r}" if corpus.get("user_field") else ""
    row("corpus", f"{corpus.get('name')} ({summary.get('n_texts'):,} texts{by_user})")
    row("embedder", summary.get("embedder"))
    row("release path", summary.get("protocol"))
    unit = summary.get("unit") or {}
    if unit.get("kind") == "user":
        row("privacy per contribution (ε, δ)", f"({num(summary.get('epsilon'))}, {num(summary.get('delta'))})")
        row("privacy per user (ε, δ)", f"({num(unit.get('epsilon'))}, {num(unit.get('delta'))})  "
            f"[{unit.get('rule')}]")
    else:
        row("privacy spent (ε, δ)", f"({num(summary.get('epsilon'))}, {num(summary.get('delta'))})")
    if unit:
        row("what one user is", unit.get("statement"))
    params = summary.get("params", {})
    row(
        "parameters",
        f"r={num(params.get('radius'))} t={params.get('threshold')} k={params.get('k')} "
        f"p_s={num(params.get('p_sample'))} v={num(params.get('budget_factor'))} "
        f"u={num(params.get('sensitivity_ratio'))} "
        + (f"C={num(params['clip'])} " if "clip" in params else "")
        + f"σ={num(summary.get('sigma'))}",
    )
    row("released clusters", f"{summary.get('n_released'):,}")
    row("synthetic texts", f"{summary.get('n_synthetic'):,}")
    if summary.get("empty_reason"):
        row("nothing released", summary["empty_reason"])
    ev = summary.get("evaluation")
    if ev:
        lines.append("  evaluation (reads the private data; not covered by DP):")
        row("  frequent texts", f"{ev.get('n_frequent'):,} of {ev.get('n_texts'):,} ({num(ev.get('frequent_share'), 3)})")
        for level in ("centroid", "text"):
            u = (ev.get(level) or {}).get("utility")
            if not u:
                continue
            strict = (ev.get(level) or {}).get("utility_strict") or {}
            row(
                f"  {level} level P / R / F1 / L2",
                f"{num(u.get('precision'), 3)} / {num(u.get('recall'), 3)} / {num(u.get('f1'), 3)} / "
                f"{num(u.get('avg_l2'), 3)}   δ*(r)={num(ev[level].get('delta_star_at_r'), 3)}"
                + (
                    f"   [α=1: {num(strict.get('precision'), 3)} / {num(strict.get('recall'), 3)} / "
                    f"{num(strict.get('f1'), 3)}]"
                    if strict
                    else ""
                ),
            )
        users = ev.get("users") or {}
        for level in ("centroid", "text") if users else ():
            u = (users.get(level) or {}).get("utility")
            if u:
                row(f"  {level} level over users P / R / F1",
                    f"{num(u.get('precision'), 3)} / {num(u.get('recall'), 3)} / {num(u.get('f1'), 3)}   "
                    f"δ*(r)={num(users[level].get('delta_star_at_r'), 3)}  ({users.get('n_users'):,} users)")
    timings = summary.get("timings_s", {})
    row("wall time per stage (s)", ", ".join(f"{k} {v:.1f}" for k, v in timings.items() if k != "total"))
    row("total wall time (s)", f"{timings.get('total', math.nan):.1f}")
    row("peak memory (MiB)", f"{summary.get('peak_memory_mb', math.nan):.0f}")
    for w in summary.get("warnings", []):
        row("warning", w)
    row("outputs", "synthetic.jsonl centroids.npy release.json ledger.json summary.json"
        + (" evaluation.json" if ev else "") + " report.html"
        + (" " + str(summary["transcript"]) if summary.get("transcript") else ""))
    return "\n".join(lines)
