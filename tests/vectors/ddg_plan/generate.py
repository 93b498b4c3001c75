"""Write the DDG plan known answers of this folder (see README.md): for a grid of DP round
settings, what a device derives for phase 2 (the aggregation budget, the DDG configuration and
each released count's m_h and σ_int), computed by the Python code a device runs.

Run from the repository root with the project's Python: ``.venv/bin/python
tests/vectors/ddg_plan/generate.py``. The output is a function of the code alone (no randomness,
sorted keys), so running it on an unchanged tree rewrites the file byte for byte; it prints the
file's sha256 for the README and ``tests/support/known_answers.py``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from known_answers import write_vector  # noqa: E402

from fre_protocol.roles.config import ProtocolConfig, honest_contributors  # noqa: E402
from fre_protocol.roles.ledger import aggregation_budget, ddg_config_for, dummy_parameters  # noqa: E402
from fre_protocol.roles.noise_plan import CountSizing  # noqa: E402
from mechanism.accounting import calibrate_noise, heavy_hitter_privacy, sensitivity_term  # noqa: E402
from mechanism.fre_e2t import release_threshold  # noqa: E402
from mechanism.params import FreParams  # noqa: E402
from primitives.analytic_gaussian import log_normal_cdf  # noqa: E402
from primitives.ddg import clipped_sensitivity, ddg_epsilon  # noqa: E402
from primitives.ddg.accounting import scales_exactly  # noqa: E402

FORMAT = 1
VECTOR_DIR = Path(__file__).resolve().parent
FILE = "plans.json"

#: (name, dim, FreParams fields, ProtocolConfig fields): ε 1 to 16, δ 1e-8 to 1e-3, d 16 to 768,
#: thresholds 20 to 1000, both calibrations, dropout allowances 0 to 0.3, dishonest fractions,
#: explicit dummy parameters, the clip cap binding or not, rings of 8 to 32 bits.
SETTINGS: tuple[tuple[str, int, dict[str, Any], dict[str, Any]], ...] = (
    ("eps1_d384", 384, {"epsilon": 1.0, "p_sample": 0.2, "budget_factor": 2.0, "threshold": 1000}, {}),
    ("eps4_d384_paper", 384, {"epsilon": 4.0, "p_sample": 0.3, "budget_factor": 4.0}, {}),
    ("eps8_d384_paper", 384, {"epsilon": 8.0, "p_sample": 0.5, "budget_factor": 4.0}, {}),
    ("eps16_d384_paper", 384, {"epsilon": 16.0, "p_sample": 0.6, "budget_factor": 3.0}, {}),
    ("eps8_d64_floor", 64, {"epsilon": 8.0}, {"noise_calibration": "floor"}),
    ("eps8_d768_delta1e-8", 768, {"epsilon": 8.0, "delta": 1e-8, "threshold": 200}, {}),
    ("eps16_d768_floor", 768, {"epsilon": 16.0, "p_sample": 0.6, "budget_factor": 3.0},
     {"noise_calibration": "floor"}),
    ("eps4_d64_dropout0.1", 64, {"epsilon": 4.0, "p_sample": 0.3, "threshold": 150}, {"dropout_allowance": 0.1}),
    ("eps8_d384_dropout0.3", 384, {"epsilon": 8.0}, {"dropout_allowance": 0.3}),
    ("eps8_d384_dishonest0.2", 384, {"epsilon": 8.0}, {"dishonest_fraction": 0.2}),
    ("eps16_d64_dishonest0.1_floor", 64, {"epsilon": 16.0, "p_sample": 0.6, "budget_factor": 3.0},
     {"dishonest_fraction": 0.1, "noise_calibration": "floor"}),
    ("eps8_d384_dummies", 384, {"epsilon": 8.0}, {"dummy_epsilon0": 0.5, "dummy_delta0": 1e-13}),
    ("eps8_d384_cap_binds", 384, {"epsilon": 8.0, "radius": 1.0}, {}),
    ("eps8_d768_32bit", 768, {"epsilon": 8.0, "delta": 1e-7}, {"modulus_bits": 32, "modulus_stddevs": 4.0}),
    ("eps16_d16_delta1e-2", 16, {"epsilon": 16.0, "delta": 0.01, "threshold": 20}, {"chunk_size": 1}),
    # Small rings: σ_int below ~8.7, where τ_DDG does not underflow and the count sizing bisects
    # (at 12 bits the floor's σ_int is above it: modest counts scale, large ones bisect).
    ("eps4_d64_ring10", 64, {"epsilon": 4.0, "p_sample": 0.3, "threshold": 40, "delta": 1e-3},
     {"modulus_bits": 10, "modulus_stddevs": 4.0}),
    ("eps4_d64_ring12", 64, {"epsilon": 4.0, "p_sample": 0.3, "threshold": 40, "delta": 1e-3},
     {"modulus_bits": 12, "modulus_stddevs": 4.0}),
    ("eps16_d16_ring8", 16, {"epsilon": 16.0, "p_sample": 0.6, "budget_factor": 3.0, "threshold": 40, "delta": 1e-2},
     {"modulus_bits": 8, "modulus_stddevs": 4.0, "dishonest_fraction": 0.25}),
    # KLS21's RDP accountant alone (ProtocolConfig.ddg_accountant = "rdp"); the rest use the default.
    ("eps8_d384_paper_rdp", 384, {"epsilon": 8.0, "p_sample": 0.5, "budget_factor": 4.0}, {"ddg_accountant": "rdp"}),
    ("eps4_d64_ring10_rdp", 64, {"epsilon": 4.0, "p_sample": 0.3, "threshold": 40, "delta": 1e-3},
     {"modulus_bits": 10, "modulus_stddevs": 4.0, "ddg_accountant": "rdp"}),
)

#: The largest count sized, in floors: the small rings hold no more than ten floors' users.
LARGE = {"eps4_d64_ring10": 10, "eps4_d64_ring12": 10, "eps16_d16_ring8": 10, "eps4_d64_ring10_rdp": 10}

#: Points of erf (Lemma 2's collision probability needs it; JS has none).
ERF_POINTS = (1e-5, 0.1, 0.5, 0.5892556509887896, 1.0, 1.5, 2.0, 3.0, 4.5, 5.9)

#: Points of ln Φ (the analytic accountant's Gaussian tails, far into the lower tail).
LOG_NORMAL_CDF_POINTS = (-60.0, -37.5, -30.0, -29.9, -20.0, -8.5, -3.0, -1.0, 0.0, 0.7, 2.5, 6.0)


def counts_for(floor: int, dropout: float, large: int) -> list[int]:
    """The released counts each case sizes: the floor, one above, the first above whose m_h
    leaves the floor, a few times the floor, and large."""
    first_above = max(floor + 1, math.ceil((floor + 1) / (1.0 - dropout)) + 1)
    return sorted({floor, floor + 1, first_above, 3 * floor + 7, large * floor + 3})


def path(sizing: CountSizing, count: int, n_ref: int) -> str:
    """Which way noise_plan._calibrated finds σ_int for this count: the floor's configuration,
    exact √ scaling (the accountant depends on n·σ_int² alone at both), or the bisection."""
    m = sizing.users(count)
    if m == sizing.floor:
        return "floor"
    sigma_ref = float(sizing.ddg_config.sigma_int)
    n = honest_contributors(m, sizing.cfg.dishonest_fraction)
    guess = sigma_ref * math.sqrt(n_ref / n)
    accountant = sizing.ddg_config.accountant
    exact = scales_exactly(sigma_ref, n_ref, accountant) and scales_exactly(guess, n, accountant)
    return "scaled" if exact else "bisection"


def case(name: str, dim: int, params_fields: dict[str, Any], cfg_fields: dict[str, Any]) -> dict[str, Any]:
    params = FreParams(**params_fields)
    cfg = ProtocolConfig(**cfg_fields)
    floor = release_threshold(params)
    flat = calibrate_noise(params).to_dict()
    dummy = dummy_parameters(params, cfg)
    eps_agg, delta_agg = aggregation_budget(params, dummy)
    eps_fre, delta_fre = heavy_hitter_privacy(params.p_sample, params.budget_factor, params.tau)
    counts = counts_for(floor, cfg.dropout_allowance, LARGE.get(name, 40))
    max_count = max(counts)
    config = ddg_config_for(params, dim, cfg, n_modulus=max_count)
    sizing = CountSizing(params=params, cfg=cfg, ddg_config=config)
    n_ref = honest_contributors(floor, cfg.dishonest_fraction)
    sens = clipped_sensitivity(params.sensitivity, config.clip)
    sized = []
    for count in counts:
        m = sizing.users(count)
        n = honest_contributors(m, cfg.dishonest_fraction)
        sigma = float(sizing.sigma(count))
        epsilon = ddg_epsilon(sigma_int=sigma, gamma=config.gamma, sensitivity=sens, dim_padded=config.padded_dim,
                              n=n, delta=delta_agg, beta=config.beta, accountant=config.accountant)
        sized.append({"count": count, "m": m, "n_honest": n, "sigma_int": sigma, "epsilon": epsilon,
                      "path": path(sizing, count, n_ref)})
    return {
        "name": name,
        "round": {"dim": dim, "params": params.to_dict(), "protocol": cfg.to_dict()},
        "max_count": max_count,
        "floor": floor,
        "budget": {
            "eps_fre": eps_fre, "delta_fre": delta_fre, "delta_sens": sensitivity_term(params).delta,
            "eps_central": float(flat["eps_agg"]), "delta_central": float(flat["delta_agg"]),
            "dummy_epsilon0": dummy[0], "dummy_delta0": dummy[1], "eps_agg": eps_agg, "delta_agg": delta_agg,
        },
        "ddg_config": config.to_dict(),
        "counts": sized,
    }


def build() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "description": (
            "What a device derives for a DP round's phase 2, from the round's params and protocol and the "
            "broadcast's largest count (max_count): the aggregation budget (Lemma 1 closed form, Lemma 2, "
            "the TSDLap dummies), the DDG configuration calibrated at the release floor (ddg_config_for), and "
            "for each released count its m_h, honest contributors, sigma_int (CountSizing.sigma), the DDG "
            "epsilon at that sigma_int under the round's ddg_accountant, and the way sigma_int was found "
            "(floor, scaled, bisection)."
        ),
        "erf": [[x, math.erf(x)] for x in ERF_POINTS],
        "log_normal_cdf": [[x, log_normal_cdf(x)] for x in LOG_NORMAL_CDF_POINTS],
        "cases": [case(*setting) for setting in SETTINGS],
    }


def main() -> None:
    write_vector(VECTOR_DIR / FILE, build())


if __name__ == "__main__":
    main()
