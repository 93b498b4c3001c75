"""Assembling a round's release, written once for every driver (design §6.6).

The release: centroids and counts, the protocol's ledger, the public info (configuration and
functions of the DP output only) and the operator-private diagnostics; and, in a transcript, the
artifacts an audit re-reads. Every input is a role's state or a plain value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fre_protocol.components import Components
from fre_protocol.roles.config import ProtocolConfig
from fre_protocol.roles.dummy_user import DummyUser
from fre_protocol.roles.ledger import DropoutOutcome, build_ledger
from fre_protocol.roles.round import Parties, Phase2Plan, RunPlan, ServerPlan
from fre_protocol.roles.synthesis_server import Reconstruction, SynthesisServer
from fre_protocol.roles.user import UserTally
from mechanism.accounting import calibrate_noise
from mechanism.contributions import PrivacyUnit, with_unit
from mechanism.fre_e2t import release_threshold
from mechanism.params import FreParams
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import SeedPlan
from primitives.errors import ProtocolStateError

#: The norm guard's rule as published (S_syn withholds a decoded sum beyond it; n contributors).
NORM_GUARD_RULE = (
    "withhold a decoded sum longer than n·clip + γ·n·√d' + γ·σ_int·√n·(√d' + 8)"
    " (σ_int the tag's σ_int,h under count-sized noise; the noise term over max(n, m_h) users where"
    " S_tag topped up)"
)

@dataclass(frozen=True, slots=True, kw_only=True)
class PublicPlan:
    """The public plan a release is assembled under: the servers' plan (parameters, seed plan,
    configuration, components, floor, dummies) plus the embedding width, the noise switch and
    the privacy unit. Every driver's S_syn holds it: the in-process drivers take it from the
    :class:`~fre_protocol.roles.round.RunPlan`, a deployed S_syn from its round settings."""

    server: ServerPlan
    dim: int
    noise: bool
    unit: PrivacyUnit

    @classmethod
    def of(cls, run: RunPlan) -> PublicPlan:
        return cls(server=run.servers(), dim=run.dim, noise=run.noise, unit=run.slots.unit)


#: The operator diagnostics' keys in the order they are written (``diagnostics.json`` keeps it);
#: a key not named here follows them.
DIAGNOSTICS_ORDER = (
    "n_users", "n_texts", "n_slots", "n_padding_slots", "proxy_traffic", "n_submissions", "n_real_submissions",
    "n_distinct_tags_seen", "n_participants", "n_dropped_out", "n_cover_users", "contributors",
    "below_floor_contributors", "refused_by_S_tag", "dummies", "user_workers", "rejections", "user_status",
)


def synthesis_release(
    plan: PublicPlan,
    s_syn: SynthesisServer,
    phase2: Phase2Plan,
    result: Reconstruction,
    operator: Mapping[str, Any] | None = None,
) -> Release:
    """The release as S_syn assembles it, in any driver: centroids and counts of the tags it
    reconstructed, the protocol's ledger (with the dropout outcome S_syn saw,
    :meth:`~fre_protocol.roles.ledger.DropoutOutcome.of_reconstruction`), the public info and the
    operator diagnostics: S_syn's own counts merged with ``operator``, the figures only an
    operator holding the other parties has (their ``rejections`` are added to S_syn's)."""
    server = plan.server
    released = s_syn.released  # read once: a Dask driver's S_syn answers each read remotely
    tags = sorted(result.centroids)
    outcome = DropoutOutcome.of_reconstruction(result, server.floor, server.cfg.dropout_policy, phase2.noise)
    ledger = with_unit(
        build_ledger(
            server.params, phase2.ddg_config, server.dummy, (outcome.ledger_term(),),
            dishonest_fraction=server.cfg.dishonest_fraction, plan=phase2.noise,
        ),
        plan.unit,
    )
    centroids = (
        np.stack([result.centroids[t] for t in tags]) if tags else np.zeros((0, plan.dim), dtype=np.float64)
    )
    info = public_info(
        server.params, plan.dim, server.cfg, server.comps, phase2.ddg_config, outcome,
        rng_mode=server.seeds.rng_mode, noise=plan.noise, n_released_tags=len(released),
        n_released=len(tags),
    )
    return Release(
        buckets=tuple(ReleasedBucket(id=t.hex(), count=released[t]) for t in tags),
        centroids=centroids,
        ledger=ledger,
        params=server.params,
        seeds=server.seeds.to_dict(),
        noise=plan.noise,
        info=info,
        diagnostics=diagnostics(s_syn, result, tags, outcome, operator or {}),
    )


def assemble_release(
    run: RunPlan,
    parties: Parties,
    plan: Phase2Plan,
    released: Mapping[bytes, int],
    result: Reconstruction,
    dummy_user: DummyUser | None,
    user_workers: int,
    tally: UserTally,
) -> tuple[Release, dict[str, Any]]:
    """The in-process drivers' release: :func:`synthesis_release` with the figures of the other
    parties (slots, proxy, S_tag, dummy user, devices) as the operator's; and the figures the
    cost table reads. ``released`` is S_syn's broadcast (its own record is what counts)."""
    if dict(released) != parties.s_syn.released:
        raise ProtocolStateError("the broadcast differs from S_syn's released tags")
    release = synthesis_release(
        PublicPlan.of(run), parties.s_syn, plan, result, operator_figures(run, parties, tally, dummy_user, user_workers)
    )
    sizes = {"width": plan.width, "share_bytes": list(plan.sharing.share_sizes(plan.width))}
    return release, {**release.info, **release.diagnostics, "sizes": sizes}


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
        "noise_calibration": cfg.noise_calibration,
        "dropout_allowance": cfg.dropout_allowance,
        "components": comps.header(),
        "component_origins": comps.origins(),
        "rng_mode": rng_mode,
    }

def diagnostics(
    s_syn: SynthesisServer,
    result: Reconstruction,
    tags: list[bytes],
    outcome: DropoutOutcome,
    operator: Mapping[str, Any],
) -> dict[str, Any]:
    """Operator-private: every count below reads the private data (or its dummies) directly.
    S_syn's own, then ``operator``'s; in :data:`DIAGNOSTICS_ORDER`."""
    own: dict[str, Any] = {
        "n_submissions": s_syn.n_submissions,
        "n_distinct_tags_seen": len(s_syn.counts),
        "contributors": {t.hex(): result.contributors[t] for t in tags},
        "below_floor_contributors": outcome.below_floor_contributors,
    }
    merged = {**operator, **own, "rejections": _merge_counts(operator.get("rejections", {}), s_syn.rejections)}
    rank = {key: i for i, key in enumerate(DIAGNOSTICS_ORDER)}
    return {k: merged[k] for k in sorted(merged, key=lambda k: rank.get(k, len(rank)))}


def operator_figures(
    run: RunPlan, parties: Parties, tally: UserTally, dummy_user: DummyUser | None, user_workers: int
) -> dict[str, Any]:
    """What an operator holding every party in one process adds to S_syn's diagnostics."""
    s_tag = parties.s_tag
    return {
        "n_users": run.slots.n_users,
        "n_texts": run.slots.n_texts,
        "n_slots": run.n,
        "n_padding_slots": run.slots.n_padding,
        "proxy_traffic": parties.proxy.traffic(),
        "n_real_submissions": tally.n_real_submissions,
        "n_participants": tally.n_participants,
        "n_dropped_out": tally.n_dropped_out,
        "n_cover_users": tally.n_cover_users,
        "refused_by_S_tag": {t.hex(): why for t, why in sorted(s_tag.refused.items())},
        "dummies": dummy_user.summary() if dummy_user is not None else None,
        "user_workers": user_workers,
        "rejections": dict(s_tag.rejections),
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
