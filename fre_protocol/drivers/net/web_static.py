"""The join page's static files, served by the proxy from the built web client (``web_root``,
``clients/web/dist``): ``GET /`` is ``web/index.html``, ``GET /web/assets/PATH`` a file of
``assets/`` (the on-device embedder's model and wasm), ``GET /web/PATH`` a file of ``web/``.

The page talks to this origin only, so its headers hold it to that: a CSP with no inline script
or style, scripts from this origin (and WebAssembly compilation, which onnxruntime-web needs),
fetches to this origin; no framing, no referrer, no sniffing. Static files take no credential
and no body; the proxy's connection limits (listener.py) hold for them as for every request, and
admission is untouched: the page's requests to ``/v1/...`` are the node client's.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.routing import Route

from primitives.errors import InvalidParameterError

#: How to build what this serves (named in the start-up error when it is missing).
BUILD_COMMAND = "cd clients/web && npm ci && npm run build:web"

CSP = "; ".join([
    "default-src 'none'",
    "script-src 'self' 'wasm-unsafe-eval'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
])

HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".onnx": "application/octet-stream",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}

#: What the page needs in ``web/`` to run at all.
REQUIRED = ("index.html", "page.js", "page.css")


def check_web_root(root: Path) -> Path:
    """``root`` resolved, once the page is built there (InvalidParameterError naming the build
    command otherwise): checked when the proxy starts, not when a person first asks."""
    root = Path(root).resolve()
    missing = [name for name in REQUIRED if not (root / "web" / name).is_file()]
    if missing:
        raise InvalidParameterError(
            f"the join page is not built: {root / 'web'} lacks {', '.join(missing)} (build it with `{BUILD_COMMAND}`)"
        )
    return root


def _not_found() -> Response:
    return PlainTextResponse("not found", status_code=404, headers=HEADERS)


def _file(base: Path, relative: str, request: Request) -> Response:
    """``base/relative`` when it is a regular file inside ``base`` with a known type (404
    otherwise); 304 when the request names its current ETag (the embedder's model is 90 MB, and
    ``no-cache`` has the browser revalidate it on every visit)."""
    parts = relative.split("/")
    if not relative or any(p in ("", ".", "..") or p.startswith(".") or "\\" in p for p in parts):
        return _not_found()
    path = (base / relative).resolve()
    if not path.is_relative_to(base) or not path.is_file() or path.suffix not in CONTENT_TYPES:
        return _not_found()
    # stat_result given: the ETag (and length) are set now, not when the body is sent.
    response = FileResponse(path, media_type=CONTENT_TYPES[path.suffix], headers=HEADERS, stat_result=path.stat())
    etag = response.headers.get("etag")
    if etag is not None and etag in (t.strip() for t in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers={**HEADERS, "etag": etag})
    return response


def web_routes(root: Path) -> list[Route]:
    """``GET /`` and ``GET /web/...`` from the built web client at ``root`` (checked)."""
    root = check_web_root(root)
    page, assets = (root / "web").resolve(), (root / "assets").resolve()

    async def index(request: Request) -> Response:
        return _file(page, "index.html", request)

    async def static(request: Request) -> Response:
        relative = request.path_params["path"]
        if relative.startswith("assets/"):
            return _file(assets, relative.removeprefix("assets/"), request)
        return _file(page, relative, request)

    return [
        Route("/", index, methods=["GET", "HEAD"]),
        Route("/web/{path:path}", static, methods=["GET", "HEAD"]),
    ]


__all__ = ["BUILD_COMMAND", "CSP", "check_web_root", "web_routes"]
