"""Tenants, users and tokens: create them, and turn a presented token into a principal."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tapgate.domain.accounts import AGENT_NAME_MAX, Credential, Tenant, User
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import InvalidInput, NotFound, Unauthenticated
from tapgate.domain.ids import check_slug
from tapgate.domain.principals import SCOPES_BY_KIND, Principal, Scope, TokenKind
from tapgate.domain.text import check_display_text
from tapgate.domain.tokens import check_secret, issue_token, parse_token
from tapgate.ports import Clock, Store
from tapgate.services.context import TENANTS_KEY


@dataclass(frozen=True, slots=True)
class NewToken:
    token: str
    kind: TokenKind
    scopes: frozenset[Scope]
    credential_id: str
    expires_at: datetime | None = None


async def create_tenant(store: Store, clock: Clock, name: str, actor: str = "cli") -> NewToken:
    """Create tenant ``name`` with its first operator token. Raises InvalidInput, Conflict."""
    tenant_id = check_slug(name, "name")
    now = clock.now()
    issued = issue_token(TokenKind.OPERATOR, tenant_id)
    async with store.unit_of_work(tenant_id) as uow:
        await uow.tenants.add(Tenant(tenant_id, name, now))
        await uow.credentials.add(
            Credential(
                tenant_id, issued.credential_id, TokenKind.OPERATOR, issued.secret_hash, frozenset(), now
            )
        )
        await uow.journal.append(AuditRecord("tenant.created", actor, subject=tenant_id), now)
        await uow.journal.append(
            AuditRecord("token.created", actor, subject=issued.credential_id, data={"kind": "operator"}),
            now,
        )
        uow.notify(TENANTS_KEY)  # the push worker starts listening for the new tenant's outbox
    return NewToken(issued.token, TokenKind.OPERATOR, frozenset(), issued.credential_id)


MAX_EXPIRY_SECONDS = 10 * 365 * 86_400


def expiry(now: datetime, expires_in_seconds: int | None) -> datetime | None:
    """When a token minted at ``now`` expires (None: never). Raises InvalidInput."""
    if expires_in_seconds is None:
        return None
    if (
        isinstance(expires_in_seconds, bool)
        or not isinstance(expires_in_seconds, int)
        or not 1 <= expires_in_seconds <= MAX_EXPIRY_SECONDS
    ):
        raise InvalidInput(
            "expires_in_seconds",
            f"expires_in_seconds must be a whole number of seconds from 1 to {MAX_EXPIRY_SECONDS}.",
        )
    return now + timedelta(seconds=expires_in_seconds)


async def create_operator_token(
    store: Store, clock: Clock, tenant_id: str, expires_in_seconds: int | None = None, actor: str = "cli"
) -> NewToken:
    """Another operator token for an existing tenant. Raises NotFound."""
    now = clock.now()
    expires_at = expiry(now, expires_in_seconds)
    issued = issue_token(TokenKind.OPERATOR, tenant_id)
    await _tenant_exists(store, tenant_id)
    async with store.unit_of_work(tenant_id) as uow:
        await uow.credentials.add(
            Credential(
                tenant_id,
                issued.credential_id,
                TokenKind.OPERATOR,
                issued.secret_hash,
                frozenset(),
                now,
                expires_at=expires_at,
            )
        )
        await uow.journal.append(
            AuditRecord("token.created", actor, subject=issued.credential_id, data={"kind": "operator"}),
            now,
        )
        uow.notify(TENANTS_KEY)  # the push worker starts listening for the new tenant's outbox
    return NewToken(issued.token, TokenKind.OPERATOR, frozenset(), issued.credential_id, expires_at)


async def create_user(
    store: Store, clock: Clock, caller: Principal, user_id: str, display_name: str | None
) -> User:
    """Add a person to the caller's tenant. Raises InvalidInput, Conflict."""
    check_slug(user_id, "user_id")
    name = check_display_text(display_name if display_name is not None else user_id, "display_name", 80)
    now = clock.now()
    user = User(caller.tenant_id, user_id, name, now)
    async with store.unit_of_work(caller.tenant_id) as uow:
        await uow.users.add(user)
        await uow.journal.append(
            AuditRecord("user.created", caller.actor, subject=user_id, data={"user_id": user_id}), now
        )
    return user


async def list_users(store: Store, caller: Principal) -> Sequence[User]:
    """The caller's tenant's users, by id."""
    async with store.unit_of_work(caller.tenant_id) as uow:
        return await uow.users.list()


def _scopes_for(kind: TokenKind, requested: Iterable[str] | None) -> frozenset[Scope]:
    allowed = SCOPES_BY_KIND[kind]
    if requested is None:
        return allowed
    scopes: set[Scope] = set()
    for name in requested:
        try:
            scope = Scope(name)
        except ValueError:
            scope = None
        if scope is None or scope not in allowed:
            choices = ", ".join(sorted(allowed))
            raise InvalidInput(
                "scopes", f"scopes: {name!r} is not a scope of {kind} tokens; choose from {choices}."
            )
        scopes.add(scope)
    return frozenset(scopes)


async def create_token(
    store: Store,
    clock: Clock,
    caller: Principal,
    user_id: str,
    kind: TokenKind,
    scopes: Iterable[str] | None = None,
    agent_id: str | None = None,
    require_device_signature: bool | None = None,
    expires_in_seconds: int | None = None,
    console_session_id: str | None = None,
    agent_name: str | None = None,
) -> NewToken:
    """Mint a user or agent token bound to ``user_id`` (made in the console session
    ``console_session_id``, if so; an agent token named ``agent_name`` on the person's cards, "your
    assistant" if none). Raises InvalidInput, NotFound."""
    if kind not in (TokenKind.USER, TokenKind.AGENT):
        raise InvalidInput("kind", "kind must be 'user' or 'agent'; device tokens come from enrolment.")
    granted = _scopes_for(kind, scopes)
    if kind is TokenKind.AGENT:
        agent_id = check_slug(agent_id or "default", "agent_id")
        if require_device_signature is not None:
            raise InvalidInput(
                "require_device_signature", "require_device_signature applies to user tokens only."
            )
        agent_name = _agent_name(agent_name)
    elif agent_id is not None:
        raise InvalidInput("agent_id", "agent_id applies to agent tokens only.")
    elif agent_name is not None:
        raise InvalidInput("agent_name", "agent_name applies to agent tokens only.")
    now = clock.now()
    expires_at = expiry(now, expires_in_seconds)
    issued = issue_token(kind, caller.tenant_id)
    await _tenant_exists(store, caller.tenant_id)
    async with store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(
                f"There is no user {user_id!r} in tenant {caller.tenant_id!r}; add them first with "
                f"'tapgate user add --tenant {caller.tenant_id} {user_id}' (or POST /v1/users)."
            )
        await uow.credentials.add(
            Credential(
                caller.tenant_id,
                issued.credential_id,
                kind,
                issued.secret_hash,
                granted,
                now,
                user_id=user_id,
                agent_id=agent_id,
                require_device_signature=require_device_signature,
                expires_at=expires_at,
                console_session_id=console_session_id,
                agent_name=agent_name,
            )
        )
        data = {"kind": str(kind), "user_id": user_id, "scopes": " ".join(sorted(granted))}
        if console_session_id is not None:
            data["console_session_id"] = console_session_id
        await uow.journal.append(
            AuditRecord(
                "token.created",
                caller.actor,
                subject=issued.credential_id,
                data=data,
            ),
            now,
        )
    return NewToken(issued.token, kind, granted, issued.credential_id, expires_at)


async def _tenant_exists(store: Store, tenant_id: str) -> None:
    """Raise NotFound, naming the tenant ``tenant_id`` is most likely a typo of, unless it exists."""
    async with store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is not None:
            return
    close = difflib.get_close_matches(tenant_id, list(await store.tenant_ids()), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else "create it with 'tapgate tenant create'."
    raise NotFound(f"There is no tenant {tenant_id!r}; {hint}")


def _agent_name(name: str | None) -> str | None:
    """An agent's name as the person's cards show it, or None for the default. Raises InvalidInput."""
    if name is None or not name.strip():
        return None
    return check_display_text(" ".join(name.split()), "agent_name", AGENT_NAME_MAX)


async def authenticate(store: Store, token: str) -> Principal:
    """The principal behind a bearer token. Raises Unauthenticated."""
    presented = parse_token(token)
    async with store.unit_of_work(presented.tenant_id) as uow:
        credential = await uow.credentials.get(presented.credential_id)
    if credential is None or credential.kind is not presented.kind or credential.revoked_at is not None:
        raise Unauthenticated("The bearer token is not valid; it may have been revoked.")
    check_secret(presented, credential.secret_hash)
    return credential.principal()
