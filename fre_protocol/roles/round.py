"""The step layer: planning a round and building its roles, for every driver (design §6, §13).

:func:`plan_run` checks a round's inputs and fixes what it needs before any message (coins,
dropouts, slots, the dummies' budget); :func:`setup` makes the keys, the servers and the proxy;
:func:`population` the devices of a span of users; :func:`phase2_plan` what every party derives
from the broadcast. A driver that plays the servers or the devices elsewhere builds them with
the same pieces: each server's keys (:func:`tagging_keys`, :func:`synthesis_key`) and server
(:func:`tagging_server`, :func:`synthesis_server`) where it runs, the proxy and the parties around
them (:func:`parties_around`), devices from their inputs (:func:`device_inputs`,
:func:`bucket_encodings`, :func:`devices`). Each takes plain values and a :class:`~fre_protocol.roles.base.Runtime` (the
threads, meter and recorder a driver lends the roles), never a driver's own objects.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.components import Components, build_components
from fre_protocol.inputs import EmbeddingShards
from fre_protocol.messages import Role
from fre_protocol.roles import streams
from fre_protocol.roles.base import Runtime, chunks
from fre_protocol.roles.broadcast import (
    DeviceSigmas,
    HeardBroadcast,
    broadcast_seed,
    build_message,
    encoding_name,
)
from fre_protocol.roles.broadcast import encoding as broadcast_encoding
from fre_protocol.roles.config import Dropout, ProtocolConfig, RoundSpec
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.ledger import (
    _check_dummy_budget,
    ddg_clip,
    ddg_config_for,
    dummy_parameters,
)
from fre_protocol.roles.noise_plan import CountSizing, NoisePlan, noise_plan
from fre_protocol.roles.proxy import AnonymizingProxy
from fre_protocol.roles.synthesis_server import SynthesisServer
from fre_protocol.roles.tagging_server import TaggingServer
from fre_protocol.roles.user import ServerKeys, UserPopulation
from fre_protocol.slots import SlotLayout
from mechanism.accounting import calibrate_noise
from mechanism.contributions import PrivacyUnit, check_users_for
from mechanism.fre_e2t import release_threshold, sample_coins
from mechanism.grid import PublicGrid, encode_buckets
from mechanism.ledger import PrivacyLedger
from mechanism.params import FreParams
from mechanism.seeds import SeedPlan
from primitives.channel import Channel
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource
from primitives.secret import Secret
from primitives.voprf import Oprf

VOPRF_KEY_INFO = b"fre-e2t/S_tag/voprf-key"

def tagging_key(seeds: SeedPlan, suite: Oprf) -> tuple[Secret[bytes], bytes]:
    """S_tag's VOPRF key pair: DeriveKeyPair from ``seeds.secret("voprf/key")`` in test mode
    (so tests and audits can recompute tags), GenerateKeyPair otherwise (RFC 9497 §3.2)."""
    if seeds.rng_mode == "seeded":
        seed = seeds.secret(streams.VOPRF_KEY).random_bytes(32)
        sk, pk = suite.derive_key_pair(seed, VOPRF_KEY_INFO)
    else:
        sk, pk = suite.generate_key_pair()
    return (sk if isinstance(sk, Secret) else Secret(sk)), pk

def box_key(seeds: SeedPlan, channel: Channel, role: Role) -> tuple[Secret[bytes], bytes]:
    """A server's sealing key pair: from ``seeds.secret("channel/<role>")`` in test mode."""
    if seeds.rng_mode == "seeded":
        sk, pk = channel.generate_keypair(rng=seeds.secret(streams.channel_key(role.label)))
    else:
        sk, pk = channel.generate_keypair()
    return (sk if isinstance(sk, Secret) else Secret(sk)), pk

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
    out: npt.NDArray[np.bool_] = seeds.secret(streams.DROPOUT).bernoulli(float(dropout), n)
    return out

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
    workers: int

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

def plan_run(x: npt.ArrayLike | EmbeddingShards, spec: RoundSpec, *, users: npt.ArrayLike | None = None) -> RunPlan:
    """Check a round's inputs and fix what it needs before any message: an infeasible budget or
    a bad argument fails here, before any work. ``users`` (one label per row) groups the rows
    under a user unit: every user's contributions are then bounded (the slot layout), as the
    mechanism bounds them."""
    if not isinstance(spec, RoundSpec):
        raise InvalidParameterError(f"spec must be a RoundSpec, got {type(spec).__name__}")
    params, seeds, cfg, unit = spec.params, spec.seeds, spec.config, spec.unit
    ddg_clip(params, cfg)
    check_unit(params, cfg, users, unit)
    arr = _check_x(x)
    n = int(arr.shape[0])
    if users is not None:  # a user unit (check_unit)
        slots = SlotLayout.bound(arr, users, unit, PublicGrid.derive(seeds, int(arr.shape[1]), params), seeds)
    else:
        slots = SlotLayout.per_text(n)
    _check_batch_memory(slots.n_slots, cfg.proof_batch_size)
    dropped_mask = slots.per_slot(_dropout_mask(spec.dropout, slots.n_users, seeds))
    base_ledger = calibrate_noise(params)
    comps = build_components(spec.components, workers=spec.workers)
    dummy = dummy_parameters(params, cfg) if params.is_dp else (math.inf, 0.0)
    if params.is_dp:
        _check_dummy_budget(params, dummy)
    return RunPlan(
        x=arr, params=params, seeds=seeds, cfg=cfg, comps=comps, noise=spec.noise, dropped_mask=dropped_mask,
        floor=release_threshold(params), dummy=dummy, base_ledger=base_ledger, slots=slots,
        workers=spec.workers,
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

#: A key pair: the secret half and the public one.
KeyPair = tuple[Secret[bytes], bytes]

def tagging_keys(run: ServerPlan | RunPlan) -> tuple[KeyPair, KeyPair]:
    """S_tag's VOPRF key pair and sealing key pair, made wherever S_tag runs."""
    return tagging_key(run.seeds, run.comps.suite), box_key(run.seeds, run.comps.channel, Role.S_TAG)

def synthesis_key(run: ServerPlan | RunPlan) -> KeyPair:
    """S_syn's sealing key pair, made wherever S_syn runs."""
    return box_key(run.seeds, run.comps.channel, Role.S_SYN)

def setup(run: RunPlan, runtime: Runtime, *, keep_contributions: bool = True) -> Parties:
    """Keys, servers and proxy. ``keep_contributions=False``: the servers keep a running sum
    per released tag instead of every share (see :class:`~fre_protocol.roles.server_common.ShareBook`)."""
    with runtime.meter.phase("setup"):
        voprf_key, tag_box = tagging_keys(run)
        syn_box = synthesis_key(run)
        keys = ServerKeys(voprf_public_key=voprf_key[1], tag_box_key=tag_box[1], syn_box_key=syn_box[1])
        s_tag = tagging_server(run, runtime, voprf_key, tag_box, keep_contributions=keep_contributions)
        s_syn = synthesis_server(run, runtime, syn_box, keep_contributions=keep_contributions)
        return parties_around(run, runtime, keys, s_tag, s_syn, key_pairs=(voprf_key, tag_box, syn_box))

def parties_around(
    run: RunPlan,
    runtime: Runtime,
    keys: ServerKeys,
    s_tag: TaggingServer,
    s_syn: SynthesisServer,
    *,
    key_pairs: tuple[KeyPair, KeyPair, KeyPair] | None = None,
) -> Parties:
    """The parties of a run around its two servers, made here (:func:`setup`) or on machines of
    their own (seen here through stand-ins): the proxy, on ``runtime``, and the servers' public
    ``keys``. ``key_pairs`` (S_tag's VOPRF and sealing pairs, S_syn's sealing pair): where this
    process holds them, which a driver whose servers run elsewhere does in seeded test mode only
    (the transcript then records them; every secret comes from the test seed anyway)."""
    proxy = AnonymizingProxy(
        shuffler=run.comps.shuffler, rng=run.seeds.secret(streams.PROXY_SHUFFLE), recorder=runtime.recorder,
        meter=runtime.meter, adversary=runtime.adversary, cap=run.slots.cap,
    )
    voprf_key, tag_box, syn_box = key_pairs if key_pairs is not None else (None, None, None)
    return Parties(
        voprf_key=voprf_key, tag_box=tag_box, syn_box=syn_box, keys=keys, proxy=proxy,  # type: ignore[arg-type]
        s_tag=s_tag, s_syn=s_syn,
    )

def tagging_server(
    run: ServerPlan | RunPlan,
    runtime: Runtime,
    voprf_key: tuple[Secret[bytes], bytes],
    tag_box: tuple[Secret[bytes], bytes],
    *,
    keep_contributions: bool = True,
) -> TaggingServer:
    """S_tag with its keys, on ``runtime``'s threads, meter and recorder (any driver)."""
    return TaggingServer(
        suite=run.comps.suite, voprf_key=voprf_key, box_key=tag_box, channel=run.comps.channel,
        rng=run.seeds.secret(streams.S_TAG), workers=runtime.pool, meter=runtime.meter, recorder=runtime.recorder,
        release_floor=run.floor, dropout_policy=run.cfg.dropout_policy,
        proof_batch_size=run.cfg.proof_batch_size, record_shares=run.seeds.rng_mode == "seeded",
        keep_contributions=keep_contributions,
    )

def synthesis_server(
    run: ServerPlan | RunPlan, runtime: Runtime, syn_box: tuple[Secret[bytes], bytes], *, keep_contributions: bool = True
) -> SynthesisServer:
    """S_syn with its key, on ``runtime``'s threads, meter and recorder (any driver)."""
    return SynthesisServer(
        box_key=syn_box, channel=run.comps.channel, workers=runtime.pool, meter=runtime.meter,
        recorder=runtime.recorder, release_floor=run.floor, validator=runtime.validator,
        keep_contributions=keep_contributions, broadcast=broadcast_encoding(encoding_name(run.comps.names)),
        broadcast_seed=broadcast_seed(run.seeds.public_seed),
    )

def population(
    run: RunPlan,
    keys: ServerKeys,
    runtime: Runtime,
    span: range,
    *,
    coins: npt.NDArray[np.bool_] | None = None,
    grid: PublicGrid | None = None,
    inputs: bool = True,
) -> UserPopulation:
    """The devices of users ``span`` (all of them, or a window starting on a chunk boundary),
    each with its bucket's canonical encoding (public grid, step 1) and its coin. ``coins`` and
    ``grid``, when a driver already holds them, are all users' coins and the public grid. Under
    a user unit the entries are slots (:class:`~fre_protocol.slots.SlotLayout`). ``inputs=False``:
    devices for phase 2 only, whose outcome of phase 1 a driver restores
    (:meth:`~fre_protocol.roles.user.UserPopulation.restore`): phase 2 does not use the bucket
    encodings (the tag stands for the bucket), so none are computed again."""
    if span.start % run.cfg.chunk_size:
        raise InvalidParameterError(
            f"a population must start on a chunk boundary (chunk_size {run.cfg.chunk_size}), got user {span.start}"
        )
    if inputs:
        meter = runtime.meter
        start = time.perf_counter()
        with meter.phase("bucketing"):
            grid = grid if grid is not None else PublicGrid.derive(run.seeds, run.dim, run.params)
            x, encodings = device_inputs(run, span, grid)
            if encodings is None:
                encodings = bucket_encodings(grid, x)
            if coins is None:
                coins = user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size)
        meter.add("user.bucketing", time.perf_counter() - start, len(span))
    else:
        x, encodings = np.zeros((len(span), 0)), [b""] * len(span)
        if coins is None:
            coins = user_coins(run.seeds, run.n, run.params, run.cfg.chunk_size)
    return devices(
        x, encodings, coins[span.start : span.stop], comps=run.comps, keys=keys, rng=run.seeds.secret(streams.USERS),
        runtime=runtime, chunk_size=run.cfg.chunk_size, cover_traffic=run.cfg.cover_traffic,
        first_chunk=span.start // run.cfg.chunk_size,
    )

def device_inputs(
    run: RunPlan, span: range, grid: PublicGrid
) -> tuple[npt.NDArray[np.floating[Any]], list[bytes] | None]:
    """Users ``span``'s embeddings and, under a user unit, their slots' VOPRF inputs (padding
    included, laid out from the slot layout); under a text unit None: each device encodes its own
    bucket (:func:`bucket_encodings`), wherever it runs."""
    if run.slots.slot_rows is None:
        return rows(run.x, span.start, span.stop), None
    return run.slots.inputs(run.x, span, grid, run.seeds.secret(streams.USERS), run.cfg.chunk_size)

def bucket_encodings(grid: PublicGrid, x: npt.NDArray[np.floating[Any]]) -> list[bytes]:
    """Step 1: each device's bucket under the public grid, as its canonical encoding."""
    return encode_buckets(grid.bucket_indices(x))

def devices(
    x: npt.NDArray[np.floating[Any]], encodings: Sequence[bytes], coins: npt.NDArray[np.bool_], *, comps: Components,
    keys: ServerKeys, rng: RandomSource, runtime: Runtime, chunk_size: int, cover_traffic: bool, first_chunk: int,
) -> UserPopulation:
    """Devices from their inputs (rows, VOPRF inputs, coins), anywhere: this process, a worker's
    task. ``rng`` is the devices' stream (:data:`~fre_protocol.roles.streams.USERS`), of which
    each chunk of devices, ``first_chunk`` on, draws its own children."""
    return UserPopulation(
        x, encodings, coins, suite=comps.suite, keys=keys, channel=comps.channel, rng=rng, workers=runtime.user_pool,
        meter=runtime.meter, recorder=runtime.recorder, chunk_size=chunk_size, cover_traffic=cover_traffic,
        first_chunk=first_chunk, broadcast=encoding_name(comps.names),
    )

def make_dummy_user(run: ServerPlan | RunPlan, parties: Parties, runtime: Runtime) -> DummyUser | None:
    """S_tag's dummy user (DP runs only), which adds TSDLap dummy tags to the submissions."""
    return dummy_user_for(run, parties.keys.syn_box_key, runtime)

def dummy_user_for(run: ServerPlan | RunPlan, syn_box_key: bytes, runtime: Runtime) -> DummyUser | None:
    """S_tag's dummy user, sealing to S_syn's ``syn_box_key`` (None outside DP runs)."""
    if not run.params.is_dp:
        return None
    return DummyUser(
        generator=run.comps.make_dummy_generator(*run.dummy), channel=run.comps.channel,
        syn_box_key=syn_box_key, rng=run.seeds.secret(streams.DUMMY), workers=runtime.pool,
        meter=runtime.meter,
    )

@dataclass(frozen=True, slots=True, kw_only=True)
class Phase2Plan:
    """Phase 2's public parameters, fixed by the broadcast: the DDG configuration (its modulus
    holds the largest released count), the encoder, the secret sharing, the padded width, the
    noise plan (each released tag's m_h and σ_int, :mod:`~fre_protocol.roles.noise_plan`), the
    count → σ_int map it applies (``sizing``) and ``sigmas``, each tag's σ_int as whoever holds
    the plan reads it: the servers' plan lists every released tag's, a device's
    (:func:`device_phase2`) reads its own tag's count from the compact broadcast."""

    ddg_config: Any
    encoder: Any
    sharing: Any
    width: int
    noise: NoisePlan
    sizing: CountSizing
    sigmas: Mapping[bytes, float]

def plan_phase2(run: RunPlan, released: Mapping[bytes, int]) -> Phase2Plan:
    return phase2_plan(run.params, run.dim, run.cfg, run.comps, released)

def topup_noise(run: RunPlan, plan: Phase2Plan) -> tuple[Any, float] | None:
    """The users' own DDG noise (sampler, σ_int), which S_tag adds for missing contributors under
    the ``topup`` dropout policy (at each tag's σ_int,h of ``plan.noise`` where S_tag is given
    the noise plan); None when the round adds no noise."""
    return (run.comps.sampler, float(plan.ddg_config.sigma_int)) if run.noise and run.params.is_dp else None


def phase2_plan(
    params: FreParams, dim: int, cfg: ProtocolConfig, comps: Components, released: Mapping[bytes, int]
) -> Phase2Plan:
    """What every server derives from the full list (any driver): the modulus holds the largest
    released count (at least the release floor); the noise plan sizes each released tag's noise
    from the count a device reads for it in the round's broadcast encoding (design §4.4: a
    function of the broadcast counts and public parameters only)."""
    ddg_config = ddg_config_for(params, dim, cfg, n_modulus=_n_modulus(params, max(released.values(), default=0)))
    # Sized from what the devices read (a lossy encoding rounds counts down), as they size theirs.
    heard = broadcast_encoding(encoding_name(comps.names)).heard_counts(released)
    noise = noise_plan(params, cfg, ddg_config, heard)
    sharing = comps.make_sharing(int(ddg_config.modulus_bits))
    _check_capacity(sharing, comps.names.get("secret_sharing", "?"), max(released.values(), default=0))
    return Phase2Plan(
        ddg_config=ddg_config,
        encoder=comps.make_encoder(ddg_config),
        sharing=sharing,
        width=int(ddg_config.padded_dim),
        noise=noise,
        sizing=CountSizing(params=params, cfg=cfg, ddg_config=ddg_config),
        sigmas=noise.sigma_int,
    )


def _check_capacity(sharing: Any, name: str, largest: int) -> None:
    """A sharing that sums in a field (``capacity``: the most ring values whose sum stays below
    its modulus) must hold the largest released bucket's contributions plus S_tag's top-up,
    or the sums would wrap; refused before phase 2, naming the numbers."""
    capacity = getattr(sharing, "capacity", None)
    if capacity is not None and largest + 1 > int(capacity):
        raise InvalidParameterError(
            f"secret_sharing {name!r} sums at most {int(capacity)} contributions per bucket, but the largest "
            f"released bucket has {largest} (plus one top-up summand): use a smaller ring (modulus_bits) or a ring sharing"
        )


def device_phase2(
    params: FreParams, dim: int, cfg: ProtocolConfig, comps: Components, heard: HeardBroadcast,
    *, like: Phase2Plan | None = None,
) -> Phase2Plan:
    """What a device derives from the compact broadcast alone: the same DDG configuration (the
    broadcast carries the largest released count) and its own tag's σ_int from the count it
    reads (:class:`~fre_protocol.roles.broadcast.DeviceSigmas`); no per-tag noise plan. ``like``:
    a plan already built in this process (the servers'), whose encoder and sharing are reused
    where the configuration is the same (building an encoder draws its rotation again)."""
    ddg_config = ddg_config_for(params, dim, cfg, n_modulus=_n_modulus(params, heard.max_count))
    same = like is not None and like.ddg_config == ddg_config
    sizing = CountSizing(params=params, cfg=cfg, ddg_config=ddg_config)
    return Phase2Plan(
        ddg_config=ddg_config,
        encoder=like.encoder if same and like is not None else comps.make_encoder(ddg_config),
        sharing=like.sharing if same and like is not None else comps.make_sharing(int(ddg_config.modulus_bits)),
        width=int(ddg_config.padded_dim),
        noise=noise_plan(params, cfg, ddg_config, {}),
        sizing=sizing,
        sigmas=DeviceSigmas(heard, sizing),
    )


def plan_devices(run: RunPlan, heard: HeardBroadcast, like: Phase2Plan | None = None) -> Phase2Plan:
    return device_phase2(run.params, run.dim, run.cfg, run.comps, heard, like=like)


def hear(run: RunPlan | ServerPlan, message: bytes) -> HeardBroadcast:
    """The compact broadcast as every device of ``run`` loads it (the round's encoding)."""
    return HeardBroadcast(message, encoding_name(run.comps.names))


def heard_by(run: RunPlan, users: UserPopulation) -> HeardBroadcast:
    """The broadcast as ``users`` heard it; where they refused it (malformed, another encoding),
    an empty one: nothing was released for them, and every online device sends cover."""
    if users.heard is not None:
        return users.heard
    enc = broadcast_encoding(encoding_name(run.comps.names))
    return HeardBroadcast(build_message({}, enc, b""), enc)


def _n_modulus(params: FreParams, max_count: int) -> int:
    """The count the ring must hold: the largest released count, at least the release floor."""
    return max_count if max_count > 0 else release_threshold(params)

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
            # Each component's origin and version beside the plain names of ``components`` (which
            # stay as they were, so older readers and older transcripts agree on them).
            "component_origins": comps.origins(),
            **extra,
        },
    )
