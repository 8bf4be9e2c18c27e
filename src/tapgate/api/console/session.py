"""Who is at the console: the session behind its cookie, and the CSRF check every form passes."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from fastapi import Request

from tapgate.domain.console import COOKIE_NAME, ConsoleSession, check_csrf, csrf_token
from tapgate.domain.errors import Forbidden, MalformedRequest, Unauthenticated
from tapgate.domain.principals import Principal
from tapgate.gateway import Gateway

SIGN_IN_COOKIE = "tapgate_console_sign_in"
_FORM_MAX = 16_384
_LISTS = ("grant", "scope")  # checkbox groups: one field per ticked box


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
