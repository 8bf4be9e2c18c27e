"""Who is at the console: the session behind its cookie, and the checks every form passes (its CSRF
token, and that it was posted from the gateway's own pages)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request

from tapgate.domain.console import COOKIE_NAME, ConsoleSession, check_csrf, csrf_token
from tapgate.domain.errors import Forbidden, MalformedRequest, Unauthenticated
from tapgate.domain.principals import Principal
from tapgate.gateway import Gateway

SIGN_IN_COOKIE = "tapgate_console_sign_in"
_FORM_MAX = 16_384
_LISTS = ("grant", "scope")  # checkbox groups: one field per ticked box
_SAME_SITE = ("same-origin", "none")  # Sec-Fetch-Site of a page of this origin, or of the person's own typing
_DEFAULT_PORTS = {"http": "80", "https": "443"}


@dataclass(frozen=True, slots=True)
class Visitor:
    """A signed-in person: their session, the principal it stands for, and their forms' CSRF token."""

    session: ConsoleSession
    principal: Principal
    csrf: str
    secret: str


def gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


async def visitor(request: Request) -> Visitor:
    """The signed-in person; raises Unauthenticated (the page sends them to sign in)."""
    cookie = request.cookies.get(COOKIE_NAME)
    if not cookie:
        raise Unauthenticated("Sign in to the console first.")
    session, secret = await gateway(request).console_session(cookie)
    return Visitor(session, session.principal(), csrf_token(secret), secret)


async def form(request: Request, who: Visitor | None) -> dict[str, str]:
    """The posted form's fields (each name once); with ``who``, its CSRF token must match the session."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise MalformedRequest("The console posts forms; send application/x-www-form-urlencoded.")
    body = await request.body()
    if len(body) > _FORM_MAX:
        raise MalformedRequest("The form is too large.")
    try:
        pairs = urllib.parse.parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError as e:
        raise MalformedRequest("The form is not UTF-8.") from e
    fields: dict[str, str] = {}
    for name, value in pairs:
        if name in fields and name not in _LISTS:
            raise MalformedRequest(f"The form repeats the field {name!r}.")
        fields[name] = value if name not in _LISTS else fields.get(name, "") + value + "\n"
    if who is not None:
        presented = fields.get("csrf") or request.headers.get("x-csrf-token")
        if not check_csrf(who.secret, presented):
            raise Forbidden("This form has expired; reload the page and try again.")
    return fields


def _origin(scheme: str, netloc: str) -> str:
    """``scheme://host[:port]``, lower case, without the scheme's default port ("" if it does not parse)."""
    try:
        parts = urlsplit(f"{scheme.lower()}://{netloc}")
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname or ""
    if not host:
        return ""
    shown = f"[{host}]" if ":" in host else host
    if port is not None and str(port) != _DEFAULT_PORTS.get(parts.scheme):
        shown = f"{shown}:{port}"
    return f"{parts.scheme}://{shown}"


def own_origins(request: Request, public_url: str) -> set[str]:
    """The gateway's own origins: its public_url's, and the one this request was sent to (its scheme and
    Host), which is the page's own when the person opened the console at another address of it."""
    public = urlsplit(public_url)
    found = {
        _origin(public.scheme, public.netloc),
        _origin(request.url.scheme, request.headers.get("host", "")),
    }
    return found - {""}


def check_origin(request: Request, public_url: str) -> None:
    """Raise Forbidden unless a posted form comes from one of the gateway's own pages: its Origin is one
    of ``own_origins``; or its Origin is hidden (``null``, as a browser sends under the console's
    no-referrer policy) and its Sec-Fetch-Site says same-origin (or none: the person's own typing). A
    request with neither header is not a browser's (every current browser sends one on a POST) and is
    judged by its CSRF token or one-time link alone."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    if origin is not None and origin != "null":
        parts = urlsplit(origin)
        if _origin(parts.scheme, parts.netloc) not in own_origins(request, public_url):
            raise Forbidden(_CROSS_SITE)
        return
    if site is None and origin is None:
        return
    if site is None or site.lower() not in _SAME_SITE:
        raise Forbidden(_CROSS_SITE)


_CROSS_SITE = (
    "This form was sent from another site, so nothing was done. Open the console at its own address "
    "and use its pages."
)
