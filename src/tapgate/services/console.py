"""The person's console: signing in by the phone or an operator's link, its sessions, and the switch that
pauses every agent of the person.

A phone sign-in is an approval of kind ``console_login`` that a paired device signs with its key, like any
other decision; the browser that started it, holding the sign-in's secret, then takes a 12-hour session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from tapgate.domain.accounts import User
from tapgate.domain.approvals import Decision, action_sha256, new_sign_block
from tapgate.domain.audit import AuditEntry, AuditRecord
from tapgate.domain.console import (
    ALL_AGENTS,
    CONSOLE_LOGIN,
    LINK_LIFETIME,
    SESSION_LIFETIME,
    SIGN_IN_LIFETIME,
    ConsoleSession,
    SignIn,
    SignInKind,
    SignInStatus,
    cookie_value,
    new_id,
    new_secret,
    parse_cookie,
    parse_sign_in,
    sign_in_token,
)
from tapgate.domain.console import check as check_secret
from tapgate.domain.errors import Conflict, Forbidden, Gone, NotFound, Unauthenticated
from tapgate.domain.events import AGENTS_PAUSED, AGENTS_RESUMED
from tapgate.domain.ids import new_id as new_prefixed_id
from tapgate.domain.inbox import Approval, ApprovalStatus, binding_code
from tapgate.domain.invocations import Invocation
from tapgate.domain.principals import Principal, TokenKind
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, events_key, inbox_key, sign_in_key
from tapgate.services.decisions import record_decision

NOT_AN_APPROVER = (
    "Only a device that approves for you signs you in to the console: use your phone, or grant this device "
    "'approvals' first."
)
PAUSED_UNTIL = datetime.fromisoformat("9999-12-31T00:00:00+00:00")  # "until resumed"
_HISTORY_MAX = 200
_AUDIT_WINDOW = 1000  # the newest entries of the tenant the console looks through for the person's own


@dataclass(frozen=True, slots=True)
class NewSession:
    session: ConsoleSession
    cookie: str


def _browser(text: str) -> str:
    shown = "".join(ch for ch in text if ch.isprintable())[:80]
    return shown or "a browser"


async def start_phone_sign_in(ctx: Context, tenant_id: str, browser: str) -> tuple[SignIn, str]:
    """A sign-in a phone can answer; the token only the starting browser holds. Raises NotFound."""
    now = ctx.clock.now()
    secret, secret_hash = new_secret()
    sign_in = SignIn(
        tenant_id=tenant_id,
        sign_in_id=new_id(),
        kind=SignInKind.PHONE,
        secret_hash=secret_hash,
        status=SignInStatus.WAITING,
        created_at=now,
        expires_at=now + SIGN_IN_LIFETIME,
        browser=_browser(browser),
    )
    async with ctx.store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is None:
            raise NotFound(f"There is no tenant {tenant_id!r}; open the console link your operator gave you.")
        await uow.sign_ins.add(sign_in)
    return sign_in, sign_in_token(tenant_id, sign_in.sign_in_id, secret)


async def create_link(ctx: Context, caller: Principal, user_id: str) -> str:
    """A one-time sign-in for ``user_id`` (operator only); the token its link carries. Raises NotFound."""
    caller.require(TokenKind.OPERATOR)
    now = ctx.clock.now()
    secret, secret_hash = new_secret()
    sign_in = SignIn(
        tenant_id=caller.tenant_id,
        sign_in_id=new_id(),
        kind=SignInKind.LINK,
        secret_hash=secret_hash,
        status=SignInStatus.APPROVED,
        created_at=now,
        expires_at=now + LINK_LIFETIME,
        user_id=user_id,
    )
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r}; add the person first.")
        await uow.sign_ins.add(sign_in)
        await uow.journal.append(
            AuditRecord(
                "console.link_created", caller.actor, subject=sign_in.sign_in_id, data={"user_id": user_id}
            ),
            now,
        )
    return sign_in_token(caller.tenant_id, sign_in.sign_in_id, secret)


async def ask_phone(ctx: Context, caller: Principal, sign_in_id: str) -> Approval:
    """The paired phone that scanned the console's code opens a console_login approval for its person;
    only an approver (a device that approves for the person) may. Raises Forbidden, NotFound, Gone,
    Conflict."""
    caller.require(TokenKind.DEVICE)
    assert caller.user_id is not None and caller.device_uid is not None
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        device = await uow.devices.by_uid(caller.device_uid)
        if device is None or not device.approver:
            raise Forbidden(NOT_AN_APPROVER)
        sign_in = await uow.sign_ins.get(sign_in_id)
        if sign_in is None or sign_in.kind is not SignInKind.PHONE:
            raise NotFound("There is no such console sign-in; scan the code the console shows now.")
        if not sign_in.open_at(now):
            raise Gone("This console sign-in has ended; reload the console and scan its new code.")
        approval = _login_approval(ctx, sign_in, caller.user_id, now)
        if not await uow.sign_ins.save(
            sign_in.asked(caller.user_id, approval.approval_id), SignInStatus.WAITING
        ):
            raise Conflict("This sign-in was answered already; start a new one on the console.")
        await uow.approvals.add(approval)
        await uow.journal.append(
            AuditRecord(
                "console.sign_in_asked",
                caller.actor,
                subject=sign_in_id,
                data={"approval_id": approval.approval_id},
            ),
            now,
        )
        uow.notify(inbox_key(caller.tenant_id, caller.user_id))
        uow.notify(sign_in_key(caller.tenant_id, sign_in_id))
    return approval


def _login_approval(ctx: Context, sign_in: SignIn, user_id: str, now: datetime) -> Approval:
    code = binding_code()
    arguments = {"sign_in_id": sign_in.sign_in_id, "browser": sign_in.browser, "code": code}
    preview = {
        "kind": CONSOLE_LOGIN,
        "fields": [
            {"label": "Browser", "value": sign_in.browser},
            {"label": "Started", "value": sign_in.created_at.strftime("%H:%M UTC")},
            {"label": "Code on the console", "value": code},
        ],
    }
    # The same planned-action hash as a tool call's, so a phone recomputes it from what the card shows.
    planned = action_sha256(CONSOLE_LOGIN, sign_in.sign_in_id, CONSOLE_LOGIN, arguments, preview)
    window = int((sign_in.expires_at - now).total_seconds())
    return Approval(
        tenant_id=sign_in.tenant_id,
        approval_id=new_prefixed_id("apr"),
        user_id=user_id,
        agent_id="",
        invocation_id=None,
        kind=CONSOLE_LOGIN,
        subject=sign_in.sign_in_id,
        prompt="Sign in to your tapgate console? Approve only if you started it and its code matches.",
        preview=preview,
        sign=new_sign_block(planned, now, max(1, window)),
        binding_code=code,
        status=ApprovalStatus.PENDING,
        created_at=now,
        expires_at=sign_in.expires_at,
        tool=CONSOLE_LOGIN,
        arguments=arguments,
    )


async def login_decided(
    uow: UnitOfWork,
    caller: Principal,
    approval: Approval,
    decision: Decision,
    by: str,
    device_id: str | None,
    now: datetime,
) -> Approval:
    """Apply a checked decision on a console_login approval: the waiting browser may now take its
    session, or not. Raises Conflict."""
    data = {"device_id": device_id, "kind": CONSOLE_LOGIN, "sign_in_id": approval.subject}
    decided = await record_decision(uow, caller, approval, decision, by, now, data)
    sign_in = await uow.sign_ins.get(approval.subject)
    if (
        sign_in is not None
        and sign_in.status is SignInStatus.ASKED
        and sign_in.approval_id == approval.approval_id
    ):
        answered = SignInStatus.APPROVED if decided.status is ApprovalStatus.APPROVED else SignInStatus.DENIED
        await uow.sign_ins.save(replace(sign_in, status=answered), SignInStatus.ASKED)
        uow.notify(sign_in_key(uow.tenant_id, sign_in.sign_in_id))
    return decided


async def sign_in_state(ctx: Context, token: str) -> tuple[SignIn, Approval | None]:
    """Where a browser's sign-in stands, and the approval a phone opened for it. Raises Gone."""
    presented = parse_sign_in(token)
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        sign_in = await uow.sign_ins.get(presented.sign_in_id)
        if sign_in is None:
            raise Gone("This sign-in has ended; reload the console.")
        check_secret(
            presented.secret, sign_in.secret_hash, Gone("This sign-in has ended; reload the console.")
        )
        approval = await uow.approvals.get(sign_in.approval_id) if sign_in.approval_id else None
    return sign_in, approval


async def finish_sign_in(ctx: Context, token: str, browser: str) -> NewSession:
    """Turn an approved sign-in (a phone's yes, or an operator's link) into a session, once.
    Raises Gone (expired, used, denied, not yet approved: the message says which), Unauthenticated."""
    presented = parse_sign_in(token)
    now = ctx.clock.now()
    ended = Gone("This sign-in link has been used or has expired; ask for a new one.")
    secret, secret_hash = new_secret()
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        sign_in = await uow.sign_ins.get(presented.sign_in_id)
        if sign_in is None:
            raise ended
        check_secret(presented.secret, sign_in.secret_hash, ended)
        if sign_in.status is SignInStatus.DENIED:
            raise Gone("Your phone declined this sign-in.")
        if sign_in.status is not SignInStatus.APPROVED or now >= sign_in.expires_at:
            raise ended
        assert sign_in.user_id is not None
        if not await uow.sign_ins.save(sign_in.used(), SignInStatus.APPROVED):
            raise ended
        session = ConsoleSession(
            tenant_id=sign_in.tenant_id,
            session_id=new_id(),
            user_id=sign_in.user_id,
            secret_hash=secret_hash,
            via=sign_in.kind,
            created_at=now,
            expires_at=now + SESSION_LIFETIME,
            browser=_browser(browser),
        )
        await uow.console_sessions.add(session)
        await uow.journal.append(
            AuditRecord(
                "console.signed_in",
                f"user:{session.user_id}",
                subject=session.session_id,
                data={"via": sign_in.kind.value, "sign_in_id": sign_in.sign_in_id},
            ),
            now,
        )
    return NewSession(session, cookie_value(session.tenant_id, session.session_id, secret))


async def authenticate(ctx: Context, cookie: str) -> tuple[ConsoleSession, str]:
    """The live session behind a console cookie and the cookie's secret. Raises Unauthenticated."""
    presented = parse_cookie(cookie)
    refused = Unauthenticated("Your console session has ended; sign in again.")
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        session = await uow.console_sessions.get(presented.session_id)
    if session is None or not session.live_at(ctx.clock.now()):
        raise refused
    check_secret(presented.secret, session.secret_hash, refused)
    return session, presented.secret


async def sessions(ctx: Context, session: ConsoleSession) -> Sequence[ConsoleSession]:
    async with ctx.store.unit_of_work(session.tenant_id) as uow:
        return await uow.console_sessions.list_for(session.user_id)


async def revoke_session(ctx: Context, session: ConsoleSession, session_id: str) -> None:
    """End one of the person's console sessions (this one included). Raises NotFound."""
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(session.tenant_id) as uow:
        target = await uow.console_sessions.get(session_id)
        if target is None or target.user_id != session.user_id:
            raise NotFound("There is no such console session.")
        if await uow.console_sessions.revoke(session_id, now):
            await uow.journal.append(
                AuditRecord("console.session_revoked", f"user:{session.user_id}", subject=session_id), now
            )


async def set_paused(ctx: Context, caller: Principal, paused: bool) -> bool:
    """Pause (or resume) every agent of the person: their calls are refused until resumed."""
    caller.require(TokenKind.USER)
    assert caller.user_id is not None
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        await uow.pauses.pause(caller.user_id, ALL_AGENTS, PAUSED_UNTIL if paused else now)
        await uow.journal.append(
            AuditRecord(
                "agents.paused" if paused else "agents.resumed", caller.actor, subject=caller.user_id
            ),
            now,
        )
        await uow.events.append(
            caller.user_id, AGENTS_PAUSED if paused else AGENTS_RESUMED, {"user_id": caller.user_id}, now
        )
        uow.notify(events_key(caller.tenant_id, caller.user_id))
    return paused


async def paused(ctx: Context, caller: Principal) -> bool:
    assert caller.user_id is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        return await is_paused(uow, caller.user_id, ctx.clock.now())


async def is_paused(uow: UnitOfWork, user_id: str, now: datetime) -> bool:
    return is_paused_until(await uow.pauses.paused_until(user_id, ALL_AGENTS), now)


def is_paused_until(until: datetime | None, now: datetime) -> bool:
    """Whether a pause that lasts ``until`` (None: never paused) holds at ``now``."""
    return until is not None and until > now


@dataclass(frozen=True, slots=True)
class CallRow:
    """One line of the person's call history: a call that made a row, or one refused before it."""

    at: datetime
    tool: str
    agent_id: str
    status: str
    reason: str
    invocation_id: str


async def calls(
    ctx: Context, caller: Principal, agent_id: str | None = None, status: str | None = None
) -> list[CallRow]:
    """The person's calls, newest first: every call with a row, and the refused ones from the journal."""
    assert caller.user_id is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        rows: list[Invocation] = list(
            await uow.invocations.history(caller.user_id, _HISTORY_MAX, agent_id, status)
        )
        entries = await _recent_entries(uow)
    out = [
        CallRow(
            i.created_at, i.tool, i.agent_id, i.status.value, i.reason or i.message or "", i.invocation_id
        )
        for i in rows
    ]
    prefix = f"agent:{caller.user_id}/"
    for e in entries:
        if e.action not in ("invocation.refused", "invocation.unavailable") or not e.actor.startswith(prefix):
            continue
        agent = e.actor[len(prefix) :]
        if (agent_id is not None and agent != agent_id) or (status is not None and e.outcome != status):
            continue
        out.append(CallRow(e.at, str(e.data.get("tool") or ""), agent, e.outcome, e.reason, e.subject))
    out.sort(key=lambda r: r.at, reverse=True)
    return out[:_HISTORY_MAX]


async def _recent_entries(uow: UnitOfWork) -> Sequence[AuditEntry]:
    head = await uow.journal.head()
    last = head[0] if head else 0
    return await uow.journal.read(max(0, last - _AUDIT_WINDOW), _AUDIT_WINDOW)


def concerns(entry: AuditEntry, user_id: str) -> bool:
    """Whether a journal entry is the person's own: by them, their agents or devices, or about them."""
    actor = entry.actor
    return (
        actor == f"user:{user_id}"
        or actor.startswith((f"agent:{user_id}/", f"device:{user_id}/"))
        or entry.data.get("user_id") == user_id
        or entry.subject == user_id
    )


async def audit(ctx: Context, caller: Principal) -> list[AuditEntry]:
    """The person's own entries among the tenant's newest, newest first."""
    assert caller.user_id is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        entries = await _recent_entries(uow)
    return [e for e in reversed(entries) if concerns(e, caller.user_id)]


async def user(ctx: Context, caller: Principal) -> User:
    assert caller.user_id is not None
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        found = await uow.users.get(caller.user_id)
    if found is None:
        raise Unauthenticated("Your console session has ended; sign in again.")
    return found


def require_signature_for_login(approval: Approval, signed: bool) -> None:
    """Only a paired device's key signs a person into the console: no token decides it without one."""
    if approval.kind == CONSOLE_LOGIN and not signed:
        raise Forbidden("A console sign-in is approved on a paired phone, with its key.")
