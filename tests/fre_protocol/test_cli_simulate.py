"""``fre-e2t simulate`` (and ``costs``): the mechanism's output contract plus the transcript."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fre_protocol.cli import main
from fre_protocol.drivers.inprocess import run_protocol
from fre_protocol.roles.config import RoundSpec
from mechanism.params import FreParams
from mechanism.population import synthetic_population
from mechanism.release import Release
from mechanism.seeds import SeedPlan
from primitives.randomness import RandomSource
from transcripts import TranscriptStore


@pytest.fixture(scope="module")
def x_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pop = synthetic_population(2, 125, 30, 32, 0.5, RandomSource.seeded(25, "audit"), spread=0.005)
    path = tmp_path_factory.mktemp("data") / "x.npy"
    np.save(path, pop.embeddings)
    return path


def test_simulate_writes_the_release_contract_and_transcript(x_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(
        ["simulate", "--embeddings", str(x_path), "--epsilon", "inf", "--seed", "31", "--out", str(out),
         "--noise", "off", "--jsonl"]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "released" in printed and "noise OFF" in printed
    for name in ("centroids.npy", "release.json", "transcript.sqlite", "transcript.jsonl"):
        assert (out / name).is_file(), name
    release = Release.load(out)
    expected = run_protocol(np.load(x_path), RoundSpec(params=FreParams.paper(math.inf), seeds=SeedPlan.from_seed(31), noise=False)).release
    assert release.ids == expected.ids
    assert np.array_equal(release.centroids, expected.centroids)
    # the same release.json contract as `fre-e2t mechanism`
    mech = tmp_path / "mech"
    assert main(["mechanism", "--embeddings", str(x_path), "--epsilon", "inf", "--seed", "31", "--out", str(mech), "--noise", "off"]) == 0
    proto_doc = json.loads((out / "release.json").read_text())
    mech_doc = json.loads((mech / "release.json").read_text())
    assert set(proto_doc) == set(mech_doc)
    assert set(proto_doc["ledger"]) >= {"epsilon", "delta", "tau", "eps_fre", "delta_fre", "sigma", "terms"}
    # the same buckets (ids differ: bucket encoding vs VOPRF tag) with the same counts
    assert sorted(b["count"] for b in proto_doc["buckets"]) == sorted(b["count"] for b in mech_doc["buckets"])
    with TranscriptStore.open(out / "transcript.sqlite") as store:
        assert store.header.rng_mode == "seeded"
        n_entries = len(store)
    lines = (out / "transcript.jsonl").read_text().splitlines()
    assert len(lines) >= n_entries + 1  # the header line, then one line per entry


def test_simulate_dropout_and_options(x_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(
        ["simulate", "--embeddings", str(x_path), "--epsilon", "inf", "--seed", "5", "--out", str(out),
         "--dropout", "0.2", "--proof-batch", "16", "--modulus-bits", "30", "--workers", "1", "--no-progress"]
    )
    assert code == 0
    release = Release.load(out)
    info = release.info
    assert release.diagnostics["n_dropped_out"] > 0 and info["proof_batch_size"] == 16
    assert info["ddg"]["modulus_bits"] == 30


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--embeddings", "/nonexistent/x.npy", "--out", "OUT"],
        ["simulate", "--embeddings", "X", "--epsilon", "1", "--out", "OUT"],  # infeasible budget
    ],
)
def test_simulate_errors_are_one_line(argv: list[str], x_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(x_path) if a == "X" else str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fre-e2t simulate: error:") and "Traceback" not in err


def test_simulate_rejects_bad_flags(x_path: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--embeddings", str(x_path), "--out", str(tmp_path), "--dropout", "1.5"])


def test_costs_command_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["costs", "--num-users", "400", "--dim", "32", "--epsilon", "inf", "--batched-run", "8", "--out", str(tmp_path)]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "VOPRF evaluation" in table and "89.5" in table and "≤ 45" in table
    costs = json.loads((tmp_path / "costs.json").read_text())
    assert costs["n_users"] == 400 and costs["batched_run"]["proof_batch_size"] == 8
    assert (tmp_path / "costs.md").read_text().startswith("Per-operation costs")
    assert "ours, one proof per 8" in table and "user offline preparation" in table
    single, batched = costs, costs["batched_run"]
    assert single["proof_batch_size"] == 1
    # The same population and seed: the two layouts release the same buckets.
    assert single["released_buckets"] == batched["released_buckets"]
    # Per-user proofs: a user downloads one element and a proof; a batch: every element of it.
    assert single["download_bytes_evaluation"] < batched["download_bytes_evaluation"]
    for key in ("user_online_ms", "user_offline_ms", "user_total_ms"):
        assert single[key] > 0
    assert single["user_total_ms"] == pytest.approx(single["user_online_ms"] + single["user_offline_ms"])
    # Cover traffic (default) beside a run without it: same release; every user outside the
    # released buckets uploads two covers as long as a participant's shares; more to open.
    plain = costs["no_cover_run"]
    assert "no cover traffic" in table and plain["released_buckets"] == single["released_buckets"]
    assert single["n_cover_users"] == 400 - single["n_participants"] > 0 and plain["n_cover_users"] == 0
    assert single["cover_upload_kB"] == pytest.approx(single["upload_bytes_phase2"] / 1000)
    assert single["messages_opened"] == plain["messages_opened"] + 2 * single["n_cover_users"]


def test_simulate_groups_rows_by_user_and_states_the_unit(x_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--user-labels FILE --cap C: the runner's user-level release, and a summary saying whom it
    protects; the streaming driver releases the same; --cap without --user-labels is refused."""
    from mechanism.contributions import PrivacyUnit

    x = np.load(x_path)
    labels = [f"author-{i // 3}" for i in range(x.shape[0])]
    users = tmp_path / "authors.txt"
    users.write_text("\n".join(labels) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["simulate", "--embeddings", str(x_path), "--epsilon", "inf", "--threshold", "20", "--seed", "5",
            "--noise", "off", "--user-labels", str(users)]
    assert main([*argv, "--cap", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{x.shape[0]} texts of {-(-x.shape[0] // 3)} users (c = 2), " in printed and "runner driver" in printed
    assert "unit of privacy: texts grouped by user field 'user'; each user contributes to at most c=2" in printed
    unit = PrivacyUnit(kind="user", cap=2, user_field="user")
    params = FreParams.paper(math.inf, threshold=20)
    expected = run_protocol(x, RoundSpec(params=params, seeds=SeedPlan.from_seed(5), noise=False, unit=unit), users=np.array(labels)).release
    release = Release.load(out)
    assert len(release) >= 1 and release.ids == expected.ids and np.array_equal(release.centroids, expected.centroids)
    assert json.loads((out / "release.json").read_text())["ledger"]["unit"]["cap"] == 2

    no_users = [a for a in argv if a not in ("--user-labels", str(users))]
    assert main([*no_users, "--cap", "2", "--out", str(tmp_path / "no-users")]) == 2
    assert "--cap bounds what one user contributes" in capsys.readouterr().err
    assert main([*argv, "--cap", "2", "--driver", "streaming", "--out", str(tmp_path / "streamed")]) == 0
    streamed = Release.load(tmp_path / "streamed")
    assert streamed.ids == release.ids and streamed.counts.tolist() == release.counts.tolist()


def test_simulate_passes_the_dishonest_fraction_to_the_run(x_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--dishonest-fraction reaches ProtocolConfig: the transcript header's configuration and the
    release's ledger state it."""
    out = tmp_path / "run"
    code = main(["simulate", "--embeddings", str(x_path), "--epsilon", "8", "--seed", "31", "--out", str(out),
                 "--dishonest-fraction", "0.2"])
    assert code == 0
    capsys.readouterr()
    release = Release.load(out)
    assert release.ledger.term("dishonest_contributors").detail["dishonest_fraction"] == 0.2
    with TranscriptStore.open(out / "transcript.sqlite") as store:
        assert store.header.extra["config"]["dishonest_fraction"] == 0.2
    # its ledger term is public (parameters only): the audit passes the run
    assert main(["audit", str(out)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--embeddings", str(x_path), "--out", str(tmp_path / "bad"), "--dishonest-fraction", "1.5"])
    assert exc.value.code == 2 and "expected a fraction in [0, 1)" in capsys.readouterr().err
