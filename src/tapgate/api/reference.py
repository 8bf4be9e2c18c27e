"""``/docs``: the API reference, drawn on the server from the OpenAPI document as plain HTML. It loads no
script and no style from anywhere (FastAPI's default page pulls Swagger UI from a CDN, unpinned);
``/openapi.json`` stays the machine-readable form."""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

_METHODS = ("get", "post", "put", "patch", "delete")
_STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "code{background:#f3f3f3;padding:0 .25em}h2{margin-top:2rem}dt{margin-top:1rem;font-weight:600}"
    "dd{margin-left:1rem}"
)
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
    ),
    "Cache-Control": "no-store",
}


def reference_html(spec: dict[str, Any]) -> str:
    info = spec.get("info", {})
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{escape(str(info.get('title', 'tapgate')))} API</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(str(info.get('title', '')))} {escape(str(info.get('version', '')))}</h1>",
        f"<p>{escape(str(info.get('summary', '')))}</p>",
        "<p>The machine-readable document: <a href='/openapi.json'>/openapi.json</a>. Every route but the "
        "open ones takes <code>Authorization: Bearer &lt;token&gt;</code>.</p>",
    ]
    by_tag: dict[str, list[str]] = {}
    for path, operations in spec.get("paths", {}).items():
        for method in _METHODS:
            op = operations.get(method)
            if op is None:
                continue
            params = ", ".join(
                f"<code>{escape(p['name'])}</code> ({escape(p.get('in', ''))})"
                for p in op.get("parameters", [])
            )
            answers = ", ".join(escape(code) for code in op.get("responses", {}))
            item = (
                f"<dt><code>{method.upper()} {escape(path)}</code></dt>"
                f"<dd>{escape(str(op.get('summary', '')))}"
                + (f"<br>parameters: {params}" if params else "")
                + ("<br>body: JSON" if "requestBody" in op else "")
                + f"<br>answers: {answers}</dd>"
            )
            by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(item)
    for tag in sorted(by_tag):
        parts.append(f"<h2>{escape(tag)}</h2><dl>{''.join(by_tag[tag])}</dl>")
    parts.append("</body></html>")
    return "".join(parts)


def install(app: FastAPI) -> None:
    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(reference_html(request.app.openapi()), headers=HEADERS)
