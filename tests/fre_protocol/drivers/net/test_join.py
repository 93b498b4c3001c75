"""``fre-e2t join``: one real device among simulated users in a local deployment.

The small seeded population of the deployment tests, less one row: that row is played by
``fre-e2t join`` in its own process (its secrets from the system's CSPRNG, as on a device), the
others by the users' client. The round releases what the all-simulated in-process run releases
(same buckets and counts; centroids equal up to the join user's own rounding coins, noise being
off), the join user's messages are accepted, it learns its own bucket's count, and the audit
passes. Then, on the finished round, ``join`` refuses in one line with its own exit status: the
credential already used, the round closed, a CA that did not sign the servers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from net_rounds import PARAMS, SEED, needs_net, round_settings

needs_net()

from fre_protocol.drivers.net.deploy import (  # noqa: E402
    Deployment,
    DeployOptions,
    credentials_for,
    deploy_local,
    operator_client,
)
from fre_protocol.drivers.net.transcript import audit_deployment  # noqa: E402
from fre_protocol.roles.round import bucket_encodings  # noqa: E402
from mechanism.grid import PublicGrid  # noqa: E402
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


@pytest.mark.parametrize("client", ["python", "typescript"], indirect=True)
def test_a_join_device_among_simulated_users_is_accepted_and_changes_nothing(
    tmp_path: Path, small_population, reference_release, client
) -> None:
    x = np.asarray(small_population.embeddings, dtype=np.float64)
    n = int(x.shape[0])
    # The join user: a row of a bucket that clears the threshold, so it sends shares.
    grid = PublicGrid.derive(SeedPlan.from_seed(SEED), int(x.shape[1]), PARAMS)
    encodings = bucket_encodings(grid, x)
    sizes = Counter(encodings)
    j = next(i for i, e in enumerate(encodings) if sizes[e] >= PARAMS.threshold + 5)
    np.save(tmp_path / "me.npy", x[j : j + 1])
    simulated = np.delete(x, j, axis=0)
    settings = round_settings("join")
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
        elif step == "phase1_submitted":
            _wait_items(dep, "submit", n, procs["join"])  # every tag in, the join user's too, before the close
        elif step == "phase2_sent":
            _wait_items(dep, "phase2", 2 * n, procs["join"])

    try:
        summary = deploy_local(simulated, settings, out, DeployOptions(test_seed=SEED), on_phase=on_phase)
        stdout, stderr = procs["join"].communicate(timeout=120)
    finally:
        if "join" in procs and procs["join"].poll() is None:
            procs["join"].kill()
    assert procs["join"].returncode == 0, (stdout, stderr)
    lines = stdout.splitlines()
    assert [ln.split()[1] for ln in lines if ln.startswith("  sent")] == ["phase1", "submit", "phase2"]
    assert "sent shares" in stdout and lines[-1].endswith(": done")
    own = next(ln for ln in lines if "(for you only)" in ln)
    assert encodings[j].hex() in own and f"released count {sizes[encodings[j]]}" in own
    assert summary["users"]["failures"] == {}

    from mechanism.release import Release

    release = Release.load(out)
    assert release.ids == reference_release.ids
    assert release.counts.tolist() == reference_release.counts.tolist()
    # Noise off: the centroids differ only by the join user's own randomized rounding.
    np.testing.assert_allclose(release.centroids, reference_release.centroids, atol=1e-3)
    report = audit_deployment(out, embeddings=simulated)
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
