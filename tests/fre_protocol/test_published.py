"""What a run publishes is a function of the DP output, public parameters and public randomness.

The privacy review found it the way these tests look for it: two neighbouring populations (one
rare user replaced by a copy of another rare user, both sampled, so the number of distinct sampled
buckets drops by one), the same seed, and a byte comparison of every published file. Before the
fix ``release.json`` carried ``n_sampled_buckets`` (mechanism) and ``n_distinct_tags_seen`` and the
dummy counts (protocol), which differ here although every DP output is identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.audit import audit_run
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.messages import Role
from fre_protocol.published import check_published, release_document_problems
from fre_protocol.roles.base import PHASE2
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, RunOptions
from fre_protocol.roles.proxy import NetworkAdversary
from fre_protocol.roles.round import user_coins
from mechanism.fre_e2t import run_mechanism, sample_coins
from mechanism.grid import PublicGrid
from mechanism.params import FreParams
from mechanism.population import Population, synthetic_population
from mechanism.release import DIAGNOSTICS_FILE, PUBLIC_INFO_KEYS, Release
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource
from transcripts import TranscriptStore

PARAMS = FreParams.paper(8.0)
SEEDS = SeedPlan.from_seed(31)
PUBLISHED = ("release.json", "centroids.npy")


@pytest.fixture(scope="module")
def pop() -> Population:
    return synthetic_population(2, 140, 60, 16, 0.5, RandomSource.seeded(31, "published"), spread=0.01)


def neighbour(pop: Population, coins: np.ndarray) -> np.ndarray:
    """The population with rare user u replaced by a copy of rare user v, where both are sampled
    and sit in different buckets: the distinct sampled buckets drop by one, nothing DP changes."""
    buckets = PublicGrid.derive(SEEDS, pop.dim, PARAMS).bucket_indices(pop.embeddings)
    rare = [i for i in np.flatnonzero(pop.rare_mask & coins)]
    for u in rare:
        for v in rare:
            if u != v and not np.array_equal(buckets[u], buckets[v]):
                x = pop.embeddings.copy()
                x[u] = x[v]
                return x
    raise AssertionError("the population needs two sampled rare users in different buckets")


def _published_bytes(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in PUBLISHED}


def test_mechanism_publishes_the_same_bytes_for_neighbours(pop: Population, tmp_path: Path) -> None:
    x2 = neighbour(pop, sample_coins(SEEDS, pop.n, PARAMS))
    a = run_mechanism(pop.embeddings, PARAMS, SEEDS)
    b = run_mechanism(x2, PARAMS, SEEDS)
    assert len(a) >= 1
    # what differs between the neighbours stays in the operator-private diagnostics
    assert a.diagnostics["n_sampled_buckets"] == b.diagnostics["n_sampled_buckets"] + 1
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    assert _published_bytes(tmp_path / "a") == _published_bytes(tmp_path / "b")
    assert (tmp_path / "a" / DIAGNOSTICS_FILE).read_bytes() != (tmp_path / "b" / DIAGNOSTICS_FILE).read_bytes()
    for run in ("a", "b"):
        assert all(f.passed for f in check_published(tmp_path / run))


def test_protocol_publishes_the_same_bytes_for_neighbours(pop: Population, tmp_path: Path) -> None:
    coins = user_coins(SEEDS, pop.n, PARAMS, 1024)
    x2 = neighbour(pop, coins)
    a = run_protocol(pop.embeddings, RoundSpec(params=PARAMS, seeds=SEEDS), RunOptions(out_dir=tmp_path / "a")).release
    b = run_protocol(x2, RoundSpec(params=PARAMS, seeds=SEEDS), RunOptions(out_dir=tmp_path / "b")).release
    assert len(a) >= 1
    assert a.diagnostics["n_distinct_tags_seen"] == b.diagnostics["n_distinct_tags_seen"] + 1
    assert _published_bytes(tmp_path / "a") == _published_bytes(tmp_path / "b")
    report = audit_run(tmp_path / "a")
    published = [f for f in report.findings if f.name.startswith(("published:", "release:public_fields"))]
    assert len(published) == 2 and all(f.passed for f in published)


def test_release_refuses_private_info_and_the_audit_flags_it(pop: Population, tmp_path: Path) -> None:
    release = run_mechanism(pop.embeddings, PARAMS, SEEDS)
    with pytest.raises(ValueError, match="n_sampled_buckets"):
        Release(
            buckets=release.buckets, centroids=release.centroids, ledger=release.ledger,
            params=release.params, seeds=release.seeds, noise=release.noise,
            info={**release.info, "n_sampled_buckets": 3},
        )
    release.save(tmp_path)
    doc = json.loads((tmp_path / "release.json").read_text())
    assert set(doc["info"]) <= set(PUBLIC_INFO_KEYS) and release_document_problems(doc) == []
    doc["info"]["n_users"] = 420  # a file edited (or written by an old version) by hand
    doc["ledger"]["terms"].append({"name": "private_count", "epsilon": 0, "delta": 0, "source": "", "detail": {}})
    (tmp_path / "release.json").write_text(json.dumps(doc))
    (finding,) = [f for f in check_published(tmp_path) if f.name == "published:release.json"]
    assert not finding.passed
    assert finding.data["problems"] == ["release.json info: n_users", "release.json ledger term: private_count"]


class PhaseTwoObserver(NetworkAdversary):
    """Records what the proxy sees of each connection in phase 2 (it forwards them unchanged)."""

    def __init__(self) -> None:
        self.seen: dict[int, list[int]] = {}

    def on_forward(self, phase: str, items: list[tuple[int, Role, bytes]]) -> list[tuple[int, Role, bytes]]:
        if phase == PHASE2:
            for connection, _, envelope in items:
                self.seen.setdefault(connection, []).append(len(envelope))
        return items


def test_cover_traffic_hides_who_sits_in_a_released_bucket(pop: Population, tmp_path: Path) -> None:
    """The proxy sees each user's phase-2 messages: with cover traffic every user sends two, of
    the same sizes, whether its bucket was released or not; without it, only contributors send.
    The servers discard the covers, so the release is the same either way."""
    inf = FreParams.paper(float("inf"))
    runs = {}
    for cover in (True, False):
        observer = PhaseTwoObserver()
        result = run_protocol(pop.embeddings, RoundSpec(params=inf, seeds=SEEDS, noise=False, config=ProtocolConfig(cover_traffic=cover)), RunOptions(out_dir=tmp_path / str(cover)), adversary=observer)
        runs[cover] = (observer.seen, result.release)
    seen, release = runs[True]
    contributors = sum(release.diagnostics["contributors"].values())
    assert 0 < contributors < pop.n and release.diagnostics["n_cover_users"] == pop.n - contributors
    assert set(seen) == set(range(pop.n))
    assert {tuple(sorted(sizes)) for sizes in seen.values()} == {tuple(sorted(seen[0]))}
    assert len(seen[0]) == 2
    plain_seen, plain = runs[False]
    assert len(plain_seen) == contributors and plain.info["cover_traffic"] is False
    assert plain.ids == release.ids and np.array_equal(plain.centroids, release.centroids)
    # the servers opened the covers and kept nothing of them
    with TranscriptStore.open(tmp_path / "True" / "transcript.sqlite") as store:
        for view in ("S_tag", "S_syn"):
            covers = list(store.entries(view=view, message_type="cover_share"))
            assert len(covers) == pop.n - contributors and {e.status for e in covers} == {"accepted"}


def test_synthetic_lines_may_carry_the_retrieval_seed_and_nothing_private(tmp_path: Path) -> None:
    """Guided inversion's seed (a public-pool text chosen by the DP centroid) is published beside
    the result; any other field of a synthetic line is flagged."""
    line = {"text": "t", "bucket_id": "ab", "bucket_count": 70, "centroid_index": 0, "kind": "inversion",
            "rank": 0, "source": None, "distance_to_centroid": 0.3, "seed": "a pool text", "seed_distance": 0.4}
    (tmp_path / "synthetic.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    (finding,) = check_published(tmp_path)
    assert finding.passed
    (tmp_path / "synthetic.jsonl").write_text(json.dumps({**line, "nearest_private": "x"}) + "\n", encoding="utf-8")
    (finding,) = check_published(tmp_path)
    assert not finding.passed and finding.data["problems"] == ["synthetic.jsonl: nearest_private"]
