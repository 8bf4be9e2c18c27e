"""The console's pages. Each reads or acts through the gateway's use cases, as the signed-in person.

Every page is plain HTML that works without script; htmx (served from this origin, no inline script)
refreshes the parts that change on their own: the sign-in's state, presence, pending approvals and a
pairing in progress. Every form carries the session's CSRF token, every POST must come from the
gateway's own pages (its Origin, or Sec-Fetch-Site), and the cookie is SameSite=Strict.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from tapgate.api import qr as qr_code
from tapgate.api.console.session import SIGN_IN_COOKIE, Visitor, check_origin, form, gateway, visitor
from tapgate.api.routes.proofs import proof_response
from tapgate.domain.console import (
    COOKIE_NAME,
    SESSION_LIFETIME,
    SIGN_IN_LIFETIME,
    SignInKind,
    SignInStatus,
)
from tapgate.domain.errors import (
    BrokenChain,
    Forbidden,
    InvalidInput,
    RateLimited,
    TapgateError,
    Unauthenticated,
)
from tapgate.domain.invocations import Status
from tapgate.domain.pairing import PairingStatus
from tapgate.domain.principals import TokenKind
from tapgate.domain.shown import shown_time

router = APIRouter(include_in_schema=False)

_env = Environment(
    loader=PackageLoader("tapgate.api.console", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["time"] = shown_time

_SAID = {
    "granted": "Grants saved.",
    "revoked": "The device was revoked; its tools are gone and its token no longer works.",
    "paused": "Every agent is paused: their calls are refused until you resume, and calls that were "
    "waiting for your approval or for a device to take them are refused now.",
    "resumed": "Agents may call again.",
    "session-ended": "That console session has ended.",
    "mandate-revoked": "That standing mandate is revoked: no call goes under it any more.",
    "signed-out": "You are signed out.",
    "token-revoked": "The token was revoked: every request and stream of it is refused now.",
}
STATUS_FILTERS = [s.value for s in Status]


def _qr(url: str, title: str) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(qr_code.svg(url, scale=5, title=title)).decode()


def _when(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "never"
    seconds = int((now - at).total_seconds())
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 86400:
        return f"{seconds // 3600} h ago"
    return shown_time(at)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _html(name: str, http_status: int = 200, **values: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**values), status_code=http_status)


async def _page(request: Request, who: Visitor, name: str, active: str, **values: Any) -> HTMLResponse:
    gw = gateway(request)
    user = await gw.console_user(who.principal)
    paused = await gw.agents_paused(who.principal)
    said = _SAID.get(request.query_params.get("said", ""), "")
    return _html(
        name,
        user=user,
        paused=paused,
        csrf=who.csrf,
        active=active,
        said=said,
        now=gw.clock.now(),
        when=_when,
        **values,
    )


def _to(path: str, said: str | None = None) -> RedirectResponse:
    return RedirectResponse(path + (f"?said={said}" if said else ""), status_code=303)


async def _guard(request: Request, action: Callable[[], Awaitable[Response]]) -> Response:
    """Run a page: a POST from another site is refused before anything; no session goes to sign-in; a
    refusal is shown in the house's words."""
    try:
        if request.method not in ("GET", "HEAD"):
            check_origin(request, gateway(request).public_url)
        return await action()
    except Unauthenticated:
        if request.headers.get("hx-request"):
            return Response(status_code=204, headers={"HX-Redirect": "/console/sign-in"})
        return _to("/console/sign-in")
    except TapgateError as e:
        status = {
            "invalid": 422,
            "malformed": 400,
            "forbidden": 403,
            "not_found": 404,
            "conflict": 409,
            "gone": 410,
            "rate_limited": 429,
        }.get(e.code, 400)
        page = _html("problem.html", status, message=e.message, user=None, csrf=None)
        if isinstance(e, RateLimited):
            page.headers["retry-after"] = str(e.retry_after)
        return page


# signing in


@router.get("/console")
@router.get("/console/")
async def home(request: Request) -> Response:
    try:
        await visitor(request)
    except TapgateError:
        return _to("/console/sign-in")
    return _to("/console/devices")


@router.get("/console/sign-in")
async def sign_in(request: Request) -> Response:
    """Shows the QR code a paired phone scans; the browser keeps the sign-in's secret in a cookie."""

    async def run() -> Response:
        gw = gateway(request)
        tenant = request.query_params.get("tenant", "default")
        sign_in, token = await gw.start_console_sign_in(
            tenant, request.headers.get("user-agent", ""), _address(request)
        )
        url = gw.console_sign_in_url(sign_in)
        page = _html(
            "sign_in.html",
            qr=_qr(url, "Scan with your paired phone to sign in"),
            url=url,
            tenant=tenant,
        )
        page.set_cookie(
            SIGN_IN_COOKIE,
            token,
            max_age=int(SIGN_IN_LIFETIME.total_seconds()),
            path="/console",
            httponly=True,
            samesite="strict",
            secure=_secure(request),
        )
        return page

    return await _guard(request, run)


@router.get("/console/sign-in/status")
async def sign_in_status(request: Request) -> Response:
    """Where this browser's sign-in stands (polled by the page); once the phone said yes, the session."""

    async def run() -> Response:
        token = request.cookies.get(SIGN_IN_COOKIE, "")
        if not token:
            return _html("sign_in_status.html", state="ended")
        sign_in, approval = await gateway(request).console_sign_in_state(token)
        if sign_in.status is SignInStatus.APPROVED:
            return await _finish(request, token, SignInKind.PHONE)
        if not sign_in.open_at(gateway(request).clock.now()):
            return _html(
                "sign_in_status.html",
                state="ended" if sign_in.status is not SignInStatus.DENIED else "denied",
            )
        code = approval.binding_code if approval is not None else None
        return _html("sign_in_status.html", state=sign_in.status.value, code=code)

    return await _guard(request, run)


@router.post("/console/sign-in/finish")
async def sign_in_finish(request: Request) -> Response:
    """A phone sign-in ends in the browser that started it: its secret is this browser's cookie."""
    token = request.cookies.get(SIGN_IN_COOKIE, "")
    return await _guard(request, lambda: _finish(request, token, SignInKind.PHONE))


def _address(request: Request) -> str:
    return request.client.host if request.client else ""


async def _finish(request: Request, token: str, kind: SignInKind) -> Response:
    if not token:
        return _to("/console/sign-in")
    new = await gateway(request).finish_console_sign_in(token, kind, request.headers.get("user-agent", ""))
    if request.headers.get("hx-request"):
        response: Response = Response(status_code=204, headers={"HX-Redirect": "/console/devices"})
    else:
        response = _to("/console/devices")
    response.set_cookie(
        COOKIE_NAME,
        new.cookie,
        max_age=int(SESSION_LIFETIME.total_seconds()),
        path="/console",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.delete_cookie(SIGN_IN_COOKIE, path="/console")
    return response


@router.get("/console/link/{token}")
async def link(request: Request, token: str) -> Response:
    """An operator's one-time link: a button, so a link preview never spends it."""
    return _html("link.html", token=token)


@router.post("/console/link/{token}")
async def link_use(request: Request, token: str) -> Response:
    """Only an operator's one-time link signs in here; a phone sign-in's token is refused like a spent
    link (it completes only in the browser that started it)."""

    async def run() -> Response:
        await form(request, None)
        return await _finish(request, token, SignInKind.LINK)

    return await _guard(request, run)


@router.post("/console/sign-out")
async def sign_out(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        await gateway(request).revoke_console_session(who.session, who.session.session_id)
        response = _to("/console/sign-in", "signed-out")
        response.delete_cookie(COOKIE_NAME, path="/console")
        return response

    return await _guard(request, run)


# devices and pairing


@router.get("/console/devices")
async def devices(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        found = await gateway(request).list_devices(who.principal, who.session.user_id)
        left = await gateway(request).must_pair_again(who.principal.tenant_id, list(found))
        return await _page(request, who, "devices.html", "devices", devices=found, must_pair_again=left)

    return await _guard(request, run)


@router.get("/console/devices/presence")
async def presence(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        gw = gateway(request)
        found = await gw.list_devices(who.principal, who.session.user_id)
        return _html("presence.html", devices=found, now=gw.clock.now(), when=_when)

    return await _guard(request, run)


@router.post("/console/devices/{device_id}/grants")
async def grants(request: Request, device_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        fields = await form(request, who)
        gw = gateway(request)
        chosen = set(fields.get("grant", "").split())
        devices_now = await gw.list_devices(who.principal, who.session.user_id)
        device = next((d for d in devices_now if d.device_id == device_id), None)
        if device is None:
            raise InvalidInput("device_id", f"You have no device {device_id!r}.")
        wanted = {d.capability.name: d.capability.name in chosen for d in device.capabilities}
        await gw.set_grants(who.principal, who.session.user_id, device_id, wanted)
        return _to("/console/devices", "granted")

    return await _guard(request, run)


@router.post("/console/devices/{device_id}/revoke")
async def revoke(request: Request, device_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        await gateway(request).revoke_device(who.principal, who.session.user_id, device_id)
        return _to("/console/devices", "revoked")

    return await _guard(request, run)


@router.post("/console/pairings")
async def pair(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        pairing, _ = await gateway(request).start_pairing(who.principal, who.session.user_id)
        return _to(f"/console/pairings/{pairing.pairing_id}")

    return await _guard(request, run)


@router.get("/console/pairings/{pairing_id}")
async def pairing(request: Request, pairing_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        values = await _pairing_values(request, who, pairing_id)
        return await _page(request, who, "pairing.html", "devices", **values)

    return await _guard(request, run)


@router.get("/console/pairings/{pairing_id}/state")
async def pairing_state(request: Request, pairing_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        values = await _pairing_values(request, who, pairing_id)
        return _html("pairing_state.html", csrf=who.csrf, **values)

    return await _guard(request, run)


async def _pairing_values(request: Request, who: Visitor, pairing_id: str) -> dict[str, Any]:
    gw = gateway(request)
    found, device = await gw.pairing(who.principal, pairing_id)
    url = qr = None
    if found.status is PairingStatus.OPEN:
        url = await gw.pairing_link(who.principal, pairing_id)
        qr = _qr(url, "Scan with the new device to pair it")
    return {"pairing": found, "device": device, "url": url, "qr": qr, "Status": PairingStatus}


@router.post("/console/pairings/{pairing_id}/consent")
async def consent(request: Request, pairing_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        fields = await form(request, who)
        approved = fields.get("decision", "approved") == "approved"
        chosen = fields.get("grant", "").split()  # the capabilities the person ticked
        try:
            await gateway(request).consent_pairing(
                who.principal, pairing_id, fields.get("comparison_code", "").strip(), approved, chosen
            )
        except Forbidden as e:  # with a paired device, the new one is approved on the phone instead
            values = await _pairing_values(request, who, pairing_id)
            return await _page(request, who, "pairing.html", "devices", refusal=e.message, **values)
        return _to(f"/console/pairings/{pairing_id}")

    return await _guard(request, run)


# approvals, calls, audit


@router.get("/console/approvals")
async def approvals(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        pending = await gateway(request).inbox(who.principal)
        return await _page(request, who, "approvals.html", "approvals", approvals=pending)

    return await _guard(request, run)


@router.get("/console/approvals/pending")
async def approvals_pending(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        gw = gateway(request)
        pending = await gw.inbox(who.principal)
        return _html("approvals_list.html", approvals=pending, now=gw.clock.now(), when=_when)

    return await _guard(request, run)


@router.get("/console/calls")
async def calls(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        agent = request.query_params.get("agent") or None
        status = request.query_params.get("status") or None
        if status is not None and status not in STATUS_FILTERS:
            raise InvalidInput("status", f"status must be one of {', '.join(STATUS_FILTERS)}.")
        rows = await gateway(request).call_history(who.principal, agent, status)
        return await _page(
            request,
            who,
            "calls.html",
            "calls",
            rows=rows,
            agent=agent or "",
            status=status or "",
            statuses=STATUS_FILTERS,
        )

    return await _guard(request, run)


@router.get("/console/calls/{invocation_id}/proof")
async def call_proof(request: Request, invocation_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        return proof_response(
            await gateway(request).invocation_proof(who.principal, invocation_id), f"call-{invocation_id}"
        )

    return await _guard(request, run)


@router.get("/console/mandates/{mandate_id}/proof")
async def mandate_proof(request: Request, mandate_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        return proof_response(
            await gateway(request).mandate_proof(who.principal, mandate_id), f"mandate-{mandate_id}"
        )

    return await _guard(request, run)


@router.get("/console/audit")
async def audit(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        gw = gateway(request)
        entries = await gw.person_audit(who.principal)
        try:
            count = await gw.verify_audit_since(who.session.tenant_id)
            chain = f"The journal verifies: {count} entries, each chained to the last."
            chain_ok = True
        except BrokenChain as e:
            chain, chain_ok = f"The journal does not verify: {e}.", False
        except TapgateError as e:
            chain, chain_ok = f"The journal does not verify: {e.message}", False
        return await _page(
            request, who, "audit.html", "audit", entries=entries, chain=chain, chain_ok=chain_ok
        )

    return await _guard(request, run)


# agents and the pause switch


_SHORTER = {"1h": ("in an hour", 3600), "1d": ("in a day", 86_400), "30d": ("in 30 days", 30 * 86_400)}
AGENT_SCOPES = ("tools", "events", "notices")


def expiries(longest_days: int) -> dict[str, tuple[str, int]]:
    """The lives an agent token made in the console may have: never longer than ``longest_days`` (the
    last, and the one offered first)."""
    longest = longest_days * 86_400
    found = {name: choice for name, choice in _SHORTER.items() if choice[1] < longest}
    found[f"{longest_days}d"] = (f"in {longest_days} days", longest)
    return found


@router.get("/console/agents")
async def agents(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        return await _agents_page(request, who, None, "")

    return await _guard(request, run)


async def _agents_page(request: Request, who: Visitor, created: Any, agent_id: str) -> Response:
    gw = gateway(request)
    tokens = await gw.list_user_tokens(who.principal, who.session.user_id)
    agent_tokens = [t for t in tokens if t.kind == TokenKind.AGENT.value]
    return await _page(
        request,
        who,
        "agents.html",
        "agents",
        tokens=agent_tokens,
        created=created,
        created_for=agent_id,
        scopes=AGENT_SCOPES,
        expiries=expiries(gw.limits.console_agent_token_days),
        mine=who.session.session_id,
    )


@router.post("/console/agents/tokens")
async def agent_token(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        fields = await form(request, who)
        chosen = [s for s in fields.get("scope", "").split() if s]
        gw = gateway(request)
        choices = expiries(gw.limits.console_agent_token_days)
        expiry = fields.get("expires") or list(choices)[-1]
        if expiry not in choices:
            raise InvalidInput("expires", f"expires must be one of {', '.join(choices)}.")
        agent_id = fields.get("agent_id", "").strip()
        agent_name = fields.get("agent_name", "").strip() or None
        created = await gw.create_agent_token(
            who.session, agent_id, chosen or None, choices[expiry][1], agent_name
        )
        return await _agents_page(request, who, created, agent_id)

    return await _guard(request, run)


@router.post("/console/agents/tokens/{token_id}/revoke")
async def agent_token_revoke(request: Request, token_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        await gateway(request).revoke_token(who.principal, token_id)
        return _to("/console/agents", "token-revoked")

    return await _guard(request, run)


@router.post("/console/agents/pause")
async def pause(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        fields = await form(request, who)
        paused = fields.get("paused") == "true"
        await gateway(request).pause_agents(who.principal, paused)
        back = fields.get("back", "/console/devices")
        return _to(
            back if back.startswith("/console/") else "/console/devices", "paused" if paused else "resumed"
        )

    return await _guard(request, run)


# standing mandates


@router.get("/console/mandates")
async def mandates(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        found = await gateway(request).list_mandates(who.principal)
        return await _page(request, who, "mandates.html", "mandates", mandates=found)

    return await _guard(request, run)


@router.post("/console/mandates/{mandate_id}/revoke")
async def mandate_revoke(request: Request, mandate_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        await gateway(request).revoke_mandate(who.principal, mandate_id)
        return _to("/console/mandates", "mandate-revoked")

    return await _guard(request, run)


# console sessions


@router.get("/console/sessions")
async def sessions(request: Request) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        found = await gateway(request).console_sessions(who.session)
        return await _page(
            request, who, "sessions.html", "sessions", sessions=found, mine=who.session.session_id
        )

    return await _guard(request, run)


@router.post("/console/sessions/{session_id}/revoke")
async def session_revoke(request: Request, session_id: str) -> Response:
    async def run() -> Response:
        who = await visitor(request)
        await form(request, who)
        await gateway(request).revoke_console_session(who.session, session_id)
        if session_id == who.session.session_id:
            response = _to("/console/sign-in", "signed-out")
            response.delete_cookie(COOKIE_NAME, path="/console")
            return response
        return _to("/console/sessions", "session-ended")

    return await _guard(request, run)
