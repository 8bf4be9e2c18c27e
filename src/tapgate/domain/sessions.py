"""Sessions: the agent runtime's conversations as tapgate knows them (kind, attended, what devices said)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tapgate.domain.devices import CAPABILITY_NAME_RULE, is_capability_name
from tapgate.domain.errors import InvalidInput

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")
MAX_MESSAGE_CAPABILITIES = 32


class SessionKind(StrEnum):
    CHAT = "chat"
    SCHEDULE = "schedule"
    SUBAGENT = "subagent"
    TRIAGE = "triage"


@dataclass(frozen=True, slots=True)
class Session:
    tenant_id: str
    user_id: str
    session_id: str
    agent_id: str
    kind: SessionKind
    attended: bool
    created_at: datetime
    updated_at: datetime
    # The device the latest message came from, and the capabilities that message came with.
    latest_device_uid: str | None = None
    latest_capabilities: tuple[str, ...] = ()
    # The phone whose message last offered phone_actions: phone_action acts on it, and once offered
    # the tool stays listed for the rest of the session.
    phone_device_uid: str | None = None


def check_session_id(value: str, field: str = "session_id") -> str:
    if not _SESSION_ID.fullmatch(value):
        raise InvalidInput(
            field,
            f"{field} must be 1-100 letters, digits, '.', '_', ':' or '-', starting with a letter or digit.",
        )
    return value


def check_message_capabilities(values: Sequence[str], field: str = "capabilities") -> tuple[str, ...]:
    if len(values) > MAX_MESSAGE_CAPABILITIES:
        raise InvalidInput(field, f"{field} may name at most {MAX_MESSAGE_CAPABILITIES} capabilities.")
    for value in values:
        if not is_capability_name(value):
            raise InvalidInput(
                field,
                f"{field} holds {value[:40]!r}, which is not a capability name ({CAPABILITY_NAME_RULE}).",
            )
    return tuple(dict.fromkeys(values))
