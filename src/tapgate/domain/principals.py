"""Who calls: token kinds, their scopes, and the principal a token stands for."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tapgate.domain.errors import Forbidden


class TokenKind(StrEnum):
    OPERATOR = "operator"
    USER = "user"
    AGENT = "agent"
    DEVICE = "device"


class Scope(StrEnum):
    DEVICE_READ = "device.read"
    DEVICE_WRITE = "device.write"
    APPROVE = "approve"
    TOOLS = "tools"
    EVENTS = "events"
    NOTICES = "notices"


SCOPES_BY_KIND: dict[TokenKind, frozenset[Scope]] = {
    TokenKind.OPERATOR: frozenset(),
    TokenKind.USER: frozenset({Scope.DEVICE_READ, Scope.DEVICE_WRITE, Scope.APPROVE}),
    TokenKind.AGENT: frozenset({Scope.TOOLS, Scope.EVENTS, Scope.NOTICES}),
    TokenKind.DEVICE: frozenset({Scope.DEVICE_READ, Scope.DEVICE_WRITE}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind a valid token."""

    tenant_id: str
    credential_id: str
    kind: TokenKind
    scopes: frozenset[Scope]
    user_id: str | None = None
    agent_id: str | None = None
    device_uid: str | None = None
    device_id: str | None = None
    require_device_signature: bool | None = None
    expires_at: datetime | None = None
    agent_name: str | None = None  # an agent: who asks, as the person's cards name it

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    @property
    def actor(self) -> str:
        """How the audit journal names this caller: never the token itself."""
        if self.kind is TokenKind.OPERATOR:
            return f"operator:{self.credential_id}"
        if self.kind is TokenKind.AGENT:
            return f"agent:{self.user_id}/{self.agent_id}"
        if self.kind is TokenKind.DEVICE:
            return f"device:{self.user_id}/{self.device_id or self.device_uid}"
        return f"user:{self.user_id}"

    def acts_for(self, user_id: str) -> bool:
        """True for the tenant's operator and for the user's own tokens."""
        return self.kind is TokenKind.OPERATOR or self.user_id == user_id

    def require(self, *kinds: TokenKind, scope: Scope | None = None) -> None:
        """Raise Forbidden unless this caller is one of ``kinds`` holding ``scope`` (operators need none)."""
        if self.kind not in kinds:
            wanted = " or ".join(str(k) for k in kinds)
            raise Forbidden(f"This needs an {wanted} token; this {self.kind} token cannot do it.")
        if scope is not None and self.kind is not TokenKind.OPERATOR and scope not in self.scopes:
            raise Forbidden(f"This token lacks the {scope.value!r} scope; create a token that has it.")
