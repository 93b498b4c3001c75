"""The join page in headless Chromium, when something is wrong: a forged round document, a
tampered proof from S_tag, a closed round, a reused credential. Each is one clear message on the
page, and the page sends nothing after the failure (every request it made is counted)."""

from __future__ import annotations

import numpy as np
import pytest
from browser_pages import WEB_ROOT, needs_browser, results, start_pages
from net_rounds import needs_net, round_settings

needs_net()

pytestmark = pytest.mark.integration


@pytest.fixture
def page_deployment(live_deployment) -> object:  # type: ignore[no-untyped-def]
    """S_tag, S_syn and a proxy serving the join page (one user's round, nobody else in it)."""
    needs_browser()
    return live_deployment(round_settings("page-refusals"), web_root=WEB_ROOT)


def _embedding() -> list[float]:
    x = np.zeros(round_settings("d").dim)
    x[0] = 1.0
    return x.tolist()


def _paths(result: dict[str, object]) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in result["requests"]]  # type: ignore[union-attr]


PAGE_FILES = [("GET", "/"), ("GET", "/web/page.css"), ("GET", "/web/page.js")]


def test_the_page_says_so_and_sends_nothing_when_the_document_or_proof_is_forged(page_deployment) -> None:
    from fre_protocol.drivers.net.deploy import credentials_for

    dep = page_deployment
    first, second = credentials_for(dep, 2)
    proc = start_pages(dep.url("proxy"), dep.pki / "ca.pem", [
        {"credential": first, "embedding": _embedding(), "tamper": "round"},
        {"credential": second, "embedding": _embedding(), "tamper": "proof"},
    ])
    forged, tampered = results(proc)
    assert forged["state"] == "failed" and forged["kind"] == "verification", forged
    assert forged["status"].startswith("Verification failed; nothing more was sent: ")
    assert "signature on the round document does not verify" in forged["status"]
    assert sorted(_paths(forged)) == sorted([*PAGE_FILES, ("GET", "/v1/round")])  # nothing after the document

    assert tampered["state"] == "failed" and tampered["kind"] == "verification", tampered
    assert "S_tag's answer did not verify" in tampered["status"]
    v1 = [p for p in _paths(tampered) if p[1].startswith("/v1/")]
    assert [m for m, _ in v1] == ["GET", "POST", "GET"] and v1[1][1] == "/v1/phase1"  # round, request, answer: no tag
    assert all(r["stored"] == {"localStorage": 0, "sessionStorage": 0} for r in (forged, tampered))


def test_the_page_says_so_when_its_credential_was_used_or_the_round_closed(page_deployment) -> None:
    from fre_protocol.drivers.net.deploy import close_phase, credentials_for, proxy_items

    dep = page_deployment
    first, second = credentials_for(dep, 2)
    # The first user's page: its request and tag in, it waits for the broadcast.
    alone = start_pages(dep.url("proxy"), dep.pki / "ca.pem", [{"credential": first, "embedding": _embedding()}])
    import time

    end = time.monotonic() + 120
    while proxy_items(dep).get("submit", 0) < 1:
        assert alone.poll() is None and time.monotonic() < end
        time.sleep(0.1)
    again = start_pages(dep.url("proxy"), dep.pki / "ca.pem", [{"credential": first, "embedding": _embedding()}])
    (reused,) = results(again)
    assert reused["state"] == "failed" and reused["kind"] == "credential", reused
    assert reused["status"].startswith("Your credential was refused (already used in this round")
    assert [p for p in _paths(reused) if p[1].startswith("/v1/")] == [("GET", "/v1/round"), ("POST", "/v1/phase1")]

    close_phase(dep, 1)
    (done,) = results(alone)
    assert done["state"] == "done", done
    assert [row[0] for row in done["sent"]] == ["phase1", "submit", "phase2"]

    late = start_pages(dep.url("proxy"), dep.pki / "ca.pem", [{"credential": second, "embedding": _embedding()}])
    (closed,) = results(late)
    assert closed["state"] == "failed" and closed["kind"] == "closed", closed
    assert closed["status"].startswith("The round is closed for this request")
    assert [p for p in _paths(closed) if p[1].startswith("/v1/")] == [("GET", "/v1/round"), ("POST", "/v1/phase1")]
