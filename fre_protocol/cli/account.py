"""``fre-e2t account``: the privacy ledger of a setting, term by term (design §4.1-§4.3).

Prints every term with the result it comes from, the composed total, the sensitivity cap
Δ = min(u·r, 2C) (whether it binds, and the δ_sens it leaves) and the noise it implies;
``--json`` prints the same as one JSON object (flat keys, ``sensitivity_cap`` and ``terms``). ``--optimise-v`` first
searches the budget factor v (and, with ``--p-grid``, p_s) for the least noise. ``--protocol``
accounts the two-server protocol instead (S_syn's padded histogram view, DDG noise at ``--dim``).
``--cap C`` adds the guarantee per *user* when each user contributes to at most c buckets
(:func:`mechanism.contributions.per_user_guarantee`), beside the per-contribution total.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fre_protocol.cli.common import add_noise_flags, add_param_flags, params_from_args, positive_int
from mechanism.accounting import DEFAULT_V_GRID, calibrate_noise, optimise_budget_factor
from mechanism.contributions import PrivacyUnit, per_user_guarantee
from mechanism.ledger import PrivacyLedger
from mechanism.params import FreParams
from primitives.errors import InvalidParameterError
from primitives.jsonsafe import json_safe

HELP = "Compute the privacy ledger (every term, its source) and the centroid noise of a setting."


def _grid(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers such as 1,2,3, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one number, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_param_flags(parser, defaults=FreParams.paper(8.0))
    g = parser.add_argument_group("accounting")
    g.add_argument(
        "--lemma1",
        choices=["closed", "exact"],
        default="closed",
        help="Lemma 1 delta: the paper's Chernoff closed form or the exact hockey-stick divergence",
    )
    g.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    g.add_argument(
        "--optimise-v",
        action="store_true",
        help="search the budget factor v (and p_s with --p-grid) for the least noise first",
    )
    g.add_argument(
        "--v-grid",
        type=_grid,
        default=DEFAULT_V_GRID,
        metavar="V1,V2,...",
        help="budget factors tried by --optimise-v (default 0.5, 1.0, ..., 8.0)",
    )
    g.add_argument(
        "--p-grid",
        type=_grid,
        default=None,
        metavar="P1,P2,...",
        help="sampling rates tried by --optimise-v (default: only --p-sample)",
    )
    g.add_argument("--cap", type=positive_int, metavar="C",
                   help="also show the guarantee per user when each user contributes to at most C buckets "
                   "(default: per contribution only)")
    g.add_argument("--protocol", action="store_true",
                   help="the two-server protocol's ledger (S_syn's histogram view, DDG noise) instead of the mechanism's")
    g.add_argument("--dim", type=positive_int, default=384,
                   help="embedding dimension the protocol's DDG noise is calibrated for (default 384)")
    g.add_argument("--dishonest-fraction", type=float, default=0.0, metavar="F",
                   help="with --protocol: size the users' DDG noise so that the honest (1 - F) of the "
                   "release floor's contributors meet the DDG term (design §4.4; default 0)")
    add_noise_flags(g)


def _num(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.6g}"


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        out.append("  ".join([*cells, row[-1]]).rstrip())
    return out


def sensitivity_cap(ledger: PrivacyLedger, params: FreParams) -> dict[str, Any]:
    """The cap of design §4.2: Δ = min(u·r, 2C), whether 2C binds, and δ_sens as charged."""
    flat = ledger.flat()
    return {
        "clip": params.clip,
        "sensitivity_target": params.sensitivity_target,
        "diameter": params.diameter,
        "sensitivity": flat["sensitivity"],
        "binds": params.sensitivity_capped,
        "delta_sens": flat["delta_sens"],
    }


def render_ledger(ledger: PrivacyLedger, params: FreParams, *, lemma1: str) -> str:
    """The human-readable ledger: one aligned row per term, the total, then derived values."""
    flat = ledger.flat()
    cap = sensitivity_cap(ledger, params)
    lines = [
        "Fre-E2T privacy ledger",
        (
            f"  setting: epsilon={_num(params.epsilon)} delta={_num(params.delta)} "
            f"r={_num(params.radius)} t={params.threshold} k={params.k} "
            f"p_s={_num(params.effective_p_sample)} v={_num(params.budget_factor)} "
            f"u={_num(params.sensitivity_ratio)} m_L={_num(params.edge_multiplier)} "
            f"C={_num(params.clip)} rounding={params.rounding} lemma1={lemma1}"
        ),
        "",
    ]
    rows: list[tuple[str, ...]] = [("term", "epsilon", "delta", "source")]
    rows += [(t.name, _num(t.epsilon), _num(t.delta), t.source) for t in ledger.terms]
    rows.append(("total", _num(ledger.epsilon), _num(ledger.delta), ledger.composition))
    lines += _table(rows)
    lines.append("")
    derived = [
        ("quantity", "value", "meaning"),
        ("tau", _num(flat["tau"]), "release threshold on sampled counts, p_s*t"),
        ("eps_fre", _num(flat["eps_fre"]), "heavy-hitter epsilon, v*ln(1/(1-p_s))"),
        ("delta_fre", _num(flat["delta_fre"]), "heavy-hitter delta"),
        (
            "delta_sens",
            _num(flat["delta_sens"]),
            "probability the sensitivity bound fails"
            + (" (0: the cap 2C binds)" if cap["binds"] else " (Lemma 2)"),
        ),
        ("eps_agg", _num(flat["eps_agg"]), "epsilon left for the centroids"),
        ("delta_agg", _num(flat["delta_agg"]), "delta left for the centroids"),
        ("u*r", _num(cap["sensitivity_target"]), "Lemma 2's target sensitivity"),
        ("2C", _num(cap["diameter"]), "diameter of the clipped domain (C = clip)"),
        ("cap_binds", "yes" if cap["binds"] else "no", "2C <= u*r: Delta = 2C holds with certainty"),
        (
            "sensitivity",
            _num(flat["sensitivity"]),
            "L2 sensitivity Delta = min(u*r, 2C)"
            + (": the cap 2C binds" if cap["binds"] else " = u*r"),
        ),
        ("sigma", _num(flat["sigma"]), "Gaussian std on each bucket sum (embedding units)"),
        ("noise_multiplier", _num(flat["noise_multiplier"]), "sigma / Delta"),
        ("bucket_edge", _num(flat["bucket_edge"]), "grid edge L = m_L*2r/sqrt(k)"),
    ]
    lines += _table(derived)
    return "\n".join(lines)


#: Released counts, in multiples of ⌈τ⌉, at which `account --protocol` shows the noise.
NOISE_TABLE_MULTIPLES = (1, 2, 5, 10)


def noise_by_count(params: FreParams, dim: int, config: Any) -> list[dict[str, Any]]:
    """The users' noise at a few released counts n (multiples of ⌈τ⌉), all contributing: m_h,
    σ_int, each user's σ (γ·σ_int), the σ of the bucket's sum (γ·σ_int·√n) and of its centroid
    (÷ n), with the floor calibration's sum beside it. At the γ of a round whose largest count is
    10⌈τ⌉ (a round's γ follows its largest count; the sums' σ in embedding units hardly does)."""
    from fre_protocol.roles.ledger import ddg_config_for
    from fre_protocol.roles.noise_plan import noise_plan
    from mechanism.fre_e2t import release_threshold

    floor = release_threshold(params)
    counts = [m * floor for m in NOISE_TABLE_MULTIPLES]
    ddg = ddg_config_for(params, dim, config, n_modulus=max(counts))
    plan = noise_plan(params, config, ddg, {n.to_bytes(8, "big"): n for n in counts})
    rows = []
    for n in counts:
        tag = n.to_bytes(8, "big")
        sigma = plan.sigma(tag)
        rows.append({
            "count": n, "m": plan.needed(tag), "sigma_int": sigma, "sigma_user": ddg.gamma * sigma,
            "sigma_sum": ddg.gamma * sigma * math.sqrt(n), "sigma_centroid": ddg.gamma * sigma / math.sqrt(n),
            "sigma_sum_floor": ddg.gamma * float(ddg.sigma_int) * math.sqrt(n),
        })
    return rows


def render_noise(rows: Sequence[Mapping[str, Any]], config: Any) -> str:
    table: list[tuple[str, ...]] = [("n_h", "m_h", "sigma_int", "user sigma", "sum sigma", "floor's sum sigma")]
    table += [
        (str(r["count"]), str(r["m"]), _num(r["sigma_int"]), _num(r["sigma_user"]), _num(r["sigma_sum"]),
         _num(r["sigma_sum_floor"]))
        for r in rows
    ]
    head = (f"Users' DDG noise by released count (--noise-calibration {config.noise_calibration}, "
            f"dropout allowance {config.dropout_allowance}, --ddg-accountant {config.ddg_accountant}; "
            "embedding units, every contributor online)")
    return "\n".join([head, *_table(table)])


def protocol_ledger_of(params: FreParams, dim: int, dishonest_fraction: float = 0.0) -> PrivacyLedger:
    """The ledger the two-server protocol states with the default configuration (but for the
    dishonest fraction f), before any dropout: the DDG calibrated at the release floor (what the
    runner does with no released count)."""
    from fre_protocol.roles.config import ProtocolConfig
    from fre_protocol.roles.ledger import build_ledger, ddg_config_for, dummy_parameters
    from mechanism.fre_e2t import release_threshold

    config = ProtocolConfig(dishonest_fraction=dishonest_fraction)
    ddg = ddg_config_for(params, dim, config, n_modulus=release_threshold(params))
    return build_ledger(params, ddg, dummy_parameters(params, config), dishonest_fraction=dishonest_fraction)


def _noise_config(args: argparse.Namespace) -> Any:
    """The protocol's noise configuration (--protocol only; the flags need it)."""
    from fre_protocol.roles.config import (
        DEFAULT_DROPOUT_ALLOWANCE,
        NOISE_CALIBRATIONS,
        ProtocolConfig,
    )
    from primitives.ddg.encoder import DEFAULT_ACCOUNTANT

    chosen = (
        args.noise_calibration != NOISE_CALIBRATIONS[0]
        or args.dropout_allowance != DEFAULT_DROPOUT_ALLOWANCE
        or args.ddg_accountant != DEFAULT_ACCOUNTANT
    )
    if not args.protocol:
        if chosen:
            raise InvalidParameterError(
                "--noise-calibration, --dropout-allowance and --ddg-accountant size the protocol's noise: add --protocol"
            )
        return None
    return ProtocolConfig(
        dishonest_fraction=args.dishonest_fraction, noise_calibration=args.noise_calibration,
        dropout_allowance=args.dropout_allowance, ddg_accountant=args.ddg_accountant,
    )


def per_user(ledger: PrivacyLedger, cap: int) -> dict[str, Any]:
    """The per-user guarantee of ``ledger`` at c = ``cap``, and the rule that gives it."""
    epsilon, delta, rule = per_user_guarantee(ledger, PrivacyUnit(kind="user", cap=cap))
    return {"cap": cap, "epsilon": epsilon, "delta": delta, "rule": rule}


def run(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    lemma1: str = args.lemma1
    optimisation: dict[str, Any] | None = None
    if args.protocol and (args.optimise_v or lemma1 != "closed"):
        raise InvalidParameterError("--protocol accounts the protocol's own ledger: drop --optimise-v and --lemma1")
    if args.dishonest_fraction and not args.protocol:
        raise InvalidParameterError("--dishonest-fraction sizes the protocol's DDG noise: add --protocol")
    noise = _noise_config(args)
    if args.protocol:
        ledger = protocol_ledger_of(params, args.dim, args.dishonest_fraction)
    elif args.optimise_v:
        if not params.is_dp:
            raise InvalidParameterError("--optimise-v needs a finite --epsilon, got inf")
        choice = optimise_budget_factor(
            params, v_grid=args.v_grid, p_grid=args.p_grid, lemma1=lemma1
        )
        ledger = choice.ledger
        params = FreParams.from_dict(dict(ledger.params))
        optimisation = {
            "objective": choice.objective,
            "budget_factor": choice.budget_factor,
            "p_sample": choice.p_sample,
            "sigma": choice.sigma,
            "candidates": [
                {
                    "budget_factor": c.budget_factor,
                    "p_sample": c.p_sample,
                    "feasible": c.feasible,
                    "sigma": c.sigma if c.feasible else None,
                    "reason": c.reason,
                }
                for c in choice.candidates
            ],
        }
    else:
        ledger = calibrate_noise(params, lemma1=lemma1)

    if args.json:
        out = ledger.to_dict()
        out["sensitivity_cap"] = sensitivity_cap(ledger, params)
        out["lemma1"] = lemma1
        if optimisation is not None:
            out["optimisation"] = optimisation
        if args.cap is not None:
            out["per_user"] = per_user(ledger, args.cap)
        out["path"] = "protocol" if args.protocol else "mechanism"
        if noise is not None and params.is_dp:
            out["noise_by_count"] = noise_by_count(params, args.dim, noise)
        print(json.dumps(json_safe(out), indent=2, allow_nan=False, ensure_ascii=False))
        return 0

    if optimisation is not None:
        rows: list[tuple[str, ...]] = [("p_s", "v", "sigma", "note")]
        for c in optimisation["candidates"]:
            best = (c["budget_factor"], c["p_sample"]) == (
                optimisation["budget_factor"],
                optimisation["p_sample"],
            )
            note = "<- best" if best else ("" if c["feasible"] else f"infeasible: {c['reason']}")
            sigma = _num(c["sigma"]) if c["feasible"] else "-"
            rows.append((_num(c["p_sample"]), _num(c["budget_factor"]), sigma, note))
        print("Budget-factor search (least sigma)")
        print("\n".join(_table(rows)))
        print()
    print(render_ledger(ledger, params, lemma1=lemma1))
    if noise is not None and params.is_dp:
        print()
        print(render_noise(noise_by_count(params, args.dim, noise), noise))
    if args.cap is not None:
        user = per_user(ledger, args.cap)
        print()
        print("\n".join(_table([
            ("guarantee", "epsilon", "delta", "rule"),
            ("per contribution", _num(ledger.epsilon), _num(ledger.delta), "the total above"),
            (f"per user (c={args.cap})", _num(user["epsilon"]), _num(user["delta"]), user["rule"]),
        ])))
    return 0
