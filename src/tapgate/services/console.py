"""The person's console: signing in by the phone or an operator's link, its sessions, and the switch that
pauses every agent of the person.

A phone sign-in is an approval of kind ``console_login`` that a paired device signs with its key, like any
other decision; the browser that started it, holding the sign-in's secret, then takes a 12-hour session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from tapgate.domain.accounts import User
from tapgate.domain.approvals import Decision, action_sha256, new_sign_block
from tapgate.domain.audit import AuditEntry, AuditRecord
from tapgate.domain.console import (
    ALL_AGENTS,
    CONSOLE_LOGIN,
    LINK_LIFETIME,
    PAUSED_REASON,
    SESSION_LIFETIME,
    SIGN_IN_LIFETIME,
    ConsoleSession,
    SignIn,
    SignInKind,
    SignInStarts,
    SignInStatus,
    cookie_value,
    describe_browser,
    new_id,
    new_secret,
    parse_cookie,
    parse_sign_in,
    same_network,
    sign_in_token,
)
from tapgate.domain.console import check as check_secret
from tapgate.domain.devices import Device
from tapgate.domain.errors import Conflict, Forbidden, Gone, NotFound, RateLimited, Unauthenticated
from tapgate.domain.events import AGENTS_PAUSED, AGENTS_RESUMED
from tapgate.domain.ids import check_slug
from tapgate.domain.ids import new_id as new_prefixed_id
from tapgate.domain.inbox import Approval, ApprovalStatus, binding_code
from tapgate.domain.invocations import Invocation, Status
from tapgate.domain.principals import Principal, TokenKind
from tapgate.ports import UnitOfWork
from tapgate.services.context import Context, events_key, inbox_key, sign_in_key
from tapgate.services.decisions import record_decision
from tapgate.services.endings import refuse_unhanded

NOT_AN_APPROVER = (
    "Only a device that approves for you signs you in to the console: use your phone, or grant this device "
    "'approvals' first."
)
PAUSED_UNTIL = datetime.fromisoformat("9999-12-31T00:00:00+00:00")  # "until resumed"
_HISTORY_MAX = 200
_AUDIT_WINDOW = 1000  # the newest entries of the tenant the console looks through for the person's own
_SWEEP_BATCH = 500
_TOUCH_EVERY = timedelta(minutes=1)  # a session's last use is written at most this often


@dataclass(frozen=True, slots=True)
class NewSession:
    session: ConsoleSession
    cookie: str


async def start_phone_sign_in(
    ctx: Context, starts: SignInStarts, tenant_id: str, user_agent: str, address: str
) -> tuple[SignIn, str]:
    """A sign-in a phone can answer, and the token only the starting browser holds. An unknown tenant
    gets the same answer, with nothing stored (nobody can answer it). Raises InvalidInput, RateLimited."""
    check_slug(tenant_id, "tenant")
    now = ctx.clock.now()
    wait = starts.take(address, now)
    if wait:
        raise RateLimited(
            f"Too many console sign-ins were started from your address; try again in {wait} seconds "
            "(or sign in with the one already on your screen).",
            wait,
        )
    secret, secret_hash = new_secret()
    sign_in = SignIn(
        tenant_id=tenant_id,
        sign_in_id=new_id(),
        kind=SignInKind.PHONE,
        secret_hash=secret_hash,
        status=SignInStatus.WAITING,
        created_at=now,
        expires_at=now + SIGN_IN_LIFETIME,
        browser=describe_browser(user_agent),
        address=address,
    )
    async with ctx.store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is not None:
            await uow.sign_ins.add(sign_in)
    return sign_in, sign_in_token(tenant_id, sign_in.sign_in_id, secret)


async def sweep_sign_ins(ctx: Context) -> int:
    """Delete every console sign-in that has expired (answered or not); return how many."""
    now = ctx.clock.now()
    count = 0
    for tenant_id in await ctx.store.tenant_ids():
        while True:
            async with ctx.store.unit_of_work(tenant_id) as uow:
                deleted = await uow.sign_ins.delete_ended(now, _SWEEP_BATCH)
            count += deleted
            if deleted < _SWEEP_BATCH:
                break
    return count


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


async def ask_phone(ctx: Context, caller: Principal, sign_in_id: str, address: str) -> Approval:
    """The paired phone that scanned the console's code (its request from ``address``) opens a
    console_login approval for its person; only an approver (a device that approves for the person) may.
    Raises Forbidden, NotFound, Gone, Conflict."""
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
        approval = _login_approval(ctx, sign_in, caller.user_id, same_network(sign_in.address, address), now)
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


def network_line(address: str, on_phones_network: bool) -> str:
    """Where the browser asking to sign in is, as the server saw it: what the card says first."""
    if on_phones_network:
        return f"on this phone's network ({address})"
    return f"from another network: {address or 'an unknown address'}"


def _login_approval(
    ctx: Context, sign_in: SignIn, user_id: str, on_phones_network: bool, now: datetime
) -> Approval:
    code = binding_code()
    where = network_line(sign_in.address, on_phones_network)
    arguments = {
        "sign_in_id": sign_in.sign_in_id,
        "address": sign_in.address,
        "network": "same" if on_phones_network else "other",
        "browser": sign_in.browser,
        "code": code,
    }
    preview = {
        "kind": CONSOLE_LOGIN,
        "fields": [
            {"label": "Requested", "value": where},
            {"label": "Browser (as it says)", "value": sign_in.browser},
            {"label": "Code on the console", "value": code},
        ],
    }
    # The same planned-action hash as a tool call's, so a phone recomputes it from what the card shows.
    planned = action_sha256(CONSOLE_LOGIN, sign_in.sign_in_id, CONSOLE_LOGIN, arguments, preview)
    window = int((sign_in.expires_at - now).total_seconds())
    caution = "" if on_phones_network else " It comes from another network than this phone's."
    return Approval(
        tenant_id=sign_in.tenant_id,
        approval_id=new_prefixed_id("apr"),
        user_id=user_id,
        agent_id="",
        invocation_id=None,
        kind=CONSOLE_LOGIN,
        subject=sign_in.sign_in_id,
        prompt=(
            f"Sign in to your tapgate console {where}?{caution} Approve only if you started it on a "
            "computer in front of you and its code matches."
        ),
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
        signer = await uow.devices.get(approval.user_id, device_id) if device_id else None
        await uow.sign_ins.save(
            replace(
                sign_in,
                status=answered,
                approver_uid=signer.device_uid if signer else None,
                approver_id=signer.device_id if signer else None,
            ),
            SignInStatus.ASKED,
        )
        uow.notify(sign_in_key(uow.tenant_id, sign_in.sign_in_id))
    return decided


async def sign_in_state(ctx: Context, token: str) -> tuple[SignIn, Approval | None]:
    """Where a browser's phone sign-in stands, and the approval a phone opened for it. One of an unknown
    tenant waits, unanswered, like any other nobody has scanned. Raises Gone."""
    presented = parse_sign_in(token)
    ended = Gone("This sign-in has ended; reload the console.")
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        sign_in = await uow.sign_ins.get(presented.sign_in_id)
        if sign_in is None and await uow.tenants.get() is None:
            now = ctx.clock.now()
            return _unanswerable(presented.tenant_id, presented.sign_in_id, now), None
        if sign_in is None or sign_in.kind is not SignInKind.PHONE:
            raise ended
        check_secret(presented.secret, sign_in.secret_hash, ended)
        approval = await uow.approvals.get(sign_in.approval_id) if sign_in.approval_id else None
    return sign_in, approval


def _unanswerable(tenant_id: str, sign_in_id: str, now: datetime) -> SignIn:
    return SignIn(
        tenant_id, sign_in_id, SignInKind.PHONE, "", SignInStatus.WAITING, now, now + SIGN_IN_LIFETIME
    )


async def finish_sign_in(ctx: Context, token: str, kind: SignInKind, user_agent: str) -> NewSession:
    """Turn an approved sign-in of ``kind`` (a phone's yes, held by the browser that started it, or an
    operator's link) into a session, once. A token of the other kind is refused like a spent one.
    Raises Gone (expired, used, denied, not yet approved: the message says which), Unauthenticated."""
    presented = parse_sign_in(token)
    now = ctx.clock.now()
    ended = Gone("This sign-in link has been used or has expired; ask for a new one.")
    secret, secret_hash = new_secret()
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        sign_in = await uow.sign_ins.get(presented.sign_in_id)
        if sign_in is None or sign_in.kind is not kind:
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
            browser=describe_browser(user_agent),
            approver_uid=sign_in.approver_uid,
            approver_id=sign_in.approver_id,
        )
        await uow.console_sessions.add(session)
        await uow.journal.append(
            AuditRecord(
                "console.signed_in",
                f"user:{session.user_id}",
                subject=session.session_id,
                data={
                    "via": sign_in.kind.value,
                    "sign_in_id": sign_in.sign_in_id,
                    "device_id": sign_in.approver_id or "",
                },
            ),
            now,
        )
    return NewSession(session, cookie_value(session.tenant_id, session.session_id, secret))


async def authenticate(ctx: Context, cookie: str) -> tuple[ConsoleSession, str]:
    """The live session behind a console cookie and the cookie's secret. Raises Unauthenticated."""
    presented = parse_cookie(cookie)
    refused = Unauthenticated("Your console session has ended; sign in again.")
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(presented.tenant_id) as uow:
        session = await uow.console_sessions.get(presented.session_id)
    if session is None or not session.live_at(now):
        raise refused
    check_secret(presented.secret, session.secret_hash, refused)
    if session.last_used_at is None or now - session.last_used_at >= _TOUCH_EVERY:
        async with ctx.store.unit_of_work(presented.tenant_id) as uow:
            await uow.console_sessions.touch(session.session_id, now)
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


async def end_sessions_signed_by(uow: UnitOfWork, device: Device, actor: str, now: datetime) -> None:
    """The device that signed console sessions in is gone: so are they."""
    for session_id in await uow.console_sessions.revoke_signed_by(device.device_uid, now):
        await uow.journal.append(
            AuditRecord(
                "console.session_revoked",
                actor,
                subject=session_id,
                data={"user_id": device.user_id, "device_id": device.device_id},
            ),
            now,
        )


async def set_paused(ctx: Context, caller: Principal, paused: bool) -> bool:
    """Pause (or resume) every agent of the person: their calls are refused until resumed, those already
    waiting for an approval or not yet handed to a device included (their approvals close)."""
    caller.require(TokenKind.USER)
    assert caller.user_id is not None
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        await uow.pauses.pause(caller.user_id, ALL_AGENTS, PAUSED_UNTIL if paused else now)
        refused = 0
        if paused:
            refused = await refuse_unhanded(uow, caller.user_id, f"[deny] {PAUSED_REASON}", caller.actor, now)
        await uow.journal.append(
            AuditRecord(
                "agents.paused" if paused else "agents.resumed",
                caller.actor,
                subject=caller.user_id,
                data={"user_id": caller.user_id, **({"refused": refused} if paused else {})},
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
    provable: bool = False  # decided by a signed approval, or made under a mandate: it has a proof


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
            i.created_at,
            i.tool,
            i.agent_id,
            i.status.value,
            i.reason or i.message or "",
            i.invocation_id,
            i.mandate_id is not None
            or (i.approval_id is not None and i.status is not Status.AWAITING_APPROVAL),
        )
        for i in rows
    ]
    for e in entries:
        refused = e.action in ("invocation.refused", "invocation.unavailable")
        if not refused or not e.actor.startswith("agent:") or actor_user(e.actor) != caller.user_id:
            continue
        agent = e.actor.partition("/")[2]
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
    """Whether a journal entry is the person's own: by them, their agents or devices, or naming them as
    its ``user_id``. Never by its subject, which may be anyone's id that happens to read the same."""
    return actor_user(entry.actor) == user_id or entry.data.get("user_id") == user_id


def actor_user(actor: str) -> str | None:
    """The user an actor acts as (``user:ana``, ``agent:ana/…``, ``device:ana/…``); None for the
    operator and the system. User ids are slugs, so the part before ``/`` is the whole id."""
    kind, _, rest = actor.partition(":")
    if kind == "user":
        return rest
    if kind in ("agent", "device"):
        user, slash, _ = rest.partition("/")
        return user if slash else None
    return None


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
