"""Approvals waiting for the person: what the card shows (prompt, preview, binding code) and its state.

The preview is rendered by the server from the real arguments, and its hash is inside the signed action,
so what the person is shown is what they sign. The binding code is short and on both the card and the
agent's view of the call, so the person can match the phone to the conversation.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from tapgate.domain.approvals import SignBlock
from tapgate.domain.capabilities import traits
from tapgate.domain.devices import Capability, Device, DeviceStatus, in_words
from tapgate.domain.errors import Conflict, TooLongToShow
from tapgate.domain.shown import PREVIEW_MAX, VALUE_MAX
from tapgate.domain.shown import shown as _shown

# No 0/O, 1/I/L, 2/Z, 5/S, 8/B: a code read aloud or across a room is not misread.
_BINDING_ALPHABET = "ACDEFGHJKMNPQRTUVWXY34679"
PREVIEW_VALUE_MAX = VALUE_MAX  # no value is ever cut: a longer one refuses the call


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Approval:
    tenant_id: str
    approval_id: str
    user_id: str
    agent_id: str
    invocation_id: str | None  # None for an approval no agent's call waits on (device_pair, console_login)
    kind: str  # the capability, or what else the person approves (device_pair, console_login)
    subject: str  # the device id
    prompt: str
    preview: Mapping[str, Any]
    sign: SignBlock
    binding_code: str
    status: ApprovalStatus
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    tool: str = ""  # with kind, subject, arguments and the preview: the planned action a phone re-hashes
    arguments: Mapping[str, Any] | None = None

    @property
    def agent_asks(self) -> bool:
        """Whether an agent's call waits on it: only then may the person answer "this wasn't me"."""
        return self.invocation_id is not None

    def decided(self, status: ApprovalStatus, by: str, now: datetime) -> Approval:
        if self.status is not ApprovalStatus.PENDING:
            raise Conflict(f"This approval was decided already: {self.status.value}.")
        return replace(self, status=status, decided_by=by, decided_at=now)


def may_answer(device: Device, kind: str, subject: str, call: bool) -> bool:
    """Whether ``device`` receives and signs an approval of ``kind`` about ``subject`` (``call``: an
    agent's call waits on it). An approver answers every approval of its person; any other device only
    the approvals of calls to itself, on a capability it declares with ``confirm``."""
    if device.status is not DeviceStatus.ACTIVE:
        return False
    if device.approver:
        return True
    declared = device.declared(kind) if call and subject == device.device_id else None
    return declared is not None and declared.capability.confirm


def answers(device: Device, approval: Approval) -> bool:
    """Whether ``device`` receives and signs ``approval`` (``may_answer``)."""
    return may_answer(device, approval.kind, approval.subject, approval.invocation_id is not None)


def erased_preview(kind: str) -> dict[str, Any]:
    """What an approval's preview becomes once retention erased the message it showed."""
    return {"kind": kind, "fields": [], "erased": True}


def binding_code() -> str:
    return "".join(secrets.choice(_BINDING_ALPHABET) for _ in range(4))


YOUR_ASSISTANT = "your assistant"  # who asks, for an agent token minted without a name
THE_DEVICE_ASKS = "the device asks for a yes"


def who_asks(agent_name: str | None) -> str:
    """Who asks, as the person's cards name an agent: its token's name, or "your assistant"."""
    return agent_name or YOUR_ASSISTANT


THE_POLICY_ASKS = "your gateway's policy asks you first"


def why_asked(policy_asks: bool, policy_message: str) -> str:
    """Why the person is asked, in their words: when the policy asks, its message (the rule's own
    ``message``, or that it came from a message they received); else the device asks for a yes."""
    if policy_asks:
        return policy_message or THE_POLICY_ASKS
    return THE_DEVICE_ASKS


def render_preview(
    capability: Capability, arguments: Mapping[str, Any], who: str = "", why: str = ""
) -> dict[str, Any]:
    """``{kind, title, description, who, why, fields: [{label, value}]}`` from the real arguments, in the
    capability's own order, each value whole and visible (``shown.shown``); a boolean reads as the
    manifest's ``true_label``/``false_label`` or yes/no. Raises TooLongToShow for a preview too long to
    show."""
    fields = _fields(capability, arguments)
    if sum(len(f["value"]) for f in fields) > PREVIEW_MAX:
        raise TooLongToShow()
    return {
        "kind": capability.name,
        "title": capability.shown_label,
        "description": capability.description,
        "who": who or YOUR_ASSISTANT,
        "why": why,
        "fields": fields,
    }


def _fields(capability: Capability, arguments: Mapping[str, Any]) -> list[dict[str, str]]:
    params = {p.name: p for p in capability.params}
    order = [p.name for p in capability.params]
    keys = [k for k in order if k in arguments] + [k for k in arguments if k not in order]
    fields = []
    for key in keys:
        param = params.get(key)
        value = arguments[key]
        if isinstance(value, bool):
            yes = (param.true_label if param else "") or "yes"
            no = (param.false_label if param else "") or "no"
            value = yes if value else no
        fields.append({"label": param.shown_label if param else in_words(key), "value": _shown(value)})
    return fields


def prompt_for(device: Device, capability: Capability, who: str) -> str:
    """One line the card leads with: who asks, what, and on which device (server-checked text only)."""
    who = who or YOUR_ASSISTANT
    who = who[:1].upper() + who[1:]
    doing = traits(capability.name).card_words
    if doing:
        return f"{who} asks to {doing} from {device.name}."
    return f"{who} asks to use {device.name}: {capability.shown_label}."
