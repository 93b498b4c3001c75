"""What the browser tests share: whether headless Chromium and the built join page are here,
and users played on the page by clients/web/test/browser/drive.mjs (one Chromium, a page each)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "clients" / "web"
WEB_ROOT = WEB / "dist"
CHROMIUM = "/usr/bin/chromium"
#: How long a page, and a test waiting on pages, may take: a bound against a page that hangs, never
#: a speed check (65 pages can share one core with the other test worker and take minutes).
PAGE_TIMEOUT_S = 600


def needs_browser() -> None:
    """Skip unless node, the web client's packages and Chromium are installed; build the page."""
    if shutil.which("node") is None or not (WEB / "node_modules" / "playwright-core").is_dir():
        pytest.skip("the web client is not installed (node >= 20.19 and `make setup-web`)")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian's chromium package: scripts/install_system_deps.sh)")
    subprocess.run(["npm", "run", "build:web", "--silent"], cwd=WEB, check=True, timeout=300)


def start_pages(url: str, ca: Path, users: list[dict[str, Any]], *, timeout_ms: int = PAGE_TIMEOUT_S * 1000,
                stagger: bool = False) -> subprocess.Popen[str]:
    """The driver, started: each user's page opened at ``url`` and its join pressed (with
    ``stagger``, each once the one before has sent its tag)."""
    proc = subprocess.Popen(["node", str(WEB / "test" / "browser" / "drive.mjs")], cwd=WEB, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"url": url + "/", "ca": str(ca), "users": users, "timeoutMs": timeout_ms,
                                 "chromium": CHROMIUM, "stagger": stagger}))
    proc.stdin.close()
    proc.stdin = None  # written and closed: communicate() then only reads
    return proc


def results(proc: subprocess.Popen[str], timeout_s: float = PAGE_TIMEOUT_S) -> list[dict[str, Any]]:
    """Each user's outcome on the page (see drive.mjs)."""
    try:
        out, err = proc.communicate(timeout=timeout_s)  # read as it comes: a full pipe would stall the driver
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    return list(json.loads(out))
