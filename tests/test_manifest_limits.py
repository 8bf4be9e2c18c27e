"""A manifest's limits hold exactly at their edge: N is accepted, N + 1 refused, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from tapgate.domain.devices import (
    CAPABILITY_NAME_MAX,
    MAX_CAPABILITIES,
    MAX_ENUM,
    MAX_PARAMS,
    parse_manifest,
)
from tapgate.domain.errors import InvalidInput


def _capability(name: str = "set_light", params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "kind": "actuator", "params": params or {}}


def _name(length: int) -> str:
    return ("a" * length)[:length]


def _refused(entries: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        parse_manifest(entries)
    return refused.value


def test_a_manifest_holds_up_to_its_most_capabilities_and_not_one_more() -> None:
    entries = [_capability(f"c{i}") for i in range(MAX_CAPABILITIES + 1)]
    assert len(parse_manifest(entries[:MAX_CAPABILITIES])) == MAX_CAPABILITIES
    refused = _refused(entries)
    assert refused.field == "capabilities"
    assert f"at most {MAX_CAPABILITIES} capabilities" in refused.message


def test_a_capability_name_may_be_as_long_as_its_limit_and_not_one_character_longer() -> None:
    longest = _name(CAPABILITY_NAME_MAX)
    assert parse_manifest([_capability(longest)])[0].capability.name == longest
    assert _refused([_capability(_name(CAPABILITY_NAME_MAX + 1))]).field == "capabilities[0].name"


def test_a_parameter_name_may_be_as_long_as_its_limit_and_not_one_character_longer() -> None:
    longest = _name(CAPABILITY_NAME_MAX)
    declared = parse_manifest([_capability(params={longest: {"type": "boolean"}})])
    assert [p.name for p in declared[0].capability.params] == [longest]
    too_long = {_name(CAPABILITY_NAME_MAX + 1): {"type": "boolean"}}
    assert _refused([_capability(params=too_long)]).field == "capabilities[0].params"


def test_a_capability_holds_up_to_its_most_parameters_and_not_one_more() -> None:
    params = {f"p{i}": {"type": "boolean"} for i in range(MAX_PARAMS + 1)}
    most = dict(list(params.items())[:MAX_PARAMS])
    assert len(parse_manifest([_capability(params=most)])[0].capability.params) == MAX_PARAMS
    refused = _refused([_capability(params=params)])
    assert (refused.field, f"at most {MAX_PARAMS} parameters" in refused.message) == (
        "capabilities[0].params",
        True,
    )


def test_an_enum_holds_up_to_its_most_values_and_not_one_more() -> None:
    values = [f"v{i}" for i in range(MAX_ENUM + 1)]
    most = {"mode": {"type": "enum", "enum": values[:MAX_ENUM]}}
    assert parse_manifest([_capability(params=most)])[0].capability.params[0].enum == tuple(values[:MAX_ENUM])
    too_many = {"mode": {"type": "enum", "enum": values}}
    assert _refused([_capability(params=too_many)]).field == "capabilities[0].params.mode.enum"


@pytest.mark.parametrize("kind", ["number", "integer", "boolean"])
def test_only_a_string_or_enum_parameter_may_list_allowed_values(kind: str) -> None:
    refused = _refused([_capability(params={"level": {"type": kind, "enum": ["1", "2"]}})])
    assert refused.field == "capabilities[0].params.level.enum"
    assert "on a string parameter" in refused.message


@pytest.mark.parametrize("kind", ["string", "enum"])
def test_a_string_or_enum_parameter_lists_its_allowed_values(kind: str) -> None:
    declared = parse_manifest([_capability(params={"mode": {"type": kind, "enum": ["warm", "cold"]}})])
    assert declared[0].capability.params[0].enum == ("warm", "cold")


def test_allowed_values_come_as_a_list_not_a_string() -> None:
    refused = _refused([_capability(params={"mode": {"type": "string", "enum": "warm"}})])
    assert refused.field == "capabilities[0].params.mode.enum"
