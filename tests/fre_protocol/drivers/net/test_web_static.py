"""The join page's static files as the proxy serves them (web_static.py), without a browser:
the headers that hold the page to its origin, content types, what is not served, and the
start-up error when the page is not built."""

from __future__ import annotations

from pathlib import Path

import pytest
from net_rounds import needs_net

needs_net()

from starlette.applications import Starlette  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from fre_protocol.drivers.net.web_static import BUILD_COMMAND, check_web_root, web_routes  # noqa: E402
from primitives.errors import InvalidParameterError  # noqa: E402


@pytest.fixture
def built(tmp_path: Path) -> Path:
    (tmp_path / "web").mkdir()
    (tmp_path / "assets" / "model").mkdir(parents=True)
    for name, text in (("index.html", "<!doctype html>"), ("page.js", "export {}"), ("page.css", "body{}"),
                       (".hidden.js", "secret"), ("notes.md", "#")):
        (tmp_path / "web" / name).write_text(text)
    (tmp_path / "assets" / "model" / "model.onnx").write_bytes(b"\x08\x01")
    (tmp_path / "assets" / "ort.wasm").write_bytes(b"\x00asm")
    (tmp_path / "outside.js").write_text("not served")
    return tmp_path


def test_the_page_is_served_with_a_strict_policy_and_its_own_content_types(built: Path) -> None:
    client = TestClient(Starlette(routes=web_routes(built)))
    index = client.get("/")
    assert index.status_code == 200 and index.text == "<!doctype html>"
    assert index.headers["content-type"] == "text/html; charset=utf-8"
    csp = index.headers["content-security-policy"]
    assert "script-src 'self' 'wasm-unsafe-eval'" in csp and "connect-src 'self'" in csp
    assert "default-src 'none'" in csp and "'unsafe-inline'" not in csp and "frame-ancestors 'none'" in csp
    assert index.headers["x-content-type-options"] == "nosniff" and index.headers["referrer-policy"] == "no-referrer"
    for path, kind in (("/web/page.js", "text/javascript; charset=utf-8"), ("/web/page.css", "text/css; charset=utf-8"),
                       ("/web/assets/model/model.onnx", "application/octet-stream"), ("/web/assets/ort.wasm", "application/wasm")):
        answer = client.get(path)
        assert answer.status_code == 200 and answer.headers["content-type"] == kind, path
        assert answer.headers["content-security-policy"] == csp


def test_a_file_the_browser_holds_is_answered_304_when_unchanged(built: Path) -> None:
    client = TestClient(Starlette(routes=web_routes(built)))
    first = client.get("/web/assets/model/model.onnx")
    etag = first.headers["etag"]
    again = client.get("/web/assets/model/model.onnx", headers={"if-none-match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    assert "content-security-policy" in again.headers
    (built / "assets" / "model" / "model.onnx").write_bytes(b"\x08\x02\x03")  # changed: sent again
    assert client.get("/web/assets/model/model.onnx", headers={"if-none-match": etag}).content == b"\x08\x02\x03"


@pytest.mark.parametrize("path", ["/web/.hidden.js", "/web/notes.md", "/web/../outside.js", "/web/%2e%2e/outside.js",
                                  "/web/assets/../../outside.js", "/web/missing.js", "/web/", "/web/assets/"])
def test_nothing_outside_the_built_files_is_served(built: Path, path: str) -> None:
    answer = TestClient(Starlette(routes=web_routes(built))).get(path)
    assert answer.status_code == 404, (path, answer.text)


def test_a_page_that_is_not_built_is_refused_at_start_naming_the_build_command(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="the join page is not built") as caught:
        check_web_root(tmp_path)
    assert BUILD_COMMAND in str(caught.value) and "index.html, page.js, page.css" in str(caught.value)
