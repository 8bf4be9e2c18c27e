"""Tenants, users and the credentials their tokens stand for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tapgate.domain.principals import Principal, Scope, TokenKind


@dataclass(frozen=True, slots=True)
class Tenant:
    tenant_id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class User:
    tenant_id: str
    user_id: str
    display_name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Credential:
    """A token as stored: its hash and what it may do, never the token."""

    tenant_id: str
    credential_id: str
    kind: TokenKind
    secret_hash: str
    scopes: frozenset[Scope]
    created_at: datetime
    user_id: str | None = None
    agent_id: str | None = None
    device_uid: str | None = None
    require_device_signature: bool | None = None
    revoked_at: datetime | None = None
    expires_at: datetime | None = None
    last_used_at: datetime | None = None

    def live(self, now: datetime) -> bool:
        """Neither revoked nor past its expiry at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)

    def principal(self) -> Principal:
        return Principal(
            tenant_id=self.tenant_id,
            credential_id=self.credential_id,
            kind=self.kind,
            scopes=self.scopes,
            user_id=self.user_id,
            agent_id=self.agent_id,
            device_uid=self.device_uid,
            require_device_signature=self.require_device_signature,
            expires_at=self.expires_at,
        )
