"""Tenants, users and the credentials their tokens stand for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tapgate.domain.principals import Principal, Scope, TokenKind

AGENT_NAME_MAX = 40  # characters of an agent's name on the person's cards


@dataclass(frozen=True, slots=True)
class Tenant:
    tenant_id: str
    name: str
    created_at: datetime
    served_url: str | None = None  # the public_url its devices were last served under
    moved_at: datetime | None = None  # when `serve --move` last moved it to served_url


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
    console_session_id: str | None = None  # an agent token made in the console: the session that made it
    agent_name: str | None = None  # an agent token: who asks, as the person's cards name it

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
            agent_name=self.agent_name,
        )


@dataclass(frozen=True, slots=True)
class ListedToken:
    """One line of a token list: a bearer token, or a console session (kind ``console_session``), which
    is as much a credential of the person's and is revoked the same way."""

    token_id: str
    kind: str
    user_id: str | None
    agent_id: str | None
    scopes: frozenset[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    signed_in_by: str | None = None  # a console session: the device whose signature opened it
    console_session_id: str | None = None  # an agent token: the console session that made it
    agent_name: str | None = None  # an agent token: who asks on the person's cards

    @classmethod
    def of(cls, credential: Credential) -> ListedToken:
        return cls(
            credential.credential_id,
            credential.kind.value,
            credential.user_id,
            credential.agent_id,
            frozenset(credential.scopes),
            credential.created_at,
            credential.expires_at,
            credential.last_used_at,
            console_session_id=credential.console_session_id,
            agent_name=credential.agent_name,
        )
