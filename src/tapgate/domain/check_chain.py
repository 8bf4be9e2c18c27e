"""The check chain every call to a device goes through, in its order, as decisions over what was read.

The store is read first (``services/check_chain.py``: the device the tool names with the person's
pauses of every agent and of this one, and the call's session, in one statement for most calls), and
then these decide. The first check that fails is the call's answer, raised as ``Refusal``. ``invoke`` and
``tapgate policy explain`` run the same checks over the same reads, so they never give a call different
verdicts. Only a call that would ask reads more: the person's live mandates, and their open cards.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tapgate.domain import phone_action
from tapgate.domain.capabilities import traits
from tapgate.domain.console import PAUSED_REASON
from tapgate.domain.devices import PHONE_ACTIONS, Capability, Device, DeviceStatus
from tapgate.domain.errors import InvalidInput
from tapgate.domain.invocations import Status, check_arguments, check_string, strings_in
from tapgate.domain.mandates import Mandate, first_covering
from tapgate.domain.policy import PolicyDecision, PolicyRequest, PolicySet, Verdict, decide
from tapgate.domain.secret_scan import SecretRefused, check_outbound
from tapgate.domain.sessions import Session, SessionKind
from tapgate.domain.tools import PHONE_ACTION, ToolName, meant

__all__ = [
    "Asked",
    "Passed",
    "Read",
    "Refusal",
    "Request",
    "check",
    "check_input",
    "guess_tool",
    "how_asked",
    "tool_name",
    "unknown_tool",
]

UNKNOWN_TOOL = "unknown tool"


class Refusal(Exception):
    """The chain's answer for a call a check refuses: its status, the reason the agent reads (tagged
    ``[deny]`` or ``[policy]``), and what the journal names: the device, the capability, the rule."""

    def __init__(
        self,
        status: Status,
        reason: str,
        device: Device | None = None,
        capability: str = "",
        rule: PolicyDecision | None = None,
    ) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.device = device
        self.capability = capability
        self.rule = rule


def deny(reason: str, device: Device | None = None, capability: str = "") -> Refusal:
    return Refusal(Status.REFUSED, f"[deny] {reason}", device, capability)


def by_policy(
    reason: str, device: Device | None = None, capability: str = "", rule: PolicyDecision | None = None
) -> Refusal:
    return Refusal(Status.REFUSED, f"[policy] {reason}", device, capability, rule)


@dataclass(frozen=True, slots=True)
class Request:
    """The call as the chain sees it."""

    tool: str
    agent_id: str
    session_id: str | None = None
    origin: str = "owner"
    shadow: bool = False
    session_kind: str = ""  # the kind of session supposed when the call names none (policy explain)


@dataclass(frozen=True, slots=True)
class Read:
    """What the store held for the call, read before any check."""

    channel_on: bool
    paused_until: datetime | None = None  # the person's pause of every agent
    agent_paused_until: datetime | None = None  # their pause of this agent ("this wasn't me")
    session: Session | None = None  # the session the call names
    device: Device | None = None  # the live device the tool names; for phone_action, the session's phone
    ever: bool = False  # the named device is gone, but existed: it was removed


@dataclass(frozen=True, slots=True)
class Passed:
    """A call past steps 1-5: its device and capability, and the rules' decision (any verdict)."""

    device: Device
    capability: Capability
    session: Session | None
    origin: str  # "untrusted" for every call of a triage session
    request: PolicyRequest
    decision: PolicyDecision


def tool_name(tool: str) -> ToolName | None:
    """The device__ tool ``tool`` names, or None (``phone_action``, or no such name)."""
    if tool == PHONE_ACTION:
        return None
    try:
        return ToolName.parse(tool)
    except InvalidInput:
        return None


def _paused(until: datetime | None, now: datetime) -> bool:
    return until is not None and until > now


def check(policies: PolicySet, read: Read, request: Request, now: datetime) -> Passed:
    """Steps 1-5: the channel, the person's pause, the device and capability the tool means, the
    person's grant, availability, and the rules. Raises Refusal; a ``block`` comes back as a decision,
    which ``invoke`` refuses and ``policy explain`` explains."""
    # 1. The device channel is on.
    if not read.channel_on:
        raise deny("the device channel is off on this gateway")
    # 1b. The person has not paused every agent (the console's switch).
    if _paused(read.paused_until, now):
        raise deny(PAUSED_REASON)
    # 2. A real device of this user, and a capability it declares.
    session = read.session
    if session is not None and session.agent_id not in ("", request.agent_id):
        session = None
    device, capability = _resolve(read, request, session)
    # 3. The person granted it; no rule can lift this.
    if not device.may_run(capability.name):
        raise deny(
            f"capability not granted: the person has not granted {capability.name} on {device.device_id}",
            device,
            capability.name,
        )
    # 4. Available: phone_action needs an attended session whose latest message came from this phone.
    if capability.name == PHONE_ACTIONS and not _phone_available(session, device):
        raise Refusal(
            Status.UNAVAILABLE, f"[deny] {phone_action.unavailable_text()}", device, capability.name
        )
    # 5. Policy.
    kind = session.kind.value if session is not None else request.session_kind
    origin = "untrusted" if kind == SessionKind.TRIAGE.value else request.origin
    policy_request = PolicyRequest(
        tool=request.tool,
        device_id=device.device_id,
        capability=PHONE_ACTION if capability.name == PHONE_ACTIONS else capability.name,
        capability_kind=capability.kind.value,
        agent_id=request.agent_id,
        session_id=request.session_id or "",
        session_kind=kind,
        origin=origin,
        shadow=request.shadow,
    )
    return Passed(device, capability, session, origin, policy_request, decide(policies, policy_request))


def _resolve(read: Read, request: Request, session: Session | None) -> tuple[Device, Capability]:
    """The device and capability a tool name means, or the refusal that says what is wrong with it:
    ``unknown tool`` only for a name that never existed for this person."""
    if request.tool == PHONE_ACTION:
        if request.session_id is None:
            raise deny("phone_action needs a session_id: the session the person's message came in")
        if session is None:
            raise deny(f"unknown session: this agent has no session {request.session_id!r}")
        device = read.device
        if device is None or device.declared(PHONE_ACTIONS) is None:
            raise Refusal(Status.UNAVAILABLE, f"[deny] {phone_action.unavailable_text()}")
        _usable(device)
        declared = device.declared(PHONE_ACTIONS)
        assert declared is not None
        return device, declared.capability
    name = tool_name(request.tool)
    found = read.device
    if name is None:
        raise deny(UNKNOWN_TOOL)
    if found is None:
        if read.ever:
            raise deny(f"device revoked: the person removed {name.device_id}; its tools are gone")
        raise deny(UNKNOWN_TOOL)
    _usable(found)
    declared = found.declared(name.capability)
    if declared is None or not declared.capability.device_tool:  # phone_actions, approvals: never tools
        raise deny(UNKNOWN_TOOL)
    return found, declared.capability


def unknown_tool(refusal: Refusal) -> bool:
    return refusal.reason == f"[deny] {UNKNOWN_TOOL}"


def guess_tool(refusal: Refusal, tool: str, devices: Sequence[Device]) -> Refusal:
    """An ``unknown tool`` refusal with the tool of this person's the name is most likely a typo of: only
    tools this agent may list itself (another person's never). Any other refusal as it is."""
    if not unknown_tool(refusal):
        return refusal
    names = [
        str(ToolName(device.device_id, capability.name))
        for device in devices
        if device.status is DeviceStatus.ACTIVE
        for capability in device.granted()
        if capability.device_tool
    ]
    guess = meant(tool, names)
    return deny(f"{UNKNOWN_TOOL}; did you mean {guess}?") if guess else refusal


def _usable(device: Device) -> None:
    if device.status is DeviceStatus.REVOKED:
        raise deny(f"device revoked: the person removed {device.device_id}; its tools are gone", device)
    if device.status is not DeviceStatus.ACTIVE:
        raise deny(f"device not paired yet: {device.device_id} waits for the person to confirm it", device)


def _phone_available(session: Session | None, device: Device) -> bool:
    if session is None:
        return False
    return session.latest_device_uid == device.device_uid and phone_action.is_available(
        session.attended, session.latest_capabilities, session.kind.value
    )


def check_input(
    passed: Passed, arguments: Mapping[str, Any], online: bool, if_offline: str
) -> dict[str, Any]:
    """Steps 5b-7b for a call past ``check``: a ``block`` refuses; the input fits the capability's
    params and its own checks; no outbound text carries a secret; and the agent that asked not to wait
    for an offline device is refused when it is (``online``: a live link or a push route). The payload
    the device gets. Raises Refusal."""
    device, capability, decision = passed.device, passed.capability, passed.decision
    if decision.verdict is Verdict.BLOCK:
        raise by_policy(decision.reason, device, capability.name, decision)
    # 6. Input: the capability's params, then its own checks.
    try:
        for field, text in strings_in(arguments):
            check_string(field, text)
        if capability.name == PHONE_ACTIONS:
            payload = phone_action.validate(arguments).payload()
        else:
            payload = check_arguments(capability, arguments)
    except phone_action.PhoneActionRefused as e:
        raise deny(e.text, device, capability.name) from None
    except InvalidInput as e:
        raise deny(e.message, device, capability.name) from None
    # 7. Hardline scan on every outbound text, before any row exists.
    try:
        check_outbound(strings_in(payload))
    except SecretRefused as e:
        raise Refusal(Status.REFUSED, e.message, device, capability.name) from None
    # 7b. Offline: the agent asked not to wait for a device that has no live link and no push route.
    if if_offline == "fail" and not online:
        raise Refusal(
            Status.UNAVAILABLE,
            f"[deny] device offline: {device.device_id} has no live link and no push route now; "
            "try again later, or call without if_offline=fail to wait for it",
            device,
            capability.name,
        )
    return payload


@dataclass(frozen=True, slots=True)
class Asked:
    """Step 8's reading of a call past its input checks: whether it would ask the person, whether a
    mandate may answer for them instead, and whether the open cards are to be counted."""

    ask: bool  # a rule or the capability asks the person
    coverable: bool  # a live mandate may answer instead
    heard: bool  # it asks, or waits on the device's own screen: the person's pause of the agent holds


def how_asked(passed: Passed, shadow: bool) -> Asked:
    """A live mandate the person signed may answer for them only for their own agent's calls (never a
    triage session's, a shadow run's, or a phone action), and only where a call would ask: a block
    rule, an ungranted capability and the device's own on-screen step are past its reach."""
    name = passed.capability.name
    ask = passed.decision.verdict is Verdict.ASK or passed.capability.confirm
    coverable = ask and passed.origin == "owner" and not shadow and name != PHONE_ACTIONS
    return Asked(ask, coverable, ask or traits(name).confirmed_on_screen)


def paused_agent(passed: Passed, until: datetime | None, now: datetime) -> None:
    """A paused agent ("this wasn't me") is asked nothing, and no mandate answers for it either."""
    if until is not None and until > now:
        raise by_policy(
            f"the person said a request from this agent wasn't them; its requests are paused until "
            f"{until.strftime('%H:%M')} UTC",
            passed.device,
            passed.capability.name,
        )


def covering(
    mandates: Sequence[Mandate], request: Request, payload: Mapping[str, Any], now: datetime
) -> Iterator[Mandate]:
    """The live mandates that cover the call, the one to spend first first, each checked when reached."""
    return first_covering(mandates, request.agent_id, request.tool, payload, now)
