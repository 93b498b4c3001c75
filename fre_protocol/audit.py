"""The protocol's audit of a recorded run (design §6.7; ``fre-e2t audit RUN``).

Built on the generic checks of :mod:`transcripts.audit`, it reports

* what each party saw: per view, message types with counts and bytes;
* structure: the store is sound and complete; views, senders and receivers are protocol roles
  (never a user identity); each view holds only the message types its party may receive; the
  header names every component family;
* leaks: no server or proxy view holds a raw embedding, a bucket index encoding or a user
  identifier — with the embeddings given, their exact bytes and the bucket encodings recomputed
  from the public seed are searched for; without them a float-vector heuristic still runs;
* the release recomputed from S_syn's view alone: tag submissions counted (rejected ones
  excluded), thresholded at the release floor, compared with the broadcast and the recorded
  release; centroids reconstructed from S_syn's own shares plus S_tag's aggregate shares,
  decoded and divided by the contributors, compared with the recorded centroids;
* the privacy ledger of the run with every term, and that its total is within the parameters;
* the noise plan (design §4.4): each released tag's m_h and σ_int in the ledger's DDG term,
  recomputed from the broadcast counts and the header's configuration.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fre_protocol.components import DEFAULT_COMPONENTS
from fre_protocol.messages import (
    AggregateShare,
    ReleasedTags,
    Role,
    ShareSubmission,
    TagSubmission,
    decode,
)
from fre_protocol.published import check_published, release_document_problems
from mechanism.accounting import histogram_release_cost
from mechanism.contributions import PrivacyUnit, per_user_guarantee
from mechanism.fre_e2t import release_threshold
from mechanism.ledger import PrivacyLedger
from mechanism.params import FreParams
from mechanism.run_files import TRANSCRIPT_FILE
from primitives.errors import DecodeError, InvalidInputError
from transcripts import TranscriptStore, view_summary
from transcripts.audit import (
    AuditFinding,
    AuditReport,
    check_float_vectors,
    check_integrity,
    check_message_types,
    check_no_forbidden_content,
    view_lines,
)

ROLES = {r.label for r in Role}
SERVER_VIEWS = (Role.S_TAG.label, Role.S_SYN.label, Role.PROXY.label)
_ERROR_TYPES = {"sealed_payload", "unknown"}
ALLOWED_TYPES: dict[str, set[str]] = {
    # refused_request: a request the proxy refused, recorded by its digest and size only.
    # compact_broadcast: the users' broadcast it relays (released_tags: runs recorded before it).
    Role.PROXY.label: {"sealed_envelope", "refused_request", "evaluation", "batch_evaluation", "rejection", "released_tags",
                       "compact_broadcast", "unknown"},
    # released_tokens: S_syn's token hashes per released tag; accepted_contributions: S_syn's
    # aggregation request, or its settling of a window's shares under a windowed driver.
    Role.S_TAG.label: {
        "blind_request", "share_submission", "cover_share", "released_tags", "released_tokens", "accepted_contributions",
    } | _ERROR_TYPES,
    # accepted_contributions: S_tag's answer when a windowed driver settles a window's shares
    Role.S_SYN.label: {"tag_submission", "share_submission", "cover_share", "accepted_contributions", "aggregate_share"} | _ERROR_TYPES,
    Role.USER.label: {"evaluation", "batch_evaluation", "rejection", "released_tags", "compact_broadcast", "unknown"},
}
FLOAT_DTYPES = ("<f4", ">f4", "<f8", ">f8")
MIN_FLOAT_SCAN_DIM = 32
#: The component families the audit rebuilds to recompute the centroids from S_syn's view.
RECOMPUTE_FAMILIES = ("secret_sharing", "ddg_encoder", "discrete_gaussian")
REQUIRED_TERMS = ("heavy_hitters", "sensitivity_failure", "centroid_ddg")
REQUIRED_TERMS_DP = ("heavy_hitters", "dummy_padding", "sensitivity_failure", "centroid_ddg")


def resolve_transcript(run: str | Path) -> Path:
    """``RUN`` may be the run directory or the transcript file itself."""
    path = Path(run)
    if path.is_dir():
        path = path / TRANSCRIPT_FILE
    if not path.is_file():
        raise InvalidInputError(f"no transcript at {str(path)!r} (expected a run directory or {TRANSCRIPT_FILE})")
    return path


# -- forbidden byte strings -----------------------------------------------------------------------
def embedding_needles(x: npt.NDArray[Any], *, prefix: int = 8) -> list[bytes]:
    """Byte prefixes of every row as float32/float64, little- and big-endian: a verbatim raw
    embedding in any of these layouts contains one of them."""
    needles: list[bytes] = []
    for dtype in ("<f4", ">f4", "<f8", ">f8"):
        arr = np.ascontiguousarray(np.asarray(x)[:, :prefix], dtype=dtype)
        width = arr.shape[1] * arr.dtype.itemsize
        raw = arr.tobytes()
        needles.extend(raw[i : i + width] for i in range(0, len(raw), width))
    return needles


def bucket_needles(x: npt.NDArray[Any], params: FreParams, public_seed: bytes) -> list[bytes]:
    """Every user's bucket index encoding, recomputed from the public seed (design §3 steps 1-2)."""
    from mechanism.grid import PublicGrid, encode_buckets
    from mechanism.seeds import SeedPlan

    grid = PublicGrid.derive(SeedPlan(public_seed=public_seed), int(x.shape[1]), params)
    return sorted(set(encode_buckets(grid.bucket_indices(x))))


# -- recomputing the release from S_syn's view ------------------------------------------------------
def _recompute_counts(store: TranscriptStore) -> Counter[bytes]:
    counts: Counter[bytes] = Counter()
    for entry in store.entries(view=Role.S_SYN.label, message_type="tag_submission"):
        if not entry.accepted:
            continue
        msg = decode(entry.payload, TagSubmission)
        assert isinstance(msg, TagSubmission)
        counts[msg.tag] += 1
    return counts


def _recompute_centroids(
    store: TranscriptStore, released: Iterable[bytes], names: Mapping[str, str]
) -> tuple[dict[bytes, npt.NDArray[np.float64]], dict[bytes, int]]:
    from fre_protocol.components import build_components
    from primitives.ddg import DDGConfig

    # Only the families the recomputation uses are the run's: a component of another family that is
    # not installed here (a plug-in shuffler, say) does not stop it (check_header warns about it).
    comps = build_components({f: n for f, n in names.items() if f in RECOMPUTE_FAMILIES}, workers=1)
    config = DDGConfig.from_dict(store.get_artifact("ddg_config"))
    encoder = comps.make_encoder(config)
    sharing = comps.make_sharing(int(config.modulus_bits))
    width = int(config.padded_dim)
    wanted = set(released)
    own: dict[bytes, dict[bytes, bytes]] = {}
    for entry in store.entries(view=Role.S_SYN.label, message_type="share_submission"):
        if not entry.accepted:
            continue
        msg = decode(entry.payload, ShareSubmission)
        assert isinstance(msg, ShareSubmission)
        if msg.tag in wanted:
            own.setdefault(msg.tag, {})[msg.contribution_id] = msg.share
    centroids: dict[bytes, npt.NDArray[np.float64]] = {}
    contributors: dict[bytes, int] = {}
    for entry in store.entries(view=Role.S_SYN.label, message_type="aggregate_share"):
        if not entry.accepted:
            continue
        agg = decode(entry.payload, AggregateShare)
        assert isinstance(agg, AggregateShare)
        if agg.tag not in wanted or agg.count == 0:
            continue
        mine = own.get(agg.tag, {})
        rows = np.stack([sharing.decode_share(mine[c], width) for c in agg.contribution_ids])
        theirs = np.frombuffer(agg.values, dtype=">u8").astype(np.uint64)
        total = sharing.reconstruct(theirs, sharing.aggregate(rows))
        centroids[agg.tag] = encoder.decode_sum(total, agg.count) / float(agg.count)
        contributors[agg.tag] = agg.count
    return centroids, contributors


def check_release(store: TranscriptStore) -> list[AuditFinding]:
    """Recompute the broadcast and the release from S_syn's view; compare with the records."""
    floor = int(store.header.extra.get("release_floor", 0))
    counts = _recompute_counts(store)
    recomputed = {t: c for t, c in counts.items() if c >= floor}
    findings = [_broadcast_finding(store, counts, recomputed, floor)]
    compact = compact_broadcast_finding(store, recomputed)
    if compact is not None:
        findings.append(compact)
    recorded = store.get_artifact("release") if store.has_artifact("release") else None
    if recorded is None:
        findings.append(AuditFinding(name="release:recorded", passed=False, detail="no recorded release artifact"))
        return findings
    findings.append(public_fields_finding(recorded))
    rec_counts = {bytes.fromhex(b["id"]): int(b["count"]) for b in recorded["buckets"]}
    findings.append(_buckets_finding(recorded, rec_counts, recomputed))
    findings.append(_centroids_finding(store, rec_counts))
    return findings


def _broadcast_finding(
    store: TranscriptStore, counts: Counter[bytes], recomputed: Mapping[bytes, int], floor: int
) -> AuditFinding:
    """The broadcast S_syn sent lists exactly the tags that reach the floor, and every party got
    the same one. It is recorded where it was received: the users' and S_tag's views."""
    broadcasts = [
        e for e in store.entries(message_type="released_tags") if e.view in (Role.USER.label, Role.S_TAG.label)
    ]
    broadcast: dict[bytes, int] | None = None
    if broadcasts:
        msg = decode(broadcasts[0].payload, ReleasedTags)
        assert isinstance(msg, ReleasedTags)
        broadcast = msg.as_dict()
    consistent = len({e.payload for e in broadcasts}) <= 1
    return AuditFinding(
        name="release:broadcast_recomputed",
        passed=broadcast is not None and consistent and broadcast == recomputed,
        detail=(
            f"{len(recomputed)} tags reach the floor {floor} among {sum(counts.values())} accepted "
            f"submissions of {len(counts)} distinct tags; broadcast "
            + ("missing" if broadcast is None else f"lists {len(broadcast)}")
            + ("" if consistent else "; parties received DIFFERENT broadcasts")
            + ("" if broadcast == recomputed else "; MISMATCH with the recomputed counts")
        ),
        data={"floor": floor, "recomputed": len(recomputed), "broadcast": None if broadcast is None else len(broadcast)},
    )


def compact_broadcast_finding(store: TranscriptStore, recomputed: Mapping[bytes, int]) -> AuditFinding | None:
    """The users' compact broadcast is the round's encoding of the released list with the public
    broadcast seed, byte for byte: rebuilt here from the full list (S_tag's, as S_syn sent it;
    the recomputed counts where S_tag's is not recorded) and the header's public seed, and
    compared with every recorded copy (users' and proxy's views; their sizes where the transcript
    keeps sizes only). None for a run recorded before the compact broadcast existed."""
    from fre_protocol.roles.broadcast import broadcast_seed, build_message, encoding, encoding_name

    copies = [
        e for e in store.entries(message_type="compact_broadcast") if e.view in (Role.USER.label, Role.PROXY.label)
    ]
    if not copies:
        return None
    full = _recorded_broadcast(store)
    source = "S_tag's full list" if full is not None else "the recomputed counts"
    full = full if full is not None else dict(recomputed)
    name = encoding_name(store.header.components)
    public_seed = bytes.fromhex(str(store.header.extra.get("seeds", {}).get("public_seed", "")))
    try:
        rebuilt = build_message(full, encoding(name), broadcast_seed(public_seed))
    except Exception as exc:  # an unknown encoding name, a malformed list: the check fails
        return AuditFinding(name="release:compact_broadcast", passed=False, detail=f"cannot rebuild: {exc}")
    recorded = [e for e in copies if e.payload_recorded]
    same_bytes = all(e.payload == rebuilt for e in recorded)
    same_size = all(e.size == len(rebuilt) for e in copies)
    return AuditFinding(
        name="release:compact_broadcast",
        passed=same_bytes and same_size,
        detail=(
            f"{len(copies)} recorded copies of the users' broadcast ({name}, {len(rebuilt)} bytes for {len(full)} "
            f"tags), rebuilt from {source} and the public seed: "
            + ("identical" if same_bytes and same_size else "MISMATCH")
            + ("" if recorded else " (sizes only)")
        ),
        data={"encoding": name, "bytes": len(rebuilt), "tags": len(full), "copies": len(copies)},
    )


def _buckets_finding(
    recorded: Mapping[str, Any], rec_counts: Mapping[bytes, int], recomputed: Mapping[bytes, int]
) -> AuditFinding:
    """The recorded release holds every recomputed bucket with its count, less the ones the run
    withheld (listed in the release's info), and nothing else."""
    withheld = {bytes.fromhex(t) for t in recorded.get("info", {}).get("withheld", {})}
    expected = {t: c for t, c in recomputed.items() if t not in withheld}
    return AuditFinding(
        name="release:buckets_and_counts",
        passed=rec_counts == expected,
        detail=(
            f"recorded release has {len(rec_counts)} buckets; recomputed {len(expected)} "
            f"({len(withheld)} withheld)"
            + ("" if rec_counts == expected else "; MISMATCH")
        ),
        data={
            "missing": sorted(t.hex() for t in set(expected) - set(rec_counts)),
            "extra": sorted(t.hex() for t in set(rec_counts) - set(expected)),
            "count_mismatch": sorted(
                t.hex() for t in set(expected) & set(rec_counts) if expected[t] != rec_counts[t]
            ),
        },
    )


def _centroids_finding(store: TranscriptStore, rec_counts: Mapping[bytes, int]) -> AuditFinding:
    """The recorded centroids match the ones reconstructed from S_syn's view; a transcript from
    which they cannot be reconstructed (missing or malformed records) fails rather than raises."""
    try:
        ok, detail = _compare_centroids(store, rec_counts)
    except (DecodeError, InvalidInputError, KeyError, ValueError) as exc:
        ok, detail = False, f"could not reconstruct the centroids from S_syn's view: {type(exc).__name__}: {exc}"
    return AuditFinding(name="release:centroids", passed=ok, detail=detail)


def _compare_centroids(store: TranscriptStore, rec_counts: Mapping[bytes, int]) -> tuple[bool, str]:
    """(passed, detail): every released bucket reconstructed, within 1e-9 of the recorded centroid
    (rows in sorted tag order), with the recorded contributor count. Raises on malformed records."""
    header = store.header
    centroids, contributors = _recompute_centroids(store, rec_counts, header.components)
    recorded_c = np.frombuffer(store.get_artifact("centroids"), dtype="<f8").reshape(
        len(rec_counts), int(header.extra.get("dim", 0))
    )
    order = sorted(rec_counts)
    # Contributor counts are operator-private: the run records them beside the release.
    private = store.get_artifact("diagnostics") if store.has_artifact("diagnostics") else {}
    rec_contrib = {bytes.fromhex(k): int(v) for k, v in private.get("contributors", {}).items()}
    missing = [t for t in order if t not in centroids]
    worst = 0.0
    for row, tag in zip(recorded_c, order, strict=True):
        if tag in centroids:
            worst = max(worst, float(np.max(np.abs(centroids[tag] - row))) if row.size else 0.0)
    same_contributors = contributors == {t: rec_contrib.get(t, -1) for t in contributors}
    ok = not missing and worst <= 1e-9 and same_contributors
    detail = (
        f"{len(centroids)} centroids reconstructed from S_syn's shares and S_tag's aggregate "
        f"shares; max |difference| to the recorded centroids {worst:.3g}"
        + (f"; {len(missing)} released buckets could not be reconstructed" if missing else "")
        + ("" if same_contributors else "; contributor counts differ")
    )
    return ok, detail


# -- structure --------------------------------------------------------------------------------------
def check_roles(store: TranscriptStore) -> AuditFinding:
    """Views, senders and receivers are role names — never a user identity."""
    rows = store.summary(by=("view", "sender", "receiver"))
    bad = sorted(
        {name for view, senders in rows.items() for sender, receivers in senders.items()
         for name in (view, sender, *receivers) if name not in ROLES}
    )
    return AuditFinding(
        name="roles_only",
        passed=not bad,
        detail="views, senders and receivers are protocol roles" if not bad else f"non-role names recorded: {bad[:10]}",
        data={"non_roles": bad[:50]},
    )


def component_lines(header: Any) -> tuple[str, list[str]]:
    """The header's components with their origins (``family=name (origin)``; a transcript from
    before origins were recorded gives the names only), and one warning per component this
    installation does not have, or has from another origin (:func:`~fre_protocol.components.installed_problems`)."""
    from fre_protocol.components import installed_problems

    origins = header.extra.get("component_origins")
    origins = origins if isinstance(origins, Mapping) else None
    parts = []
    for family, name in sorted(header.components.items()):
        entry = (origins or {}).get(family)
        origin = entry.get("origin") if isinstance(entry, Mapping) else None
        parts.append(f"{family}={name}" + (f" ({origin})" if origin else ""))
    warnings = [
        problem + (": the release cannot be recomputed from S_syn's view without it"
                   if problem.split(" ", 1)[0] in RECOMPUTE_FAMILIES else
                   ": the audit does not use it, rebuilding the run does (install the same package)")
        for problem in installed_problems(origins, header.components)
    ]
    if origins is None:
        parts.append("(origins not recorded: a transcript from before they were)")
    return ", ".join(parts), warnings


def check_header(store: TranscriptStore) -> AuditFinding:
    header = store.header
    described, warnings = component_lines(header)
    missing = sorted(set(DEFAULT_COMPONENTS) - set(header.components))
    params_ok = True
    try:
        FreParams.from_dict(dict(header.params))
    except (TypeError, ValueError):
        params_ok = False
    return AuditFinding(
        name="header",
        passed=not missing and params_ok,
        detail=(
            f"rng_mode {header.rng_mode}, package {header.package_version}, components {described}"
            + (f"; MISSING component families {missing}" if missing else "")
            + ("" if params_ok else "; parameters do not parse")
        ),
        data={"components": dict(header.components), "component_origins": header.extra.get("component_origins"),
              "not_installed": warnings},
    )


def check_ledger(store: TranscriptStore) -> AuditFinding:
    if not store.has_artifact("ledger"):
        return AuditFinding(name="ledger", passed=False, detail="no ledger recorded")
    ledger = store.get_artifact("ledger")
    params = FreParams.from_dict(dict(store.header.params))
    terms = {t["name"]: t for t in ledger.get("terms", [])}
    names = list(terms)
    required = REQUIRED_TERMS_DP if params.is_dp else REQUIRED_TERMS
    missing = [n for n in required if n not in terms]
    eps = _float(ledger.get("epsilon"))
    delta = _float(ledger.get("delta"))
    within = (not params.is_dp) or (eps <= params.epsilon * (1 + 1e-9) and delta <= params.delta * (1 + 1e-9))
    # The total must be the composition of its terms: the histogram (heavy hitters with the
    # dummies, histogram_release_cost), then basic composition with the sensitivity failure and
    # the DDG term.
    composed = True
    if params.is_dp and not missing:
        e = {n: _float(t["epsilon"]) for n, t in terms.items()}
        d = {n: _float(t["delta"]) for n, t in terms.items()}
        hist_eps, hist_delta = histogram_release_cost(
            e["heavy_hitters"], d["heavy_hitters"], params.p_sample, e["dummy_padding"], d["dummy_padding"]
        )
        eps_c = hist_eps + e["centroid_ddg"]
        delta_c = hist_delta + d["sensitivity_failure"] + d["centroid_ddg"]
        composed = math.isclose(eps, eps_c, rel_tol=1e-9) and math.isclose(delta, delta_c, rel_tol=1e-9)
    unit_ok, unit_note = _check_unit(ledger, store)
    return AuditFinding(
        name="ledger",
        passed=not missing and within and composed and unit_ok,
        detail=(
            f"total (epsilon {eps:.6g}, delta {delta:.4g}) against the target (epsilon {params.epsilon}, "
            f"delta {params.delta}); terms {names}"
            + (f"; MISSING {missing}" if missing else "")
            + ("" if within else "; EXCEEDS the target")
            + ("" if composed else "; the total is NOT the composition of the terms")
            + unit_note
        ),
    )


def recorded_config(store: TranscriptStore) -> Any:
    """The run's ProtocolConfig from the header; a run recorded before count-sized noise existed
    (no ``noise_calibration``) ran the floor calibration, and one recorded before
    ``ddg_accountant`` existed calibrated its DDG noise with KLS21's RDP accountant alone."""
    from fre_protocol.roles.config import FLOOR_CALIBRATION, ProtocolConfig

    data = dict(store.header.extra.get("config", {}))
    data.setdefault("noise_calibration", FLOOR_CALIBRATION)
    return ProtocolConfig.from_dict(data)


def _recorded_broadcast(store: TranscriptStore) -> dict[bytes, int] | None:
    """The released counts as every party heard them (the broadcast in S_tag's or the users'
    view), or None where it is not recorded whole."""
    for entry in store.entries(message_type="released_tags"):
        if entry.view in (Role.USER.label, Role.S_TAG.label) and entry.payload_recorded and entry.accepted:
            msg = decode(entry.payload, ReleasedTags)
            assert isinstance(msg, ReleasedTags)
            return msg.as_dict()
    return None


def check_noise_plan(store: TranscriptStore) -> AuditFinding:
    """Each released tag's m_h and σ_int in the ledger's DDG term are the noise plan the
    published counts and the header's configuration give (design §4.4), and each meets the
    aggregation budget: recomputed here, from the broadcast (or, where it is not recorded, the
    release's buckets) and the recorded DDG configuration."""
    from fre_protocol.roles.broadcast import encoding as broadcast_encoding
    from fre_protocol.roles.config import COUNT_CALIBRATION
    from fre_protocol.roles.noise_plan import noise_plan
    from primitives.ddg import DDGConfig

    name = "ledger:noise_plan"
    if not (store.has_artifact("ledger") and store.has_artifact("ddg_config")):
        return AuditFinding(name=name, passed=False, detail="no ledger or DDG configuration recorded")
    params = FreParams.from_dict(dict(store.header.params))
    cfg = recorded_config(store)
    terms = {t["name"]: t for t in store.get_artifact("ledger").get("terms", [])}
    recorded = dict(terms.get("centroid_ddg", {}).get("detail", {}).get("per_tag", {}))
    counts = _recorded_broadcast(store)
    partial = counts is None  # the broadcast kept as its size only: the release's buckets
    if counts is None and store.has_artifact("release"):
        counts = {bytes.fromhex(b["id"]): int(b["count"]) for b in store.get_artifact("release")["buckets"]}
    if partial:  # a withheld tag's count is in the broadcast only: its entry cannot be checked
        recorded = {t: v for t, v in recorded.items() if bytes.fromhex(t) in (counts or {})}
    ddg = DDGConfig.from_dict(store.get_artifact("ddg_config"))
    counts = counts or {}
    if not partial and "broadcast" in store.header.components:
        # Noise is sized from what the devices read: the encoding may round counts down.
        try:
            counts = broadcast_encoding(store.header.components["broadcast"]).heard_counts(counts)
        except Exception as exc:  # an encoding not installed here, a malformed list: the check fails
            return AuditFinding(name=name, passed=False, detail=f"cannot recompute the counts the devices read: {exc}")
    plan = noise_plan(params, cfg, ddg, counts)
    if plan.calibration != COUNT_CALIBRATION or not plan.users:
        ok = not recorded
        return AuditFinding(name=name, passed=ok, detail=(
            f"noise sized for the release floor ⌈τ⌉ = {plan.floor} ({plan.calibration})"
            + ("" if ok else "; the ledger lists per-tag noise NOT of this calibration")))
    want = plan.per_tag()
    same: Callable[[Mapping[str, Any] | None, Mapping[str, Any] | None], bool] = _same_entry
    if partial:
        # Without the withheld tags' counts a lossy encoding's floors cannot be rebuilt: each
        # entry must then size for no more contributors than its count asks for, at its m's σ_int.
        same = functools.partial(_no_less_noise, params=params, cfg=cfg, ddg=ddg)
    bad = sorted(t for t in set(want) | set(recorded) if not same(want.get(t), recorded.get(t)))
    return AuditFinding(
        name=name,
        passed=not bad,
        detail=(
            f"{len(want)} released tags' m_h = max(⌈τ⌉, ⌊(1 − f)·n_h⌋) (f = {plan.dropout_allowance}; n_h as the devices "
            "read it) and σ_int "
            f"recomputed from the counts and the configuration; {len(set(plan.users.values()))} distinct m_h"
            + (f"; {len(bad)} tags DIFFER from the ledger" if bad else "")
            + ("; counts from the release's buckets (the broadcast is recorded as its size): each entry checked to "
               "size for no more contributors than its count, at its own m's σ_int" if partial else "")
        ),
        data={"mismatched": bad[:50]},
    )


def _no_less_noise(
    want: Mapping[str, Any] | None, got: Mapping[str, Any] | None, *, params: Any, cfg: Any, ddg: Any
) -> bool:
    """``got`` sizes for at most ``want``'s contributors (at least the floor's), with the σ_int
    and honest count of its own m."""
    from fre_protocol.roles.config import honest_contributors
    from fre_protocol.roles.noise_plan import sigma_for

    if want is None or got is None:
        return False
    m = int(got.get("m", -1))
    if not release_threshold(params) <= m <= int(want["m"]):
        return False
    return _same_entry({"m": m, "n_honest": honest_contributors(m, cfg.dishonest_fraction),
                        "sigma_int": sigma_for(params, cfg, ddg, m)}, got)


def _same_entry(want: Mapping[str, Any] | None, got: Mapping[str, Any] | None) -> bool:
    if want is None or got is None:
        return False
    return int(got.get("m", -1)) == int(want["m"]) and int(got.get("n_honest", -1)) == int(want["n_honest"]) and (
        math.isclose(float(got.get("sigma_int", math.nan)), float(want["sigma_int"]), rel_tol=1e-12)
    )


def _check_unit(ledger: dict[str, Any], store: TranscriptStore) -> tuple[bool, str]:
    """The ledger's per-user record is the one its terms give under the run's unit (the header's),
    recomputed with :func:`mechanism.contributions.per_user_guarantee`."""
    recorded = ledger.get("unit")
    header_unit = store.header.extra.get("unit")
    if recorded is None:
        return header_unit is None, "" if header_unit is None else "; the ledger does NOT state its unit"
    unit = PrivacyUnit.from_dict(recorded)
    if header_unit is not None and PrivacyUnit.from_dict(header_unit) != unit:
        return False, f"; the ledger's unit {unit.to_dict()} is NOT the run's {header_unit}"
    eps_u, delta_u, _ = per_user_guarantee(PrivacyLedger.from_dict(ledger), unit)
    ok = math.isclose(_float(recorded.get("epsilon")), eps_u, rel_tol=1e-9) and math.isclose(
        _float(recorded.get("delta")), delta_u, rel_tol=1e-9
    )
    note = f"; per {unit.kind} (epsilon {eps_u:.6g}, delta {delta_u:.4g})"
    return ok, note + ("" if ok else " but the ledger states another per-user guarantee")


def _float(value: Any) -> float:
    if isinstance(value, str):
        return math.inf if value == "inf" else float(value)
    return float(value)


def ledger_lines(store: TranscriptStore) -> list[str]:
    """The run's privacy ledger, one line per term."""
    if not store.has_artifact("ledger"):
        return ["(no ledger recorded)"]
    ledger = store.get_artifact("ledger")
    lines = [
        f"privacy ledger: epsilon {ledger.get('epsilon')}, delta {ledger.get('delta')}, "
        f"sigma {ledger.get('sigma')} ({ledger.get('composition', '')})"
    ]
    for t in ledger.get("terms", []):
        lines.append(f"  {t['name']:<22} epsilon {t['epsilon']!s:<12} delta {t['delta']!s:<12} {t['source']}")
    if isinstance(ledger.get("unit"), dict):
        lines.append(f"  what one user is: {ledger['unit'].get('statement')}")
    return lines


def public_fields_finding(recorded: Mapping[str, Any]) -> AuditFinding:
    problems = release_document_problems(recorded)
    return AuditFinding(
        name="release:public_fields",
        passed=not problems,
        detail=(
            "the recorded release holds only fields on the public allow-list"
            if not problems
            else f"the recorded release holds non-public fields: {', '.join(problems[:8])}"
        ),
        data={"problems": problems},
    )


def check_sizes_only(store: TranscriptStore) -> list[AuditFinding]:
    """A transcript recorded with sizes only (``simulate --transcript-mode sizes``): every entry is
    size-only, and the recorded release's fields are public. Nothing can be recomputed."""
    with_payload = sum(1 for e in store.entries() if e.payload_recorded)
    findings = [
        AuditFinding(
            name="size_only_records",
            passed=with_payload == 0,
            detail=(
                "every entry is recorded size-only, as the header's transcript mode says"
                if with_payload == 0
                else f"{with_payload} entries hold payloads in a transcript recorded with sizes only"
            ),
            data={"with_payload": with_payload},
        )
    ]
    if store.has_artifact("release"):
        findings.append(public_fields_finding(store.get_artifact("release")))
    else:
        findings.append(AuditFinding(name="release:recorded", passed=False, detail="no recorded release artifact"))
    return findings


# -- the audit -----------------------------------------------------------------------------------
def audit_run(
    run: str | Path,
    *,
    embeddings: npt.NDArray[Any] | None = None,
    user_ids: Sequence[bytes] | None = None,
) -> AuditReport:
    """Audit a recorded run (a run directory or its ``transcript.sqlite``)."""
    path = resolve_transcript(run)
    store = TranscriptStore.open(path)
    try:
        report = _audit(store, embeddings=embeddings, user_ids=user_ids)
        # The published files beside the transcript: every field on the public allow-list.
        published = tuple(check_published(path.parent))
        return AuditReport(findings=report.findings + published, summary=report.summary)
    finally:
        store.close()


def _audit(
    store: TranscriptStore, *, embeddings: npt.NDArray[Any] | None, user_ids: Sequence[bytes] | None
) -> AuditReport:
    header = store.header
    params = FreParams.from_dict(dict(header.params))
    dim = int(header.extra.get("dim", 0))
    findings: list[AuditFinding] = []
    findings += check_integrity(store)
    findings.append(check_header(store))
    findings.append(check_roles(store))
    findings += check_message_types(store, {v: sorted(t) for v, t in ALLOWED_TYPES.items()})
    notes: list[str] = []
    warnings = component_lines(header)[1]
    if header.extra.get("transcript") == "sizes":
        notes.append(
            "the transcript records each message's size, not its bytes (--transcript-mode sizes): the content "
            "scans and the release's recomputation from S_syn's view cannot run"
        )
        findings += check_sizes_only(store)
    else:
        findings += _check_payloads(store, params, dim, embeddings, user_ids, notes)
    findings.append(check_ledger(store))
    findings.append(check_noise_plan(store))
    summary = {
        "run_id": header.run_id,
        "rng_mode": header.rng_mode,
        "users": header.extra.get("n_users"),
        "dim": dim,
        "views": view_summary(store),
        "notes": notes,
        "warnings": warnings,
        "ledger": ledger_lines(store),
    }
    return AuditReport(findings=tuple(findings), summary=summary)


def _check_payloads(
    store: TranscriptStore,
    params: FreParams,
    dim: int,
    embeddings: npt.NDArray[Any] | None,
    user_ids: Sequence[bytes] | None,
    notes: list[str],
) -> list[AuditFinding]:
    """What a full transcript allows: the leak scans, the size-only records, the release
    recomputed from S_syn's view."""
    header = store.header
    findings: list[AuditFinding] = []
    forbidden: dict[str, list[bytes]] = {}
    if embeddings is not None:

        x = np.asarray(embeddings)
        # one row per text (older headers name only n_users: one text each)
        n_rows = header.extra.get("n_texts", header.extra.get("n_users"))
        if x.ndim != 2 or x.shape[1] != dim or x.shape[0] != int(n_rows if n_rows is not None else -1):
            raise InvalidInputError(f"embeddings must be the run's ({n_rows}, {dim}) array, got shape {x.shape}")
        forbidden["raw_embedding"] = embedding_needles(x)
        public_seed = bytes.fromhex(str(header.extra["seeds"]["public_seed"]))
        forbidden["bucket_index"] = bucket_needles(x, params, public_seed)
    else:
        notes.append("embeddings not given: exact raw-embedding and bucket-index searches skipped")
    if user_ids:
        forbidden["user_id"] = [bytes(u) for u in user_ids]
    # Outside seeded mode S_tag's received shares are recorded size-only (with S_syn's shares
    # they would unmask every user's encoding); those, and only those, may go unscanned.
    share_size_only = sum(
        1 for e in store.entries(view=Role.S_TAG.label, message_type="share_submission") if not e.payload_recorded
    )
    scans: list[AuditFinding] = []
    if forbidden:
        scans += check_no_forbidden_content(
            store, views=list(SERVER_VIEWS), forbidden=forbidden, min_length=4, allow_unscanned=True
        )
    if dim >= MIN_FLOAT_SCAN_DIM:
        # Raw embeddings are float32/float64. With the embeddings at hand the norm window is theirs;
        # otherwise normalized embeddings are assumed. Random bytes pass a window of `dim` values
        # with probability about 2^-dim · 0.05, so below 32 dimensions the scan would raise false
        # alarms on ciphertexts and is not run.
        norm_range = (0.99, 1.01)
        if embeddings is not None:
            norms = np.linalg.norm(np.asarray(embeddings, dtype=np.float64), axis=1)
            norm_range = (float(norms.min()) * 0.99, float(norms.max()) * 1.01)
        else:
            notes.append("float-vector scan assumes unit-norm embeddings (pass the embeddings to use theirs)")
        max_abs = max(1.0, norm_range[1])
        scans += check_float_vectors(
            store, views=list(SERVER_VIEWS), dim=dim, dtypes=FLOAT_DTYPES, norm_range=norm_range,
            max_abs=max_abs, allow_unscanned=True,
        )
    else:
        notes.append(f"float-vector scan skipped: d = {dim} < {MIN_FLOAT_SCAN_DIM} would raise false alarms")
    findings += scans
    unscanned = max((int(f.data.get("size_only_entries", 0)) for f in scans), default=share_size_only)
    expected = 0 if header.rng_mode == "seeded" else share_size_only
    findings.append(
        AuditFinding(
            name="size_only_records",
            passed=unscanned == expected == share_size_only,
            detail=(
                f"{unscanned} server/proxy entries recorded without payload; {share_size_only} of them are "
                f"S_tag's received shares"
                + (" (a secret outside seeded mode)" if header.rng_mode != "seeded" else "")
                + ("" if unscanned == expected == share_size_only else ": UNEXPECTED size-only records")
            ),
            data={"size_only": unscanned, "share_size_only": share_size_only},
        )
    )
    findings += check_release(store)
    return findings


def render(report: AuditReport) -> str:
    """Human-readable report: per party what it saw, the checks, the ledger."""
    summary = report.summary
    lines = [
        f"audit of run {summary.get('run_id')} ({summary.get('rng_mode')} mode, "
        f"{summary.get('users')} users, d = {summary.get('dim')})",
        "",
        "what each party saw:",
        *view_lines(summary.get("views", {})),
        "",
        report.verdict_line("checks"),
        *report.finding_lines(),
    ]
    lines += [f"  note: {note}" for note in summary.get("notes", [])]
    lines += [f"  warning: {warning}" for warning in summary.get("warnings", [])]
    lines += [""] + list(summary.get("ledger", []))
    return "\n".join(lines) + "\n"


__all__ = [
    "ALLOWED_TYPES",
    "audit_run",
    "bucket_needles",
    "check_noise_plan",
    "check_release",
    "embedding_needles",
    "ledger_lines",
    "render",
    "resolve_transcript",
]
