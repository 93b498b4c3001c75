"""A mixed round: users on the join page in headless Chromium beside the Python users' client.

The small seeded population of the deployment tests; ``deploy-local --web``'s deployment (the
proxy serves the page); some users, chosen across the clusters and the rare points, play the
round on the page, each in its own page of one Chromium, given its credential, the CA (a chosen
file) and its embedding through the page's inputs; the users' client plays the others. Noise off
(ε = ∞) and seeded: the round releases the all-simulated in-process run's buckets and counts, and
its centroids within 10⁻³ (the pages' randomized rounding is their own), every page reports what
it sent, and the audit of the deployment passes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from browser_pages import PAGE_TIMEOUT_S, WEB_ROOT, needs_browser, results, start_pages
from net_rounds import SEED, needs_net, round_settings

needs_net()

from fre_protocol.drivers.net.deploy import (  # noqa: E402
    Deployment,
    DeployOptions,
    credentials_for,
    deploy_local,
    proxy_items,
)
from fre_protocol.drivers.net.transcript import audit_deployment  # noqa: E402
from mechanism.fre_e2t import sample_coins  # noqa: E402
from mechanism.seeds import SeedPlan  # noqa: E402


def _test_join() -> ModuleType:
    """test_join.py, for its DP round (the population, the join user's row, the in-process
    reference) and its wait for the device's own submission: the page plays that user here."""
    spec = importlib.util.spec_from_file_location("test_join_for_pages", Path(__file__).with_name("test_join.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_JOIN = _test_join()
DP_PARAMS, DP_CONFIG, dp_round = _JOIN.DP_PARAMS, _JOIN.DP_CONFIG, _JOIN.dp_round

pytestmark = pytest.mark.integration

#: How many of the 130 users play on a page (every ⌊130 / k⌋-th row): 16 in the suite, enough
#: for pages from the released clusters and the rare points to play beside each other (the
#: driver loads 8 at once, so two waves); half the round (65) is the ``heavy`` run, about 130 s
#: alone on the 2-core AVX2 machine and 230 s beside the other test worker. FRE_BROWSER_USERS=N
#: plays N in the suite's run instead.
BROWSER_USERS = int(os.environ.get("FRE_BROWSER_USERS", "16"))
HALF_THE_ROUND = 65


def _wait(dep: Deployment, kind: str, n: int, pages: object, timeout_s: float = PAGE_TIMEOUT_S) -> None:
    end = time.monotonic() + timeout_s
    while proxy_items(dep).get(kind, 0) < n:
        assert pages.poll() is None, "the page driver ended early"  # type: ignore[attr-defined]
        assert time.monotonic() < end, f"{kind}: {proxy_items(dep)} after {timeout_s} s"
        time.sleep(0.1)


@pytest.mark.parametrize("browser_users", [BROWSER_USERS, pytest.param(HALF_THE_ROUND, marks=pytest.mark.heavy)],
                         ids=["suite", "half-the-round"])
def test_users_on_the_page_in_chromium_and_simulated_users_release_the_same_round(
    tmp_path: Path, small_population, reference_release, browser_users: int
) -> None:
    needs_browser()
    x = np.asarray(small_population.embeddings, dtype=np.float64)
    n = int(x.shape[0])
    on_page = np.linspace(0, n - 1, browser_users).round().astype(int)
    simulated = np.delete(x, on_page, axis=0)
    m = int(simulated.shape[0])
    pages: dict[str, object] = {}

    def on_phase(dep: Deployment, step: str) -> None:
        if step == "started":
            tokens = credentials_for(dep, n)[m:]  # u{m}…: none of the simulated users'
            users = [{"credential": t, "embedding": x[i].tolist()} for t, i in zip(tokens, on_page, strict=True)]
            pages["driver"] = start_pages(dep.url("proxy"), dep.pki / "ca.pem", users)
        elif step == "phase1_submitted":
            _wait(dep, "submit", n, pages["driver"])  # every tag in, the pages' too, before the close
        elif step == "phase2_sent":
            _wait(dep, "phase2", 2 * n, pages["driver"])

    out = tmp_path / "run"
    t0 = time.perf_counter()
    try:
        summary = deploy_local(simulated, round_settings("browser"), out,
                               DeployOptions(test_seed=SEED, web_root=WEB_ROOT), on_phase=on_phase)
    finally:
        outcomes = results(pages["driver"]) if "driver" in pages else []  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    assert summary["users"]["failures"] == {}
    assert len(outcomes) == browser_users
    for outcome in outcomes:
        assert outcome["state"] == "done", outcome
        assert [row[0] for row in outcome["sent"]] == ["phase1", "submit", "phase2"]
        assert outcome["problems"] == [] and outcome["stored"] == {"localStorage": 0, "sessionStorage": 0}
        assert {p for _, p, _ in outcome["requests"]} <= {"/", "/web/page.js", "/web/page.css", "/v1/round",
                                                          "/v1/phase1", "/v1/submit", "/v1/broadcast", "/v1/phase2"} | {
            p for _, p, _ in outcome["requests"] if p.startswith("/v1/phase1/")}
    kinds = {o["steps"][-1]["note"] for o in outcomes}
    assert kinds == {"shares", "cover messages"}  # both a released bucket's user and a rare one played on a page

    from mechanism.release import Release

    release = Release.load(out)
    assert release.ids == reference_release.ids
    assert release.counts.tolist() == reference_release.counts.tolist()
    np.testing.assert_allclose(release.centroids, reference_release.centroids, atol=1e-3)
    report = audit_deployment(out, embeddings=simulated)
    assert report.passed, [(f.name, f.detail) for f in report.findings if not f.passed]
    print(f"{browser_users} users on the page, {m} simulated: {wall:.1f} s")


def test_deploy_local_web_serves_the_page_and_holds_the_round_for_its_users(
    tmp_path: Path, small_population, reference_release
) -> None:
    """``fre-e2t deploy-local --web --web-wait S``: the simulated users play; a person with one of
    the spare credentials it writes joins from the page while phase 1 is held open, and the
    round waits for their shares before it closes."""
    import subprocess
    import sys

    needs_browser()
    x = np.asarray(small_population.embeddings, dtype=np.float64)
    np.save(tmp_path / "x.npy", x[1:])
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(WEB_ROOT.parents[2]), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fre_protocol.cli", "deploy-local", "--embeddings", str(tmp_path / "x.npy"), "--out", str(out),
         "--seed", str(SEED), "--noise", "off", "--threshold", "20", "--epsilon", "inf", "--web", str(WEB_ROOT), "--web-wait", "30",
         "--web-credentials", "2", "--window-seconds", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        credentials = out / "web-credentials.private.txt"
        end = time.monotonic() + 120
        while not credentials.is_file() or not credentials.read_text().endswith("\n"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end
            time.sleep(0.2)
        assert (credentials.stat().st_mode & 0o777) == 0o600
        tokens = credentials.read_text().split()
        assert len(tokens) == 2
        config = json.loads((out / "config" / "proxy.json").read_text())
        assert config["web_root"] == str(WEB_ROOT)
        url = json.loads((out / "config" / "users.json").read_text())["proxy"]
        pages = start_pages(url, out / "pki" / "ca.pem", [{"credential": tokens[0], "embedding": x[0].tolist()}])
        (outcome,) = results(pages)
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (stdout, stderr)
    assert outcome["state"] == "done", outcome
    assert "the join page is at https://localhost:" in stderr
    from mechanism.release import Release

    release = Release.load(out)  # the page's user and the simulated ones: the whole population
    assert release.ids == reference_release.ids
    assert release.counts.tolist() == reference_release.counts.tolist()


def test_a_page_in_a_dp_round_with_noise_adds_its_own_contribution_only(
    tmp_path: Path, dp_round: tuple[np.ndarray, int, object]
) -> None:
    """The page plays a DP round (ε = 8, noise on; its plan from the TypeScript accountant, as
    join.js derives it): test_join.py's DP round with its join user on a page. The release is the
    same seeded round played by the other users in Python, but for the page user's own coin
    (drawn in the browser): sampled, its bucket counts one more; not, the release is the
    reference's bit for bit."""
    needs_browser()
    x, j, ref = dp_round
    n = int(x.shape[0])
    simulated = np.delete(x, j, axis=0)
    others = int(sample_coins(SeedPlan.from_seed(SEED), len(simulated), DP_PARAMS).sum())
    pages: dict[str, object] = {}

    def on_phase(dep: Deployment, step: str) -> None:
        if step == "started":
            user = {"credential": credentials_for(dep, n)[-1], "embedding": x[j].tolist()}
            pages["driver"] = start_pages(dep.url("proxy"), dep.pki / "ca.pem", [user])
        elif step == "phase1_submitted":
            _JOIN._wait_own_submission(dep, n, others, pages["driver"])
        elif step == "phase2_sent":
            _wait(dep, "phase2", 2 * n, pages["driver"])

    out = tmp_path / "run"
    try:
        summary = deploy_local(simulated, round_settings("page-dp", params=DP_PARAMS, noise=True, protocol=DP_CONFIG), out,
                               DeployOptions(test_seed=SEED, web_root=WEB_ROOT), on_phase=on_phase)
    finally:
        (outcome,) = results(pages["driver"]) if "driver" in pages else [{}]  # type: ignore[arg-type]
    assert summary["users"]["failures"] == {}
    assert outcome["state"] == "done", outcome
    sampled = [row[0] for row in outcome["sent"]] == ["phase1", "submit", "phase2"]
    assert sampled or [row[0] for row in outcome["sent"]] == ["phase1", "phase2"]

    from mechanism.release import Release

    release = Release.load(out)
    assert release.ids == ref.ids
    added = release.counts - ref.counts
    assert sorted(added.tolist()) == [0] * (len(ref) - 1) + [int(sampled)]
    if not sampled:
        np.testing.assert_array_equal(release.centroids, ref.centroids)
    else:
        at = int(np.argmax(added))
        np.testing.assert_array_equal(np.delete(release.centroids, at, axis=0), np.delete(ref.centroids, at, axis=0))
