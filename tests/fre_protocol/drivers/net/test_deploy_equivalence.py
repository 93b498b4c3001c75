"""A local deployment against the in-process paths (issue acceptance).

Seeded, noise off: ``deploy_local`` publishes exactly what ``run_protocol`` publishes (same
arithmetic, bit for bit) and, through S_tag's tag map, the mechanism's buckets with its counts
and centroids within the DDG quantization bound. Each party's transcript store holds only its
own view, and only seeded runs keep (flagged) secrets. A crypto-mode round (fresh keys, ids
unknowable in advance) still releases the same counts and, noise off, the same centroids up to
quantization. Seeded with noise, the deployment releases the in-process driver's buckets, counts,
centroids, ledger and diagnostics bit for bit: the conformance scenarios
(tests/fre_protocol/drivers/test_conformance.py, its ``net`` driver) check that.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path

import numpy as np
import pytest
from net_rounds import PARAMS, SEED, assert_same_release, needs_net, round_settings

from fre_protocol.components import build_components
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.drivers.net.deploy import DeployOptions, deploy_local, stores_of
from fre_protocol.drivers.net.transcript import PARTY_VIEWS, audit_deployment
from fre_protocol.messages import tag_of
from fre_protocol.roles.config import RoundSpec
from fre_protocol.roles.round import tagging_key
from mechanism.fre_e2t import run_mechanism
from mechanism.population import Population
from mechanism.release import Release
from mechanism.run_files import DEPLOYMENT_FILE, METRICS_DIR
from mechanism.seeds import SeedPlan
from primitives.ddg import DDGConfig, DDGEncoder
from transcripts import TranscriptStore

needs_net()


def _tag_ids(mech: Release, seeds: SeedPlan) -> list[str]:
    """The mechanism's bucket ids as the protocol's tags (VOPRF under S_tag's seeded key)."""
    suite = build_components().suite
    sk, _ = tagging_key(seeds, suite)
    return [tag_of(suite.evaluate(sk, bytes.fromhex(bucket_id))).hex() for bucket_id in mech.ids]


def _check_stores(run: Path, *, seeded: bool) -> None:
    stores = stores_of(run)
    assert sorted(stores) == sorted(PARTY_VIEWS)
    for party, path in stores.items():
        with TranscriptStore.open(path) as store:
            assert store.views() == list(PARTY_VIEWS[party]), party
            assert len(store) > 0, party
            secrets = sorted(a.name for a in store.artifacts() if a.secret)
            named = sorted(a.name for a in store.artifacts() if a.name.startswith("secrets/"))
            assert secrets == named, party  # every secret flagged, nothing else
            if not seeded or party in ("proxy", "users"):
                assert secrets == [], party
            assert "test_seed" not in store.header.extra.get("seeds", {}), party
    if seeded:  # the servers keep their keys for replaying a seeded run, flagged secret
        with TranscriptStore.open(stores["S_tag"]) as store:
            assert {a.name for a in store.artifacts() if a.secret} == {"secrets/voprf_sk", "secrets/S_tag_box_sk"}


def _check_private_modes(run: Path) -> None:
    """A deploy-local run directory is the operator's alone (transcripts, metrics, the private
    summaries, the configurations with the test seed, logs, keys): directories 0700, files 0600."""
    loose = []
    for path in [run, *run.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            loose.append((str(path.relative_to(run)), oct(mode)))
    assert loose == [], loose[:12]


@pytest.mark.fast  # the services driver's one equivalence test in the fast tier
def test_seeded_noiseless_deployment_releases_what_the_runner_and_mechanism_release(
    tmp_path: Path, small_population: Population, reference_release: Release
) -> None:
    x = small_population.embeddings
    summary = deploy_local(x, round_settings("equivalence"), tmp_path, DeployOptions(test_seed=SEED))
    got = Release.load(tmp_path)
    assert summary["users"]["failures"] == {}
    assert summary["users"]["status"] == {"ok": len(x)}

    assert_same_release(got, reference_release)
    assert got.diagnostics["n_submissions"] == len(x)  # ε = ∞: no sampling, no dummies
    assert got.diagnostics["contributors"] == dict(zip(got.ids, got.counts.tolist(), strict=True))
    assert got.info["withheld"] == {}
    assert dict(got.info) == dict(reference_release.info)  # the same public info, field for field

    seeds = SeedPlan.from_seed(SEED)
    mech = run_mechanism(x, PARAMS, seeds, noise=False)
    assert len(mech) == 3
    assert dict(zip(_tag_ids(mech, seeds), mech.counts.tolist(), strict=True)) == dict(
        zip(got.ids, got.counts.tolist(), strict=True)
    )
    encoder = DDGEncoder(DDGConfig.from_dict(got.info["ddg"]))
    mech_by_tag = dict(zip(_tag_ids(mech, seeds), mech.centroids, strict=True))
    for tag, centroid, count in zip(got.ids, got.centroids, got.counts.tolist(), strict=True):
        err = float(np.linalg.norm(centroid - mech_by_tag[tag]))
        assert err <= encoder.quantization_bound(count) / count + 1e-9, tag[:8]
    _check_stores(tmp_path, seeded=True)
    # The audit passes on the set of stores (each its own view, then the release recomputed
    # from S_syn's store), and the embeddings appear in no server or proxy view.
    # What counts users or requests is labelled operator-private.
    deployment = json.loads((tmp_path / DEPLOYMENT_FILE).read_text())
    assert deployment["label"].startswith("OPERATOR-PRIVATE") and deployment["n_users"] == len(x)
    for prom in (tmp_path / METRICS_DIR).glob("*.prom"):
        assert prom.read_text().startswith("# OPERATOR-PRIVATE"), prom.name
    report = audit_deployment(tmp_path, embeddings=x)
    assert report.passed, [f.name for f in report.findings if not f.passed]
    assert {f.name for f in report.findings} >= {"deployment:every_party_store", "release:centroids", "no_forbidden:raw_embedding"}


def test_crypto_mode_deployment_keeps_no_secret_and_releases_the_same_buckets(
    tmp_path: Path, small_population: Population, reference_release: Release
) -> None:
    x = small_population.embeddings
    deploy_local(x, round_settings("crypto", rng_mode="crypto"), tmp_path)
    got = Release.load(tmp_path)
    # Fresh keys: other tags, but the same buckets, so the same counts and (noise off) centroids
    # up to the DDG quantization of the users' own randomized rounding.
    assert sorted(got.counts.tolist()) == sorted(reference_release.counts.tolist())
    assert set(got.ids).isdisjoint(reference_release.ids)
    encoder = DDGEncoder(DDGConfig.from_dict(got.info["ddg"]))
    for centroid, count in zip(got.centroids, got.counts.tolist(), strict=True):
        distances = [
            float(np.linalg.norm(centroid - c))
            for c, n in zip(reference_release.centroids, reference_release.counts.tolist(), strict=True)
            if n == count
        ]
        assert min(distances) <= 2 * encoder.quantization_bound(count) / count + 1e-9
    assert math.isinf(got.params.epsilon)
    _check_stores(tmp_path, seeded=False)


def test_a_user_unit_deployment_releases_what_the_runner_and_mechanism_release(
    tmp_path: Path, small_population: Population, capsys: pytest.CaptureFixture[str]
) -> None:
    """Several texts per user over the network, from the command line: each device plays its c
    slots with its one credential (c requests of each kind), and the release is the runner's and
    the mechanism's."""
    from fre_protocol import cli
    from mechanism.contributions import PrivacyUnit

    x, labels = small_population.embeddings, small_population.labels
    # Users of two texts: one from cluster 0 and one from cluster 1 (two buckets), or two from
    # cluster 2 (one bucket: one of them counts); the rare rows are users of one text each.
    users = np.empty(len(x), dtype=object)
    for c in (0, 1):
        users[np.flatnonzero(labels == c)] = [f"a{i}" for i in range(np.sum(labels == c))]
    users[np.flatnonzero(labels == 2)] = [f"b{i // 2}" for i in range(np.sum(labels == 2))]
    users[labels < 0] = [f"r{i}" for i in range(np.sum(labels < 0))]
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "authors.txt").write_text("\n".join(users.tolist()) + "\n")
    out = tmp_path / "run"
    assert cli.main([
        "deploy-local", "--embeddings", str(tmp_path / "x.npy"), "--epsilon", "inf", "--threshold", "20",
        "--seed", str(SEED), "--noise", "off", "--window", "64", "--window-seconds", "0.1", "--round-id", "user-level",
        "--user-labels", str(tmp_path / "authors.txt"), "--cap", "2", "--out", str(out),
    ]) == 0
    printed = capsys.readouterr().out
    n_users = len(set(users.tolist()))
    assert f"{n_users} users ({len(x)} texts)" in printed and "c = 2 buckets per user" in printed
    summary = json.loads((out / DEPLOYMENT_FILE).read_text())
    assert summary["users"]["failures"] == {}
    assert sum(summary["users"]["status"].values()) == 2 * n_users  # c slots per device
    got = Release.load(out)
    unit = PrivacyUnit(kind="user", cap=2, user_field="user")
    seeds = SeedPlan.from_seed(SEED)
    runner = run_protocol(x, RoundSpec(params=PARAMS, seeds=seeds, noise=False, unit=unit), users=users).release
    assert_same_release(got, runner)
    mech = run_mechanism(x, PARAMS, seeds, noise=False, users=users, unit=unit)
    assert len(mech) >= 2
    assert dict(zip(_tag_ids(mech, seeds), mech.counts.tolist(), strict=True)) == dict(
        zip(got.ids, got.counts.tolist(), strict=True)
    )
    assert got.ledger.unit is not None and got.ledger.unit["cap"] == 2
    assert "per user" in got.ledger.unit["statement"]
    _check_private_modes(out)
