"""Tokens have a life: list them without their secrets, and revoke one (a held request
learns of it through ``token_watch``). A console session is listed and revoked with them (kind
``console_session``): it is as much the person's credential."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tapgate.domain.accounts import Credential, ListedToken
from tapgate.domain.audit import AuditRecord
from tapgate.domain.console import CONSOLE_SESSION, ConsoleSession
from tapgate.domain.errors import Conflict, NotFound
from tapgate.domain.principals import Principal, TokenKind
from tapgate.ports import Clock, Store, UnitOfWork
from tapgate.services.context import auth_key

_NOT_FOUND = "There is no token {!r} you may revoke; list tokens with GET /v1/users/{{user_id}}/tokens."


async def list_for_user(store: Store, clock: Clock, caller: Principal, user_id: str) -> Sequence[ListedToken]:
    """The user's live tokens (user, agent and device) and console sessions, oldest first. Raises
    NotFound."""
    if not caller.acts_for(user_id):
        raise NotFound(f"There is no user {user_id!r} in this tenant.")
    async with store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r} in this tenant.")
        credentials = await uow.credentials.list(user_id=user_id)
        sessions = await uow.console_sessions.live(clock.now(), user_id)
    return _merged(credentials, sessions)


async def list_for_tenant(
    store: Store, clock: Clock, caller: Principal, kind: str | None
) -> Sequence[ListedToken]:
    """The tenant's live tokens and console sessions of ``kind`` (every kind when None), oldest first."""
    async with store.unit_of_work(caller.tenant_id) as uow:
        credentials = (
            await uow.credentials.list(kind=TokenKind(kind) if kind else None)
            if kind != CONSOLE_SESSION
            else []
        )
        sessions = await uow.console_sessions.live(clock.now()) if kind in (None, CONSOLE_SESSION) else []
    return _merged(credentials, sessions)


def _merged(credentials: Sequence[Credential], sessions: Sequence[ConsoleSession]) -> list[ListedToken]:
    listed = [ListedToken.of(c) for c in credentials] + [s.listed() for s in sessions]
    return sorted(listed, key=lambda t: (t.created_at, t.token_id))


def _may_revoke(caller: Principal, credential: Credential) -> bool:
    if caller.kind is TokenKind.OPERATOR:
        return True
    return (
        caller.kind is TokenKind.USER
        and credential.user_id == caller.user_id
        and credential.kind in (TokenKind.USER, TokenKind.AGENT)
    )


async def revoke(store: Store, clock: Clock, caller: Principal, token_id: str) -> None:
    """Revoke one token now, in every process (the tenant's auth wake). Raises NotFound, Conflict."""
    now = clock.now()
    async with store.unit_of_work(caller.tenant_id) as uow:
        credential = await uow.credentials.get(token_id)
        if credential is None:
            await _end_console_session(uow, caller, token_id, now)
            return
        if not credential.live(now) or not _may_revoke(caller, credential):
            raise NotFound(_NOT_FOUND.format(token_id))
        if credential.kind is TokenKind.DEVICE:
            raise Conflict(
                "A device token ends with its device: remove the device with "
                "DELETE /v1/users/{user_id}/devices/{device_id}."
            )
        if credential.kind is TokenKind.OPERATOR:
            operators = [c for c in await uow.credentials.list(kind=TokenKind.OPERATOR) if c.live(now)]
            if len(operators) <= 1:
                raise Conflict(
                    "This is the tenant's last operator token; create another with "
                    "'tapgate token create --tenant T --kind operator' before revoking it."
                )
        await uow.credentials.revoke(token_id, now)
        await uow.journal.append(
            AuditRecord(
                "token.revoked",
                caller.actor,
                subject=token_id,
                data={"kind": str(credential.kind), "user_id": credential.user_id or ""},
            ),
            now,
        )
        uow.notify(auth_key(caller.tenant_id))  # every process forgets the token and ends its streams


async def _end_console_session(uow: UnitOfWork, caller: Principal, session_id: str, now: datetime) -> None:
    """A console session is revoked like a token: by its person or an operator. Raises NotFound."""
    session = await uow.console_sessions.get(session_id)
    mine = session is not None and (
        caller.kind is TokenKind.OPERATOR
        or (caller.kind is TokenKind.USER and caller.user_id == session.user_id)
    )
    if session is None or not mine or not session.live_at(now):
        raise NotFound(_NOT_FOUND.format(session_id))
    await uow.console_sessions.revoke(session_id, now)
    await uow.journal.append(
        AuditRecord(
            "console.session_revoked", caller.actor, subject=session_id, data={"user_id": session.user_id}
        ),
        now,
    )
