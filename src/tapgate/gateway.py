"""The one object the HTTP API, the MCP server and the CLI call."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tapgate.domain.accounts import User
from tapgate.domain.audit import AuditEntry
from tapgate.domain.principals import Principal, TokenKind
from tapgate.ports import Clock, Store
from tapgate.services import accounts, journal


@dataclass(frozen=True, slots=True)
class Limits:
    invocation_timeout_seconds: int = 300
    device_call_timeout_seconds: int = 10
    ingest_daily_cap: int = 500
    approval_sign_ttl_seconds: int = 3600
    max_devices_per_user: int = 10
    max_open_confirmations: int = 5
    require_device_signature: bool = False


class Gateway:
    """Use cases behind every edge. Each method is one transaction (or a read) and raises TapgateError.

    A method that takes a caller first states which token kinds and scope it needs (``caller.require``),
    so the HTTP API, the MCP server and the CLI share one authorization rule per use case.
    """

    def __init__(self, store: Store, clock: Clock, limits: Limits, device_channel: bool) -> None:
        self.store = store
        self.clock = clock
        self.limits = limits
        self.device_channel = device_channel

    async def close(self) -> None:
        await self.store.close()

    async def ready(self) -> None:
        await self.store.ping()

    # tenants, users, tokens

    async def create_tenant(self, name: str) -> accounts.NewToken:
        return await accounts.create_tenant(self.store, self.clock, name)

    async def create_operator_token(self, tenant_id: str) -> accounts.NewToken:
        return await accounts.create_operator_token(self.store, self.clock, tenant_id)

    async def authenticate(self, token: str) -> Principal:
        return await accounts.authenticate(self.store, token)

    async def create_user(self, caller: Principal, user_id: str, display_name: str | None) -> User:
        caller.require(TokenKind.OPERATOR)
        return await accounts.create_user(self.store, self.clock, caller, user_id, display_name)

    async def create_token(
        self,
        caller: Principal,
        user_id: str,
        kind: TokenKind,
        scopes: Iterable[str] | None = None,
        agent_id: str | None = None,
        require_device_signature: bool | None = None,
    ) -> accounts.NewToken:
        caller.require(TokenKind.OPERATOR)
        return await accounts.create_token(
            self.store, self.clock, caller, user_id, kind, scopes, agent_id, require_device_signature
        )

    # the audit journal

    async def audit(self, caller: Principal, after: int, limit: int) -> Sequence[AuditEntry]:
        caller.require(TokenKind.OPERATOR)
        return await journal.read_audit(self.store, caller.tenant_id, after, limit)

    async def verify_audit(self, tenant_id: str | None = None) -> dict[str, int]:
        """Entry counts per verified tenant; raises BrokenChain at the first bad entry."""
        tenants = [tenant_id] if tenant_id else list(await self.store.tenant_ids())
        return {t: await journal.verify_audit(self.store, t) for t in tenants}
