"""The runner: reproducibility, what is recorded where, secrets, the saved release, batching, sizes."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import Release
from mechanism.run_files import TRANSCRIPT_FILE
from mechanism.seeds import SeedPlan
from primitives.errors import (
    InfeasibleBudgetError,
    InvalidInputError,
    InvalidParameterError,
    UnknownComponentError,
)
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

INF = FreParams.paper(math.inf)  # no dummies, τ = t = 100: the cheapest complete runs


def _population(dim: int = 16, seed: int = 3) -> Population:
    return synthetic_population(2, 130, 40, dim, 0.5, RandomSource.seeded(seed, "runner"), spread=0.01)


@pytest.fixture(scope="module")
def pop() -> Population:
    return _population()


@pytest.fixture(scope="module")
def recorded(pop: Population, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Release]:
    out = tmp_path_factory.mktemp("run")
    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), noise=True), RunOptions(out_dir=out))
    assert result.transcript_path == out / TRANSCRIPT_FILE
    return out, result.release


def test_seeded_runs_are_reproducible_whatever_the_worker_count(pop: Population, recorded) -> None:  # type: ignore[no-untyped-def]
    _, first = recorded
    again = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), noise=True, workers=1)).release
    assert len(first) >= 1
    assert first.ids == again.ids
    assert np.array_equal(first.counts, again.counts)
    assert np.array_equal(first.centroids, again.centroids)  # sealing randomness never matters
    # Users on their own single thread (how the cost table times a device): the same release.
    alone = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), noise=True, config=ProtocolConfig(user_workers=1)))
    assert alone.costs["user_workers"] == 1
    assert np.array_equal(first.centroids, alone.release.centroids)
    with pytest.raises(InvalidParameterError, match="user_workers must be None or an integer >= 1, got 0"):
        ProtocolConfig(user_workers=0)
    other = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(2), noise=True)).release
    assert set(other.ids).isdisjoint(first.ids)  # another S_tag key: other tags


def test_every_message_is_recorded_in_receiver_and_proxy_views(pop: Population, recorded) -> None:  # type: ignore[no-untyped-def]
    out, release = recorded
    n = pop.n
    with TranscriptStore.open(out / TRANSCRIPT_FILE) as store:
        summary = store.summary(by=("view", "message_type"))
        header = store.header
        assert header.rng_mode == "seeded"
        assert set(header.components) >= {"oprf", "group", "secret_sharing", "ddg_encoder", "channel", "shuffler"}
        assert header.params["threshold"] == INF.threshold
        assert summary["S_tag"]["blind_request"]["count"] == n
        assert summary["user"]["evaluation"]["count"] == n
        assert summary["proxy"]["evaluation"]["count"] == n
        subs = release.diagnostics["n_submissions"]
        parts = release.diagnostics["n_participants"]
        assert subs == n  # epsilon = inf: every user submits, no dummies
        assert summary["S_syn"]["tag_submission"]["count"] == subs
        covers = release.diagnostics["n_cover_users"]
        assert parts + covers == n  # cover traffic: every user sends two phase-2 messages
        for server in ("S_syn", "S_tag"):
            assert summary[server]["share_submission"]["count"] == parts
            assert summary[server]["cover_share"]["count"] == covers
            assert summary[server]["cover_share"]["bytes"] == covers * summary[server]["share_submission"]["bytes"] // parts
        # the proxy relayed every sealed user message once: requests + submissions + 2 phase-2
        assert summary["proxy"]["sealed_envelope"]["count"] == n + subs + 2 * n
        assert summary["S_syn"]["aggregate_share"]["count"] == release.info["n_released_tags"]
        assert summary["S_tag"]["accepted_contributions"]["count"] == release.info["n_released_tags"]
        # sizes are the encoded sizes
        assert summary["S_tag"]["blind_request"]["bytes"] == 33 * n
        # type, tag, token hash (which took the place of the nonce)
        assert summary["S_syn"]["tag_submission"]["bytes"] == (1 + 32 + 32) * subs
        # S_syn handed S_tag each released tag's token hashes, and nobody else
        released = release.info["n_released_tags"]
        assert summary["S_tag"]["released_tokens"]["count"] == released
        assert summary["S_tag"]["released_tokens"]["bytes"] == released * (1 + 32 + 4) + 32 * subs_released(release)
        assert {e.status for e in store.entries()} == {"accepted"}
        assert all(e.payload_recorded for e in store.entries())  # seeded mode keeps every payload
        # seeded mode keeps the secrets as artifacts; the release and ledger are recorded
        names = {a.name for a in store.artifacts()}
        assert {"release", "ledger", "ddg_config", "centroids", "secrets/voprf_sk"} <= names
        assert store.get_artifact("release")["buckets"] == [b.to_dict() for b in release.buckets]
    loaded = Release.load(out)
    assert loaded.ids == release.ids and np.array_equal(loaded.centroids, release.centroids)
    assert loaded.info["path"] == "protocol"


def subs_released(release: Release) -> int:
    """Submissions counted for the released tags: one token hash each."""
    return int(sum(release.counts)) if len(release) == release.info["n_released_tags"] else -1


def test_no_secrets_outside_seeded_mode(pop: Population, tmp_path: Path) -> None:
    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.fresh(), noise=True), RunOptions(out_dir=tmp_path))
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        assert store.header.rng_mode == "crypto"
        assert not [a.name for a in store.artifacts() if a.secret]
        assert "test_seed" not in store.header.extra["seeds"]
        # S_syn holds the other share of each contribution, so S_tag's shares are size-only:
        # the transcript file alone can never unmask a user's encoding
        tag_shares = list(store.entries(view="S_tag", message_type="share_submission"))
        assert tag_shares and all(not e.payload_recorded and e.size > 0 for e in tag_shares)
        assert all(e.payload_recorded for e in store.entries(view="S_syn", message_type="share_submission"))
    assert "test_seed" not in result.release.seeds


def test_batched_proofs_release_the_same(pop: Population) -> None:
    seeds = SeedPlan.from_seed(4)
    single = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=seeds, noise=False)).release
    batched = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=seeds, noise=False, config=ProtocolConfig(proof_batch_size=64)))
    assert batched.release.ids == single.ids
    assert np.array_equal(batched.release.centroids, single.centroids)
    assert batched.release.info["proof_batch_size"] == 64
    # each user downloads its whole proof batch: 1 + 8 + 64·64 + 64 bytes for a full batch
    assert batched.costs["download_bytes_evaluation"] > 1000


def test_user_upload_fits_the_budget_at_d_768() -> None:
    """Seed-compressed shares over Z_{2^24}: a 768-d user uploads well under 4.5 kB."""
    pop = synthetic_population(1, 120, 0, 768, 0.5, RandomSource.seeded(8, "upload"), spread=0.01)
    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(8), noise=True))
    costs = result.costs
    assert result.release.diagnostics["n_participants"] >= 100
    # 87 (blind) + 119 (tag, token hash) + 171 (seed share) + 3211 (1024 × 3-byte words) bytes,
    # 32-byte tags; each share carries the 32-byte contribution token (design §6.8)
    assert costs["upload_bytes"] == 87 + 119 + 171 + (1 + 32 + 16 + 32 + 4 + 1024 * 3 + 48 + 6)
    assert costs["upload_bytes"] == 3588
    assert costs["upload_bytes"] <= 4500
    assert costs["download_bytes_evaluation"] == 97
    for key in ("voprf_eval_us", "tag_count_us", "share_accumulate_us", "reconstruct_us", "user_online_ms"):
        assert costs[key] > 0


def test_bad_input_fails_before_any_work(pop: Population, tmp_path: Path) -> None:
    with pytest.raises(InfeasibleBudgetError):
        run_protocol(pop.embeddings, RoundSpec(params=FreParams(epsilon=1.0, p_sample=0.5), seeds=SeedPlan.from_seed(1)), RunOptions(out_dir=tmp_path))
    assert not (tmp_path / TRANSCRIPT_FILE).exists()
    with pytest.raises(UnknownComponentError, match="known|must be one of"):
        run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), components={"channel": "carrier-pigeon"}))
    bad = np.array(pop.embeddings, copy=True)
    bad[3, 2] = np.nan
    with pytest.raises(InvalidInputError, match="finite"):
        run_protocol(bad, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1)))


def test_batched_answers_that_cannot_fit_are_refused_up_front(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every member of a proof batch receives the whole batch; a layout whose answers exceed what
    the simulation may hold is refused before any work, naming the parameter and the sizes."""
    from fre_protocol.roles import round as runner

    assert runner.batch_response_bytes(1000, 1) == 0
    assert runner.batch_response_bytes(1000, 8) == 1000 * (64 * 8 + 80)
    x = np.zeros((1000, 4))
    monkeypatch.setattr(runner, "MAX_BATCH_RESPONSE_BYTES", 1000 * (64 * 8 + 80) - 1)
    with pytest.raises(InvalidParameterError, match=r"proof_batch_size = 8 with 1000 users .* GiB"):
        run_protocol(x, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), config=ProtocolConfig(proof_batch_size=8)), RunOptions(out_dir=tmp_path))
    assert not (tmp_path / TRANSCRIPT_FILE).exists()


def test_dp_run_records_dummies_and_its_ledger(tmp_path: Path) -> None:
    """ε = 4: S_syn's view holds real and dummy submissions, indistinguishable; the ledger has
    every term and its total equals the target budget."""
    pop = synthetic_population(1, 150, 30, 16, 0.5, RandomSource.seeded(6, "dp"), spread=0.01)
    params = FreParams.paper(4.0)
    result = run_protocol(pop.embeddings, RoundSpec(params=params, seeds=SeedPlan.from_seed(6)), RunOptions(out_dir=tmp_path))
    info, ledger = result.release.diagnostics, result.release.ledger
    dummies = info["dummies"]
    assert dummies["dummy_submissions"] > 0
    assert info["n_submissions"] == info["n_real_submissions"] + dummies["dummy_submissions"]
    names = [t.name for t in ledger.terms]
    assert names[:2] == ["heavy_hitters", "dummy_padding"] and "centroid_ddg" in names
    assert ledger.epsilon == pytest.approx(params.epsilon, rel=1e-9)
    assert ledger.delta <= params.delta * (1 + 1e-9)
    assert ledger.term("dummy_padding").epsilon == pytest.approx(ledger.term("heavy_hitters").epsilon)
    with TranscriptStore.open(result.transcript_path) as store:  # type: ignore[arg-type]
        senders = Counter(e.sender for e in store.entries(view="proxy", phase="phase1_submit"))
        assert senders == {"user": info["n_real_submissions"], "dummy_user": dummies["dummy_submissions"]}
        assert {e.sender for e in store.entries(view="S_syn")} == {"proxy", "S_tag"}
        sizes = {e.size for e in store.entries(view="S_syn", message_type="tag_submission")}
        assert sizes == {1 + 32 + 32}  # real and dummy submissions: type, tag, token hash
    # the audit of a DP run passes, and fails once the ledger total no longer composes its terms
    from fre_protocol.audit import audit_run

    assert audit_run(tmp_path, embeddings=pop.embeddings).passed
    with TranscriptStore.open(result.transcript_path, append=True) as store:  # type: ignore[arg-type]
        doc = store.get_artifact("ledger")
        for term in doc["terms"]:
            if term["name"] == "dummy_padding":
                term["epsilon"] = 3.0  # dummies spending more than the heavy hitters
        store.put_artifact("ledger", doc, replace=True)
    report = audit_run(tmp_path, embeddings=pop.embeddings)
    assert [f.name for f in report.failures] == ["ledger"]


def test_nothing_released(tmp_path: Path) -> None:
    """Only rare points: no tag reaches the floor; an empty release, still audited clean."""
    from fre_protocol.audit import audit_run

    pop = synthetic_population(0, 1, 200, 32, 0.5, RandomSource.seeded(2, "rare"))
    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(2)), RunOptions(out_dir=tmp_path))
    assert len(result.release) == 0 and result.release.centroids.shape == (0, 32)
    assert result.release.diagnostics["n_participants"] == 0
    assert audit_run(tmp_path, embeddings=pop.embeddings).passed


def test_every_share_lost_at_s_tag_means_no_contributors(pop: Population, tmp_path: Path) -> None:
    """S_tag receives none of a tag's shares: its aggregate covers nobody, the tag is withheld."""
    from fre_protocol.messages import Role, SealedEnvelope, decode
    from fre_protocol.roles.base import PHASE2
    from fre_protocol.roles.proxy import NetworkAdversary

    class DropToTag(NetworkAdversary):
        def on_forward(self, phase, items):  # type: ignore[no-untyped-def]
            if phase != PHASE2:
                return items
            keep = []
            for item in items:
                env = decode(item[2])
                assert isinstance(env, SealedEnvelope)
                if env.recipient is not Role.S_TAG:
                    keep.append(item)
            return keep

    result = run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1)), RunOptions(out_dir=tmp_path), adversary=DropToTag())
    info = result.release.info
    assert len(result.release) == 0 and info["n_released_tags"] >= 1
    assert set(info["withheld"].values()) == {"no aggregate share from S_tag"}
    # S_tag held no share, so it had nothing to aggregate and said so (typed, recorded)
    assert set(result.release.diagnostics["refused_by_S_tag"].values()) == {"no contribution to aggregate for this tag"}


def test_the_ddg_clip_is_the_release_parameter(pop: Population, tmp_path: Path) -> None:
    """One C: the DDG encoder clips to ``FreParams.clip``, the accountant's cap uses the same C,
    and a ProtocolConfig that names a different clip is refused before any work."""
    from fre_protocol.roles.ledger import aggregation_term, ddg_config_for, dummy_parameters

    params = FreParams(radius=0.9, k=10, p_sample=0.7, budget_factor=1.5, sensitivity_ratio=4.0, clip=0.8)
    ddg = ddg_config_for(params, 16, ProtocolConfig(), n_modulus=200)
    assert ddg.clip == 0.8
    term = aggregation_term(params, ddg, dummy_parameters(params, ProtocolConfig()))
    assert term.detail["sensitivity"] == pytest.approx(1.6)  # min(u·r, 2C) = 2·0.8
    assert ddg_config_for(params, 16, ProtocolConfig(clip=0.8), n_modulus=200).clip == 0.8
    with pytest.raises(InvalidParameterError, match=r"clip .*2\.0.* FreParams\.clip .*0\.8"):
        ddg_config_for(params, 16, ProtocolConfig(clip=2.0), n_modulus=200)
    with pytest.raises(InvalidParameterError, match="clip"):
        run_protocol(pop.embeddings, RoundSpec(params=INF, seeds=SeedPlan.from_seed(1), config=ProtocolConfig(clip=2.0)), RunOptions(out_dir=tmp_path))
    assert not (tmp_path / TRANSCRIPT_FILE).exists()
