"""phone_action: actions done on the person's phone and confirmed there, checked by the catalogue's rules.

Everything phone_action knows is data in ``phone_action_catalogue.json`` (reference 001): the actions, the
fields each reads, what each requires, the order fields are checked in, the value rules, ``wait_seconds``,
``message_max_chars`` and every text, word for word. This module reads it once and applies it:
``validate`` turns a model's arguments into the payload the phone receives or raises the call's refusal;
``result_text``, ``no_answer_text`` and ``unavailable_text`` are what the model reads back.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import Any

from tapgate.domain.errors import ConfigurationError, PhoneActionRefused

__all__ = [
    "Action",
    "Catalogue",
    "Field",
    "PhoneActionCall",
    "PhoneActionRefused",
    "Rule",
    "catalogue",
    "cut_message",
    "is_available",
    "is_offered",
    "no_answer_text",
    "result_text",
    "tool_definition",
    "unavailable_text",
    "validate",
]

_CATALOGUE_FILE = "phone_action_catalogue.json"
_SUMMARY = "summary"
_DIGITS = frozenset("0123456789")
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@dataclass(frozen=True)
class Rule:
    """What a field's value must be; ``kind`` says which of the other attributes apply."""

    kind: str
    values: tuple[str, ...] = ()
    pattern: str = ""
    minimum: int = 0
    maximum: int = 0
    item: Rule | None = None
    prefixes: tuple[str, ...] = ()
    min_digits: int = 0
    also: str = ""
    lat: tuple[float, float] = (0.0, 0.0)
    lon: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class Field:
    name: str
    rule: Rule
    what: str
    about: str


@dataclass(frozen=True)
class Action:
    name: str
    does: str
    fields: tuple[str, ...]
    required: tuple[tuple[str, ...], ...]  # each entry is one field or a group, present when any one is


@dataclass(frozen=True)
class ToolText:
    before: tuple[str, ...]
    action_line: str
    after: tuple[str, ...]
    property_line: str
    action_property: str


@dataclass(frozen=True)
class Catalogue:
    tool: str
    capability: str
    session_kinds: frozenset[str]
    wait_seconds: int
    message_max_chars: int
    statuses: tuple[str, ...]
    status_aliases: Mapping[str, str]
    texts: Mapping[str, str]
    placeholders: Mapping[str, frozenset[str]]
    description: ToolText
    actions: Mapping[str, Action]
    fields: Mapping[str, Field]
    check: tuple[str, ...]


@dataclass(frozen=True)
class PhoneActionCall:
    """A call that passed every check: what the phone receives."""

    action: str
    summary: str
    fields: Mapping[str, object]

    def payload(self) -> dict[str, object]:
        """``{action, summary, fields…}``: strings trimmed, only the action's fields that are present."""
        return {"action": self.action, "summary": self.summary, **copy.deepcopy(dict(self.fields))}


@cache
def catalogue() -> Catalogue:
    """The catalogue, read from the package once. Raises ConfigurationError if it contradicts itself."""
    text = resources.files("tapgate.domain").joinpath(_CATALOGUE_FILE).read_text(encoding="utf-8")
    loaded = _catalogue_from(json.loads(text))
    _check_consistent(loaded)
    return loaded


def validate(arguments: Mapping[str, object]) -> PhoneActionCall:
    """The call ``arguments`` describe, checked in reference 001's order.

    Raises PhoneActionRefused with the catalogue's text for the first problem: an action that is not one of
    the actions; else every required entry that is missing, in one text; else the first field the action
    reads, in check order, whose value breaks its rule. Fields the action does not read are dropped unchecked.
    """
    cat = catalogue()
    action = _known_action(cat, arguments.get("action"))
    missing = [entry for entry in action.required if not any(_present(arguments.get(n)) for n in entry)]
    if missing:
        fields = " and ".join(" or ".join(entry) for entry in missing)
        raise PhoneActionRefused(_fill(cat.texts["missing"], action=action.name, fields=fields), "missing")
    reads = {*action.fields, _SUMMARY}
    for name in cat.check:
        value = arguments.get(name)
        if name in reads and _present(value) and not _conforms(cat.fields[name].rule, value):
            text = _fill(cat.texts["bad"], field=name, what=cat.fields[name].what)
            raise PhoneActionRefused(text, "bad", name)
    summary = arguments.get(_SUMMARY)
    return PhoneActionCall(
        action=action.name,
        summary=summary.strip() if isinstance(summary, str) and summary.strip() else action.name,
        fields=MappingProxyType(
            {name: _trimmed(arguments[name]) for name in action.fields if _present(arguments.get(name))}
        ),
    )


def cut_message(message: str | None) -> str | None:
    """The phone's message trimmed and cut at ``message_max_chars``; None when there is none."""
    if message is None:
        return None
    cut = message.strip()[: catalogue().message_max_chars].rstrip()
    return cut or None


def result_text(status: str, message: str | None, action: str) -> str:
    """What the model reads when the phone answered: the status's text, then the *says* text if it said more.

    ``sent`` and ``cancelled`` count as done and declined; a status the phone does not know is failed.
    """
    cat = catalogue()
    status = cat.status_aliases.get(status, status)
    text = _fill(cat.texts[status if status in cat.statuses else "failed"], action=action)
    said = cut_message(message)
    if said is None:
        return text
    return f"{text}\n\n{_fill(cat.texts['says'], message=said)}"


def no_answer_text(action: str) -> str:
    """What the model reads when the phone did not answer within ``wait_seconds``."""
    return _fill(catalogue().texts["no_answer"], action=action)


def unavailable_text() -> str:
    """What the model reads when there is no phone to confirm on; nothing reaches any phone then."""
    return catalogue().texts["unavailable"]


def is_offered(capabilities_seen: Collection[str], session_kind: str) -> bool:
    """Whether a session lists the tool: once any of its messages came with the capability, for good."""
    cat = catalogue()
    return session_kind in cat.session_kinds and cat.capability in capabilities_seen


def is_available(
    session_attended: bool, latest_message_capabilities: Collection[str], session_kind: str
) -> bool:
    """Whether a call may reach a phone: an attended chat whose latest message came with the capability."""
    cat = catalogue()
    return (
        session_attended
        and session_kind in cat.session_kinds
        and cat.capability in latest_message_capabilities
    )


def tool_definition(tool_format: str = "openai") -> dict[str, object]:
    """The tool as an OpenAI function (``"openai"``: ``{"type": "function", "function": …}``) or an MCP tool
    (``"mcp"``: ``{name, description, inputSchema}``). Raises ValueError for any other format.
    """
    if tool_format not in ("openai", "mcp"):
        raise ValueError(f"tool_format must be 'openai' or 'mcp', not {tool_format!r}")
    cat = catalogue()
    words = cat.description
    lines = [
        *words.before,
        *(_fill(words.action_line, action=a.name, does=a.does) for a in cat.actions.values()),
        *words.after,
    ]
    properties: dict[str, object] = {
        "action": {"type": "string", "enum": list(cat.actions), "description": words.action_property},
        _SUMMARY: {"type": "string", "description": cat.fields[_SUMMARY].about},
    }
    for name, spec in cat.fields.items():
        if name == _SUMMARY:
            continue
        readers = ", ".join(a.name for a in cat.actions.values() if name in a.fields)
        about = _fill(words.property_line, about=spec.about, actions=readers, what=spec.what)
        properties[name] = {**_schema(spec.rule), "description": about}
    schema = {
        "type": "object",
        "properties": properties,
        "required": ["action"],
        "additionalProperties": False,
    }
    description = "\n".join(lines)
    if tool_format == "mcp":
        return {"name": cat.tool, "description": description, "inputSchema": schema}
    return {
        "type": "function",
        "function": {"name": cat.tool, "description": description, "parameters": schema},
    }


def _known_action(cat: Catalogue, value: object) -> Action:
    name = value.strip() if isinstance(value, str) else None
    if name is None or name not in cat.actions:
        text = _fill(cat.texts["unknown_action"], actions=", ".join(cat.actions))
        raise PhoneActionRefused(text, "unknown_action", "action")
    return cat.actions[name]


def _present(value: object) -> bool:
    """001's presence: not null, not a blank string, not an empty list or object."""
    if value is None:
        return False
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, list | tuple | Mapping):
        return len(value) > 0
    return True


def _trimmed(value: object) -> object:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list | tuple):
        return [_trimmed(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _trimmed(v) for k, v in value.items()}
    return value


def _fill(template: str, **values: str) -> str:
    # One pass, so a value that itself looks like a placeholder stays as it is.
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def _placeholders(template: str) -> frozenset[str]:
    return frozenset(_PLACEHOLDER.findall(template))


# The value rules. Strings are judged trimmed, as the phone will receive them.


def _conforms(rule: Rule, value: object) -> bool:
    return _CHECKS[rule.kind](rule, value)


def _text(_: Rule, value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _string(_: Rule, value: object) -> bool:
    return isinstance(value, str)


def _pattern(rule: Rule, value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(rule.pattern, value.strip()) is not None


def _integer(rule: Rule, value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and rule.minimum <= value <= rule.maximum


def _one_of(rule: Rule, value: object) -> bool:
    return isinstance(value, str) and value.strip() in rule.values


def _list(rule: Rule, value: object) -> bool:
    item = rule.item
    return isinstance(value, list | tuple) and item is not None and all(_conforms(item, v) for v in value)


def _object(rule: Rule, value: object) -> bool:
    item = rule.item
    return (
        isinstance(value, Mapping)
        and item is not None
        and all(isinstance(k, str) and _conforms(item, v) for k, v in value.items())
    )


def _boolean(_: Rule, value: object) -> bool:
    return isinstance(value, bool)


def _phone_number(rule: Rule, value: object) -> bool:
    if not isinstance(value, str):
        return False
    number = value.strip()
    return sum(c in _DIGITS for c in number) >= rule.min_digits and all(
        c in _DIGITS or c in rule.also for c in number
    )


def _url(rule: Rule, value: object) -> bool:
    if not isinstance(value, str):
        return False
    url = value.strip()
    return any(url.lower().startswith(p) and len(url) > len(p) for p in rule.prefixes)


def _place(rule: Rule, value: object) -> bool:
    """Coordinates (both, numeric, in range), a non-empty query or a non-empty name; nothing given wrong."""
    if not isinstance(value, Mapping):
        return False
    lat, lon, query, name = (value.get(k) for k in ("lat", "lon", "query", "name"))
    has_coordinates = lat is not None or lon is not None
    if has_coordinates and not (_within(lat, rule.lat) and _within(lon, rule.lon)):
        return False
    if any(v is not None and not isinstance(v, str) for v in (query, name)):
        return False
    return has_coordinates or _text(rule, query) or _text(rule, name)


def _within(value: object, bounds: tuple[float, float]) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and bounds[0] <= value <= bounds[1]
    )


_CHECKS: Mapping[str, Callable[[Rule, object], bool]] = MappingProxyType(
    {
        "text": _text,
        "string": _string,
        "pattern": _pattern,
        "integer": _integer,
        "one_of": _one_of,
        "list": _list,
        "object": _object,
        "boolean": _boolean,
        "phone_number": _phone_number,
        "url": _url,
        "place": _place,
    }
)


def _schema(rule: Rule) -> dict[str, object]:
    """The JSON Schema of one rule, for the tool's parameters."""
    if rule.kind in ("list", "object") and rule.item is not None:
        if rule.kind == "list":
            return {"type": "array", "items": _schema(rule.item)}
        return {"type": "object", "additionalProperties": _schema(rule.item)}
    if rule.kind == "pattern":
        return {"type": "string", "pattern": rule.pattern}
    if rule.kind == "one_of":
        return {"type": "string", "enum": list(rule.values)}
    if rule.kind == "integer":
        return {"type": "integer", "minimum": rule.minimum, "maximum": rule.maximum}
    if rule.kind == "boolean":
        return {"type": "boolean"}
    if rule.kind == "place":
        return {
            "type": "object",
            "properties": {
                "lat": {"type": "number", "minimum": rule.lat[0], "maximum": rule.lat[1]},
                "lon": {"type": "number", "minimum": rule.lon[0], "maximum": rule.lon[1]},
                "query": {"type": "string"},
                "name": {"type": "string"},
            },
            "additionalProperties": False,
        }
    return {"type": "string"}


# Reading the catalogue.


def _catalogue_from(raw: Mapping[str, Any]) -> Catalogue:
    words = raw["description"]
    return Catalogue(
        tool=str(raw["tool"]),
        capability=str(raw["capability"]),
        session_kinds=frozenset(str(k) for k in raw["session_kinds"]),
        wait_seconds=int(raw["wait_seconds"]),
        message_max_chars=int(raw["message_max_chars"]),
        statuses=_strings(raw["statuses"]),
        status_aliases=MappingProxyType({str(k): str(v) for k, v in raw["status_aliases"].items()}),
        texts=MappingProxyType({str(k): str(v) for k, v in raw["texts"].items()}),
        placeholders=MappingProxyType({str(k): frozenset(v) for k, v in raw["placeholders"].items()}),
        description=ToolText(
            before=_strings(words["before"]),
            action_line=str(words["action_line"]),
            after=_strings(words["after"]),
            property_line=str(words["property_line"]),
            action_property=str(words["action_property"]),
        ),
        actions=MappingProxyType(
            {
                str(name): Action(
                    name=str(name),
                    does=str(spec["does"]),
                    fields=_strings(spec["fields"]),
                    required=tuple(_strings([e] if isinstance(e, str) else e) for e in spec["required"]),
                )
                for name, spec in raw["actions"].items()
            }
        ),
        fields=MappingProxyType(
            {
                str(name): Field(str(name), _rule(spec["rule"]), str(spec["what"]), str(spec["about"]))
                for name, spec in raw["fields"].items()
            }
        ),
        check=_strings(raw["check"]),
    )


def _rule(spec: Mapping[str, Any]) -> Rule:
    return Rule(
        kind=str(spec["kind"]),
        values=_strings(spec.get("values", ())),
        pattern=str(spec.get("pattern", "")),
        minimum=int(spec.get("minimum", 0)),
        maximum=int(spec.get("maximum", 0)),
        item=_rule(spec["item"]) if "item" in spec else None,
        prefixes=_strings(spec.get("prefixes", ())),
        min_digits=int(spec.get("min_digits", 0)),
        also=str(spec.get("also", "")),
        lat=_bounds(spec.get("lat", (0, 0))),
        lon=_bounds(spec.get("lon", (0, 0))),
    )


def _strings(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def _bounds(values: Iterable[Any]) -> tuple[float, float]:
    low, high = (float(v) for v in values)
    return (low, high)


def _check_consistent(cat: Catalogue) -> None:
    problems = [
        *(
            f"action {a.name} reads unknown field {f}"
            for a in cat.actions.values()
            for f in a.fields
            if f not in cat.fields
        ),
        *(
            f"action {a.name} requires {n}, which it does not read"
            for a in cat.actions.values()
            for entry in a.required
            for n in entry
            if n not in a.fields
        ),
        *(f"action {a.name} has an empty required group" for a in cat.actions.values() if () in a.required),
        *(f"field {f} is not in the check order exactly once" for f in cat.fields if cat.check.count(f) != 1),
        *(f"check names unknown field {f}" for f in cat.check if f not in cat.fields),
        *(f"field {f.name} has an unknown rule" for f in cat.fields.values() if not _rule_known(f.rule)),
        *(f"text {t} is missing" for t in {*cat.placeholders, *cat.statuses, "says"} if t not in cat.texts),
        *(
            f"text {t} has placeholders other than {sorted(cat.placeholders.get(t, ()))}"
            for t, text in cat.texts.items()
            if _placeholders(text) != cat.placeholders.get(t, frozenset())
        ),
    ]
    if _SUMMARY not in cat.fields:
        problems.append("field summary is missing")
    if problems:
        raise ConfigurationError(f"{_CATALOGUE_FILE}: " + "; ".join(problems) + ".")


def _rule_known(rule: Rule) -> bool:
    if rule.kind in ("list", "object"):
        return rule.item is not None and _rule_known(rule.item)
    return rule.kind in _CHECKS
