"""The distributed discrete Gaussian (DDG) mechanism: encoder, decoder and accountant (design §4.4).

Kairouz, Liu, Steinke 2021: each user rotates, scales, randomly rounds and noises its vector with
a small discrete Gaussian, then reduces it modulo ``2^b`` for secure aggregation; the sum of ``n``
users' noise gives the aggregate its privacy. Modules: :mod:`.hadamard` (rotation),
:mod:`.rounding` (conditional randomized rounding and norm bounds), :mod:`.encoder`
(:class:`DDGConfig`, :class:`DDGEncoder`), :mod:`.accounting` (RDP accountant, calibration,
modulus selection, ledger term).
"""

from __future__ import annotations

from primitives.ddg.accounting import (
    DDGAccounting,
    aggregate_range,
    calibrate_ddg,
    calibrate_sigma_int,
    clipped_sensitivity,
    ddg_accounting,
    ddg_epsilon,
    ddg_ledger_term,
    ddg_rdp,
    gaussian_rdp_epsilon,
    modulus_bits_for,
    rdp_to_epsilon,
    tau_ddg,
)
from primitives.ddg.encoder import (
    DEFAULT_BETA,
    DEFAULT_ROTATION_SEED,
    KLS21_BETA,
    DDGConfig,
    DDGEncoder,
)
from primitives.ddg.hadamard import fwht, padded_dimension
from primitives.ddg.rounding import randomized_round, rounded_l1_bound, rounded_l2_bound

__all__ = [
    "DDGAccounting",
    "aggregate_range",
    "DDGConfig",
    "DDGEncoder",
    "DEFAULT_BETA",
    "DEFAULT_ROTATION_SEED",
    "KLS21_BETA",
    "calibrate_ddg",
    "calibrate_sigma_int",
    "clipped_sensitivity",
    "ddg_accounting",
    "ddg_epsilon",
    "ddg_ledger_term",
    "ddg_rdp",
    "fwht",
    "gaussian_rdp_epsilon",
    "modulus_bits_for",
    "padded_dimension",
    "randomized_round",
    "rdp_to_epsilon",
    "rounded_l1_bound",
    "rounded_l2_bound",
    "tau_ddg",
]
