"""A device's manifest, grants, name and push route, judged on the domain rules alone: what is refused, with
which field and sentence, and what is kept."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tapgate.domain.devices import (
    BUILTINS,
    DESCRIPTION_MAX,
    ENUM_VALUE_MAX,
    LABEL_MAX,
    MAX_ENUM,
    PARAM_DESCRIPTION_MAX,
    SMS_SEND,
    Capability,
    CapabilityKind,
    Declared,
    Device,
    DeviceStatus,
    Param,
    ParamType,
    Presence,
    PushTarget,
    apply_grants,
    changed,
    check_device_id,
    check_device_kind,
    check_device_name,
    check_push,
    grants_lost,
    parse_capability,
    parse_manifest,
    read_grants,
    redeclare,
    self_marked,
)
from tapgate.domain.errors import InvalidInput


def cap(**fields: Any) -> dict[str, Any]:
    return {"name": "set_light", "kind": "actuator", **fields}


def with_param(spec: object, name: object = "level") -> dict[str, Any]:
    return cap(params={name: spec})


@pytest.mark.parametrize(
    ("entries", "field", "message"),
    [
        pytest.param(
            {"name": "x"}, "capabilities", "capabilities must be a list of capabilities.", id="not-a-list"
        ),
        pytest.param(
            ["set_light"],
            "capabilities[0]",
            "capabilities[0] must be an object with a name and a kind.",
            id="entry-not-object",
        ),
        pytest.param(
            [cap(colour="red")],
            "capabilities[0].colour",
            "capabilities[0].colour is not a capability key.",
            id="unknown-capability-key",
        ),
        pytest.param(
            [cap(granted=True)],
            "capabilities[0].granted",
            "capabilities[0].granted is not a capability key.",
            id="granted-not-allowed",
        ),
        pytest.param(
            [cap(name="Set-Light")],
            "capabilities[0].name",
            "capabilities[0].name must be lower snake case without '__', at most 30 characters.",
            id="bad-name",
        ),
        pytest.param(
            [cap(name="set__light")],
            "capabilities[0].name",
            "capabilities[0].name must be lower snake case without '__', at most 30 characters.",
            id="double-underscore",
        ),
        pytest.param(
            [cap(name=7)],
            "capabilities[0].name",
            "capabilities[0].name must be lower snake case without '__', at most 30 characters.",
            id="name-not-string",
        ),
        pytest.param(
            [cap(kind="toaster")],
            "capabilities[0].kind",
            "capabilities[0].kind must be 'sensor' or 'actuator'.",
            id="bad-kind",
        ),
        pytest.param(
            [{"name": "set_light"}],
            "capabilities[0].kind",
            "capabilities[0].kind must be 'sensor' or 'actuator'.",
            id="missing-kind",
        ),
        pytest.param(
            [cap(params=["on"])],
            "capabilities[0].params",
            "capabilities[0].params must be an object of parameters.",
            id="params-list",
        ),
        pytest.param(
            [cap(description=3)],
            "capabilities[0].description",
            "capabilities[0].description must be a string.",
            id="description-not-string",
        ),
        pytest.param(
            [cap(label=None)],
            "capabilities[0].label",
            "capabilities[0].label must be a string.",
            id="label-not-string",
        ),
        pytest.param(
            [cap(confirm="yes")],
            "capabilities[0].confirm",
            "capabilities[0].confirm must be true or false.",
            id="confirm-not-bool",
        ),
        pytest.param(
            [cap(confirm=1)],
            "capabilities[0].confirm",
            "capabilities[0].confirm must be true or false.",
            id="confirm-1",
        ),
        pytest.param(
            [cap(), cap()], "capabilities", "capabilities declares 'set_light' twice.", id="duplicate"
        ),
        pytest.param(
            [with_param({"type": "integer"}, name="Level")],
            "capabilities[0].params",
            "capabilities[0].params: parameter names are lower snake case without '__', "
            "at most 30 characters.",
            id="param-bad-name",
        ),
        pytest.param(
            [cap(params={3: {"type": "integer"}})],
            "capabilities[0].params",
            "capabilities[0].params: parameter names are lower snake case without '__', "
            "at most 30 characters.",
            id="param-name-int",
        ),
        pytest.param(
            [with_param("integer")],
            "capabilities[0].params.level",
            "capabilities[0].params.level must be an object with a 'type'.",
            id="param-spec-not-object",
        ),
        pytest.param(
            [with_param({"type": "integer", "min": 0})],
            "capabilities[0].params.level.min",
            "capabilities[0].params.level.min is not a parameter key.",
            id="param-unknown-key",
        ),
        pytest.param(
            [with_param({"type": "float"})],
            "capabilities[0].params.level.type",
            "capabilities[0].params.level.type must be one of string, number, integer, boolean, enum.",
            id="param-bad-type",
        ),
        pytest.param(
            [with_param({})],
            "capabilities[0].params.level.type",
            "capabilities[0].params.level.type must be one of string, number, integer, boolean, enum.",
            id="param-no-type",
        ),
        pytest.param(
            [with_param({"type": "integer", "enum": ["1"]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum must be a list of strings on a string parameter.",
            id="enum-on-integer",
        ),
        pytest.param(
            [with_param({"type": "string", "enum": "a"})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum must be a list of strings on a string parameter.",
            id="enum-not-list",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": []})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum must hold 1 to 32 distinct values.",
            id="enum-empty",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": ["a", "a"]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum must hold 1 to 32 distinct values.",
            id="enum-dup",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": [f"v{i}" for i in range(MAX_ENUM + 1)]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum must hold 1 to 32 distinct values.",
            id="enum-too-many",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": [""]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum values must be non-empty strings.",
            id="enum-empty-value",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": [1]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum values must be non-empty strings.",
            id="enum-non-string",
        ),
        pytest.param(
            [with_param({"type": "enum", "enum": ["x" * (ENUM_VALUE_MAX + 1)]})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum is longer than 64 characters.",
            id="enum-value-too-long",
        ),
        pytest.param(
            [with_param({"type": "enum"})],
            "capabilities[0].params.level.enum",
            "capabilities[0].params.level.enum is required for an enum parameter.",
            id="enum-missing",
        ),
        pytest.param(
            [with_param({"type": "string", "true_label": "On"})],
            "capabilities[0].params.level.true_label",
            "capabilities[0].params.level.true_label applies to a boolean parameter only.",
            id="true_label-on-string",
        ),
        pytest.param(
            [with_param({"type": "string", "false_label": "Off"})],
            "capabilities[0].params.level.false_label",
            "capabilities[0].params.level.false_label applies to a boolean parameter only.",
            id="false_label-on-string",
        ),
        pytest.param(
            [with_param({"type": "integer", "required": "yes"})],
            "capabilities[0].params.level.required",
            "capabilities[0].params.level.required must be true or false.",
            id="required-not-bool",
        ),
        pytest.param(
            [with_param({"type": "integer", "description": 5})],
            "capabilities[0].params.level.description",
            "capabilities[0].params.level.description must be a string.",
            id="param-description-not-str",
        ),
        pytest.param(
            [with_param({"type": "integer", "label": "x" * (LABEL_MAX + 1)})],
            "capabilities[0].params.level.label",
            "capabilities[0].params.level.label is longer than 60 characters.",
            id="param-label-too-long",
        ),
        pytest.param(
            [cap(description="x" * (DESCRIPTION_MAX + 1))],
            "capabilities[0].description",
            "capabilities[0].description is longer than 500 characters.",
            id="description-too-long",
        ),
        pytest.param(
            [with_param({"type": "integer", "description": "x" * (PARAM_DESCRIPTION_MAX + 1)})],
            "capabilities[0].params.level.description",
            "capabilities[0].params.level.description is longer than 200 characters.",
            id="param-description-too-long",
        ),
        pytest.param(
            [with_param({"type": "boolean", "true_label": "x" * (LABEL_MAX + 1)})],
            "capabilities[0].params.level.true_label",
            "capabilities[0].params.level.true_label is longer than 60 characters.",
            id="true_label-too-long",
        ),
        pytest.param(
            [with_param({"type": "boolean", "false_label": 1})],
            "capabilities[0].params.level.false_label",
            "capabilities[0].params.level.false_label must be a string.",
            id="false_label-not-str",
        ),
    ],
)
def test_a_manifest_breaking_a_rule_is_refused_naming_the_field_and_what_to_send(
    entries: object, field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_manifest(entries)
    assert (refused.value.field, refused.value.message) == (field, message)


def test_a_manifest_using_every_key_is_read_whole() -> None:
    entry = cap(
        label="Light",
        description="Turn the light on or off.",
        confirm=True,
        params={
            "on": {"type": "boolean", "required": True, "true_label": "On", "false_label": "Off"},
            "mode": {"type": "enum", "enum": ["warm", "cold"], "label": "Mode", "description": "Colour"},
            "room": {"type": "string", "enum": ["study"], "required": False},
            "level": {"type": "integer"},
            "ratio": {"type": "number"},
        },
    )
    [declared] = parse_manifest([entry])
    assert not declared.granted
    assert declared.capability == Capability(
        "set_light",
        CapabilityKind.ACTUATOR,
        "Turn the light on or off.",
        (
            Param("on", ParamType.BOOLEAN, True, true_label="On", false_label="Off"),
            Param("mode", ParamType.ENUM, False, "Colour", ("warm", "cold"), "Mode"),
            Param("room", ParamType.STRING, False, enum=("study",)),
            Param("level", ParamType.INTEGER),
            Param("ratio", ParamType.NUMBER),
        ),
        confirm=True,
        label="Light",
    )


def test_texts_may_be_as_long_as_their_limits() -> None:
    longest = with_param(
        {
            "type": "enum",
            "enum": ["x" * ENUM_VALUE_MAX, *(f"v{i}" for i in range(MAX_ENUM - 1))],
            "label": "x" * LABEL_MAX,
            "description": "x" * PARAM_DESCRIPTION_MAX,
        }
    )
    longest["description"] = "x" * DESCRIPTION_MAX
    [declared] = parse_manifest([longest])
    assert len(declared.capability.params[0].enum) == MAX_ENUM


def test_a_manifest_may_mark_grants_only_where_the_caller_allows_it() -> None:
    [declared] = parse_manifest([cap(granted=True)], allow_granted=True)
    assert declared.granted
    [declared] = parse_manifest([cap()], allow_granted=True)
    assert not declared.granted
    [builtin] = parse_manifest([{"name": "sms_send", "granted": True}], allow_granted=True)
    assert builtin == Declared(BUILTINS[SMS_SEND], True)
    with pytest.raises(InvalidInput) as refused:
        parse_capability(cap(granted=True), "entry")
    assert refused.value.field == "entry.granted"
    with pytest.raises(InvalidInput) as refused:
        parse_manifest([cap(granted="yes")], allow_granted=True)
    assert refused.value.field == "capabilities[0].granted"


SLUG_RULE = "must be lower-case letters and digits in words joined by '-', at most 24 characters"


@pytest.mark.parametrize(
    ("push", "field", "message"),
    [
        (["fcm"], "push", "push must be an object with 'kind' and 'token'."),
        ({"kind": "fcm", "token": "a", "x": 1}, "push", "push must be an object with 'kind' and 'token'."),
        ({"kind": 3, "token": "a"}, "push.kind", "push.kind must be a string such as 'fcm' or 'webpush'."),
        ({"token": "a"}, "push.kind", "push.kind must be a string such as 'fcm' or 'webpush'."),
        ({"kind": "Fcm!", "token": "a"}, "push.kind", f"push.kind {SLUG_RULE} (like 'ana' or 'desk-lamp')."),
        (
            {"kind": "x" * 25, "token": "a"},
            "push.kind",
            f"push.kind {SLUG_RULE} (like 'ana' or 'desk-lamp').",
        ),
        ({"kind": "fcm", "token": ""}, "push.token", "push.token must be a non-empty string."),
        ({"kind": "fcm"}, "push.token", "push.token must be a non-empty string."),
        ({"kind": "fcm", "token": "x" * 4097}, "push.token", "push.token is longer than 4096 characters."),
    ],
)
def test_a_push_route_that_is_not_a_kind_and_a_token_is_refused(
    push: object, field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_push(push)
    assert (refused.value.field, refused.value.message) == (field, message)


def test_a_push_route_is_kept_as_sent_and_may_be_absent() -> None:
    assert check_push(None) is None
    assert check_push({"kind": "web-push", "token": "x" * 4096}) == PushTarget("web-push", "x" * 4096)
    with pytest.raises(InvalidInput) as refused:
        check_push({"token": "a"}, "device.push")
    assert refused.value.field == "device.push.kind"


@pytest.mark.parametrize(
    ("check", "value", "field", "message"),
    [
        (check_device_name, "", "name", "name must be a non-empty string."),
        (check_device_name, "   ", "name", "name must be a non-empty string."),
        (check_device_name, 3, "name", "name must be a non-empty string."),
        (check_device_name, "Lamp (kitchen)", "name", "name may not contain brackets or parentheses."),
        (check_device_name, "Lamp [1]", "name", "name may not contain brackets or parentheses."),
        (check_device_name, "x" * 41, "name", "name is longer than 40 characters."),
        (check_device_kind, 3, "kind", "kind must be a string like 'phone' or 'lamp'."),
        (check_device_kind, "Lamp", "kind", f"kind {SLUG_RULE} (like 'ana' or 'desk-lamp')."),
        (check_device_id, 3, "device_id", "device_id must be a string."),
        (check_device_id, "x" * 25, "device_id", f"device_id {SLUG_RULE} (like 'ana' or 'desk-lamp')."),
        (check_device_id, "Desk Lamp", "device_id", f"device_id {SLUG_RULE} (like 'ana' or 'desk-lamp')."),
    ],
)
def test_a_device_name_kind_or_id_breaking_its_rule_is_refused_with_a_sentence(
    check: Any, value: object, field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check(value)
    assert (refused.value.field, refused.value.message) == (field, message)


def test_a_device_name_kind_and_id_are_kept_and_the_field_is_named_as_the_caller_says() -> None:
    assert check_device_name("  Desk lamp ") == "Desk lamp"
    assert check_device_name("x" * 40) == "x" * 40
    assert check_device_kind("lamp") == "lamp"
    assert check_device_id("x" * 24) == "x" * 24
    for check in (check_device_name, check_device_kind, check_device_id):
        with pytest.raises(InvalidInput) as refused:
            check(3, "device.x")
        assert refused.value.field == "device.x"


GRANTS_RULE = (
    'grants must be a list of capability names (["set_light"]) or an object of capability names and true '
    'or false ({"set_light": true}).'
)


def test_grants_come_as_a_list_to_grant_or_an_object_to_grant_and_withdraw() -> None:
    assert read_grants(["a", "b"]) == {"a": True, "b": True}
    assert read_grants({"a": True, "b": False}) == {"a": True, "b": False}
    names = [f"c{i}" for i in range(32)]
    assert read_grants(names) == dict.fromkeys(names, True)


@pytest.mark.parametrize(
    ("grants", "message"),
    [
        ("a", GRANTS_RULE),
        ([1], GRANTS_RULE),
        ({"a": 1}, GRANTS_RULE),
        ({1: True}, GRANTS_RULE),
        ([f"c{i}" for i in range(33)], "grants names at most 32 capabilities."),
        ({f"c{i}": True for i in range(33)}, "grants names at most 32 capabilities."),
    ],
)
def test_grants_in_another_shape_or_too_many_are_refused(grants: object, message: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        read_grants(grants)
    assert (refused.value.field, refused.value.message) == ("grants", message)


LIGHT = Capability("set_light", CapabilityKind.ACTUATOR, "Light", (Param("on", ParamType.BOOLEAN, True),))
SENSOR = Capability("read_temp", CapabilityKind.SENSOR, "Temperature")


def test_applying_grants_grants_what_they_name_and_nothing_else() -> None:
    declared = [Declared(LIGHT, granted=True), Declared(SENSOR)]
    assert apply_grants(declared, None) == declared
    assert apply_grants(declared, ["read_temp"]) == [Declared(LIGHT, False), Declared(SENSOR, True)]
    assert apply_grants(declared, {"set_light": True}) == [Declared(LIGHT, True), Declared(SENSOR, False)]
    with pytest.raises(InvalidInput) as refused:
        apply_grants(declared, ["unlock_door"], "device.grants")
    assert (refused.value.field, refused.value.message) == (
        "device.grants",
        "device.grants: the device does not declare 'unlock_door'.",
    )
    with pytest.raises(InvalidInput) as refused:
        apply_grants(declared, ["unlock_door"])
    assert refused.value.field == "grants"
    with pytest.raises(InvalidInput) as refused:
        apply_grants(declared, "set_light", "device.grants")
    assert refused.value.field == "device.grants"


@pytest.mark.parametrize(
    "change",
    [
        {"kind": CapabilityKind.SENSOR},
        {"confirm": True},
        {"label": "Lamp"},
        {"params": (Param("on", ParamType.BOOLEAN, False),)},
    ],
)
def test_a_redeclared_capability_that_changed_what_was_granted_asks_again(change: dict[str, Any]) -> None:
    new = replace(LIGHT, **change)
    assert changed(LIGHT, new)
    assert redeclare([Declared(LIGHT, True)], [Declared(new)]) == [Declared(new, False)]
    assert grants_lost(
        [Declared(LIGHT, True), Declared(SENSOR, True)], [Declared(new), Declared(SENSOR)]
    ) == ["set_light"]


def test_a_redeclared_capability_keeps_its_grant_when_only_its_description_changed() -> None:
    new = replace(LIGHT, description="The desk light")
    assert not changed(LIGHT, new)
    assert redeclare([Declared(LIGHT, True), Declared(SENSOR)], [Declared(new), Declared(SENSOR, True)]) == [
        Declared(new, True),
        Declared(SENSOR, False),
    ]
    assert grants_lost([Declared(LIGHT, True)], [Declared(new)]) == []


def test_a_device_never_raises_its_own_grants_it_asks_for_them() -> None:
    merged = redeclare([Declared(LIGHT, True)], [Declared(LIGHT, True), Declared(SENSOR, True)])
    assert merged == [Declared(LIGHT, True), Declared(SENSOR, False)]
    assert self_marked(merged, [Declared(LIGHT, True), Declared(SENSOR, True)]) == [SENSOR]
    assert self_marked(merged, [Declared(LIGHT, True), Declared(SENSOR, False)]) == []


def test_an_ungranted_or_removed_capability_loses_no_grant() -> None:
    assert grants_lost([Declared(LIGHT, False)], [Declared(replace(LIGHT, confirm=True))]) == []
    assert grants_lost([Declared(LIGHT, True)], []) == []
    assert redeclare([Declared(LIGHT, True)], [Declared(SENSOR)]) == [Declared(SENSOR, False)]


def test_a_capability_is_described_to_devices_and_agents_exactly() -> None:
    [declared] = parse_manifest(
        [
            cap(
                label="Light",
                description="D",
                confirm=True,
                params={
                    "on": {
                        "type": "boolean",
                        "required": True,
                        "true_label": "On",
                        "false_label": "Off",
                        "description": "Power",
                        "label": "Power",
                    },
                    "mode": {"type": "enum", "enum": ["warm", "cold"]},
                    "level": {"type": "integer"},
                },
            )
        ]
    )
    assert declared.capability.as_dict() == {
        "name": "set_light",
        "kind": "actuator",
        "description": "D",
        "label": "Light",
        "confirm": True,
        "params": {
            "on": {
                "type": "boolean",
                "required": True,
                "description": "Power",
                "label": "Power",
                "true_label": "On",
                "false_label": "Off",
            },
            "mode": {"type": "enum", "required": False, "enum": ["warm", "cold"]},
            "level": {"type": "integer", "required": False},
        },
    }
    assert declared.capability.json_schema() == {
        "type": "object",
        "properties": {
            "on": {"type": "boolean", "description": "Power"},
            "mode": {"type": "string", "enum": ["warm", "cold"]},
            "level": {"type": "integer"},
        },
        "required": ["on"],
        "additionalProperties": False,
    }
    assert "label" not in SENSOR.as_dict()


def test_a_device_is_online_when_active_and_linked_or_pushable() -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    device = Device("t", "u", "uid", "lamp", "Lamp", "lamp", "p256", "k", DeviceStatus.ACTIVE, now)
    assert not device.live(now) and not device.reachable(now) and not device.presence().online(now)
    linked = replace(device, link_until=now + timedelta(seconds=1))
    assert linked.live(now) and linked.reachable(now) and linked.presence().online(now)
    assert not replace(device, link_until=now).live(now)
    pushable = replace(device, push=PushTarget("fcm", "t"))
    assert not pushable.live(now) and pushable.reachable(now) and pushable.presence().online(now)
    revoked = replace(linked, status=DeviceStatus.REVOKED)
    assert revoked.reachable(now) and not revoked.presence().online(now)
    assert device.presence() == Presence(DeviceStatus.ACTIVE, None, False)
    assert device.with_capabilities([Declared(LIGHT)]).capabilities == (Declared(LIGHT),)
