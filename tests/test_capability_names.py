"""One rule for a capability's name, whichever entry it comes through: a device's manifest, a policy
rule's condition, a grant, a session's message capabilities, and the operator's CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tapgate.cli import app
from tapgate.domain.devices import CAPABILITY_NAME_RULE, parse_manifest, read_grants
from tapgate.domain.errors import ConfigurationError, InvalidInput
from tapgate.domain.policy import parse_policies
from tapgate.domain.sessions import check_message_capabilities
from tests.test_operator_commands import _enrol_lamp, _tapgate

runner = CliRunner()

# (name, whether it is a capability name): each side of every edge of the rule.
BOUNDARY = [
    ("a" * 30, True),  # the longest
    ("a" * 31, False),
    ("set_light", True),
    ("set_light2", True),
    ("x", True),
    ("set__light", False),  # '__' separates a tool name's parts
    ("set_light_", False),
    ("_set_light", False),
    ("2set_light", False),
    ("Set_light", False),
    ("set-light", False),
]


def _taken(entry: Callable[[], object]) -> bool:
    try:
        entry()
    except (InvalidInput, ConfigurationError):
        return False
    return True


def _policy(name: str) -> object:
    rule = {"name": "r", "condition": f"capability equals {name!r}", "decision": "block"}
    return parse_policies(yaml.safe_dump({"version": 1, "policies": [rule]}))


@pytest.mark.parametrize(("name", "valid"), BOUNDARY)
def test_every_entry_takes_and_refuses_the_same_capability_names(name: str, valid: bool) -> None:
    taken = {
        "manifest": _taken(lambda: parse_manifest([{"name": name, "kind": "actuator"}])),
        "policy": _taken(lambda: _policy(name)),
        "grants": _taken(lambda: read_grants([name])),
        "grants object": _taken(lambda: read_grants({name: False})),
        "session": _taken(lambda: check_message_capabilities([name])),
    }
    assert taken == dict.fromkeys(taken, valid)


def test_every_entry_states_the_same_rule_when_it_refuses_a_name() -> None:
    name = "a" * 31
    sentences = []
    for entry in (
        lambda: parse_manifest([{"name": name, "kind": "actuator"}]),
        lambda: read_grants([name]),
        lambda: check_message_capabilities([name]),
    ):
        with pytest.raises(InvalidInput) as refused:
            entry()
        sentences.append(str(refused.value))
    with pytest.raises(ConfigurationError) as refused_rule:
        _policy(name)
    sentences.append(str(refused_rule.value))
    assert all(CAPABILITY_NAME_RULE in sentence for sentence in sentences), sentences


def test_the_cli_refuses_a_grant_of_a_name_that_no_device_could_declare(tmp_path: Path) -> None:
    made = runner.invoke(app, ["init", "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    config = tmp_path / "tapgate.toml"
    _enrol_lamp(config)
    too_long = _tapgate(config, "device", "grant", "desk-lamp", "a" * 31, "--user", "ana", code=1)
    assert CAPABILITY_NAME_RULE in too_long
    assert "does not declare 'fly'" in _tapgate(
        config, "device", "grant", "desk-lamp", "fly", "--user", "ana", code=1
    )
    assert "granted: set_light" in _tapgate(
        config, "device", "grant", "desk-lamp", "set_light", "--user", "ana"
    )
