"""What one device's steps cost on the join page in headless Chromium, at the MiniLM dimension
(d = 384), against a live deployment: five users, one page each, started one after another so
each page's own work is timed alone; all five in one bucket, released, so each encodes and sends
shares. The test checks the page's step reports; ``FRE_PAGE_COSTS_OUT=DIR`` also writes them
(``costs.json``, each step's medians) and a screenshot of a page after its join (the text's when
there is one: ``device-page.png``) to DIR: docs/results/device-browser.md records a run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from browser_pages import CHROMIUM, WEB_ROOT, needs_browser, results, start_pages
from net_rounds import needs_net, round_settings

needs_net()

pytestmark = pytest.mark.integration

USERS = 5
STEPS = ["round", "embedding", "blind", "evaluation", "submit", "broadcast", "phase2"]


def test_the_pages_steps_are_reported_with_their_time_and_bytes(tmp_path: Path, live_deployment) -> None:  # type: ignore[no-untyped-def]
    needs_browser()
    from fre_protocol.drivers.net.deploy import close_phase, credentials_for, proxy_items
    from fre_protocol.drivers.net.round import EmbedderSpec
    from mechanism.params import FreParams

    embedder = EmbedderSpec(name="sentence-transformers/all-MiniLM-L6-v2", dim=384, normalize=True)
    settings = dataclasses.replace(round_settings("page-costs", params=FreParams.paper(math.inf, threshold=2)),
                                   dim=384, embedder=embedder)
    rng = np.random.default_rng(7)
    centre = rng.standard_normal(384)
    rows = [centre + 1e-4 * rng.standard_normal(384) for _ in range(USERS)]
    rows = [(r / np.linalg.norm(r)).tolist() for r in rows]  # unit norm, as the round's model gives
    keep = os.environ.get("FRE_PAGE_COSTS_OUT")
    shot = Path(keep) / "device-page.png" if keep else tmp_path / "device-page.png"
    dep = live_deployment(settings, web_root=WEB_ROOT)
    users = [{"credential": t, "embedding": {"embedder": embedder.name, "embedding": r}}
             for t, r in zip(credentials_for(dep, USERS), rows, strict=True)]
    users[0]["screenshot"] = str(shot)
    texts = (WEB_ROOT / "assets" / "manifest.json").is_file()
    if texts:
        (token,) = credentials_for(dep, USERS + 1)[USERS:]
        users.append({"credential": token, "text": "I have had a fever and a cough for three days",
                      "screenshot": users[0].pop("screenshot")})
    driver = start_pages(dep.url("proxy"), dep.pki / "ca.pem", users, stagger=True)
    end = time.monotonic() + 240
    while proxy_items(dep).get("submit", 0) < len(users):
        assert driver.poll() is None and time.monotonic() < end
        time.sleep(0.1)
    close_phase(dep, 1)
    outcomes = results(driver)
    for outcome in outcomes:
        assert outcome["state"] == "done", outcome
        assert [s["step"] for s in outcome["steps"]] == STEPS and outcome["problems"] == []
    text_page = outcomes[USERS:]
    outcomes = outcomes[:USERS]
    assert all(o["steps"][-1]["note"] == "shares" for o in outcomes)
    for outcome in text_page:
        note = outcome["steps"][1]["note"]
        assert "(named by the round; your text embedded on this device: model ready in" in note, note
    first = {s["step"]: s for s in outcomes[0]["steps"]}
    sent = {row[0]: int(row[1]) for row in outcomes[0]["sent"]}
    assert first["blind"]["sentBytes"] == sent["phase1"] and first["phase2"]["sentBytes"] == sent["phase2"]
    assert "(named by the round; the embedding declares it)" in first["embedding"]["note"]
    assert shot.stat().st_size > 10_000
    medians = {step: {key: statistics.median(o["steps"][i][key] for o in outcomes)
                      for key in ("computeMs", "networkMs", "sentBytes", "receivedBytes")}
               for i, step in enumerate(STEPS)}
    if keep:
        version = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, check=False).stdout.strip()
        record = {"users": USERS, "dim": 384, "chromium": version, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                  "medians": medians, "pages": [o["steps"] for o in outcomes], "sent": outcomes[0]["sent"],
                  "text_page": [o["steps"] for o in text_page]}
        (Path(keep) / "costs.json").write_text(json.dumps(record, indent=2) + "\n")
