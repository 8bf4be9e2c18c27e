"""Tokens have a life (DESIGN §15): list them without their secrets, and revoke one (a held request
learns of it through ``token_watch``)."""

from __future__ import annotations

from collections.abc import Sequence

from tapgate.domain.accounts import Credential
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import Conflict, NotFound
from tapgate.domain.principals import Principal, TokenKind
from tapgate.ports import Clock, Store
from tapgate.services.context import auth_key

_NOT_FOUND = "There is no token {!r} you may revoke; list tokens with GET /v1/users/{{user_id}}/tokens."


async def list_for_user(store: Store, caller: Principal, user_id: str) -> Sequence[Credential]:
    """The user's live tokens (user, agent and device), oldest first. Raises NotFound."""
    if not caller.acts_for(user_id):
        raise NotFound(f"There is no user {user_id!r} in this tenant.")
    async with store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user_id) is None:
            raise NotFound(f"There is no user {user_id!r} in this tenant.")
        return await uow.credentials.list(user_id=user_id)


async def list_for_tenant(store: Store, caller: Principal, kind: TokenKind | None) -> Sequence[Credential]:
    """The tenant's live tokens of ``kind`` (every kind when None), oldest first."""
    async with store.unit_of_work(caller.tenant_id) as uow:
        return await uow.credentials.list(kind=kind)


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
        if credential is None or not credential.live(now) or not _may_revoke(caller, credential):
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
