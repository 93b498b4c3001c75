"""``fre-e2t mechanism``: outputs, seed modes, the demo, and one-line errors with exit status 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fre_protocol.cli as cli
from mechanism.fre_e2t import run_mechanism
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource


@pytest.fixture(autouse=True)
def _only_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    # The dispatcher imports every sub-command; this test needs only its own.
    monkeypatch.setattr(cli, "COMMANDS", {"mechanism": "fre_protocol.cli.mechanism_cmd"})


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pop = synthetic_population(3, 120, 100, 16, 0.5, RandomSource.seeded(1, "p"), spread=0.02)
    path = tmp_path_factory.mktemp("data") / "x.npy"
    np.save(path, pop.embeddings)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["mechanism", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_seeded_run_matches_the_library(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    rc, out, err = _run(
        capsys, "--embeddings", str(embeddings), "--threshold", "50", "--seed", "7",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0, err
    assert "released buckets:" in out and "sigma" in out and "seeded" in out
    saved = Release.load(tmp_path)
    direct = run_mechanism(
        np.load(embeddings), FreParams(threshold=50), SeedPlan.from_seed(7), noise=True
    )
    assert saved.ids == direct.ids and len(saved) > 0
    np.testing.assert_array_equal(saved.centroids, direct.centroids)
    assert saved.seeds == SeedPlan.from_seed(7).to_dict()
    assert saved.diagnostics["input"] == str(embeddings) and saved.noise is True


def test_without_seed_the_public_seed_is_fresh_and_recorded(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    seeds = []
    for name in ("a", "b"):
        rc, out, _ = _run(
            capsys, "--embeddings", str(embeddings), "--epsilon", "inf", "--threshold", "60",
            "--out", str(tmp_path / name),
        )  # fmt: skip
        assert rc == 0 and "crypto" in out and "non-DP" in out
        doc = json.loads((tmp_path / name / "release.json").read_text())
        assert doc["seeds"]["rng_mode"] == "crypto" and "test_seed" not in doc["seeds"]
        assert doc["params"]["epsilon"] == "inf" and doc["params"]["p_sample"] == 1.0
        assert doc["ledger"]["sigma"] == 0.0
        seeds.append(doc["seeds"]["public_seed"])
    assert len(seeds[0]) == 64 and seeds[0] != seeds[1]


def test_noise_off_is_recorded_and_announced_with_progress_bars(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    rc, out, _ = _run(
        capsys, "--embeddings", str(embeddings), "--threshold", "50", "--seed", "1",
        "--noise", "off", "--progress", "--out", str(tmp_path),
    )  # fmt: skip
    assert rc == 0 and "noise OFF" in out
    assert Release.load(tmp_path).noise is False


def test_demo_recovers_the_large_planted_clusters(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, err = _run(capsys, "--demo", "--seed", "0", "--out", str(tmp_path))
    assert rc == 0, err
    demo = Release.load(tmp_path).diagnostics["demo"]
    assert set(demo["clusters_of_size_2t"]) <= set(demo["clusters_recovered"])
    assert demo["nearest_rare_distance"] > demo["radius"]
    assert "demo: recovered" in out


def _write(path: Path, content: object) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, content)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"this is not an array", "not a readable .npy"),
        (np.zeros((0, 8), dtype=np.float32), "non-empty"),
        (np.array([[0.1, np.nan], [0.2, 0.3]], dtype=np.float32), "NaN"),
        (np.array([[0.1, np.inf]], dtype=np.float32), "infinite"),
        (np.zeros(8, dtype=np.float32), "2-D"),
        (np.zeros((2, 3, 4), dtype=np.float32), "2-D"),
        (np.array([["a", "b"]]), "real numbers"),
    ],
)
def test_bad_embeddings_give_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: object, message: str
) -> None:
    path = tmp_path / "x.npy"
    if content is not None:
        _write(path, content)
    rc, out, err = _run(capsys, "--embeddings", str(path), "--seed", "1", "--out", str(tmp_path))
    assert rc == 2
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("fre-e2t mechanism: error:")
    assert not (tmp_path / "release.json").exists()


def test_infeasible_budget_and_bad_out_give_status_2(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    rc, _, err = _run(
        capsys, "--embeddings", str(embeddings), "--threshold", "5", "--out", str(tmp_path)
    )
    assert rc == 2 and "budget" in err and "Traceback" not in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = _run(capsys, "--embeddings", str(embeddings), "--out", str(blocker))
    assert rc == 2 and "must be a directory" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--out", "x"],  # neither --embeddings nor --demo
        ["--demo", "--embeddings", "x.npy", "--out", "x"],
        ["--demo", "--seed", "-1", "--out", "x"],
        ["--demo", "--noise", "maybe", "--out", "x"],
    ],
)
def test_bad_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["mechanism", *argv])
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_without_users_every_row_is_its_own_user(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    rc, out, err = _run(capsys, "--embeddings", str(embeddings), "--threshold", "50", "--seed", "7",
                        "--out", str(tmp_path))
    assert rc == 0, err
    assert "each text is treated as a separate user" in out
    assert Release.load(tmp_path).ledger.unit["kind"] == "text"  # type: ignore[index]


def test_users_file_bounds_contributions_like_the_library(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path
) -> None:
    from mechanism.contributions import PrivacyUnit

    n = np.load(embeddings).shape[0]
    users = [f"person-{i % 200}" for i in range(n)]
    (tmp_path / "users.txt").write_text("\n".join(users) + "\n", encoding="utf-8")
    rc, out, err = _run(capsys, "--embeddings", str(embeddings), "--threshold", "50", "--seed", "7",
                        "--user-labels", str(tmp_path / "users.txt"), "--cap", "2", "--out", str(tmp_path / "run"))
    assert rc == 0, err
    saved = Release.load(tmp_path / "run")
    unit = PrivacyUnit(kind="user", cap=2, user_field="user")
    direct = run_mechanism(np.load(embeddings), FreParams(threshold=50), SeedPlan.from_seed(7), users=users, unit=unit)
    assert saved.ids == direct.ids and len(saved) > 0
    np.testing.assert_array_equal(saved.centroids, direct.centroids)
    assert saved.ledger.unit == direct.ledger.unit
    assert saved.ledger.unit["epsilon"] == pytest.approx(2 * saved.ledger.epsilon)  # type: ignore[index]
    assert "per user: epsilon" in out and "200 users, c = 2" in out and "grouped by user field 'user'" in out


def test_cap_auto_records_what_it_spent(capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path) -> None:
    n = np.load(embeddings).shape[0]
    rows = "\n".join(json.dumps({"author": f"a{i % 50}"}) for i in range(n))
    (tmp_path / "users.jsonl").write_text(rows + "\n", encoding="utf-8")
    rc, _, err = _run(capsys, "--embeddings", str(embeddings), "--threshold", "50", "--seed", "7",
                      "--user-labels", str(tmp_path / "users.jsonl"), "--user-field", "author", "--cap", "auto",
                      "--cap-epsilon", "1", "--out", str(tmp_path / "run"))
    assert rc == 0, err
    assert "--cap auto: c = " in err
    unit = Release.load(tmp_path / "run").ledger.unit
    assert unit is not None and unit["user_field"] == "author" and unit["extra_epsilon"] == 1.0
    assert unit["extra_delta"] == 1e-8 and unit["cap"] >= 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cap", "2"], "--cap bounds what one user contributes: it needs --user-field"),
        (["--user-field", "author"], "--user-field names a column of the --user-labels file"),
        (["--user-labels", "USERS_SHORT"], "one label per embedding row"),
        (["--cap-epsilon", "1", "--cap", "2"], "apply to --cap auto only"),
    ],
)
def test_unit_flag_errors(
    capsys: pytest.CaptureFixture[str], embeddings: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    (tmp_path / "short.txt").write_text("a\nb\n", encoding="utf-8")
    argv = [str(tmp_path / "short.txt") if a == "USERS_SHORT" else a for a in extra]
    rc, _, err = _run(capsys, "--embeddings", str(embeddings), "--out", str(tmp_path / "o"), *argv)
    assert rc == 2 and message in err
