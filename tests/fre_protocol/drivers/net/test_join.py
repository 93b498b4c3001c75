"""``fre-e2t join``: one real device among simulated users in a local deployment.

The small seeded population of the deployment tests, less one row: that row is played by
``fre-e2t join`` in its own process (its secrets from the system's CSPRNG, as on a device), the
others by the users' client. The round releases what the all-simulated in-process run releases
(same buckets and counts; centroids equal up to the join user's own rounding coins, noise being
off), the join user's messages are accepted, it learns its own bucket's count, and the audit
passes. A DP round (ε = 8, noise on) played the same way, the TypeScript client deriving its
plan with its own accountant: the release is the same seeded round's played in Python by the
other users, but for the join user's own contribution (its coin is its device's). Then, on the
finished round, ``join`` refuses in one line with its own exit status: the
credential already used, the round closed, a CA that did not sign the servers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from net_rounds import PARAMS, SEED, needs_net, population, round_settings

needs_net()

from fre_protocol.drivers.net.deploy import (  # noqa: E402
    Deployment,
    DeployOptions,
    credentials_for,
    deploy_local,
    operator_client,
)
from fre_protocol.drivers.net.round import RoundSettings  # noqa: E402
from fre_protocol.drivers.net.transcript import audit_deployment  # noqa: E402
from fre_protocol.roles.config import ProtocolConfig, RoundSpec, sized_contributors  # noqa: E402
from fre_protocol.roles.ledger import ddg_config_for  # noqa: E402
from fre_protocol.roles.noise_plan import CountSizing  # noqa: E402
from fre_protocol.roles.round import bucket_encodings  # noqa: E402
from mechanism.fre_e2t import release_threshold, sample_coins  # noqa: E402
from mechanism.grid import PublicGrid  # noqa: E402
from mechanism.params import FreParams  # noqa: E402
from mechanism.release import Release  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[4]


def _join(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "fre_protocol.cli", "join", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )


def _items(dep: Deployment) -> dict[str, int]:
    with operator_client(dep) as client:
        return dict(client.get(dep.url("proxy") + "/v1/admin/status").json()["items"])


def _wait_items(dep: Deployment, kind: str, n: int, proc: subprocess.Popen[str], timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while _items(dep).get(kind, 0) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"{kind}: {_items(dep)} after {timeout_s} s"
        time.sleep(0.05)


WEB = ROOT / "clients" / "web"


def _web_join(*args: str) -> subprocess.Popen[str]:
    """The TypeScript client's join (clients/web), its embedding as JSON."""
    converted = list(args)
    at = converted.index("--embedding") + 1
    path = Path(converted[at]).with_suffix(".json")
    path.write_text(json.dumps(np.load(converted[at])[0].tolist()))
    converted[at] = str(path)
    return subprocess.Popen(["node", str(WEB / "dist" / "src" / "join.js"), *converted],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=WEB)


@pytest.fixture
def client(request: pytest.FixtureRequest):  # noqa: ANN201 - a Popen factory
    if request.param == "python":
        return _join
    if shutil.which("node") is None or not (WEB / "node_modules").is_dir():
        pytest.skip("the TypeScript client is not installed (node >= 20.19 and `make setup-web`)")
    subprocess.run(["npm", "run", "build", "--silent"], cwd=WEB, check=True, timeout=180)
    return _web_join


def _wait_own_submission(dep: Deployment, n: int, others: int, proc: subprocess.Popen[str]) -> None:
    """In a DP round the join user submits its tag only if its coin (drawn on its device) says
    so: once every blind request is in and the other users' ``others`` submissions, give it 20 s
    (it submits within milliseconds of S_tag's answer, which came in the first window). A
    submission later than that would be refused after the close (exit 3), failing the test."""
    _wait_items(dep, "phase1", n, proc)
    _wait_items(dep, "submit", others, proc)
    end = time.monotonic() + 20.0
    while _items(dep).get("submit", 0) < others + 1 and time.monotonic() < end:
        time.sleep(0.1)


def _mixed_round(tmp_path: Path, x: np.ndarray, j: int, settings: RoundSettings, client,  # noqa: ANN001
                 *, others_submit: int | None = None) -> tuple[dict, str]:
    """Row ``j`` of ``x`` played by ``client`` in its own process, the others by the users'
    client of a seeded local deployment (in ``tmp_path / "run"``): the summary and its stdout.
    ``others_submit``: how many of the others submit a tag (a DP round's coins); None: all of
    them and the join user (ε = ∞)."""
    n = int(x.shape[0])
    np.save(tmp_path / "me.npy", x[j : j + 1])
    simulated = np.delete(x, j, axis=0)
    out = tmp_path / "run"
    procs: dict[str, subprocess.Popen[str]] = {}

    def on_phase(dep: Deployment, step: str) -> None:
        if step == "started":
            (tmp_path / "credential").write_text(credentials_for(dep, n)[-1] + "\n")  # u{n-1}: not a simulated one's
            procs["join"] = client(
                "--round", dep.url("proxy"), "--ca", str(dep.pki / "ca.pem"), "--credential",
                str(tmp_path / "credential"), "--embedding", str(tmp_path / "me.npy"), "--show-bucket",
                "--deadline", "120",
            )
        elif step == "phase1_submitted" and others_submit is None:
            _wait_items(dep, "submit", n, procs["join"])  # every tag in, the join user's too, before the close
        elif step == "phase1_submitted":
            _wait_own_submission(dep, n, others_submit, procs["join"])
        elif step == "phase2_sent":
            _wait_items(dep, "phase2", 2 * n, procs["join"])

    try:
        summary = deploy_local(simulated, settings, out, DeployOptions(test_seed=SEED), on_phase=on_phase)
        stdout, stderr = procs["join"].communicate(timeout=120)
    finally:
        if "join" in procs and procs["join"].poll() is None:
            procs["join"].kill()
    assert procs["join"].returncode == 0, (stdout, stderr)
    assert summary["users"]["failures"] == {}
    return summary, stdout


@pytest.mark.parametrize("client", ["python", "typescript"], indirect=True)
def test_a_join_device_among_simulated_users_is_accepted_and_changes_nothing(
    tmp_path: Path, small_population, reference_release, client
) -> None:
    x = np.asarray(small_population.embeddings, dtype=np.float64)
    # The join user: a row of a bucket that clears the threshold, so it sends shares.
    grid = PublicGrid.derive(SeedPlan.from_seed(SEED), int(x.shape[1]), PARAMS)
    encodings = bucket_encodings(grid, x)
    sizes = Counter(encodings)
    j = next(i for i, e in enumerate(encodings) if sizes[e] >= PARAMS.threshold + 5)
    simulated = np.delete(x, j, axis=0)
    _, stdout = _mixed_round(tmp_path, x, j, round_settings("join"), client)
    lines = stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("  sent")] == ["phase1", "submit", "phase2"]
    assert "sent shares" in stdout and lines[-1].endswith(": done")
    own = next(ln for ln in lines if "(for you only)" in ln)
    assert encodings[j].hex() in own and f"released count {sizes[encodings[j]]}" in own

    release = Release.load(tmp_path / "run")
    assert release.ids == reference_release.ids
    assert release.counts.tolist() == reference_release.counts.tolist()
    # Noise off: the centroids differ only by the join user's own randomized rounding.
    np.testing.assert_allclose(release.centroids, reference_release.centroids, atol=1e-3)
    report = audit_deployment(tmp_path / "run", embeddings=simulated)
    assert report.passed, [(f.name, f.detail) for f in report.findings if not f.passed]


# A DP round: ε = 8 needs t ≥ 50 for its δ budget (τ = 25, p_s = 0.5); clusters of 60 clear it sampled.
DP_PARAMS = FreParams.paper(8.0, threshold=50)


#: A dropout allowance under which the join user's coin leaves its bucket's m_h as it is (at the
#: default f = 0, m_h = n_h moves with the coin, and with it the other users' σ_int,h).
DP_CONFIG = ProtocolConfig(dropout_allowance=0.1)


@pytest.fixture(scope="module")
def dp_round() -> tuple[np.ndarray, int, Release]:
    """The DP round's population, the join user's row j and the reference: the same seeded round
    played all in Python (in process) by the other users.

    j is the first row whose bucket, without it, is released (the other users' coins are the
    seeded ones of their rows) with a count c that is not the largest, and whose m_h is the same
    at c and c + 1: whatever the join user's coin, the ring (sized by the largest count) and the
    σ_int,h of every other user are the reference's."""
    from fre_protocol.drivers.inprocess import run_protocol

    x = np.asarray(population(size=60, rare=8).embeddings, dtype=np.float64)
    seeds = SeedPlan.from_seed(SEED)
    encodings = bucket_encodings(PublicGrid.derive(seeds, int(x.shape[1]), DP_PARAMS), x)
    coins = sample_coins(seeds, len(x) - 1, DP_PARAMS)
    floor = release_threshold(DP_PARAMS)
    cfg = DP_CONFIG

    def fits(j: int) -> bool:
        others = [e for i, e in enumerate(encodings) if i != j]
        counts = Counter(e for e, coin in zip(others, coins, strict=True) if coin)
        c = counts[encodings[j]]
        largest = max(v for e, v in counts.items() if e != encodings[j])
        m = [sized_contributors(k, floor, cfg.noise_calibration, cfg.dropout_allowance) for k in (c, c + 1)]
        return floor <= c < largest and m[0] == m[1]

    j = next(i for i in range(len(x)) if fits(i))
    spec = RoundSpec(params=DP_PARAMS, seeds=seeds, noise=True, config=cfg)
    return x, j, run_protocol(np.delete(x, j, axis=0), spec).release


@pytest.mark.parametrize("client", ["python", "typescript"], indirect=True)
def test_a_join_device_in_a_dp_round_with_noise_adds_its_own_contribution_only(
    tmp_path: Path, dp_round: tuple[np.ndarray, int, Release], client
) -> None:
    """The client derives the DP round's plan itself (the TypeScript one with its own accountant).

    Buckets and counts: the users' coins, noise and tags are seeded, the servers' randomness too,
    so the release is the reference's except for the join user's own coin, drawn on the device
    from the system's CSPRNG: not sampled (no submit), it sends cover and the release is the
    reference's bit for bit; sampled, its bucket counts one more and its centroid moves by its
    contribution, every other bucket (same count, same ring, same seeded noise) bit for bit."""
    x, j, ref = dp_round
    simulated = np.delete(x, j, axis=0)
    settings = round_settings("join-dp", params=DP_PARAMS, noise=True, protocol=DP_CONFIG)
    # The other users' coins are the seeded ones of their rows (entry i is user i's).
    others = int(sample_coins(SeedPlan.from_seed(SEED), len(simulated), DP_PARAMS).sum())
    _, stdout = _mixed_round(tmp_path, x, j, settings, client, others_submit=others)
    lines = stdout.splitlines()
    steps = [ln.split()[1] for ln in lines if ln.startswith("  sent")]
    sampled = "submit" in steps
    assert steps == ["phase1", "submit", "phase2"] if sampled else ["phase1", "phase2"]
    own = next(ln for ln in lines if "(for you only)" in ln)
    tag = re.search(r"tag ([0-9a-f]{64})", own)
    assert tag is not None, own
    at = ref.ids.index(tag.group(1))  # its bucket is released without it
    others = [i for i in range(len(ref)) if i != at]
    count = int(ref.counts[at])
    assert count < max(int(ref.counts[i]) for i in others)
    expected = ref.counts.tolist()
    expected[at] += int(sampled)
    # Sampled, it reads its bucket's count (its own included) and sends shares; else cover (the
    # TypeScript client then reads no count: it has no submission to look up).
    assert (f"released count {expected[at]}: sent shares" if sampled else "sent cover messages") in own

    release = Release.load(tmp_path / "run")
    assert release.ids == ref.ids
    assert release.counts.tolist() == expected
    np.testing.assert_array_equal(release.centroids[others], ref.centroids[others])
    if not sampled:
        np.testing.assert_array_equal(release.centroids[at], ref.centroids[at])
    else:
        # Its bucket's m_h (and so every other member's σ_int,h) is the same at c and c + 1, so
        # the others' seeded rounding and noise are the reference's draws: the sums differ by the
        # join user's own encoding, its clipped row plus its rounding (< γ per rotated coordinate,
        # so < γ·√d' per coordinate back) and its discrete Gaussian noise (γ·σ_int,h per
        # coordinate), within 8 standard deviations but with probability ~1e-15. And it did add
        # that noise: all 8 coordinates within 0.05 standard deviations has probability ~1e-11.
        config = ddg_config_for(DP_PARAMS, int(x.shape[1]), settings.protocol, n_modulus=max(expected))
        sizing = CountSizing(params=DP_PARAMS, cfg=settings.protocol, ddg_config=config)
        assert sizing.users(count) == sizing.users(count + 1)
        row = x[j] * min(1.0, DP_PARAMS.clip / float(np.linalg.norm(x[j])))
        added = release.centroids[at] * (count + 1) - ref.centroids[at] * count - row
        bound = 8 * config.gamma * sizing.sigma(count + 1) + config.gamma * np.sqrt(config.padded_dim) + 1e-9
        assert float(np.max(np.abs(added))) <= bound
        assert float(np.max(np.abs(added))) >= 0.05 * config.gamma * sizing.sigma(count + 1)
    report = audit_deployment(tmp_path / "run", embeddings=simulated)
    assert report.passed, [(f.name, f.detail) for f in report.findings if not f.passed]


def test_join_says_in_one_line_when_its_credential_is_used_or_the_round_closed(tmp_path: Path, live_deployment) -> None:
    from fre_protocol.drivers.net.deploy import close_phase

    dep = live_deployment(round_settings("join-refusals"))
    ca = str(dep.pki / "ca.pem")
    first, second = credentials_for(dep, 2)
    for name, token in (("first", first), ("second", second)):
        (tmp_path / name).write_text(token)
    x = np.zeros((1, round_settings("d").dim))
    x[0, 0] = 1.0
    np.save(tmp_path / "me.npy", x)
    common = ["--round", dep.url("proxy"), "--ca", ca, "--embedding", str(tmp_path / "me.npy"), "--deadline", "60"]
    alone = _join(*common, "--credential", str(tmp_path / "first"), "--show-bucket")
    try:
        _wait_items(dep, "submit", 1, alone)
        again = _join(*common, "--credential", str(tmp_path / "first"))
        out, err = again.communicate(timeout=120)
        assert again.returncode == 4, (out, err)
        assert err.strip().count("\n") == 0 and "credential refused" in err
        close_phase(dep, 1)
        out, err = alone.communicate(timeout=120)
    finally:
        if alone.poll() is None:
            alone.kill()
    assert alone.returncode == 0, (out, err)
    assert "released count None: sent cover messages" in out  # alone, under the threshold
    late = _join(*common, "--credential", str(tmp_path / "second"))
    out, err = late.communicate(timeout=120)
    assert late.returncode == 3, (out, err)
    assert err.strip().count("\n") == 0 and "the round is closed" in err



@pytest.mark.text
def test_join_embeds_its_text_with_the_rounds_embedder_and_plays_its_part(tmp_path: Path, live_deployment) -> None:
    pytest.importorskip("sentence_transformers", reason="join --text needs the text extra")
    from fre_protocol.drivers.net.deploy import close_phase
    from fre_protocol.drivers.net.round import EmbedderSpec
    from fre_protocol.text.embedder import DEFAULT_MODEL_ID

    # The round names the default embedder (MiniLM, 384-d): join embeds with it, no --embedder given.
    embedder = EmbedderSpec(name=DEFAULT_MODEL_ID, dim=384, normalize=True)
    dep = live_deployment(dataclasses.replace(round_settings("join-text"), dim=384, embedder=embedder))
    (tmp_path / "credential").write_text(credentials_for(dep, 1)[0])
    proc = _join("--round", dep.url("proxy"), "--ca", str(dep.pki / "ca.pem"), "--credential",
                 str(tmp_path / "credential"), "--text", "I have had a fever and a cough for three days",
                 "--deadline", "120")
    try:
        _wait_items(dep, "submit", 1, proc, timeout_s=180)
        close_phase(dep, 1)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "d = 384" in out and "bucket" not in out  # no --show-bucket: nothing of its bucket printed
    assert f"  embedder {DEFAULT_MODEL_ID} (d = 384, unit norm) (named by the round)" in out.splitlines()
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("  sent")] == ["phase1", "submit", "phase2"]
