"""A manifest breaking a rule is refused naming the field and saying in a sentence what to send instead."""

from __future__ import annotations

from typing import Any

import pytest

from tapgate.domain.devices import (
    DESCRIPTION_MAX,
    ENUM_VALUE_MAX,
    LABEL_MAX,
    MAX_ENUM,
    PARAM_DESCRIPTION_MAX,
    Capability,
    CapabilityKind,
    Param,
    ParamType,
    parse_manifest,
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
            "capabilities[0].params: parameter names are lower snake case, at most 30 characters.",
            id="param-bad-name",
        ),
        pytest.param(
            [cap(params={3: {"type": "integer"}})],
            "capabilities[0].params",
            "capabilities[0].params: parameter names are lower snake case, at most 30 characters.",
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
    with pytest.raises(InvalidInput) as refused:
        parse_manifest([cap(granted="yes")], allow_granted=True)
    assert refused.value.field == "capabilities[0].granted"
