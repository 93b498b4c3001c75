"""The protocol with several texts per user (design §4.6): slots, padding, caps at the proxy.

400 texts (d = 16) held by 121 authors: 60 write one text, 60 write about five, one writes five
rare texts. Cap c = 3, so single-text authors pad two slots and prolific ones keep three buckets.
Seeded runs; ε = ∞ (τ = 20, every coin 1) where a run only has to be complete, a small DP
setting (ε = 16, δ = 1e-3, τ = 30, ⌈τ⌉ = 18, ~950 dummy submissions) where the coins, the
dummies and the noise must be those of a real release.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fre_protocol.audit import audit_run
from fre_protocol.components import build_components
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.local import ProtocolResult
from fre_protocol.drivers.streaming import run_streaming
from fre_protocol.inputs import open_embeddings
from fre_protocol.messages import Role, SealedEnvelope, tag_of
from fre_protocol.published import check_published
from fre_protocol.roles.base import PHASE1, PHASE1_SUBMIT, PHASE2, Meter, Recorder, Row
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.proxy import AnonymizingProxy, NetworkAdversary
from fre_protocol.roles.round import tagging_key
from fre_protocol.slots import PADDING_DOMAIN, PADDING_RANDOM_BYTES
from mechanism.accounting import HISTOGRAM_RELEASE
from mechanism.contributions import PrivacyUnit
from mechanism.fre_e2t import run_mechanism
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.run_files import TRANSCRIPT_FILE
from mechanism.seeds import SeedPlan
from primitives.ddg import DDGConfig, DDGEncoder
from primitives.errors import InvalidParameterError
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

CAP = 3
UNIT = PrivacyUnit(kind="user", cap=CAP, user_field="author")
SEEDS = SeedPlan.from_seed(7)
INF = FreParams.paper(math.inf, threshold=20)
DP = FreParams(epsilon=16.0, p_sample=0.6, budget_factor=3.0, threshold=30, delta=1e-3)
#: The author of five rare texts, whose texts the neighbouring population replaces.
RARE_AUTHOR = "rare-author"


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(3, 110, 70, 16, 0.5, RandomSource.seeded(5, "user-level"), spread=0.01)


@pytest.fixture(scope="module")
def authors(pop: Population) -> np.ndarray:
    rng = np.random.default_rng(11)
    labels = np.empty(pop.n, dtype=object)
    rare = np.flatnonzero(pop.rare_mask)
    labels[rare[:5]] = RARE_AUTHOR
    rest = rng.permutation(np.setdiff1d(np.arange(pop.n), rare[:5]))
    labels[rest[:60]] = [f"solo-{j}" for j in range(60)]
    labels[rest[60:]] = [f"prolific-{j}" for j in rng.integers(0, 60, rest.size - 60)]
    return labels.astype(str)


def _user_run(x: np.ndarray, authors: np.ndarray, params: FreParams, out: Path, **kw: Any) -> ProtocolResult:
    adversary = kw.pop("adversary", None)
    spec = RoundSpec(params=params, seeds=SEEDS, unit=UNIT, **kw)
    return run_protocol(x, spec, RunOptions(out_dir=out), users=authors, adversary=adversary)


@pytest.fixture(scope="module")
def inf_run(pop: Population, authors: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> ProtocolResult:
    return _user_run(pop.embeddings, authors, INF, tmp_path_factory.mktemp("inf"), noise=False)


@pytest.fixture(scope="module")
def dp_run(pop: Population, authors: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> ProtocolResult:
    return _user_run(pop.embeddings, authors, DP, tmp_path_factory.mktemp("dp"))


def _tag_ids(mech: Release) -> list[str]:
    suite = build_components().suite
    sk, _ = tagging_key(SEEDS, suite)
    return [tag_of(suite.evaluate(sk, bytes.fromhex(bucket_id))).hex() for bucket_id in mech.ids]


def _entries(path: Path | None, **where: Any) -> list[Any]:
    assert path is not None
    with TranscriptStore.open(path) as store:
        return list(store.entries(**where))


# -- equivalence with the mechanism ------------------------------------------------------------------
def test_same_buckets_counts_and_centroids_as_the_mechanism_without_noise(
    pop: Population, authors: np.ndarray, inf_run: ProtocolResult
) -> None:
    mech = run_mechanism(pop.embeddings, INF, SEEDS, noise=False, users=authors, unit=UNIT)
    proto = inf_run.release
    assert len(mech) >= 2
    expected = dict(zip(_tag_ids(mech), mech.counts.tolist(), strict=True))
    assert dict(zip(proto.ids, proto.counts.tolist(), strict=True)) == expected
    assert proto.diagnostics["contributors"] == expected
    encoder = DDGEncoder(DDGConfig.from_dict(proto.info["ddg"]))
    mech_by_tag = dict(zip(_tag_ids(mech), mech.centroids, strict=True))
    for tag, centroid, count in zip(proto.ids, proto.centroids, proto.counts.tolist(), strict=True):
        assert np.linalg.norm(centroid - mech_by_tag[tag]) <= encoder.quantization_bound(count) / count + 1e-9
    # a user counts once per bucket: the counts are people, fewer than the texts in the bucket
    assert sum(expected.values()) < mech.diagnostics["n_texts"] - 70


def test_dp_run_releases_the_mechanisms_buckets_and_counts(
    pop: Population, authors: np.ndarray, dp_run: ProtocolResult
) -> None:
    """Noise on: the coins are the mechanism's per slot, so the same buckets clear the floor with
    the same sampled counts (the noise only moves the centroids, by the DDG's σ)."""
    mech = run_mechanism(pop.embeddings, DP, SEEDS, noise=False, users=authors, unit=UNIT)
    proto = dp_run.release
    assert len(mech) >= 2 and proto.noise
    assert dict(zip(proto.ids, proto.counts.tolist(), strict=True)) == dict(
        zip(_tag_ids(mech), mech.counts.tolist(), strict=True)
    )
    assert proto.diagnostics["n_users"] == mech.diagnostics["n_users"] == 121
    assert proto.diagnostics["n_texts"] == pop.n and proto.diagnostics["n_slots"] == 121 * CAP


def test_distinct_users_with_cap_one_are_the_text_unit(pop: Population, tmp_path: Path) -> None:
    """Every message, the release and the noise are those of the single-text protocol."""
    text = run_protocol(pop.embeddings, RoundSpec(params=DP, seeds=SEEDS), RunOptions(out_dir=tmp_path / "text"))
    each = PrivacyUnit(kind="user", cap=1, user_field="id")
    user = run_protocol(pop.embeddings, RoundSpec(params=DP, seeds=SEEDS, unit=each), RunOptions(out_dir=tmp_path / "user"), users=np.arange(pop.n))
    a, b = text.release, user.release
    assert len(a) >= 2 and a.ids == b.ids and np.array_equal(a.counts, b.counts)
    assert np.array_equal(a.centroids, b.centroids)
    assert (a.ledger.epsilon, a.ledger.delta) == (b.ledger.epsilon, b.ledger.delta) == (
        b.ledger.unit["epsilon"], b.ledger.unit["delta"]
    )

    def messages(result: ProtocolResult) -> list[tuple[Any, ...]]:
        return [(e.view, e.phase, e.sender, e.receiver, e.message_type, e.payload, e.status)
                for e in _entries(result.transcript_path)]

    assert messages(text) == messages(user)


# -- padding ---------------------------------------------------------------------------------------
def test_every_user_sends_c_requests_and_c_share_pairs_whatever_its_texts(
    pop: Population, authors: np.ndarray, inf_run: ProtocolResult
) -> None:
    texts_per_user = np.unique(authors, return_counts=True)[1]
    assert texts_per_user.min() == 1 and texts_per_user.max() > CAP  # both kinds of users are here
    diag = inf_run.release.diagnostics
    n_users = diag["n_users"]
    assert diag["n_padding_slots"] >= 60 * (CAP - 1)  # every single-text author pads two slots
    # every coin is 1 at ε = ∞: each slot submits, so every user sends c of every kind
    assert diag["proxy_traffic"] == {
        f"{PHASE1}:S_tag": {str(CAP): n_users},
        f"{PHASE1_SUBMIT}:S_syn": {str(CAP): n_users},
        f"{PHASE2}:S_tag": {str(CAP): n_users},
        f"{PHASE2}:S_syn": {str(CAP): n_users},
    }
    proxy = _entries(inf_run.transcript_path, view="proxy", sender="user")
    assert sum(e.phase == PHASE1 for e in proxy) == CAP * n_users
    assert sum(e.phase == PHASE2 for e in proxy) == 2 * CAP * n_users
    assert len({e.size for e in proxy if e.phase == PHASE2 and e.receiver == "S_syn"}) == 1
    # padding tags reach S_syn at count 1: one distinct tag each beside the real buckets
    mech = run_mechanism(pop.embeddings, INF, SEEDS, noise=False, users=authors, unit=UNIT)
    assert diag["n_distinct_tags_seen"] == mech.diagnostics["n_sampled_buckets"] + diag["n_padding_slots"]
    assert diag["n_cover_users"] == inf_run.release.diagnostics["n_slots"] - sum(diag["contributors"].values())


def test_a_user_goes_offline_with_all_its_slots(pop: Population, authors: np.ndarray, tmp_path: Path) -> None:
    """Dropout draws people: in phase 2 every online user still sends c share pairs, nobody fewer."""
    result = _user_run(pop.embeddings, authors, INF, tmp_path, noise=False, dropout=0.3)
    offline = int(SEEDS.secret("dropout").bernoulli(0.3, 121).sum())
    assert 0 < offline < 121
    traffic = result.release.diagnostics["proxy_traffic"]
    assert traffic[f"{PHASE2}:S_tag"] == traffic[f"{PHASE2}:S_syn"] == {str(CAP): 121 - offline}


def test_a_padding_input_is_never_a_bucket_encoding() -> None:
    assert (len(PADDING_DOMAIN) + PADDING_RANDOM_BYTES) % 8 != 0  # bucket encodings are k × 8 bytes


def test_dp_submissions_are_at_most_c_per_user(dp_run: ProtocolResult) -> None:
    traffic = dp_run.release.diagnostics["proxy_traffic"]
    submitted = traffic[f"{PHASE1_SUBMIT}:S_syn"]
    assert set(submitted) <= {str(k) for k in range(1, CAP + 1)} and len(submitted) > 1
    assert traffic[f"{PHASE1}:S_tag"] == {str(CAP): 121}


# -- caps at the proxy -------------------------------------------------------------------------------
class OneMore(NetworkAdversary):
    """Sends, on the connection of user 0's first slot, a copy of its message of each phase in
    ``phases``: that user's (c+1)-th of the kind."""

    def __init__(self, phases: tuple[str, ...]) -> None:
        self.phases = phases

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase not in self.phases:
            return items
        conn, role, envelope = next(item for item in items if item[1] is Role.USER and item[0] // CAP == 0)
        return items + [(conn, role, envelope)]


def test_a_users_extra_request_and_submission_are_refused_and_recorded(
    pop: Population, authors: np.ndarray, inf_run: ProtocolResult, tmp_path: Path
) -> None:
    result = _user_run(pop.embeddings, authors, INF, tmp_path, noise=False, adversary=OneMore((PHASE1, PHASE1_SUBMIT)))
    refused = _entries(result.transcript_path, view="proxy", status="rejected:RateLimitedError")
    assert [(e.phase, e.receiver) for e in refused] == [(PHASE1, "S_tag"), (PHASE1_SUBMIT, "S_syn")]
    honest = inf_run.release
    assert result.release.ids == honest.ids and np.array_equal(result.release.centroids, honest.centroids)
    # nothing of the extra copies reached a server, and the tally still shows c per user
    assert result.release.diagnostics["rejections"] == {}
    assert result.release.diagnostics["proxy_traffic"] == honest.diagnostics["proxy_traffic"]


class Rows(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []

    def add(self, rows: Any) -> None:
        self.rows.extend(rows)


def test_the_proxy_counts_per_user_and_kind() -> None:
    """cap = 2: connections 0-1 are user 0's, 2-3 user 1's. User 0's third message to S_tag is
    refused; its messages to S_syn, user 1's and the dummy user's are not counted against it."""
    rows = Rows()
    proxy = AnonymizingProxy(
        shuffler=build_components().shuffler, rng=RandomSource.seeded(1, "proxy"), recorder=rows, meter=Meter(), cap=2
    )
    to_tag = SealedEnvelope(recipient=Role.S_TAG, ciphertext=bytes(48)).encode()
    to_syn = SealedEnvelope(recipient=Role.S_SYN, ciphertext=bytes(48)).encode()
    batch = [(0, Role.USER, to_tag), (1, Role.USER, to_tag), (1, Role.USER, to_syn), (2, Role.USER, to_tag),
             (3, Role.USER, to_tag), (-1, Role.DUMMY_USER, to_tag), (-1, Role.DUMMY_USER, to_tag),
             (0, Role.USER, to_tag)]
    out = proxy.forward(PHASE1, batch)
    assert len(out[Role.S_TAG].ciphertexts) == 6 and len(out[Role.S_SYN].ciphertexts) == 1
    assert [r[6] for r in rows.rows] == ["accepted"] * 7 + ["rejected:RateLimitedError"]
    assert proxy.traffic() == {f"{PHASE1}:S_syn": {"1": 1}, f"{PHASE1}:S_tag": {"2": 2}}


# -- neighbouring users ------------------------------------------------------------------------------
def test_neighbouring_users_publish_the_same_bytes(
    pop: Population, authors: np.ndarray, dp_run: ProtocolResult, tmp_path: Path
) -> None:
    """All five texts of the rare author replaced by copies of five other authors' rare texts,
    same seed: release.json and centroids.npy are byte-identical (no released bucket holds
    either version of that author), while S_syn saw different tags."""
    rare = np.flatnonzero(pop.rare_mask)
    mine = np.flatnonzero(authors == RARE_AUTHOR)
    assert set(mine) == set(rare[:5])
    x = pop.embeddings.copy()
    x[mine] = pop.embeddings[rare[5:10]]
    neighbour = _user_run(x, authors, DP, tmp_path)
    base = dp_run.transcript_path.parent  # type: ignore[union-attr]
    for name in ("release.json", "centroids.npy"):
        assert (tmp_path / name).read_bytes() == (base / name).read_bytes(), name
    assert all(f.passed for f in check_published(tmp_path))

    def submissions(result: ProtocolResult) -> set[bytes]:
        return {e.payload for e in _entries(result.transcript_path, view="S_syn", phase=PHASE1_SUBMIT)}

    assert submissions(neighbour) != submissions(dp_run)


# -- the ledger --------------------------------------------------------------------------------------
def test_the_ledger_states_the_per_user_guarantee(dp_run: ProtocolResult) -> None:
    """Group privacy over c slots for S_syn's histogram view, c-fold composition of the rest."""
    ledger = dp_run.release.ledger
    hist = ledger.term(HISTOGRAM_RELEASE)
    eps_h, delta_h = hist.epsilon, hist.delta
    eps = CAP * eps_h + CAP * (ledger.epsilon - eps_h)
    delta = delta_h * math.expm1(CAP * eps_h) / math.expm1(eps_h) + CAP * (ledger.delta - delta_h)
    unit = ledger.unit
    assert unit is not None
    assert unit["kind"] == "user" and unit["cap"] == CAP and unit["user_field"] == "author"
    assert unit["epsilon"] == pytest.approx(eps, rel=1e-12) and unit["delta"] == pytest.approx(delta, rel=1e-12)
    assert "group privacy" in unit["rule"] and "per user" in unit["statement"]
    with TranscriptStore.open(dp_run.transcript_path) as store:  # type: ignore[arg-type]
        assert store.header.extra["unit"] == UNIT.to_dict()
        assert store.header.extra["n_users"] == 121 and store.header.extra["n_texts"] == 400


def test_the_audit_passes_a_user_level_run(pop: Population, dp_run: ProtocolResult) -> None:
    report = audit_run(dp_run.transcript_path.parent, embeddings=pop.embeddings)  # type: ignore[union-attr]
    assert [f.name for f in report.findings if not f.passed] == []
    ledger = next(f for f in report.findings if f.name == "ledger")
    assert "per user (epsilon" in ledger.detail


def test_the_audit_fails_a_ledger_that_overstates_the_per_user_guarantee(
    pop: Population, dp_run: ProtocolResult, tmp_path: Path
) -> None:
    # A ledger whose unit record claims the per-contribution guarantee for a person (c = 3 texts).
    run = tmp_path / "run"
    shutil.copytree(dp_run.transcript_path.parent, run)  # type: ignore[union-attr]
    with TranscriptStore.open(run / TRANSCRIPT_FILE, append=True) as store:
        ledger = store.get_artifact("ledger")
        ledger["unit"] = ledger["unit"] | {"epsilon": ledger["epsilon"], "delta": ledger["delta"]}
        store.put_artifact("ledger", ledger, replace=True)
    report = audit_run(run, embeddings=pop.embeddings)
    failed = [f for f in report.findings if not f.passed]
    assert [f.name for f in failed] == ["ledger"] and "another per-user guarantee" in failed[0].detail


# -- refusals ----------------------------------------------------------------------------------------
def test_a_user_unit_is_refused_where_padding_would_show(pop: Population, authors: np.ndarray) -> None:
    x = pop.embeddings
    with pytest.raises(InvalidParameterError, match="cover_traffic must be on"):
        run_protocol(x, RoundSpec(params=INF, seeds=SEEDS, unit=UNIT, config=ProtocolConfig(cover_traffic=False)), users=authors)
    with pytest.raises(InvalidParameterError, match=r"release floor .* at least 2.*got 1"):
        run_protocol(x, RoundSpec(params=FreParams.paper(math.inf, threshold=1), seeds=SEEDS, unit=UNIT), users=authors)
    with pytest.raises(InvalidParameterError, match="users .* exactly when"):
        run_protocol(x, RoundSpec(params=INF, seeds=SEEDS), users=authors)


def test_the_streaming_driver_plays_a_user_unit_as_the_runner_does(
    pop: Population, authors: np.ndarray, tmp_path: Path
) -> None:
    """Windows of 64 slots over two memory-mapped shards, noise on: the runner's release, bit for
    bit, and the same per-user traffic at the proxy."""
    config = ProtocolConfig(chunk_size=64)
    half = pop.n // 2
    for j, part in enumerate((pop.embeddings[:half], pop.embeddings[half:])):
        np.save(tmp_path / f"{j}.npy", part)
    shards = open_embeddings(tmp_path)
    streamed = run_streaming(shards, RoundSpec(params=DP, seeds=SEEDS, unit=UNIT, config=config), users=authors, window_chunks=1)
    runner = run_protocol(pop.embeddings, RoundSpec(params=DP, seeds=SEEDS, unit=UNIT, config=config), users=authors)
    a, b = streamed.release, runner.release
    assert len(b) >= 1 and a.ids == b.ids and a.counts.tolist() == b.counts.tolist()
    np.testing.assert_array_equal(a.centroids, b.centroids)
    assert a.ledger.unit == b.ledger.unit
    assert a.diagnostics["n_padding_slots"] == b.diagnostics["n_padding_slots"] > 0
