"""Play the whole two-server, two-phase protocol for N users in one process (design §6).

:func:`run_protocol` builds the parties, runs

1. local pre-processing (public grid → bucket index b_i → its canonical encoding),
2. phase 1: blind → proxy → S_tag evaluates with proofs → proxy → users verify and finalize → tag
   h_i; with its coin a user seals h_i to S_syn; S_tag's dummy user adds TSDLap dummy tags; the
   proxy shuffles; S_syn counts, thresholds at τ and broadcasts the released tags with counts,
3. phase 2: users of released tags DDG-encode x_i, share it, seal one share to each server; each
   server keeps its shares per tag; S_syn tells S_tag which contributions it accepted; S_tag sends
   its aggregate share per tag; S_syn reconstructs, decodes, divides by the contributors,

and returns a :class:`~mechanism.release.Release` whose ledger is the protocol's
(:func:`mechanism.accounting.protocol_ledger`: heavy hitters ∨ dummies, sensitivity failure, DDG).
Every message is real and recorded (when ``out_dir`` is given) in the receiver's view and the
proxy's view of ``out_dir/transcript.sqlite``.

Randomness: public randomness (projection, offsets) from the public seed; coins from
:func:`mechanism.fre_e2t.sample_coins` (seeded only in test mode, where they equal the
mechanism's, which is what makes the two comparable); keys, blinds, nonces, DDG rounding and
noise, share masks, shuffles and dummies from labelled streams of ``seeds.secret`` —
cryptographic unless the seed plan is in test mode.
"""

from __future__ import annotations

import dataclasses
import math
import time
import tracemalloc
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.components import Components, build_components
from fre_protocol.costs import summarize
from fre_protocol.inputs import EmbeddingShards
from fre_protocol.messages import MAX_PROOF_BATCH, Role
from fre_protocol.parties.base import (
    BROADCAST,
    DROPOUT_POLICIES,
    PHASE1,
    PHASE1_SUBMIT,
    PHASE2,
    WITHHOLD,
    Meter,
    Recorder,
    Workers,
    chunks,
    status_of,
)
from fre_protocol.parties.dummy_user import DummyUser
from fre_protocol.parties.proxy import AnonymizingProxy, Delivery, NetworkAdversary
from fre_protocol.parties.synthesis_server import (
    ContributionValidator,
    Reconstruction,
    SynthesisServer,
)
from fre_protocol.parties.tagging_server import TaggingServer
from fre_protocol.parties.user import ServerKeys, UserPopulation, UserTally
from fre_protocol.slots import SlotLayout
from mechanism.accounting import calibrate_noise, histogram_release_cost, protocol_ledger
from mechanism.contributions import TEXT_UNIT, PrivacyUnit, check_users_for, with_unit
from mechanism.fre_e2t import release_threshold, sample_coins
from mechanism.grid import PublicGrid, encode_buckets, single_threaded_blas
from mechanism.ledger import LedgerTerm, PrivacyLedger
from mechanism.params import FreParams
from mechanism.release import Release, ReleasedBucket
from mechanism.run_files import TRANSCRIPT_FILE
from mechanism.seeds import SeedPlan
from primitives.channel import Channel
from primitives.errors import (
    InfeasibleBudgetError,
    InvalidInputError,
    InvalidParameterError,
    ProtocolStateError,
)
from primitives.randomness import RandomSource
from primitives.secret import Secret
from primitives.voprf import Oprf

VOPRF_KEY_INFO = b"fre-e2t/S_tag/voprf-key"
VOPRF_KEY_LABEL = "voprf/key"
DROPOUT_LABEL = "dropout"
#: The ledger term that records the dropout policy's outcome (zero cost).
DROPOUTS_TERM = "dropouts"
#: The norm guard's rule as published (S_syn withholds a decoded sum beyond it; n contributors).
NORM_GUARD_RULE = "withhold a decoded sum longer than n·clip + γ·n·√d' + γ·σ_int·√n·(√d' + 8)"

Dropout = float | Callable[[int], npt.NDArray[np.bool_]]

#: What the transcript keeps of each message: its bytes, or only its size (with sender,
#: receiver and type); recorded in the header as ``transcript``.
TRANSCRIPT_FULL = "full"
TRANSCRIPT_SIZES = "sizes"
TRANSCRIPT_MODES = (TRANSCRIPT_FULL, TRANSCRIPT_SIZES)


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

    ``dropout_policy``: for a released tag whose phase-2 contributors fall below ⌈τ⌉, ``withhold``
    its centroid or let S_tag ``topup`` the missing users' noise.

    ``cover_traffic``: every user online in phase 2 sends two sealed messages of the same sizes,
    its shares or cover, so the proxy cannot tell who sits in a released bucket (on by default;
    off saves the non-participants' uploads and the servers' opening of them).

    ``dishonest_fraction``: the fraction f in [0, 1) of a released aggregate's ⌈τ⌉ contributors
    that may add no noise (Sybils, malicious users; design §4.4). The users' σ_int is calibrated
    so that max(1, ⌊(1 − f)·⌈τ⌉⌋) honest users' noise alone meets the DDG term; 0 (default)
    is the honest-noise assumption, every number as before.
    """

    proof_batch_size: int = 1
    user_workers: int | None = None
    dummy_epsilon0: float | None = None
    dummy_delta0: float | None = None
    clip: float | None = None
    modulus_bits: int = 24
    modulus_stddevs: float = 8.0
    dropout_policy: str = WITHHOLD
    cover_traffic: bool = True
    chunk_size: int = 1024
    dishonest_fraction: float = 0.0

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
        if self.dropout_policy not in DROPOUT_POLICIES:
            raise InvalidParameterError(
                f"dropout_policy must be one of {list(DROPOUT_POLICIES)}, got {self.dropout_policy!r}"
            )
        if not isinstance(self.cover_traffic, bool):
            raise InvalidParameterError(f"cover_traffic must be a bool, got {self.cover_traffic!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise InvalidParameterError(f"chunk_size must be an integer >= 1, got {self.chunk_size!r}")
        check_dishonest_fraction(self.dishonest_fraction)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ProtocolResult:
    """What :func:`run_protocol` returns: the release, where the transcript is, and the costs."""

    release: Release
    transcript_path: Path | None
    costs: dict[str, Any] = field(default_factory=dict)


def check_dishonest_fraction(value: object) -> float:
    """f, the fraction of dishonest contributors the users' noise is sized for: a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and 0 <= value < 1):
        raise InvalidParameterError(f"dishonest_fraction must be a number in [0, 1), got {value!r}")
    return float(value)


def honest_contributors(floor: int, dishonest_fraction: float) -> int:
    """The honest users whose noise the DDG term counts on: max(1, ⌊(1 − f)·⌈τ⌉⌋) (design §4.4)."""
    f = check_dishonest_fraction(dishonest_fraction)
    if f == 0:
        return floor
    # A tiny slack, as release_floor's: (1 − 0.1)·50 is 44.99999… in floating point.
    return max(1, math.floor((1.0 - f) * floor + 1e-9))


# -- keys -----------------------------------------------------------------------------------------
def tagging_key(seeds: SeedPlan, suite: Oprf) -> tuple[Secret[bytes], bytes]:
    """S_tag's VOPRF key pair: DeriveKeyPair from ``seeds.secret("voprf/key")`` in test mode
    (so tests and audits can recompute tags), GenerateKeyPair otherwise (RFC 9497 §3.2)."""
    if seeds.rng_mode == "seeded":
        seed = seeds.secret(VOPRF_KEY_LABEL).random_bytes(32)
        sk, pk = suite.derive_key_pair(seed, VOPRF_KEY_INFO)
    else:
        sk, pk = suite.generate_key_pair()
    return (sk if isinstance(sk, Secret) else Secret(sk)), pk


def box_key(seeds: SeedPlan, channel: Channel, role: Role) -> tuple[Secret[bytes], bytes]:
    """A server's sealing key pair: from ``seeds.secret("channel/<role>")`` in test mode."""
    if seeds.rng_mode == "seeded":
        sk, pk = channel.generate_keypair(rng=seeds.secret(f"channel/{role.label}"))
    else:
        sk, pk = channel.generate_keypair()
    return (sk if isinstance(sk, Secret) else Secret(sk)), pk


# -- budget pieces ---------------------------------------------------------------------------------
def _budget(params: FreParams) -> dict[str, Any]:
    return calibrate_noise(params).to_dict()


def dummy_parameters(params: FreParams, config: ProtocolConfig) -> tuple[float, float]:
    """(ε0, δ0) of the TSDLap dummies: half of Lemma 1's (eps_fre, delta_fre) by default."""
    flat = _budget(params)
    eps0 = config.dummy_epsilon0 if config.dummy_epsilon0 is not None else float(flat["eps_fre"]) / 2
    delta0 = config.dummy_delta0 if config.dummy_delta0 is not None else float(flat["delta_fre"]) / 2
    return float(eps0), float(delta0)


def aggregation_budget(params: FreParams, dummy: tuple[float, float]) -> tuple[float, float]:
    """(ε, δ) left for the DDG centroid sums once S_syn's view of all counts is paid for
    (:func:`mechanism.accounting.histogram_release_cost`, dummies at (2ε0, 2δ0)) and the
    sensitivity failure: CalibrateNoise's (eps_agg, delta_agg) less what the histogram costs
    beyond Lemma 1's term."""
    flat = _budget(params)
    eps_fre, delta_fre = float(flat["eps_fre"]), float(flat["delta_fre"])
    eps0, delta0 = dummy
    hist_eps, hist_delta = histogram_release_cost(eps_fre, delta_fre, params.p_sample, 2 * eps0, 2 * delta0)
    eps_agg = float(flat["eps_agg"]) - (hist_eps - eps_fre)
    delta_agg = float(flat["delta_agg"]) - (hist_delta - delta_fre)
    if not (eps_agg > 0 and delta_agg > 0):
        raise InfeasibleBudgetError(
            f"the dummies leave no aggregation budget: (eps_agg, delta_agg) = ({eps_agg:.6g}, {delta_agg:.4g})"
        )
    return eps_agg, delta_agg


def _check_dummy_budget(params: FreParams, dummy: tuple[float, float]) -> None:
    """The dummies' (2ε0, 2δ0) must fit under Lemma 1's (eps_fre, delta_fre): the aggregation
    already spends the rest of the budget, so more would exceed (ε, δ). Checked before any work."""
    flat = _budget(params)
    eps_fre, delta_fre = float(flat["eps_fre"]), float(flat["delta_fre"])
    eps0, delta0 = dummy
    if 2 * eps0 > eps_fre * (1 + 1e-9) or 2 * delta0 > delta_fre * (1 + 1e-9):
        raise InfeasibleBudgetError(
            f"dummy (2·epsilon0, 2·delta0) = ({2 * eps0:.6g}, {2 * delta0:.4g}) must not exceed the "
            f"heavy-hitter term (eps_fre, delta_fre) = ({eps_fre:.6g}, {delta_fre:.4g}) of the budget"
        )


def ddg_clip(params: FreParams, config: ProtocolConfig) -> float:
    """The DDG encoder's clip: C = ``params.clip``, which the accountant's cap assumed. A config
    naming another clip would void the cap (or waste noise), so it is refused."""
    if config.clip is not None and float(config.clip) != float(params.clip):
        raise InvalidParameterError(
            f"ProtocolConfig.clip must equal FreParams.clip (the C of Δ = min(u·r, 2C)) or be None, "
            f"got clip {config.clip!r} against FreParams.clip {params.clip!r}"
        )
    return float(params.clip)


def ddg_config_for(
    params: FreParams, dim: int, config: ProtocolConfig, *, n_modulus: int
) -> Any:
    """The DDG configuration: σ_int calibrated (RDP, design §4.4) to :func:`aggregation_budget`
    at the worst case of ⌈τ⌉ contributors, of whom only :func:`honest_contributors` add noise
    (all of them at the default f = 0); the modulus
    holds ``modulus_stddevs`` standard deviations of an aggregate of ``n_modulus`` users."""
    from primitives.ddg import DDGConfig, calibrate_ddg, padded_dimension

    floor = release_threshold(params)
    n_mod = max(int(n_modulus), floor)
    clip = ddg_clip(params, config)
    if not params.is_dp:
        # No noise: the finest γ whose noiseless aggregate fits the ring (KLS21 §4.4 range with
        # σ = 0, plus the rounding term).
        # range(γ) = 2k·sqrt(A + nγ²/4)/γ ≤ 2^b with A = c²n²/d'  ⇔  γ ≥ 2k·sqrt(A)/sqrt(4^b − k²n).
        padded = padded_dimension(dim)
        k = float(config.modulus_stddevs)
        room = float(1 << config.modulus_bits) ** 2 - k * k * n_mod
        if room <= 0:
            raise InvalidParameterError(
                f"modulus_bits = {config.modulus_bits} cannot hold {n_mod} users' rounding; raise it"
            )
        gamma = 1.01 * 2.0 * k * math.sqrt(clip**2 * n_mod * n_mod / padded) / math.sqrt(room)
        return DDGConfig(
            dim=dim,
            padded_dim=padded,
            gamma=gamma,
            sigma_int=0.0,
            modulus_bits=config.modulus_bits,
            clip=clip,
        )
    eps_agg, delta_agg = aggregation_budget(params, dummy_parameters(params, config))
    return calibrate_ddg(
        epsilon=eps_agg,
        delta=delta_agg,
        sensitivity=params.sensitivity,
        dim=dim,
        n=honest_contributors(floor, config.dishonest_fraction),
        clip=clip,
        modulus_bits=config.modulus_bits,
        n_modulus=n_mod,
        k_stddevs=config.modulus_stddevs,
    )


def aggregation_term(
    params: FreParams, ddg_config: Any, dummy: tuple[float, float], *, dishonest_fraction: float = 0.0
) -> LedgerTerm:
    """The DDG term of the ledger (primitives.ddg's plain dict wrapped as a LedgerTerm), computed
    at the honest contributors' count (⌈τ⌉ at f = 0)."""
    if not params.is_dp:
        return LedgerTerm(
            name="centroid_ddg",
            epsilon=math.inf,
            delta=0.0,
            source="no noise: epsilon = inf (non-DP reference)",
            detail={"sigma_effective": 0.0, "ddg": ddg_config.to_dict()},
        )
    from primitives.ddg import ddg_ledger_term

    eps_agg, delta_agg = aggregation_budget(params, dummy)
    term = ddg_ledger_term(
        ddg_config,
        delta=delta_agg,
        n=honest_contributors(release_threshold(params), dishonest_fraction),
        sensitivity=params.sensitivity,
        epsilon=eps_agg,
    )
    return LedgerTerm(
        name=str(term["name"]),
        epsilon=float(term["epsilon"]),
        delta=float(term["delta"]),
        source=str(term["source"]),
        detail=dict(term["detail"]),
    )


def build_ledger(
    params: FreParams,
    ddg_config: Any,
    dummy: tuple[float, float],
    extra: tuple[LedgerTerm, ...] = (),
    *,
    dishonest_fraction: float = 0.0,
) -> PrivacyLedger:
    """protocol_ledger with the dummies' (2ε0, 2δ0) and the DDG term; ``extra`` zero-cost terms
    record what happened (dropouts) without changing the totals. With ``dishonest_fraction``
    f > 0 the DDG term is computed at the honest count and a zero-cost term states f and what
    it costs in σ (at f = 0 the ledger is exactly what it was before f existed)."""
    eps0, delta0 = dummy
    if params.is_dp:
        ledger = protocol_ledger(
            params,
            dummy_epsilon=2 * eps0,
            dummy_delta=2 * delta0,
            aggregation=aggregation_term(params, ddg_config, dummy, dishonest_fraction=dishonest_fraction),
            strict=True,
        )
        if check_dishonest_fraction(dishonest_fraction) > 0:
            extra = (dishonest_term(params, ddg_config, dummy, dishonest_fraction), *extra)
    else:
        ledger = protocol_ledger(
            params, dummy_epsilon=math.inf, dummy_delta=0.0, aggregation=aggregation_term(params, ddg_config, dummy)
        )
    if extra:
        ledger = dataclasses.replace(ledger, terms=tuple(ledger.terms) + tuple(extra))
    return ledger


DISHONEST_TERM = "dishonest_contributors"


def dishonest_term(params: FreParams, ddg_config: Any, dummy: tuple[float, float], f: float) -> LedgerTerm:
    """A zero-cost term: the DDG noise is sized for a fraction f of dishonest contributors, and
    the σ that costs against f = 0 (recalibrated at ⌈τ⌉ with everything else equal)."""
    from primitives.ddg import calibrate_sigma_int, clipped_sensitivity

    floor = release_threshold(params)
    honest = honest_contributors(floor, f)
    eps_agg, delta_agg = aggregation_budget(params, dummy)
    at_zero = calibrate_sigma_int(
        epsilon=eps_agg, delta=delta_agg, sensitivity=clipped_sensitivity(params.sensitivity, ddg_config.clip),
        gamma=ddg_config.gamma, padded_dim=ddg_config.padded_dim, n=floor, beta=ddg_config.beta,
    )
    return LedgerTerm(
        name=DISHONEST_TERM,
        epsilon=0.0,
        delta=0.0,
        source=(
            "design §4.4: the users' DDG noise is calibrated so that the honest ⌊(1 − f)·⌈τ⌉⌋ of the "
            "release floor's contributors meet the DDG term; up to f·⌈τ⌉ of them may add no noise"
        ),
        detail={
            "dishonest_fraction": float(f),
            "release_floor": floor,
            "n_honest": honest,
            "gamma": float(ddg_config.gamma),
            "sigma_int": float(ddg_config.sigma_int),
            "sigma_int_at_f0": float(at_zero),
            # Per user, in embedding units (γ·σ_int): what f costs each device's noise.
            "sigma_user": float(ddg_config.gamma * ddg_config.sigma_int),
            "sigma_user_at_f0": float(ddg_config.gamma * at_zero),
            "sigma_ratio": float(ddg_config.sigma_int) / float(at_zero),
        },
    )


@dataclass(frozen=True, slots=True)
class DropoutOutcome:
    """What the dropout policy did: the tags withheld (with the rule) and topped up, for the
    release and the ledger, and the below-floor contributor counts, for the operator only."""

    policy: str
    withheld: dict[str, str]
    topped_up: list[str]
    below_floor_contributors: dict[str, int]

    @classmethod
    def of(cls, result: Any, s_tag: TaggingServer, policy: str) -> DropoutOutcome:
        return cls(
            policy=policy,
            withheld={t.hex(): why for t, why in sorted(result.withheld.items())},
            topped_up=sorted(t.hex() for t in s_tag.topped_up if t in result.centroids),
            below_floor_contributors={
                t.hex(): s_tag.release_floor - missing for t, missing in sorted(s_tag.topped_up.items())
            },
        )

    def ledger_term(self) -> LedgerTerm:
        """A zero-cost term that states the policy and what each affected tag cost.

        Withheld: S_tag sent no aggregate (design §6), so nothing of the tag's users left S_tag.
        Topped up: S_tag added the missing users' discrete Gaussian noise before sending, so the
        sum carries the noise of ⌈τ⌉ users and the DDG term, computed at ⌈τ⌉, covers it.
        """
        tags: dict[str, dict[str, Any]] = {
            t: {"outcome": "withheld", "why": why, "epsilon": 0.0, "delta": 0.0} for t, why in self.withheld.items()
        }
        for t in self.topped_up:
            tags[t] = {"outcome": "topped_up", "epsilon": 0.0, "delta": 0.0,
                       "why": "covered by the DDG term at the release floor"}
        return LedgerTerm(
            name=DROPOUTS_TERM,
            epsilon=0.0,
            delta=0.0,
            source=(
                f"dropout policy {self.policy!r} (design §6): S_tag sends no aggregate of fewer than ⌈τ⌉ "
                "contributions (topup: it first adds the missing users' noise) and answers once per tag"
            ),
            detail={"policy": self.policy, "tags": dict(sorted(tags.items()))},
        )


# -- the run ---------------------------------------------------------------------------------------
#: What the in-process simulation may hold of batched evaluations at once (see below).
MAX_BATCH_RESPONSE_BYTES = 4 << 30


def batch_response_bytes(n: int, proof_batch_size: int) -> int:
    """Bytes of S_tag's phase-1 answers with one proof per ``proof_batch_size`` elements: every
    member receives its whole batch (both element lists and the proof), about 64·B bytes each."""
    if proof_batch_size <= 1:
        return 0
    per_member = 64 * min(proof_batch_size, n) + 64 + 16
    return n * per_member


def _check_batch_memory(n: int, proof_batch_size: int) -> None:
    """This simulation holds every user's answer in memory at once; a batch layout whose answers
    would not fit is refused before any work instead of being killed midway."""
    need = batch_response_bytes(n, proof_batch_size)
    if need > MAX_BATCH_RESPONSE_BYTES:
        raise InvalidParameterError(
            f"proof_batch_size = {proof_batch_size} with {n} users means {need / 2**30:.1f} GiB of "
            f"batched answers held at once in this single-process simulation (each user receives "
            f"its whole batch); expected at most {MAX_BATCH_RESPONSE_BYTES / 2**30:.0f} GiB: use a "
            f"smaller proof_batch_size or fewer users"
        )


def rows(x: npt.NDArray[np.floating[Any]] | EmbeddingShards, lo: int, hi: int) -> npt.NDArray[np.floating[Any]]:
    """Users lo..hi-1's embeddings: a view of an array, or read from memory-mapped shards."""
    return x.rows(lo, hi) if isinstance(x, EmbeddingShards) else x[lo:hi]


def _check_x(x: Any) -> npt.NDArray[np.floating[Any]] | EmbeddingShards:
    if isinstance(x, EmbeddingShards):
        return x  # checked row block by row block when opened
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidInputError(f"x must be a non-empty (N, d) array, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise InvalidInputError("x must be finite (found NaN or infinity)")
    return arr


def user_coins(seeds: SeedPlan, n: int, params: FreParams, chunk_size: int) -> npt.NDArray[np.bool_]:
    """Each user's sampling coin. Test mode: exactly the mechanism's
    :func:`~mechanism.fre_e2t.sample_coins` (entry i is user i's coin), which is what makes the
    two paths comparable. Normal mode: every device draws its own from a cryptographic source
    (one fresh source per chunk of simulated devices)."""
    if seeds.rng_mode == "seeded":
        return sample_coins(seeds, n, params)
    p = params.effective_p_sample
    parts = [RandomSource.cryptographic(f"users/coins/{j}").bernoulli(p, len(r)) for j, r in enumerate(chunks(n, chunk_size))]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _dropout_mask(dropout: Dropout, n: int, seeds: SeedPlan) -> npt.NDArray[np.bool_]:
    """True for users who go offline between the phases."""
    if callable(dropout):
        mask = np.asarray(dropout(n), dtype=bool)
        if mask.shape != (n,):
            raise InvalidParameterError(f"dropout(n) must return {n} booleans, got shape {mask.shape}")
        return mask
    if isinstance(dropout, bool) or not isinstance(dropout, int | float) or not 0 <= dropout < 1:
        raise InvalidParameterError(f"dropout must be a fraction in [0, 1) or a callable, got {dropout!r}")
    if dropout == 0:
        return np.zeros(n, dtype=bool)
    out: npt.NDArray[np.bool_] = seeds.secret(DROPOUT_LABEL).bernoulli(float(dropout), n)
    return out


def run_protocol(
    x: npt.ArrayLike,
    params: FreParams,
    seeds: SeedPlan,
    *,
    noise: bool = True,
    out_dir: str | Path | None = None,
    dropout: Dropout = 0.0,
    components: Mapping[str, str] | None = None,
    progress: bool = False,
    workers: int = 2,
    config: ProtocolConfig | None = None,
    adversary: NetworkAdversary | None = None,
    validator: ContributionValidator | None = None,
    measure_memory: bool = False,
    users: npt.ArrayLike | None = None,
    unit: PrivacyUnit = TEXT_UNIT,
    transcript: str = TRANSCRIPT_FULL,
) -> ProtocolResult:
    """Run Fre-E2T's distributed protocol on embeddings ``x`` (one row per text; one per user
    unless ``users`` groups them).

    ``noise=False`` runs every step but adds no DDG noise (the equivalence setting of design §6).
    ``dropout`` is a fraction of users that go offline between the phases (drawn from
    ``seeds.secret("dropout")``) or a callable ``n -> bool mask``. ``components`` overrides
    registry names (see :mod:`fre_protocol.components`). ``adversary`` sits on the network at the
    proxy (it may drop, replay, tamper with or inject messages), for robustness tests.
    ``validator`` is S_syn's per-contribution validity check (none by default; see
    :class:`~fre_protocol.parties.synthesis_server.ContributionValidator`). With ``out_dir``, writes ``centroids.npy`` +
    ``release.json`` (the same contract as the mechanism) and ``transcript.sqlite``: every party's
view with each message's bytes (``transcript="full"``) or only its sender, receiver, type and
size (``"sizes"``: ~10 kB a user less on disk, for paper-scale runs; the audit then checks
counts and sizes but cannot re-read payloads).

    Several texts per user (design §4.6), as :func:`mechanism.fre_e2t.run_mechanism` takes them:
    ``unit=PrivacyUnit(kind="user", cap=c, ...)`` and ``users`` (one label per row). Each user's
    device then plays c slots (:mod:`fre_protocol.slots`), padding included, the proxy refuses a
    user's (c+1)-th message of a kind, ``dropout`` draws people (a device's slots go offline
    together) and the ledger states the per-user guarantee.
    """
    run = plan_run(
        x, params, seeds, noise=noise, dropout=dropout, components=components, workers=workers, config=config,
        users=users, unit=unit,
    )
    return execute(
        run, _play, out_dir=out_dir, progress=progress, workers=workers, adversary=adversary, validator=validator,
        measure_memory=measure_memory, transcript=transcript,
    )


Play = Callable[["RunPlan", "Driver", Any], tuple[Release, dict[str, Any]]]


def execute(
    run: RunPlan,
    play: Play,
    *,
    out_dir: str | Path | None,
    progress: bool,
    workers: int,
    adversary: NetworkAdversary | None = None,
    validator: ContributionValidator | None = None,
    measure_memory: bool = False,
    transcript: str = TRANSCRIPT_FULL,
) -> ProtocolResult:
    """What every in-process driver does around its ``play``: thread pools, meter, transcript
    store (``transcript``: payloads recorded or sizes only), single-threaded BLAS, the release
    files, the costs (peak traced memory on request)."""
    if transcript not in TRANSCRIPT_MODES:
        raise InvalidParameterError(f"transcript must be one of {list(TRANSCRIPT_MODES)}, got {transcript!r}")
    if measure_memory:
        tracemalloc.start()
    t_start = time.perf_counter()
    meter = Meter()
    pool = Workers(workers, progress=progress)
    user_workers = run.cfg.user_workers
    user_pool = pool if user_workers in (None, workers) else Workers(int(user_workers), progress=progress)
    out_path = Path(out_dir) if out_dir is not None else None
    store = _open_store(out_path, run, transcript) if out_path is not None else None
    driver = Driver(
        meter=meter, pool=pool, user_pool=user_pool, adversary=adversary,
        recorder=Recorder(store, payloads=transcript == TRANSCRIPT_FULL),
        validator=validator,
    )
    # The parties already run on ``workers`` threads: a multi-threaded BLAS inside each of them
    # (the DDG rotation's block products) would oversubscribe the cores.
    blas = ExitStack()
    blas.enter_context(single_threaded_blas())
    try:
        release, info = play(run, driver, store)
        driver.recorder.flush()
        if store is not None:
            assert out_path is not None
            with meter.phase("save"):
                release.save(out_path)
    except BaseException as exc:
        if store is not None:
            # Keep what was exchanged and mark the transcript aborted (never "complete").
            store.__exit__(type(exc), exc, exc.__traceback__)
        raise
    else:
        if store is not None:
            store.close()
    finally:
        pool.close()
        user_pool.close()
        blas.close()
    meter.wall["total"] = time.perf_counter() - t_start
    peak = None
    if measure_memory:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    costs = summarize(meter, info, peak_bytes=peak, workers=workers)
    transcript_path = out_path / TRANSCRIPT_FILE if out_path is not None else None
    return ProtocolResult(release=release, transcript_path=transcript_path, costs=costs)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerPlan:
    """What a server needs of a run: its public choices and the seed plan, never the users' data
    (a driver that plays the servers elsewhere ships this, not the :class:`RunPlan`)."""

    params: FreParams
    seeds: SeedPlan
    cfg: ProtocolConfig
    comps: Components
    floor: int
    dummy: tuple[float, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPlan:
    """One run's inputs and public choices, checked and fixed before any message is sent."""

    x: npt.NDArray[np.floating[Any]] | EmbeddingShards
    params: FreParams
    seeds: SeedPlan
    cfg: ProtocolConfig
    comps: Components
    noise: bool
    dropped_mask: npt.NDArray[np.bool_]
    floor: int
    dummy: tuple[float, float]
    base_ledger: PrivacyLedger
    slots: SlotLayout

    @property
    def n(self) -> int:
        """Entries of the protocol's population: slots (with a text unit, the rows)."""
        return self.slots.n_slots

    def servers(self) -> ServerPlan:
        return ServerPlan(
            params=self.params, seeds=self.seeds, cfg=self.cfg, comps=self.comps, floor=self.floor, dummy=self.dummy
        )

    @property
    def dim(self) -> int:
        return int(self.x.shape[1])


def plan_run(
    x: npt.ArrayLike | EmbeddingShards,
    params: FreParams,
    seeds: SeedPlan,
    *,
    noise: bool = True,
    dropout: Dropout = 0.0,
    components: Mapping[str, str] | None = None,
    workers: int = 2,
    config: ProtocolConfig | None = None,
    users: npt.ArrayLike | None = None,
    unit: PrivacyUnit = TEXT_UNIT,
) -> RunPlan:
    """Check a run's arguments and fix what it needs before any message: an infeasible budget or
    a bad argument fails here, before any work. Under a user unit this bounds every user's
    contributions (the slot layout), as the mechanism does."""
    if not isinstance(params, FreParams):
        raise InvalidParameterError(f"params must be FreParams, got {type(params).__name__}")
    if not isinstance(seeds, SeedPlan):
        raise InvalidParameterError(f"seeds must be a SeedPlan, got {type(seeds).__name__}")
    if not isinstance(noise, bool):
        raise InvalidParameterError(f"noise must be a bool, got {noise!r}")
    cfg = config if config is not None else ProtocolConfig()
    ddg_clip(params, cfg)
    check_unit(params, cfg, users, unit)
    arr = _check_x(x)
    n = int(arr.shape[0])
    if users is not None:  # a user unit (check_unit)
        slots = SlotLayout.bound(arr, users, unit, PublicGrid.derive(seeds, int(arr.shape[1]), params), seeds)
    else:
        slots = SlotLayout.per_text(n)
    _check_batch_memory(slots.n_slots, cfg.proof_batch_size)
    dropped_mask = slots.per_slot(_dropout_mask(dropout, slots.n_users, seeds))
    base_ledger = calibrate_noise(params)
    comps = build_components(components, workers=workers)
    dummy = dummy_parameters(params, cfg) if params.is_dp else (math.inf, 0.0)
    if params.is_dp:
        _check_dummy_budget(params, dummy)
    return RunPlan(
        x=arr, params=params, seeds=seeds, cfg=cfg, comps=comps, noise=noise, dropped_mask=dropped_mask,
        floor=release_threshold(params), dummy=dummy, base_ledger=base_ledger, slots=slots,
    )


def check_unit(params: FreParams, cfg: ProtocolConfig, users: npt.ArrayLike | None, unit: PrivacyUnit) -> None:
    """A user unit needs what keeps its padding slots invisible: cover traffic (a padding slot
    sends cover in phase 2) and a release floor of at least 2 (a padding tag counts 1)."""
    check_users_for(unit, users)
    if unit.kind != "user":
        return
    if not cfg.cover_traffic:
        raise InvalidParameterError(
            "cover_traffic must be on with a user unit (a padding slot sends cover in phase 2, so the "
            "proxy cannot count a user's buckets), got cover_traffic=False"
        )
    floor = release_threshold(params)
    if floor <= 1:
        raise InvalidParameterError(
            f"the release floor ⌈τ⌉ must be at least 2 with a user unit (a padding slot's tag counts 1), "
            f"got {floor} (tau = {params.tau})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Driver:
    """How this in-process driver runs the parties: thread pools, the cost meter, the transcript
    recorder, and what sits on the network (an adversary) or beside S_syn (a validator)."""

    meter: Meter
    pool: Workers
    user_pool: Workers
    recorder: Recorder
    adversary: NetworkAdversary | None = None
    validator: ContributionValidator | None = None


def _open_store(out: Path, run: RunPlan, transcript: str) -> Any:
    from transcripts import TranscriptStore

    if out.exists() and not out.is_dir():
        raise InvalidParameterError(f"out_dir must be a directory, got existing file {str(out)!r}")
    out.mkdir(parents=True, exist_ok=True)
    header = transcript_header(
        run.seeds, run.comps, run.params, run.cfg,
        protocol="fre-e2t two-server two-phase (design §6)", n_users=run.slots.n_users, n_texts=run.slots.n_texts,
        n_slots=run.n, dim=run.dim, noise=run.noise, unit=run.slots.unit.to_dict(), transcript=transcript,
    )
    return TranscriptStore.create(out / TRANSCRIPT_FILE, header, overwrite=True)


def transcript_header(
    seeds: SeedPlan, comps: Components, params: FreParams, cfg: ProtocolConfig, *, protocol: str, **extra: Any
) -> Any:
    """A protocol transcript's header: components, parameters, configuration and the public
    seed (never the test seed), plus ``extra`` (n_users, dim, noise, a party's name, ...)."""
    from transcripts import TranscriptHeader

    public_seeds = {k: v for k, v in seeds.to_dict().items() if k != "test_seed"}
    return TranscriptHeader(
        rng_mode=seeds.rng_mode,
        components=comps.header(),
        params=params.to_dict(),
        extra={
            "protocol": protocol,
            "seeds": public_seeds,
            "release_floor": release_threshold(params),
            "tau": params.tau,
            "config": cfg.to_dict(),
            **extra,
        },
    )


def _play(run: RunPlan, driver: Driver, store: Any) -> tuple[Release, dict[str, Any]]:
    """The protocol as a sequence of role calls (design §6); each stage meters its own phase."""
    parties = setup(run, driver)
    users = population(run, parties.keys, driver, range(run.n))
    with driver.meter.phase("users_offline"):
        users.prepare()
    phase1(parties, users, driver)
    dummy_user = make_dummy_user(run, parties, driver)
    with driver.meter.phase("phase1_submit"):
        dummies = dummy_user.submissions(run.params.tau) if dummy_user is not None else []
        phase1_submit(parties, users.tag_submissions() + dummies, driver)
    released, _ = broadcast(parties, driver, users)
    plan = plan_phase2(run, released)
    with driver.meter.phase("phase2_shares"):
        shares = users.share_submissions(
            encoder=plan.encoder, sharing=plan.sharing, noise=run.noise, active=~run.dropped_mask
        )
        phase2(parties, plan, shares, driver)
    result = aggregation(run, parties, plan, driver)
    release, info = assemble_release(run, parties, plan, released, result, dummy_user, driver, users.tally())
    if store is not None:
        store_artifacts(store, release, plan.ddg_config, run.seeds, parties, dummy_user)
    return release, info


@dataclass(frozen=True, slots=True, kw_only=True)
class Parties:
    """The servers and the proxy of one run, with the servers' key pairs (the users know the
    public halves). Users are played apart: all at once, or window by window."""

    voprf_key: tuple[Secret[bytes], bytes]
    tag_box: tuple[Secret[bytes], bytes]
    syn_box: tuple[Secret[bytes], bytes]
    keys: ServerKeys
    proxy: AnonymizingProxy
    s_tag: TaggingServer
    s_syn: SynthesisServer


def setup(run: RunPlan, driver: Driver, *, keep_contributions: bool = True) -> Parties:
    """Keys, servers and proxy. ``keep_contributions=False``: the servers keep a running sum
    per released tag instead of every share (see :class:`~fre_protocol.parties.server_common.ShareBook`)."""
    seeds, comps, meter = run.seeds, run.comps, driver.meter
    with meter.phase("setup"):
        voprf_key = tagging_key(seeds, comps.suite)
        tag_box = box_key(seeds, comps.channel, Role.S_TAG)
        syn_box = box_key(seeds, comps.channel, Role.S_SYN)
        proxy = AnonymizingProxy(
            shuffler=comps.shuffler, rng=seeds.secret("proxy/shuffle"), recorder=driver.recorder,
            meter=meter, adversary=driver.adversary, cap=run.slots.cap,
        )
        s_tag = tagging_server(run, driver, voprf_key, tag_box, keep_contributions=keep_contributions)
        s_syn = synthesis_server(run, driver, syn_box, keep_contributions=keep_contributions)
        keys = ServerKeys(voprf_public_key=voprf_key[1], tag_box_key=tag_box[1], syn_box_key=syn_box[1])
    return Parties(
        voprf_key=voprf_key, tag_box=tag_box, syn_box=syn_box, keys=keys, proxy=proxy, s_tag=s_tag, s_syn=s_syn,
    )


def tagging_server(
    run: ServerPlan | RunPlan,
    driver: Driver,
    voprf_key: tuple[Secret[bytes], bytes],
    tag_box: tuple[Secret[bytes], bytes],
    *,
    keep_contributions: bool = True,
) -> TaggingServer:
    """S_tag with its keys, on ``driver``'s threads, meter and recorder (any driver)."""
    return TaggingServer(
        suite=run.comps.suite, voprf_key=voprf_key, box_key=tag_box, channel=run.comps.channel,
        rng=run.seeds.secret("S_tag"), workers=driver.pool, meter=driver.meter, recorder=driver.recorder,
        release_floor=run.floor, dropout_policy=run.cfg.dropout_policy,
        proof_batch_size=run.cfg.proof_batch_size, record_shares=run.seeds.rng_mode == "seeded",
        keep_contributions=keep_contributions,
    )


def synthesis_server(
    run: ServerPlan | RunPlan, driver: Driver, syn_box: tuple[Secret[bytes], bytes], *, keep_contributions: bool = True
) -> SynthesisServer:
    """S_syn with its key, on ``driver``'s threads, meter and recorder (any driver)."""
    return SynthesisServer(
        box_key=syn_box, channel=run.comps.channel, workers=driver.pool, meter=driver.meter,
        recorder=driver.recorder, release_floor=run.floor, validator=driver.validator,
        keep_contributions=keep_contributions,
    )


def population(
    run: RunPlan,
    keys: ServerKeys,
    driver: Driver,
    span: range,
    *,
    coins: npt.NDArray[np.bool_] | None = None,
    grid: PublicGrid | None = None,
) -> UserPopulation:
    """The devices of users ``span`` (all of them, or a window starting on a chunk boundary),
    each with its bucket's canonical encoding (public grid, step 1) and its coin. ``coins`` and
    ``grid``, when a driver already holds them, are all users' coins and the public grid. Under
    a user unit the entries are slots (:class:`~fre_protocol.slots.SlotLayout`)."""
    if span.start % run.cfg.chunk_size:
        raise InvalidParameterError(
            f"a population must start on a chunk boundary (chunk_size {run.cfg.chunk_size}), got user {span.start}"
        )
    meter = driver.meter
    start = time.perf_counter()
    with meter.phase("bucketing"):
        grid = grid if grid is not None else PublicGrid.derive(run.seeds, run.dim, run.params)
        if run.slots.slot_rows is None:
            x = rows(run.x, span.start, span.stop)
            encodings = encode_buckets(grid.bucket_indices(x))
        else:
            x, encodings = run.slots.inputs(run.x, span, grid, run.seeds.secret("users"), run.cfg.chunk_size)
        if coins is None:
            coins = user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size)
    meter.add("user.bucketing", time.perf_counter() - start, len(span))
    return UserPopulation(
        x, encodings, coins[span.start : span.stop], suite=run.comps.suite, keys=keys, channel=run.comps.channel,
        rng=run.seeds.secret("users"), workers=driver.user_pool, meter=meter, recorder=driver.recorder,
        chunk_size=run.cfg.chunk_size, cover_traffic=run.cfg.cover_traffic,
        first_chunk=span.start // run.cfg.chunk_size,
    )


def _refuse(parties: Parties, recorder: Recorder, role: Role, phase: str, delivery: Delivery) -> None:
    """A batch of user messages for a server that takes none in this phase: each is refused,
    counted and recorded in that server's view."""
    server = parties.s_tag if role is Role.S_TAG else parties.s_syn
    status = status_of(ProtocolStateError(f"{role.label} takes no user messages in {phase}"))
    server.rejections[status] = server.rejections.get(status, 0) + len(delivery.ciphertexts)
    recorder.add(
        (role.label, phase, Role.PROXY.label, role.label, "sealed_payload", c, status) for c in delivery.ciphertexts
    )


def phase1(parties: Parties, users: UserPopulation, driver: Driver) -> None:
    """Step 2, VOPRF: users blind, S_tag evaluates with proofs, users verify and finalize."""
    proxy, s_tag = parties.proxy, parties.s_tag
    with driver.meter.phase("phase1_voprf"):
        answered: list[tuple[int, bytes]] = []
        for role, delivery in proxy.forward(PHASE1, users.blind_requests()).items():
            if role is Role.S_TAG:
                answered.extend(proxy.route_back(PHASE1, delivery, s_tag.evaluate(delivery.ciphertexts)))
            elif role is Role.S_SYN:
                parties.s_syn.receive_submissions(delivery.ciphertexts)
            else:
                _refuse(parties, driver.recorder, role, PHASE1, delivery)
        users.receive_evaluations(answered)


def make_dummy_user(run: ServerPlan | RunPlan, parties: Parties, driver: Driver) -> DummyUser | None:
    """S_tag's dummy user (DP runs only), which adds TSDLap dummy tags to the submissions."""
    return dummy_user_for(run, parties.keys.syn_box_key, driver)


def dummy_user_for(run: ServerPlan | RunPlan, syn_box_key: bytes, driver: Driver) -> DummyUser | None:
    """S_tag's dummy user, sealing to S_syn's ``syn_box_key`` (None outside DP runs)."""
    if not run.params.is_dp:
        return None
    return DummyUser(
        generator=run.comps.make_dummy_generator(*run.dummy), channel=run.comps.channel,
        syn_box_key=syn_box_key, rng=run.seeds.secret("S_tag/dummy"), workers=driver.pool,
        meter=driver.meter,
    )


def phase1_submit(
    parties: Parties, submissions: list[tuple[int, Role, bytes]], driver: Driver,
    deliver: Callable[[list[bytes]], None] | None = None,
) -> None:
    """Step 2, submission: the sealed tags (users' with their coin, and dummies) through the
    proxy to S_syn (``deliver``: where the proxy puts S_syn's batch instead, e.g. a windowed
    run's :class:`~fre_protocol.streaming.HeldSubmissions`)."""
    for role, delivery in parties.proxy.forward(PHASE1_SUBMIT, submissions).items():
        if role is Role.S_SYN:
            (deliver or parties.s_syn.receive_submissions)(delivery.ciphertexts)
        else:
            _refuse(parties, driver.recorder, role, PHASE1_SUBMIT, delivery)


def broadcast(
    parties: Parties, driver: Driver, users: UserPopulation | None = None
) -> tuple[dict[bytes, int], bytes]:
    """S_syn thresholds the counts at τ and broadcasts the released tags with their counts;
    returns them and the broadcast message (``users``: a population that hears it now; a
    streaming driver hands it to its windows later)."""
    with driver.meter.phase("broadcast"):
        message = parties.proxy.broadcast(BROADCAST, Role.S_SYN, parties.s_syn.release())
        if users is not None:
            users.receive_broadcast(message)
        parties.s_tag.receive_broadcast(message)
        # Server to server, not through the proxy: each released tag's token hashes (design §6.8).
        parties.s_tag.receive_tokens(parties.s_syn.released_tokens())
    return dict(parties.s_syn.released), message


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase2Plan:
    """Phase 2's public parameters, fixed by the broadcast: the DDG configuration (its modulus
    holds the largest released count), the encoder, the secret sharing and the padded width."""

    ddg_config: Any
    encoder: Any
    sharing: Any
    width: int


def plan_phase2(run: RunPlan, released: Mapping[bytes, int]) -> Phase2Plan:
    return phase2_plan(run.params, run.dim, run.cfg, run.comps, released)


def phase2_plan(
    params: FreParams, dim: int, cfg: ProtocolConfig, comps: Components, released: Mapping[bytes, int]
) -> Phase2Plan:
    """What every party derives from the broadcast (any driver): the modulus holds the largest
    released count (at least the release floor)."""
    n_modulus = max(released.values(), default=release_threshold(params))
    ddg_config = ddg_config_for(params, dim, cfg, n_modulus=n_modulus)
    return Phase2Plan(
        ddg_config=ddg_config,
        encoder=comps.make_encoder(ddg_config),
        sharing=comps.make_sharing(int(ddg_config.modulus_bits)),
        width=int(ddg_config.padded_dim),
    )


def phase2(
    parties: Parties, plan: Phase2Plan, shares: list[tuple[int, Role, bytes]], driver: Driver, *, concurrent: bool = False
) -> None:
    """Step 3: the users' sealed shares (or cover) through the proxy, one to each server.

    ``concurrent``: the two servers take their batches at the same time, as two machines would
    (S_tag's on a second thread): each server's view keeps its order, but the transcript then
    interleaves the two views, so a driver replayed in sequence order leaves it off."""

    def deliver(role: Role, delivery: Any) -> None:
        if role is Role.S_TAG:
            parties.s_tag.receive_shares(delivery.ciphertexts, sharing=plan.sharing, dim=plan.width)
        elif role is Role.S_SYN:
            parties.s_syn.receive_shares(delivery.ciphertexts, sharing=plan.sharing, dim=plan.width)
        else:
            _refuse(parties, driver.recorder, role, PHASE2, delivery)

    deliveries = parties.proxy.forward(PHASE2, shares)
    aside = deliveries.pop(Role.S_TAG, None) if concurrent else None
    if aside is None:
        for role, delivery in deliveries.items():
            deliver(role, delivery)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fre-S_tag") as side:
        tag_done = side.submit(deliver, Role.S_TAG, aside)
        try:
            for role, delivery in deliveries.items():
                deliver(role, delivery)
        except BaseException:
            wait([tag_done])  # this thread's error is the one raised
            raise
        tag_done.result()



def aggregation(run: RunPlan, parties: Parties, plan: Phase2Plan, driver: Driver) -> Reconstruction:
    """S_syn names the contributions it accepted, S_tag answers with its aggregate share per tag
    (topping up missing noise under ``topup``), S_syn reconstructs, decodes and divides."""
    with driver.meter.phase("aggregation"):
        accepted = parties.s_syn.accepted_contributions()
        # The users' own DDG noise, which S_tag tops up under the topup policy (None: noise off).
        user_noise = (
            (run.comps.sampler, float(plan.ddg_config.sigma_int)) if run.noise and run.params.is_dp else None
        )
        aggregates = parties.s_tag.aggregate(accepted, sharing=plan.sharing, noise=user_noise)
        return parties.s_syn.reconstruct(
            aggregates, sharing=plan.sharing, encoder=plan.encoder, policy=run.cfg.dropout_policy
        )


def assemble_release(
    run: RunPlan,
    parties: Parties,
    plan: Phase2Plan,
    released: Mapping[bytes, int],
    result: Reconstruction,
    dummy_user: DummyUser | None,
    driver: Driver,
    tally: UserTally,
) -> tuple[Release, dict[str, Any]]:
    """The release (centroids, counts, the protocol's ledger, public info, operator diagnostics)
    and the figures the cost table reads."""
    tags = sorted(result.centroids)
    outcome = DropoutOutcome.of(result, parties.s_tag, run.cfg.dropout_policy)
    ledger = with_unit(
        build_ledger(
            run.params, plan.ddg_config, run.dummy, (outcome.ledger_term(),),
            dishonest_fraction=run.cfg.dishonest_fraction,
        ),
        run.slots.unit,
    )
    centroids = (
        np.stack([result.centroids[t] for t in tags]) if tags else np.zeros((0, run.dim), dtype=np.float64)
    )
    info = public_info(
        run.params, run.dim, run.cfg, run.comps, plan.ddg_config, outcome, rng_mode=run.seeds.rng_mode,
        noise=run.noise, n_released_tags=len(released), n_released=len(tags),
    )
    diagnostics = _diagnostics(run, parties, tally, result, tags, outcome, dummy_user, driver.user_pool.workers)
    release = Release(
        buckets=tuple(ReleasedBucket(id=t.hex(), count=released[t]) for t in tags),
        centroids=centroids,
        ledger=ledger,
        params=run.params,
        seeds=run.seeds.to_dict(),
        noise=run.noise,
        info=info,
        diagnostics=diagnostics,
    )
    sizes = {"width": plan.width, "share_bytes": list(plan.sharing.share_sizes(plan.width))}
    return release, {**info, **diagnostics, "sizes": sizes}


def public_info(
    params: FreParams, dim: int, cfg: ProtocolConfig, comps: Components, ddg_config: Any,
    outcome: DropoutOutcome, *, rng_mode: str, noise: bool, n_released_tags: int, n_released: int,
) -> dict[str, Any]:
    """Published (release.json), by any driver: public configuration and functions of the DP
    output only (mechanism.release.PUBLIC_INFO_KEYS); the withheld tags are the broadcast minus
    the centroids."""
    floor = release_threshold(params)
    return {
        "path": "protocol",
        "dim": dim,
        "k": params.k,
        "release_floor": floor,
        "n_released_tags": n_released_tags,
        "n_released": n_released,
        "withheld": outcome.withheld,
        "topped_up": outcome.topped_up,
        "dropout_policy": cfg.dropout_policy,
        "cover_traffic": cfg.cover_traffic,
        "norm_guard": NORM_GUARD_RULE,
        "ddg": ddg_config.to_dict(),
        "sigma_effective": float(ddg_config.noise_std(floor)) if noise else 0.0,
        "sigma_mechanism": float(calibrate_noise(params).sigma),
        "proof_batch_size": cfg.proof_batch_size,
        "components": comps.header(),
        "rng_mode": rng_mode,
    }


def _diagnostics(
    run: RunPlan,
    parties: Parties,
    tally: UserTally,
    result: Reconstruction,
    tags: list[bytes],
    outcome: DropoutOutcome,
    dummy_user: DummyUser | None,
    user_workers: int,
) -> dict[str, Any]:
    """Operator-private: every count below reads the private data (or its dummies) directly."""
    s_tag, s_syn = parties.s_tag, parties.s_syn
    return {
        "n_users": run.slots.n_users,
        "n_texts": run.slots.n_texts,
        "n_slots": run.n,
        "n_padding_slots": run.slots.n_padding,
        "proxy_traffic": parties.proxy.traffic(),
        "n_submissions": s_syn.n_submissions,
        "n_real_submissions": tally.n_real_submissions,
        "n_distinct_tags_seen": len(s_syn.counts),
        "n_participants": tally.n_participants,
        "n_dropped_out": tally.n_dropped_out,
        "n_cover_users": tally.n_cover_users,
        "contributors": {t.hex(): result.contributors[t] for t in tags},
        "below_floor_contributors": outcome.below_floor_contributors,
        "refused_by_S_tag": {t.hex(): why for t, why in sorted(s_tag.refused.items())},
        "dummies": dummy_user.summary() if dummy_user is not None else None,
        "user_workers": user_workers,
        "rejections": _merge_counts(s_tag.rejections, s_syn.rejections),
        "user_status": tally.status,
    }


def _merge_counts(*maps: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for k, v in m.items():
            out[k] = out.get(k, 0) + v
    return out


def store_artifacts(
    store: Any, release: Release, ddg_config: Any, seeds: SeedPlan, parties: Parties, dummy_user: DummyUser | None
) -> None:
    keys = parties.keys
    store.put_artifact("release", release.to_json())
    store.put_artifact("diagnostics", release.diagnostics)
    store.put_artifact("ledger", release.ledger.to_dict())
    store.put_artifact("ddg_config", ddg_config.to_dict())
    store.put_artifact("centroids", np.ascontiguousarray(release.centroids, dtype="<f8").tobytes())
    store.put_artifact(
        "public_keys",
        {
            "voprf": keys.voprf_public_key.hex(),
            "S_tag_box": keys.tag_box_key.hex(),
            "S_syn_box": keys.syn_box_key.hex(),
        },
    )
    if seeds.rng_mode == "seeded":
        assert seeds.test_seed is not None
        store.put_artifact("secrets/test_seed", seeds.test_seed, secret=True)
        store.put_artifact("secrets/voprf_sk", parties.voprf_key[0].reveal(), secret=True)
        store.put_artifact("secrets/S_tag_box_sk", parties.tag_box[0].reveal(), secret=True)
        store.put_artifact("secrets/S_syn_box_sk", parties.syn_box[0].reveal(), secret=True)
        if dummy_user is not None:
            store.put_artifact(
                "secrets/dummy_plan", {str(c): z for c, z in sorted(dummy_user.plan.items())}, secret=True
            )


__all__ = [
    "DISHONEST_TERM",
    "DROPOUTS_TERM",
    "Driver",
    "Parties",
    "Phase2Plan",
    "ProtocolConfig",
    "ProtocolResult",
    "RunPlan",
    "ServerPlan",
    "TRANSCRIPT_FILE",
    "TRANSCRIPT_FULL",
    "TRANSCRIPT_MODES",
    "TRANSCRIPT_SIZES",
    "aggregation",
    "aggregation_budget",
    "aggregation_term",
    "assemble_release",
    "box_key",
    "broadcast",
    "check_dishonest_fraction",
    "check_unit",
    "dishonest_term",
    "honest_contributors",
    "build_ledger",
    "ddg_config_for",
    "dummy_parameters",
    "dummy_user_for",
    "execute",
    "make_dummy_user",
    "phase1",
    "phase1_submit",
    "phase2",
    "plan_phase2",
    "plan_run",
    "population",
    "rows",
    "run_protocol",
    "setup",
    "store_artifacts",
    "synthesis_server",
    "tagging_key",
    "tagging_server",
    "user_coins",
]
