"""A round's public choices: the protocol configuration and the one object a driver is given.

:class:`ProtocolConfig` holds the protocol choices that are not privacy parameters (recorded in
every transcript header); :class:`RoundSpec` is what every driver's entry point takes in place of
a long argument list: the privacy parameters, the seed plan, the configuration, the unit and the
simulation's own switches (noise, dropout, components, workers).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.messages import MAX_PROOF_BATCH
from fre_protocol.roles.base import TOPUP, WITHHOLD, check_dropout_policy
from mechanism.contributions import TEXT_UNIT, PrivacyUnit
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.ddg.encoder import DEFAULT_ACCOUNTANT, RDP_ACCOUNTANT, check_accountant
from primitives.errors import InvalidParameterError

Dropout = float | Callable[[int], npt.NDArray[np.bool_]]

#: What the transcript keeps of each message: its bytes, or only its size (with sender,
#: receiver and type); recorded in the header as ``transcript``.
TRANSCRIPT_FULL = "full"

TRANSCRIPT_SIZES = "sizes"

TRANSCRIPT_MODES = (TRANSCRIPT_FULL, TRANSCRIPT_SIZES)

#: Noise calibrations (``ProtocolConfig.noise_calibration``): each user's DDG noise sized for its
#: bucket's released count (less the dropout allowance), or for the release floor ⌈τ⌉.
COUNT_CALIBRATION = "count"

FLOOR_CALIBRATION = "floor"

NOISE_CALIBRATIONS = (COUNT_CALIBRATION, FLOOR_CALIBRATION)

#: What S_tag does with a released bucket left short of contributors, and the dropout allowance f
#: (ProtocolConfig): S_tag tops up the missing users' noise, so every user sizes its noise for the
#: whole released count (f = 0) and a sum carries exactly the noise its DDG term needs, at any
#: dropout rate (design §4.4, "Dropouts and the allowance f").
DEFAULT_DROPOUT_POLICY = TOPUP

DEFAULT_DROPOUT_ALLOWANCE = 0.0

#: What a recorded configuration that does not name these keys used: the defaults before the
#: analytic accountant (ddg_accountant) and before topup with f = 0 (ProtocolConfig.from_dict).
_RECORDED_BEFORE = {"ddg_accountant": RDP_ACCOUNTANT, "dropout_policy": WITHHOLD, "dropout_allowance": 0.1}

@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolConfig:
    """Protocol choices that are not privacy parameters (all public, recorded in the header).

    ``proof_batch_size``: blinded elements per DLEQ proof. 1 (default) gives each user its own
    proof: the user verifies with a constant number of scalar multiplications and downloads 97
    bytes, and S_tag pays ~4 scalar multiplications per element. Larger batches bring S_tag to
    ~2 per element, but every user must download the whole batch (65 bytes per element) and
    verify it (2 multiplications per element): user-side cost is what a device pays, so the
    default keeps it constant. At most 65,535: RFC 9497 indexes a proof's elements with two bytes.

    ``user_workers``: threads that play the users' devices (default: as many as the run's
    workers). Each user's costs are the CPU time of the thread doing its work; on a small machine
    two threads side by side slow each other down (shared caches and cores), so a measurement of
    what one device pays runs the users on one thread.

    ``dummy_epsilon0``/``dummy_delta0``: TSDLap parameters (ε0, δ0). Default: half of Lemma 1's
    (eps_fre, delta_fre), so the dummies' (2ε0, 2δ0) equals the heavy-hitter term and the
    histogram release costs exactly what the centralized mechanism pays (design §4.5).

    ``clip``: the DDG encoder's L2 clip is the release's C, ``FreParams.clip`` (the accountant's
    cap Δ = min(u·r, 2C) and the mechanism use it too). None (default) takes it from the params;
    a value that differs from them is refused (:func:`ddg_clip`).

    ``modulus_bits``/``modulus_stddevs``: the ring Z_{2^b} of the shares (24 bits keeps a
    768-d user's upload under 4.5 kB) and how many standard deviations of the largest released
    aggregate it must hold without wrapping (8: wrap probability per coordinate < 1e-14 for the
    sub-Gaussian rotated coordinates); the DDG granularity γ is then the finest that fits.

    ``dropout_policy``: for a released tag whose phase-2 contributors fall below m_h (⌈τ⌉, or the
    count-sized m_h below), ``"topup"`` (default): S_tag adds the missing users' noise itself, so
    the sum carries the noise its DDG term is computed for; ``"withhold"``: S_tag never sends that
    tag's aggregate (no noise comes from a server; choose ``dropout_allowance`` above the devices'
    dropout rate, or many buckets are withheld).

    ``cover_traffic``: every user online in phase 2 sends two sealed messages of the same sizes,
    its shares or cover, so the proxy cannot tell who sits in a released bucket (on by default;
    off saves the non-participants' uploads and the servers' opening of them).

    ``dishonest_fraction``: the fraction f in [0, 1) of a released aggregate's ⌈τ⌉ contributors
    that may add no noise (Sybils, malicious users; design §4.4). The users' σ_int is calibrated
    so that max(1, ⌊(1 − f)·⌈τ⌉⌋) honest users' noise alone meets the DDG term; 0 (default)
    is the honest-noise assumption, every number as before.

    ``noise_calibration``: how many contributors each user's DDG noise is sized for (design §4.4,
    count-calibrated contributions). ``"count"`` (default): a user in released bucket h sizes it
    for m_h = max(⌈τ⌉, ⌊(1 − f)·n_h⌋) contributors, n_h the bucket's released count (public: in
    the broadcast and the release) and f the ``dropout_allowance``, so a large bucket carries the
    noise of one DDG term, not n_h/⌈τ⌉ of them. ``"floor"``: every user sizes it for ⌈τ⌉ (the
    paper's protocol; every release exactly as before this option existed).

    ``dropout_allowance``: f in [0, 1), the fraction of a released bucket's phase-1 submitters
    that may fail to contribute in phase 2 before the dropout policy acts, under ``"count"``. Each
    user's σ is √(1/(1 − f)) times the least, so the sum of a bucket that keeps more than
    (1 − f)·n_h contributors carries more noise than it needs. 0 (default) is the best choice
    under ``"topup"`` at every dropout rate: S_tag supplies exactly the missing noise. Under
    ``"withhold"`` f trades noise for withheld buckets, and should exceed the devices' dropout
    rate between the phases (measured on healthtweets: at 10 % dropouts and f = 0.1 about half
    the buckets are withheld; docs/results/noise-parity.md).

    ``ddg_accountant``: the bound that turns the users' σ_int into the DDG term's (ε, δ) (design
    §4.4). ``"analytic"`` (default): the smaller ε of KLS21's RDP bound and the analytic bound
    (the sum of discrete Gaussians compared pointwise with a smoothed rounding of the continuous
    Gaussian, whose curve is the analytic Gaussian mechanism's): about 6 % less σ at ε = 8 than
    RDP alone, the centralized mechanism's σ to within 0.1 %. ``"rdp"``: KLS21 alone (the
    protocol as it was before this option, and as the paper has it).
    """

    proof_batch_size: int = 1
    user_workers: int | None = None
    dummy_epsilon0: float | None = None
    dummy_delta0: float | None = None
    clip: float | None = None
    modulus_bits: int = 24
    modulus_stddevs: float = 8.0
    dropout_policy: str = DEFAULT_DROPOUT_POLICY
    cover_traffic: bool = True
    chunk_size: int = 1024
    dishonest_fraction: float = 0.0
    noise_calibration: str = COUNT_CALIBRATION
    dropout_allowance: float = DEFAULT_DROPOUT_ALLOWANCE
    ddg_accountant: str = DEFAULT_ACCOUNTANT

    def __post_init__(self) -> None:
        size = self.proof_batch_size
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PROOF_BATCH:
            raise InvalidParameterError(
                f"proof_batch_size must be an integer in [1, {MAX_PROOF_BATCH}], got {size!r}"
            )
        if self.user_workers is not None and (
            isinstance(self.user_workers, bool) or not isinstance(self.user_workers, int) or self.user_workers < 1
        ):
            raise InvalidParameterError(f"user_workers must be None or an integer >= 1, got {self.user_workers!r}")
        for name in ("dummy_epsilon0", "dummy_delta0"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise InvalidParameterError(f"{name} must be a finite number > 0, got {value!r}")
        if self.dummy_delta0 is not None and not self.dummy_delta0 < 0.5:
            raise InvalidParameterError(f"dummy_delta0 must be in (0, 0.5), got {self.dummy_delta0!r}")
        if self.clip is not None and not (
            isinstance(self.clip, int | float) and math.isfinite(self.clip) and self.clip > 0
        ):
            raise InvalidParameterError(f"clip must be None or a finite number > 0, got {self.clip!r}")
        if isinstance(self.modulus_bits, bool) or not isinstance(self.modulus_bits, int) or not 8 <= self.modulus_bits <= 62:
            raise InvalidParameterError(f"modulus_bits must be an integer in [8, 62], got {self.modulus_bits!r}")
        if not (isinstance(self.modulus_stddevs, int | float) and self.modulus_stddevs >= 1):
            raise InvalidParameterError(f"modulus_stddevs must be >= 1, got {self.modulus_stddevs!r}")
        check_dropout_policy(self.dropout_policy)
        if not isinstance(self.cover_traffic, bool):
            raise InvalidParameterError(f"cover_traffic must be a bool, got {self.cover_traffic!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise InvalidParameterError(f"chunk_size must be an integer >= 1, got {self.chunk_size!r}")
        check_dishonest_fraction(self.dishonest_fraction)
        check_noise_calibration(self.noise_calibration)
        check_dropout_allowance(self.dropout_allowance)
        check_accountant(self.ddg_accountant)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProtocolConfig:
        """A recorded configuration (round document, transcript header, test vector). A missing
        key means what was used when it was recorded: one written before ``ddg_accountant``
        existed calibrated its DDG noise with KLS21's RDP bound alone, and one that does not name
        the dropout policy or allowance was written when ``withhold`` and f = 0.1 were the
        defaults."""
        return cls(**{**_RECORDED_BEFORE, **dict(data)})

def check_noise_calibration(value: object) -> str:
    """The noise calibration: ``"count"`` or ``"floor"`` (:class:`ProtocolConfig`)."""
    if value not in NOISE_CALIBRATIONS:
        raise InvalidParameterError(f"noise_calibration must be one of {list(NOISE_CALIBRATIONS)}, got {value!r}")
    return str(value)


def check_fraction(name: str, value: object) -> float:
    """``value`` as a float in [0, 1), or an error naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and 0 <= value < 1):
        raise InvalidParameterError(f"{name} must be a number in [0, 1), got {value!r}")
    return float(value)


def check_dropout_allowance(value: object) -> float:
    """f, the fraction of a released bucket's submitters that may drop out before its count-sized
    noise falls short: a number in [0, 1)."""
    return check_fraction("dropout_allowance", value)


def check_dishonest_fraction(value: object) -> float:
    """f, the fraction of dishonest contributors the users' noise is sized for: a number in [0, 1)."""
    return check_fraction("dishonest_fraction", value)

def honest_contributors(floor: int, dishonest_fraction: float) -> int:
    """The honest users whose noise the DDG term counts on: max(1, ⌊(1 − f)·⌈τ⌉⌋) (design §4.4)."""
    f = check_dishonest_fraction(dishonest_fraction)
    if f == 0:
        return floor
    # A tiny slack, as release_floor's: (1 − 0.1)·50 is 44.99999… in floating point.
    return max(1, math.floor((1.0 - f) * floor + 1e-9))


def sized_contributors(count: int, floor: int, calibration: str, dropout_allowance: float) -> int:
    """m_h, the contributors a released bucket's noise is sized for (design §4.4): ⌈τ⌉ under
    ``"floor"``; max(⌈τ⌉, ⌊(1 − f)·n_h⌋) under ``"count"``, n_h its released count."""
    check_noise_calibration(calibration)
    f = check_dropout_allowance(dropout_allowance)
    if calibration == FLOOR_CALIBRATION:
        return floor
    # The same slack as honest_contributors': (1 − 0.1)·50 is 44.99999… in floating point.
    return max(floor, math.floor((1.0 - f) * int(count) + 1e-9))


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundSpec:
    """One round's choices, as every driver's entry point takes them: the privacy parameters, the
    seed plan, the protocol configuration and the privacy unit, plus the simulation's switches.

    ``noise=False`` runs every step but adds no DDG noise (the equivalence setting of design §6).
    ``dropout`` is a fraction of users that go offline between the phases (drawn from the
    ``dropout`` stream) or a callable ``n -> bool mask``. ``components`` overrides registry names
    (:mod:`fre_protocol.components`). ``workers``: the threads that play the parties."""

    params: FreParams
    seeds: SeedPlan
    config: ProtocolConfig = dataclasses.field(default_factory=ProtocolConfig)
    unit: PrivacyUnit = TEXT_UNIT
    noise: bool = True
    dropout: Dropout = 0.0
    components: Mapping[str, str] | None = None
    workers: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.params, FreParams):
            raise InvalidParameterError(f"params must be FreParams, got {type(self.params).__name__}")
        if not isinstance(self.seeds, SeedPlan):
            raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(self.seeds).__name__}")
        if self.config is None:  # the defaults, stated once: ProtocolConfig's
            object.__setattr__(self, "config", ProtocolConfig())
        if not isinstance(self.config, ProtocolConfig):
            raise InvalidParameterError(f"config must be a ProtocolConfig, got {type(self.config).__name__}")
        if not isinstance(self.noise, bool):
            raise InvalidParameterError(f"noise must be a bool, got {self.noise!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InvalidParameterError(f"workers must be an integer >= 1, got {self.workers!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """What a run keeps and shows, none of which changes its release: ``out_dir`` (the release
    files and ``transcript.sqlite``), ``transcript`` (each message's bytes, ``"full"``, or only its
    sender, receiver, type and size, ``"sizes"``), ``progress`` bars, and ``measure_memory`` (peak
    traced memory in the costs)."""

    out_dir: str | Path | None = None
    transcript: str = TRANSCRIPT_FULL
    progress: bool = False
    measure_memory: bool = False

    def __post_init__(self) -> None:
        if self.transcript not in TRANSCRIPT_MODES:
            raise InvalidParameterError(
                f"transcript must be one of {list(TRANSCRIPT_MODES)}, got {self.transcript!r}"
            )
