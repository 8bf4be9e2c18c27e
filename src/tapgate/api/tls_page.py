"""The plain-HTTP side of a gateway that speaks https with a local certificate authority: ``/tls``, a
page a phone opens before it trusts anything (the CA to install, the steps for iOS and Android, a QR
code to the page itself), and a redirect to https for everything else."""

from __future__ import annotations

import contextlib
import hashlib
import html
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from tapgate.api.qr import svg

__all__ = ["plain_http_app", "serving_beside"]

_STOP_SECONDS = 5.0


def plain_http_app(public_url: str, http_port: int, ca: x509.Certificate | None) -> Starlette:
    """``/tls`` and the CA's downloads; every other request is sent on to ``public_url`` (308)."""
    public_url = public_url.rstrip("/")
    host = urlsplit(public_url).hostname or "localhost"
    page_url = f"http://{host}:{http_port}/tls"

    async def page(_request: Request) -> Response:
        return HTMLResponse(_page(public_url, page_url, ca), headers={"Cache-Control": "no-store"})

    async def ca_der(_request: Request) -> Response:
        if ca is None:
            return _no_ca()
        return Response(
            ca.public_bytes(serialization.Encoding.DER),
            media_type="application/x-x509-ca-cert",
            headers={"Content-Disposition": 'attachment; filename="tapgate-ca.crt"'},
        )

    async def ca_pem(_request: Request) -> Response:
        if ca is None:
            return _no_ca()
        return Response(
            ca.public_bytes(serialization.Encoding.PEM),
            media_type="application/x-pem-file",
            headers={"Content-Disposition": 'attachment; filename="tapgate-ca.pem"'},
        )

    async def onwards(request: Request) -> Response:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{public_url}{request.url.path}{query}", status_code=308)

    every = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(
        routes=[
            Route("/tls", page, methods=["GET", "HEAD"]),
            Route("/tls/ca.crt", ca_der, methods=["GET", "HEAD"]),
            Route("/tls/ca.pem", ca_pem, methods=["GET", "HEAD"]),
            Route("/{path:path}", onwards, methods=every),
        ]
    )


def _no_ca() -> Response:
    message = "This gateway's certificate comes from a public authority: there is nothing to install."
    return JSONResponse({"error": {"code": "not_found", "message": message}}, status_code=404)


def _shown_name(ca: x509.Certificate) -> str:
    """The authority's name as a phone lists it (its common name), not as RFC 4514 writes it."""
    names = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ca.subject.rfc4514_string()


def _page(public_url: str, page_url: str, ca: x509.Certificate | None) -> str:
    app = html.escape(f"{public_url}/app/")
    qr = svg(page_url, 4, "This page, for your phone").decode()
    qr = qr[qr.index("<svg") :]
    if ca is None:
        body = (
            "<p>This gateway's certificate comes from a public authority, which your phone already "
            f'trusts: there is nothing to install. Open <a href="{app}">{app}</a>.</p>'
        )
    else:
        name = html.escape(_shown_name(ca))
        fingerprint = hashlib.sha256(ca.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
        pairs = " ".join(fingerprint[i : i + 2] for i in range(0, len(fingerprint), 2))
        body = f"""<p>This gateway speaks https with a certificate from its own certificate authority,
<b>{name}</b>. Your phone must trust that authority once; then the app, its passkeys and its
notifications work at <a href="{app}">{app}</a>.</p>
<p><a class="button" href="/tls/ca.crt" download>Download the certificate</a>
(or <a href="/tls/ca.pem" download>as PEM</a>)</p>
<p>Its SHA-256 fingerprint, to compare with what your phone shows:<br><code>{pairs}</code></p>
<h2>iPhone and iPad</h2>
<ol>
<li>Open this page in Safari and tap <b>Download the certificate</b>; allow the download of the
configuration profile.</li>
<li>Settings &rsaquo; General &rsaquo; VPN &amp; Device Management: tap the profile
<b>{name}</b>, then Install.</li>
<li>Settings &rsaquo; General &rsaquo; About &rsaquo; Certificate Trust Settings: turn on full trust for
<b>{name}</b>.</li>
<li>Open <a href="{app}">{app}</a>.</li>
</ol>
<h2>Android</h2>
<ol>
<li>Tap <b>Download the certificate</b>.</li>
<li>Settings &rsaquo; Security &amp; privacy &rsaquo; More security settings &rsaquo; Encryption &amp;
credentials &rsaquo; Install a certificate &rsaquo; CA certificate (on older phones: Settings &rsaquo;
Security &rsaquo; Install from storage); choose <b>tapgate-ca.crt</b>.</li>
<li>Open <a href="{app}">{app}</a> in Chrome.</li>
</ol>
<p>Trust this authority only for a gateway you run: whoever holds its key could stand in for any web
site on a phone that trusts it.</p>"""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Trust this gateway</title>
<style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:1rem auto;padding:0 1rem;
line-height:1.4}}
code{{word-break:break-all}} .qr svg{{width:12rem;height:12rem}}
.button{{display:inline-block;padding:.6rem 1rem;background:#1f5fbf;color:#fff;border-radius:.4rem;
text-decoration:none}}</style></head>
<body><h1>Trust this gateway</h1>
{body}
<h2>On another device</h2>
<p>Scan this code with the phone to open this page there:</p>
<div class="qr">{qr}</div>
<p><code>{html.escape(page_url)}</code></p>
</body></html>
"""


@contextlib.contextmanager
def serving_beside(app: Starlette, host: str, port: int) -> Iterator[None]:
    """Serve ``app`` on ``host:port`` in a thread for as long as the block runs (the gateway's own
    server runs in the block, on the main thread, with the signal handlers)."""
    server = uvicorn.Server(
        uvicorn.Config(app, host=host, port=port, access_log=False, log_config=None, lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="tapgate-plain-http", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(_STOP_SECONDS)
