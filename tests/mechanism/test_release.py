"""Release objects: validation, the JSON layout, and save/load round trips."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mechanism.accounting import calibrate_noise
from mechanism.fre_e2t import run_mechanism
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.release import Release, ReleasedBucket
from mechanism.seeds import SeedPlan
from primitives.errors import InvalidInputError, InvalidParameterError
from primitives.randomness import RandomSource


@pytest.fixture(scope="module")
def release() -> Release:
    pop = synthetic_population(4, 250, 200, 24, 0.5, RandomSource.seeded(1, "p"), spread=0.02)
    return run_mechanism(pop.embeddings, FreParams.paper(8), SeedPlan.from_seed(3))


def _make(ids: list[str], d: int = 3, **overrides: object) -> Release:
    params = FreParams.paper(8)
    fields: dict[str, object] = {
        "buckets": tuple(ReleasedBucket(id=i, count=60) for i in ids),
        "centroids": np.zeros((len(ids), d)),
        "ledger": calibrate_noise(params),
        "params": params,
        "seeds": SeedPlan.from_seed(1).to_dict(),
        "noise": True,
        "info": {"path": "test"},
    }
    fields.update(overrides)
    return Release(**fields)  # type: ignore[arg-type]


def test_round_trip(tmp_path: Path, release: Release) -> None:
    assert len(release) >= 2
    release.save(tmp_path / "run")
    loaded = Release.load(tmp_path / "run")
    assert loaded.buckets == release.buckets
    np.testing.assert_array_equal(loaded.centroids, release.centroids)  # bit-exact
    assert loaded.params == release.params
    assert loaded.ledger.to_dict() == release.ledger.to_dict()
    assert loaded.seeds == release.seeds and loaded.noise == release.noise
    assert loaded.to_json() == release.to_json()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "centroids.npy", "diagnostics.private.json", "release.json"
    ]
    assert loaded.diagnostics == release.diagnostics


def test_json_layout(tmp_path: Path, release: Release) -> None:
    release.save(tmp_path)
    doc = json.loads((tmp_path / "release.json").read_text())
    assert list(doc)[:6] == ["buckets", "ledger", "params", "seeds", "noise", "info"]
    assert doc["buckets"] == [{"id": b.id, "count": b.count} for b in release.buckets]
    assert doc["params"]["epsilon"] == 8.0 and doc["seeds"]["rng_mode"] == "seeded"
    assert doc["ledger"]["sigma"] == pytest.approx(release.ledger.sigma)
    centroids = np.load(tmp_path / "centroids.npy")
    assert centroids.shape == (len(release), 24) and centroids.dtype == np.float64
    assert doc["centroids"]["shape"] == [len(release), 24]


def test_non_dp_release_writes_inf_as_a_string(tmp_path: Path) -> None:
    params = FreParams.paper(math.inf)
    rel = _make(["00", "01"], params=params, ledger=calibrate_noise(params))
    rel.save(tmp_path)
    text = (tmp_path / "release.json").read_text()
    assert "Infinity" not in text and json.loads(text)["params"]["epsilon"] == "inf"
    assert Release.load(tmp_path).params == params


def test_empty_release_round_trips(tmp_path: Path) -> None:
    rel = _make([], d=5)
    rel.save(tmp_path)
    loaded = Release.load(tmp_path)
    assert len(loaded) == 0 and loaded.centroids.shape == (0, 5)


def test_overwrite_leaves_no_temporary_files(tmp_path: Path) -> None:
    _make(["00"]).save(tmp_path)
    _make(["00", "0a"]).save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["centroids.npy", "release.json"]
    assert Release.load(tmp_path).ids == ["00", "0a"]


def test_mixed_or_damaged_directories_are_detected(tmp_path: Path) -> None:
    _make(["00", "01"]).save(tmp_path / "a")
    _make(["00", "01"], centroids=np.ones((2, 3))).save(tmp_path / "b")
    # centroids from another run with the same shape
    (tmp_path / "a" / "centroids.npy").write_bytes((tmp_path / "b" / "centroids.npy").read_bytes())
    with pytest.raises(InvalidInputError, match="does not match"):
        Release.load(tmp_path / "a")
    (tmp_path / "b" / "release.json").write_text("{not json")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        Release.load(tmp_path / "b")
    with pytest.raises(InvalidInputError, match="does not exist"):
        Release.load(tmp_path / "missing")
    _make(["00"]).save(tmp_path / "c")
    doc = json.loads((tmp_path / "c" / "release.json").read_text())
    del doc["ledger"]
    (tmp_path / "c" / "release.json").write_text(json.dumps(doc))
    with pytest.raises(InvalidInputError, match="missing the keys"):
        Release.load(tmp_path / "c")


def test_save_refuses_a_file_as_directory(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(InvalidParameterError, match="must be a directory"):
        _make(["00"]).save(target)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ids": ["01", "00"]}, "sorted by id"),
        ({"ids": ["00", "00"]}, "sorted by id"),
        ({"ids": ["0G"]}, "lower-case hex"),
        ({"ids": ["ABCD"]}, "lower-case hex"),
        ({"ids": ["abc"]}, "whole bytes"),
        ({"ids": ["00"], "centroids": np.zeros((2, 3))}, "one row per bucket"),
        ({"ids": ["00"], "centroids": np.full((1, 3), np.nan)}, "finite"),
        ({"ids": ["00"], "noise": 1}, "noise must be a bool"),
    ],
)
def test_invalid_releases_are_rejected(kwargs: dict[str, object], message: str) -> None:
    ids = kwargs.pop("ids")
    with pytest.raises(InvalidParameterError, match=message):
        _make(ids, **kwargs)  # type: ignore[arg-type]


def test_bucket_counts_must_be_positive_integers() -> None:
    with pytest.raises(InvalidParameterError, match=">= 1"):
        ReleasedBucket(id="00", count=0)
    with pytest.raises(InvalidParameterError, match="integer"):
        ReleasedBucket(id="00", count=2.5)  # type: ignore[arg-type]
    assert ReleasedBucket(id="00", count=np.int64(3)).count == 3


def test_release_is_immutable(release: Release) -> None:
    with pytest.raises(ValueError):
        release.centroids[0, 0] = 1.0
    with pytest.raises(AttributeError):
        release.noise = False  # type: ignore[misc]
