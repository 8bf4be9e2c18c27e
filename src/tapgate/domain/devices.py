"""Devices and their capability manifests: what a device declares, checked as untrusted input.

A manifest entry:
    {"name": "set_light", "kind": "actuator", "label": "Switch the light", "description": "…",
     "params": {"on": {"type": "boolean", "required": true, "description": "true for on",
                       "label": "Light", "true_label": "On", "false_label": "Off"}},
     "confirm": false}

``label`` (on a capability and on a param) and ``true_label``/``false_label`` (on a boolean param) are what
the person reads on an approval card; without them the card shows the name in words and yes or no.

Names, lengths and counts are bounded, and no text that a person or a model will read may carry a
control, format, bidirectional, invisible or tag character. The built-in capabilities (``sms_send``,
``phone_actions``, ``approvals``) keep the server's own kind, description and params whatever the device
sends.

``approvals`` is no tool: a device that declares it and that the person granted it to is an *approver*,
one that receives and signs the person's approvals (``Device.approver``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeGuard

from tapgate.domain.capabilities import APPROVALS as APPROVALS
from tapgate.domain.capabilities import PHONE_ACTIONS as PHONE_ACTIONS
from tapgate.domain.capabilities import SMS_SEND as SMS_SEND
from tapgate.domain.capabilities import traits
from tapgate.domain.errors import InvalidInput
from tapgate.domain.ids import check_slug
from tapgate.domain.text import check_display_text

DEVICE_ID_MAX = 24
# The one rule for a capability's name, wherever one is given: a manifest, a policy rule, a grant, a
# session's message capabilities, the CLI. A parameter's name follows it too.
CAPABILITY_NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
CAPABILITY_NAME_MAX = 30
CAPABILITY_NAME_RULE = f"lower snake case without '__', at most {CAPABILITY_NAME_MAX} characters"
MAX_CAPABILITIES = 32
MAX_PARAMS = 16
MAX_ENUM = 32
DESCRIPTION_MAX = 500
PARAM_DESCRIPTION_MAX = 200
LABEL_MAX = 60
ENUM_VALUE_MAX = 64
DEVICE_NAME_MAX = 40
PUSH_TOKEN_MAX = 4096
# Brackets and parentheses frame a device in a tool's description: a name may not forge that frame.
_FRAMING = re.compile(r"[\[\]()]")


def is_capability_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a capability name (``CAPABILITY_NAME_RULE``)."""
    return (
        isinstance(value, str)
        and len(value) <= CAPABILITY_NAME_MAX
        and CAPABILITY_NAME.fullmatch(value) is not None
    )


class CapabilityKind(StrEnum):
    SENSOR = "sensor"
    ACTUATOR = "actuator"


class ParamType(StrEnum):
    STRING = "string"
    NUMBER = "number"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    ENUM = "enum"


class DeviceStatus(StrEnum):
    PENDING = "pending"  # paired, waiting for the person's consent
    ACTIVE = "active"
    REVOKED = "revoked"


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: ParamType
    required: bool = False
    description: str = ""
    enum: tuple[str, ...] = ()
    label: str = ""
    true_label: str = ""
    false_label: str = ""

    @property
    def shown_label(self) -> str:
        """What the person reads for this param: its label, or its name in words."""
        return self.label or in_words(self.name)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type.value, "required": self.required}
        if self.description:
            out["description"] = self.description
        if self.enum:
            out["enum"] = list(self.enum)
        for key in ("label", "true_label", "false_label"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string" if self.type is ParamType.ENUM else self.type.value}
        if self.enum:
            schema["enum"] = list(self.enum)
        if self.description:
            schema["description"] = self.description
        return schema


@dataclass(frozen=True, slots=True)
class Capability:
    name: str
    kind: CapabilityKind
    description: str
    params: tuple[Param, ...] = ()
    confirm: bool = False
    label: str = ""

    @property
    def shown_label(self) -> str:
        """What the person reads for this capability: its label, or its name in words."""
        return self.label or in_words(self.name)

    @property
    def builtin(self) -> bool:
        return self.name in BUILTINS

    @property
    def device_tool(self) -> bool:
        """Whether an agent sees and calls it as ``device__<id>__<name>`` once granted."""
        return traits(self.name).device_tool

    @property
    def agent_facing(self) -> bool:
        """Whether its grant changes what an agent may see or call (a tool, or the session's phone)."""
        return traits(self.name).agent_facing

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind.value,
            "description": self.description,
            "params": {p.name: p.as_dict() for p in self.params},
            "confirm": self.confirm,
        }
        if self.label:
            out["label"] = self.label
        return out

    def json_schema(self) -> dict[str, Any]:
        """The arguments as a JSON Schema object that admits nothing else."""
        return {
            "type": "object",
            "properties": {p.name: p.json_schema() for p in self.params},
            "required": [p.name for p in self.params if p.required],
            "additionalProperties": False,
        }


BUILTINS: dict[str, Capability] = {
    SMS_SEND: Capability(
        SMS_SEND,
        CapabilityKind.ACTUATOR,
        "Open a text message on the phone, addressed and written; the person reads it and taps Send.",
        (
            Param(
                "to", ParamType.STRING, True, "The recipient's phone number, e.g. +15551234567", label="To"
            ),
            Param("body", ParamType.STRING, True, "The text of the message", label="Message"),
        ),
        label="Send a text message",
    ),
    PHONE_ACTIONS: Capability(
        PHONE_ACTIONS,
        CapabilityKind.ACTUATOR,
        "Do things on the phone the person confirms there: alarms, timers, routes, calls, messages, events.",
        label="Do something on the phone",
    ),
    APPROVALS: Capability(
        APPROVALS,
        CapabilityKind.ACTUATOR,
        "Approve for the person: show and sign their approvals (agents' calls, new devices, console "
        "sign-ins, grants).",
        label="Approve for you",
    ),
}


def in_words(name: str) -> str:
    """A snake-case name as the person reads it: ``set_light`` is "Set light"."""
    return name.replace("_", " ").capitalize()


@dataclass(frozen=True, slots=True)
class Declared:
    """A capability as declared by a device, and whether the person granted it."""

    capability: Capability
    granted: bool = False


@dataclass(frozen=True, slots=True)
class PushTarget:
    kind: str
    token: str


@dataclass(frozen=True, slots=True)
class Presence:
    """Whether a device is there for a call: what the agent's view says of it (``device_online``)."""

    status: DeviceStatus
    link_until: datetime | None  # a live WebSocket link holds until then
    push: bool  # it has a push route to wake it

    def live(self, now: datetime) -> bool:
        """A live link (a WebSocket) holds now."""
        return self.link_until is not None and self.link_until > now

    def reachable(self, now: datetime) -> bool:
        """A live link, or a push route to wake it."""
        return self.live(now) or self.push

    def online(self, now: datetime) -> bool:
        """Active and reachable: ``device_online`` in the agent's view."""
        return self.status is DeviceStatus.ACTIVE and self.reachable(now)


BROWSER_APP = "browser"  # a device paired by the browser app: its key lives on one origin


@dataclass(frozen=True, slots=True)
class Device:
    tenant_id: str
    user_id: str
    device_uid: str  # the internal id of this enrolment; a re-paired device_id gets a new one
    device_id: str
    name: str
    kind: str
    alg: str
    public_key: str
    status: DeviceStatus
    created_at: datetime
    push: PushTarget | None = None
    last_seen_at: datetime | None = None
    revoked_at: datetime | None = None
    capabilities: tuple[Declared, ...] = field(default=())
    link_until: datetime | None = None  # a live WebSocket link holds until then
    app: str | None = None  # "browser" for the browser app, whose key lives on one origin

    def declared(self, name: str) -> Declared | None:
        return next((d for d in self.capabilities if d.capability.name == name), None)

    def granted(self) -> list[Capability]:
        return [d.capability for d in self.capabilities if d.granted]

    @property
    def approver(self) -> bool:
        """Whether this device speaks for the person: active, declaring ``approvals``, and granted it."""
        return self.may_run(APPROVALS)

    def may_run(self, name: str) -> bool:
        """Whether a call to capability ``name`` may reach this device: the one rule the check chain,
        an approved call going on, and the tool list all apply. Active, declared, and granted."""
        declared = self.declared(name)
        return self.status is DeviceStatus.ACTIVE and declared is not None and declared.granted

    def with_capabilities(self, capabilities: Sequence[Declared]) -> Device:
        return replace(self, capabilities=tuple(capabilities))

    def presence(self) -> Presence:
        return Presence(self.status, self.link_until, self.push is not None)

    def live(self, now: datetime) -> bool:
        """A live link (a WebSocket) holds now."""
        return self.presence().live(now)

    def reachable(self, now: datetime) -> bool:
        """A live link, or a push route to wake it (whatever its status: ``Presence.online`` adds that)."""
        return self.presence().reachable(now)


def check_device_id(value: object, field: str = "device_id") -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"{field} must be a string.")
    return check_slug(value, field, DEVICE_ID_MAX)


def check_device_name(value: object, field: str = "name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field, f"{field} must be a non-empty string.")
    check_display_text(value, field, DEVICE_NAME_MAX)
    if _FRAMING.search(value):
        raise InvalidInput(field, f"{field} may not contain brackets or parentheses.")
    return value.strip()


def check_device_kind(value: object, field: str = "kind") -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, f"{field} must be a string like 'phone' or 'lamp'.")
    return check_slug(value, field, DEVICE_ID_MAX)


def check_push(value: object, field: str = "push") -> PushTarget | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"kind", "token"}:
        raise InvalidInput(field, f"{field} must be an object with 'kind' and 'token'.")
    kind = value.get("kind")
    token = value.get("token")
    if not isinstance(kind, str):
        raise InvalidInput(f"{field}.kind", f"{field}.kind must be a string such as 'fcm' or 'webpush'.")
    check_slug(kind, f"{field}.kind", 24)
    if not isinstance(token, str) or not token:
        raise InvalidInput(f"{field}.token", f"{field}.token must be a non-empty string.")
    check_display_text(token, f"{field}.token", PUSH_TOKEN_MAX)
    return PushTarget(kind, token)


def _text(entry: Mapping[str, Any], key: str, where: str, max_length: int, default: str = "") -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise InvalidInput(f"{where}.{key}", f"{where}.{key} must be a string.")
    return check_display_text(value, f"{where}.{key}", max_length)


def _flag(entry: Mapping[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"{where}.{key}", f"{where}.{key} must be true or false.")
    return value


def _param(name: object, spec: object, where: str) -> Param:
    if not is_capability_name(name):
        raise InvalidInput(where, f"{where}: parameter names are {CAPABILITY_NAME_RULE}.")
    at = f"{where}.{name}"
    if not isinstance(spec, Mapping):
        raise InvalidInput(at, f"{at} must be an object with a 'type'.")
    unknown = set(spec) - {"type", "required", "description", "enum", "label", "true_label", "false_label"}
    if unknown:
        raise InvalidInput(f"{at}.{sorted(unknown)[0]}", f"{at}.{sorted(unknown)[0]} is not a parameter key.")
    try:
        kind = ParamType(str(spec.get("type")))
    except ValueError:
        raise InvalidInput(
            f"{at}.type", f"{at}.type must be one of string, number, integer, boolean, enum."
        ) from None
    enum: tuple[str, ...] = ()
    if "enum" in spec:
        values = spec["enum"]
        if kind not in (ParamType.STRING, ParamType.ENUM) or not isinstance(values, list):
            raise InvalidInput(f"{at}.enum", f"{at}.enum must be a list of strings on a string parameter.")
        if not 1 <= len(values) <= MAX_ENUM or len(set(map(str, values))) != len(values):
            raise InvalidInput(f"{at}.enum", f"{at}.enum must hold 1 to {MAX_ENUM} distinct values.")
        for value in values:
            if not isinstance(value, str) or not value:
                raise InvalidInput(f"{at}.enum", f"{at}.enum values must be non-empty strings.")
            check_display_text(value, f"{at}.enum", ENUM_VALUE_MAX)
        enum = tuple(values)
    elif kind is ParamType.ENUM:
        raise InvalidInput(f"{at}.enum", f"{at}.enum is required for an enum parameter.")
    for key in ("true_label", "false_label"):
        if key in spec and kind is not ParamType.BOOLEAN:
            raise InvalidInput(f"{at}.{key}", f"{at}.{key} applies to a boolean parameter only.")
    return Param(
        name,
        kind,
        _flag(spec, "required", at),
        _text(spec, "description", at, PARAM_DESCRIPTION_MAX),
        enum,
        _text(spec, "label", at, LABEL_MAX),
        _text(spec, "true_label", at, LABEL_MAX),
        _text(spec, "false_label", at, LABEL_MAX),
    )


_ENTRY_KEYS = frozenset({"name", "kind", "label", "description", "params", "confirm"})


def parse_capability(entry: object, where: str, allow_granted: bool = False) -> Declared:
    """One manifest entry. Raises InvalidInput naming the entry's field (``capabilities[2].params.x``)."""
    if not isinstance(entry, Mapping):
        raise InvalidInput(where, f"{where} must be an object with a name and a kind.")
    allowed = _ENTRY_KEYS | ({"granted"} if allow_granted else set())
    unknown = set(entry) - allowed
    if unknown:
        key = sorted(unknown)[0]
        raise InvalidInput(f"{where}.{key}", f"{where}.{key} is not a capability key.")
    name = entry.get("name")
    if not is_capability_name(name):
        raise InvalidInput(f"{where}.name", f"{where}.name must be {CAPABILITY_NAME_RULE}.")
    granted = _flag(entry, "granted", where) if allow_granted else False
    if name in BUILTINS:
        return Declared(BUILTINS[name], granted)
    try:
        kind = CapabilityKind(str(entry.get("kind")))
    except ValueError:
        raise InvalidInput(f"{where}.kind", f"{where}.kind must be 'sensor' or 'actuator'.") from None
    params = entry.get("params", {})
    if not isinstance(params, Mapping):
        raise InvalidInput(f"{where}.params", f"{where}.params must be an object of parameters.")
    if len(params) > MAX_PARAMS:
        raise InvalidInput(f"{where}.params", f"{where}.params may hold at most {MAX_PARAMS} parameters.")
    capability = Capability(
        name,
        kind,
        _text(entry, "description", where, DESCRIPTION_MAX),
        tuple(_param(n, spec, f"{where}.params") for n, spec in params.items()),
        _flag(entry, "confirm", where),
        _text(entry, "label", where, LABEL_MAX),
    )
    return Declared(capability, granted)


def parse_manifest(
    entries: object, field: str = "capabilities", allow_granted: bool = False
) -> list[Declared]:
    """A device's whole manifest. Raises InvalidInput naming the first bad field."""
    if not isinstance(entries, list):
        raise InvalidInput(field, f"{field} must be a list of capabilities.")
    if len(entries) > MAX_CAPABILITIES:
        raise InvalidInput(field, f"{field} may hold at most {MAX_CAPABILITIES} capabilities.")
    declared = [parse_capability(e, f"{field}[{i}]", allow_granted) for i, e in enumerate(entries)]
    names = [d.capability.name for d in declared]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise InvalidInput(field, f"{field} declares {duplicate!r} twice.")
    return declared


MAX_GRANTS = 32
GRANTS_SHAPE = (
    'a list of capability names (["set_light"]) or an object of capability names and true or false '
    '({"set_light": true})'
)


def read_grants(grants: object, field: str = "grants") -> dict[str, bool]:
    """Grants in either shape people send them, as capability name → granted. A list names the
    capabilities to grant; an object grants (``true``) or withdraws (``false``) each one it names.
    Raises InvalidInput for anything else."""
    if isinstance(grants, list | dict) and len(grants) > MAX_GRANTS:
        raise InvalidInput(field, f"{field} names at most {MAX_GRANTS} capabilities.")
    if isinstance(grants, list) and all(isinstance(g, str) for g in grants):
        read = dict.fromkeys(grants, True)
    elif isinstance(grants, dict) and all(
        isinstance(k, str) and isinstance(v, bool) for k, v in grants.items()
    ):
        read = dict(grants)
    else:
        raise InvalidInput(field, f"{field} must be {GRANTS_SHAPE}.")
    for name in read:
        if not is_capability_name(name):
            raise InvalidInput(
                field, f"{field} names {name[:40]!r}, not a capability: names are {CAPABILITY_NAME_RULE}."
            )
    return read


def apply_grants(declared: Sequence[Declared], grants: object, field: str = "grants") -> list[Declared]:
    """Mark the capabilities ``grants`` grants (either shape of ``read_grants``) granted, and no others.
    Raises InvalidInput for a name the device did not declare."""
    if grants is None:
        return list(declared)
    wanted = read_grants(grants, field)
    names = {d.capability.name for d in declared}
    for name in wanted:
        if name not in names:
            raise InvalidInput(field, f"{field}: the device does not declare {name!r}.")
    return [Declared(d.capability, wanted.get(d.capability.name, False)) for d in declared]


def redeclare(current: Sequence[Declared], new: Sequence[Declared]) -> list[Declared]:
    """A device's new manifest over its old one.

    Removed capabilities vanish. A kept one keeps the person's grant unless its kind, ``confirm`` or
    params changed: a changed capability asks the person again, so a device can never lower its own bar
    (drop ``confirm``, widen a param) and keep the grant. An added one starts ungranted. ``granted:
    true`` in the new manifest grants nothing: a device never raises its own grants, it asks
    (``self_marked``).
    """
    before = {d.capability.name: d for d in current}
    out = []
    for entry in new:
        old = before.get(entry.capability.name)
        kept = old is not None and old.granted and not changed(old.capability, entry.capability)
        out.append(Declared(entry.capability, kept))
    return out


def self_marked(merged: Sequence[Declared], new: Sequence[Declared]) -> list[Capability]:
    """The capabilities a re-declaration marked ``granted: true`` that the person has not granted: what
    the device asks the person to grant."""
    granted = {d.capability.name for d in merged if d.granted}
    return [d.capability for d in new if d.granted and d.capability.name not in granted]


def changed(old: Capability, new: Capability) -> bool:
    """Whether a re-declared capability differs in what the person's grant was given for."""
    return (old.kind, old.confirm, old.label, old.params) != (new.kind, new.confirm, new.label, new.params)


def grants_lost(current: Sequence[Declared], new: Sequence[Declared]) -> list[str]:
    """The names of granted capabilities that a re-declaration changed, and so lost their grant."""
    after = {d.capability.name: d.capability for d in new}
    return sorted(
        d.capability.name
        for d in current
        if d.granted and d.capability.name in after and changed(d.capability, after[d.capability.name])
    )
