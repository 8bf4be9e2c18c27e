"""The policy engine: the rules of ``policies.yaml`` allow, ask about or block each device call.

The file::

    version: 1
    profile:                                  # optional: one tool's class
      sms_send: allow
      device__desk_lamp__set_light: require_approval
    policies:
      - name: ask-before-lamp-actions
        action: device_use                    # optional; device_use is the only action
        condition: "deviceId equals desk-lamp and capabilityKind equals actuator"
        decision: require_approval            # allow | require_approval | block
        message: "Lamp actions need a yes"    # optional; the agent reads it after "[policy] "

Profile keys. A capability name (``sms_send``) matches that capability on every device; a tool name, either
a device tool (``device__desk_lamp__set_light``) or the session tool ``phone_action``, matches that one
tool. When a call matches both kinds of key, the tool name wins. The file's entries replace the entries of
``DEFAULT_PROFILE`` with the same key; the default allows ``sms_send`` and ``phone_action`` because the
person confirms them on the device.

Conditions. ``<field> <operator> <value>``, joined by ``and`` and ``or``; ``and`` binds tighter than
``or`` and there are no parentheses (write ``a and c or b and c``). A rule without a condition matches
every call of its action. Operators:

- ``equals`` / ``not equals`` one value, compared whole;
- ``in [a, b, 'c d']`` any value of a comma-separated list in brackets;
- ``matches`` a Python regular expression found anywhere in the value (``re.search``, as grep reads
  it); ``^`` and ``$`` anchor it, so a rule written for whole values is ``^desk-lamp$``. It is compiled
  when the file loads.

Words and values are case-sensitive. A value holding spaces, commas or brackets is quoted with '…' or
"…"; there are no escapes inside the quotes. YAML's own double quotes read backslashes, so a regular
expression goes in YAML single quotes or a block scalar. A field a call does not have (no agent, no
session) is the empty string, written ``''``. Values of the fields with a known shape (deviceId,
capability, capabilityKind, sessionKind, tool) are checked when the file loads: a value that could never
match is refused (``tapgate policy check`` also warns about a regular expression no such value can meet,
and about a rule a stricter one always overrides).

Deciding. Strictest wins, block over ask over allow, across every matching rule and the call's profile
entry; between equals the first rule in the file decides, and a rule over the profile. With nothing
matching, the call is allowed: the grant is already the person's yes. A shadow run is always blocked. A
call is consequential when it moves something (an ``actuator``) or sends a message (``sms_send``,
``phone_action``): from an ``untrusted`` origin it never gets a plain allow, it is raised to ask; a block
stays a block.

Every problem in the file raises PolicyFileError, whose message names the source, the line and the reason.
Every decision names its rule, by name and line, in what the agent reads and in the journal.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from operator import attrgetter
from types import MappingProxyType
from typing import NoReturn

import yaml

from tapgate.domain.capabilities import MESSAGES, TRAITS
from tapgate.domain.devices import CAPABILITY_NAME_RULE, is_capability_name
from tapgate.domain.errors import PolicyFileError
from tapgate.domain.ids import SLUG
from tapgate.domain.text import unsafe_character

__all__ = [
    "DEFAULT_PROFILE",
    "DEFAULT_RULE",
    "DEVICE_USE",
    "FIELDS",
    "MESSAGE_MAX",
    "NAME_MAX",
    "PROFILE_PREFIX",
    "SHADOW_RULE",
    "UNTRUSTED",
    "UNTRUSTED_RULE",
    "Comparison",
    "Condition",
    "Operator",
    "PolicyDecision",
    "PolicyFileError",
    "PolicyRequest",
    "PolicyRule",
    "PolicySet",
    "Verdict",
    "decide",
    "parse_policies",
    "parse_policies_reporting",
    "strictness",
]

DEVICE_USE = "device_use"
UNTRUSTED = "untrusted"
NAME_MAX = 80
MESSAGE_MAX = 500
# Decisions tapgate makes itself are named under prefixes that no rule in the file may take.
SHADOW_RULE = "tapgate:shadow"
UNTRUSTED_RULE = "tapgate:untrusted-origin"
DEFAULT_RULE = "tapgate:default"
PROFILE_PREFIX = "profile:"
_RESERVED_PREFIXES = ("tapgate:", PROFILE_PREFIX)

_ACTIONS = (DEVICE_USE,)
_DEVICE_TOOL = re.compile(r"device__[a-z0-9]+(?:_[a-z0-9]+)*__[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_INT = "tag:yaml.org,2002:int"


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    BLOCK = "block"


_STRICTNESS = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.BLOCK: 2}
_DECISIONS = {"allow": Verdict.ALLOW, "require_approval": Verdict.ASK, "block": Verdict.BLOCK}

# What the person finishes on their own screen needs no approval besides: they read it there and act.
DEFAULT_PROFILE: Mapping[str, Verdict] = MappingProxyType(
    {t.session_tool or name: Verdict.ALLOW for name, t in TRAITS.items() if t.confirmed_on_screen}
)


class Operator(StrEnum):
    EQUALS = "equals"
    NOT_EQUALS = "not equals"
    IN = "in"
    MATCHES = "matches"


# A condition's field and the PolicyRequest attribute it reads.
FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "deviceId": "device_id",
        "capability": "capability",
        "capabilityKind": "capability_kind",
        "tool": "tool",
        "agentId": "agent_id",
        "sessionId": "session_id",
        "sessionKind": "session_kind",
        "origin": "origin",
    }
)


def _is_tool(value: str) -> bool:
    return value == "phone_action" or (len(value) <= 64 and _DEVICE_TOOL.fullmatch(value) is not None)


# Fields whose values have a known shape: (the test, what a value must be).
_SHAPES: Mapping[str, tuple[Callable[[str], bool], str]] = MappingProxyType(
    {
        "deviceId": (
            lambda v: len(v) <= 24 and SLUG.fullmatch(v) is not None,
            "lower-case words joined by '-', like desk-lamp",
        ),
        "capability": (is_capability_name, f"{CAPABILITY_NAME_RULE}, like set_light"),
        "capabilityKind": (lambda v: v in ("sensor", "actuator"), "sensor or actuator"),
        "sessionKind": (
            lambda v: v in ("chat", "schedule", "subagent", "triage"),
            "chat, schedule, subagent or triage",
        ),
        "tool": (
            _is_tool,
            "device__<device>__<capability>, like device__desk_lamp__set_light, or phone_action",
        ),
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyRequest:
    """One call as policy sees it. A field the call does not have is the empty string."""

    tool: str
    device_id: str
    capability: str
    capability_kind: str
    agent_id: str = ""
    session_id: str = ""
    session_kind: str = ""
    origin: str = ""
    action: str = DEVICE_USE
    shadow: bool = False

    @property
    def consequential(self) -> bool:
        """It moves something (an actuator) or sends a message (``capabilities.MESSAGES``)."""
        return self.capability_kind == "actuator" or self.capability in MESSAGES or self.tool in MESSAGES


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The answer for one call. ``reason`` is what the agent reads after ``[policy] ``."""

    verdict: Verdict
    reason: str
    rule: str  # the rule's name, ``profile:<key>``, or ``tapgate:…`` for tapgate's own decisions
    line: int = 0  # the rule's line in the file; 0 for the profile and tapgate's own decisions
    message: str = ""  # why the person is asked, in their words (a rule's own message), if anything says


@dataclass(frozen=True, slots=True)
class Comparison:
    field: str  # as the file names it: deviceId
    operator: Operator
    value: str | frozenset[str] | re.Pattern[str]


# Any of these groups, each group all of its comparisons: ``and`` binds tighter than ``or``.
Condition = tuple[tuple[Comparison, ...], ...]
_Test = Callable[[PolicyRequest], bool]
_Compiled = tuple[int, _Test, PolicyDecision]  # a rule's strictness, its test and its decision


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule of the file, its condition parsed and compiled once."""

    name: str
    decision: Verdict
    condition: Condition | None = None  # None: every call of the action
    action: str = DEVICE_USE
    message: str = ""
    line: int = 0
    applies_to: _Test = field(init=False, repr=False, compare=False)
    outcome: PolicyDecision = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "applies_to", _compile(self.condition))
        object.__setattr__(
            self, "outcome", PolicyDecision(self.decision, self._reason(), self.name, self.line, self.message)
        )

    @property
    def cited(self) -> str:
        """How a reason names this rule: ``'name' (line 7)``."""
        return f"'{self.name}' (line {self.line})" if self.line else f"'{self.name}'"

    def _reason(self) -> str:
        if self.message:
            where = f", line {self.line}" if self.line else ""
            return f"{self.message} (rule '{self.name}'{where})"
        if self.decision is Verdict.BLOCK:
            return f"the rule {self.cited} blocks this call"
        if self.decision is Verdict.ASK:
            return f"the rule {self.cited} asks the person first"
        return f"the rule {self.cited} allows this call"


@dataclass(frozen=True, slots=True)
class PolicySet:
    """Loaded rules in file order, and the whole profile in force (parse_policies lays the file's
    entries over DEFAULT_PROFILE)."""

    rules: tuple[PolicyRule, ...] = ()
    profile: Mapping[str, Verdict] = field(default_factory=lambda: DEFAULT_PROFILE)
    # Per action, the rules strictest first (file order within a decision), so the first match decides.
    _ordered: Mapping[str, tuple[_Compiled, ...]] = field(init=False, repr=False, compare=False)
    _profile_outcomes: Mapping[str, PolicyDecision] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_action: dict[str, list[_Compiled]] = {}
        for rule in sorted(self.rules, key=lambda r: -_STRICTNESS[r.decision]):
            by_action.setdefault(rule.action, []).append(
                (_STRICTNESS[rule.decision], rule.applies_to, rule.outcome)
            )
        object.__setattr__(self, "_ordered", {a: tuple(rs) for a, rs in by_action.items()})
        outcomes = {key: _profile_outcome(key, verdict) for key, verdict in self.profile.items()}
        object.__setattr__(self, "_profile_outcomes", outcomes)


def _profile_outcome(key: str, verdict: Verdict) -> PolicyDecision:
    if verdict is Verdict.BLOCK:
        reason = f"the policy profile blocks {key}"
    elif verdict is Verdict.ASK:
        reason = f"the policy profile asks the person before {key}"
    else:
        reason = f"the policy profile allows {key}"
    return PolicyDecision(verdict, reason, PROFILE_PREFIX + key)


_SHADOW = PolicyDecision(Verdict.BLOCK, "shadow runs may not use devices", SHADOW_RULE)
_DEFAULT = PolicyDecision(Verdict.ALLOW, "no policy rule matches; the grant allows this call", DEFAULT_RULE)
_UNTRUSTED = PolicyDecision(
    Verdict.ASK,
    "this turn came from untrusted content, so the person is asked first",
    UNTRUSTED_RULE,
    message="it came from a message you received",
)


def decide(policies: PolicySet, request: PolicyRequest) -> PolicyDecision:
    """Allow, ask or block one call. Pure; never raises."""
    if request.shadow:
        return _SHADOW
    outcomes = policies._profile_outcomes
    entry = outcomes.get(request.tool) or outcomes.get(request.capability)
    floor = _STRICTNESS[entry.verdict] if entry is not None else 0
    decision = entry or _DEFAULT
    for strictness, applies_to, outcome in policies._ordered.get(request.action, ()):
        if strictness < floor:
            break
        if applies_to(request):
            decision = outcome
            break
    if decision.verdict is Verdict.ALLOW and request.origin == UNTRUSTED and request.consequential:
        return _UNTRUSTED
    return decision


def _compile(condition: Condition | None) -> _Test:
    if condition is None:
        return lambda _: True
    return _any_of([_all_of([_test(c) for c in group]) for group in condition])


# Closures unrolled for one and two parts, the usual sizes; plain loops beyond: generators cost more
# than the tests themselves.
def _any_of(tests: list[_Test]) -> _Test:
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda r: first(r) or second(r)

    def any_of(request: PolicyRequest) -> bool:
        for test in tests:  # noqa: SIM110 - any() over a generator is slower on this hot path
            if test(request):
                return True
        return False

    return any_of


def _all_of(tests: list[_Test]) -> _Test:
    if len(tests) == 1:
        return tests[0]
    if len(tests) == 2:
        first, second = tests
        return lambda r: first(r) and second(r)

    def all_of(request: PolicyRequest) -> bool:
        for test in tests:  # noqa: SIM110 - all() over a generator is slower on this hot path
            if not test(request):
                return False
        return True

    return all_of


def _test(comparison: Comparison) -> _Test:
    read: Callable[[PolicyRequest], str] = attrgetter(FIELDS[comparison.field])
    value = comparison.value
    if isinstance(value, re.Pattern):
        search = value.search
        return lambda r: search(read(r)) is not None
    if isinstance(value, frozenset):
        return lambda r: read(r) in value
    if comparison.operator is Operator.NOT_EQUALS:
        return lambda r: read(r) != value
    return lambda r: read(r) == value


# --- the file ------------------------------------------------------------------------------------------


class _Refused(Exception):
    """A reason to refuse a condition; the file reader adds the line."""


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, reason: str) -> NoReturn:
        raise PolicyFileError(self.source, node.start_mark.line + 1, reason)

    def mapping(self, node: yaml.Node, what: str, keys: tuple[str, ...] | None) -> dict[str, yaml.Node]:
        """The entries of a mapping node, each key once and, when ``keys`` is given, one of them."""
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping of key: value")
        entries: dict[str, yaml.Node] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag != _STR:
                self.fail(key, f"{what}: a key must be a word")
            if key.value in entries:
                first = entries[key.value].start_mark.line + 1
                self.fail(key, f"{what}: {key.value!r} appears twice (first on line {first})")
            if keys is not None and key.value not in keys:
                self.fail(
                    key, f"{what}: unknown key {key.value!r}{_hint(key.value, keys)}; keys are {_list(keys)}"
                )
            entries[key.value] = value
        return entries

    def text(self, node: yaml.Node, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode) or node.tag != _STR:
            self.fail(node, f"{what} must be text (quote it if it looks like a number or yes/no)")
        return str(node.value)

    def display_text(self, node: yaml.Node, what: str, max_length: int) -> str:
        value = self.text(node, what)
        if len(value) > max_length:
            self.fail(node, f"{what} is longer than {max_length} characters")
        bad = unsafe_character(value)
        if bad is not None:
            self.fail(node, f"{what} contains {bad}, a control, format or invisible character")
        return value

    def decision(self, node: yaml.Node, what: str) -> Verdict:
        value = node.value if isinstance(node, yaml.ScalarNode) and node.tag == _STR else None
        if value not in _DECISIONS:
            shown = repr(node.value) if isinstance(node, yaml.ScalarNode) else "that"
            self.fail(node, f"{what}: {shown} is not a decision; decisions are {_list(_DECISIONS)}")
        return _DECISIONS[value]


def parse_policies(text: str, source: str = "policies.yaml") -> PolicySet:
    """Load a policies file. Raises PolicyFileError naming ``source``, the line and the reason."""
    return _load(text, source, None)


def parse_policies_reporting(
    text: str, source: str = "policies.yaml"
) -> tuple[PolicySet, list[PolicyFileError]]:
    """The rules that parse and every broken rule or profile entry. Raises PolicyFileError when the file
    as a whole cannot be read (not YAML, no version, not a mapping)."""
    problems: list[PolicyFileError] = []
    return _load(text, source, problems), problems


def strictness(verdict: Verdict) -> int:
    """0 for allow, 1 for ask, 2 for block."""
    return _STRICTNESS[verdict]


def _load(text: str, source: str, problems: list[PolicyFileError] | None) -> PolicySet:
    """The file's rules. With ``problems`` given, a broken profile entry or rule is added to it and
    skipped, so one reading reports each of them; a broken file as a whole still raises."""

    def keep_going(error: PolicyFileError) -> None:
        if problems is None:
            raise error
        problems.append(error)

    # Composing builds no Python object, so it needs no constructor; the safe loader all the same. On a
    # string, PyYAML raises a ReaderError (a character YAML refuses) or a MarkedYAMLError, which always
    # has a problem and the mark where it lies.
    try:
        root = yaml.SafeLoader(text).get_single_node()
    except yaml.MarkedYAMLError as error:
        line = error.problem_mark.line + 1  # type: ignore[union-attr]
        raise PolicyFileError(source, line, f"not valid YAML: {error.problem}") from error
    except yaml.reader.ReaderError as error:
        line = text[: error.position].count("\n") + 1
        raise PolicyFileError(source, line, f"not valid YAML: {error.reason}") from error
    reader = _Reader(source)
    if root is None:
        raise PolicyFileError(source, 1, "the file is empty; it starts with 'version: 1'")
    top = reader.mapping(root, "the file", ("version", "profile", "policies"))
    version = top.get("version")
    if version is None:
        reader.fail(root, "version is missing; the file starts with 'version: 1'")
    if not (isinstance(version, yaml.ScalarNode) and version.tag == _INT and version.value == "1"):
        reader.fail(version, "version must be 1")
    profile = dict(DEFAULT_PROFILE)
    profile_node = top.get("profile")
    if profile_node is not None and profile_node.tag != _NULL:
        for key, value in reader.mapping(profile_node, "profile", None).items():
            try:
                if not (is_capability_name(key) or _is_tool(key)):
                    reader.fail(
                        value,
                        f"profile: {key!r} is neither a capability name (sms_send) nor a tool name "
                        "(device__desk_lamp__set_light, phone_action)",
                    )
                profile[key] = reader.decision(value, f"profile: {key}")
            except PolicyFileError as error:
                keep_going(error)
    rules: list[PolicyRule] = []
    policies_node = top.get("policies")
    if policies_node is not None and policies_node.tag != _NULL:
        if not isinstance(policies_node, yaml.SequenceNode):
            reader.fail(policies_node, "policies must be a list of rules, each starting with '- name:'")
        names: dict[str, int] = {}
        for node in policies_node.value:
            try:
                rule = _rule(reader, node)
                if rule.name in names:
                    reader.fail(node, f"name: {rule.name!r} is used twice (first on line {names[rule.name]})")
            except PolicyFileError as error:
                keep_going(error)
                continue
            names[rule.name] = rule.line
            rules.append(rule)
    return PolicySet(tuple(rules), MappingProxyType(profile))


def _rule(reader: _Reader, node: yaml.Node) -> PolicyRule:
    entries = reader.mapping(node, "a rule", ("name", "action", "condition", "decision", "message"))
    if "name" not in entries:
        reader.fail(node, "a rule needs a name")
    name_node = entries["name"]
    name = reader.display_text(name_node, "name", NAME_MAX).strip()
    if not name:
        reader.fail(name_node, "name is empty")
    if name.startswith(_RESERVED_PREFIXES):
        reader.fail(name_node, f"name: {name!r} starts with {_list(_RESERVED_PREFIXES)}, which tapgate keeps")
    action = DEVICE_USE
    if "action" in entries:
        action = reader.text(entries["action"], "action")
        if action not in _ACTIONS:
            reader.fail(
                entries["action"], f"action: {action!r} is not an action; actions are {_list(_ACTIONS)}"
            )
    if "decision" not in entries:
        reader.fail(node, f"the rule {name!r} needs a decision: {_list(_DECISIONS)}")
    decision = reader.decision(entries["decision"], "decision")
    condition = None
    if "condition" in entries:
        condition_node = entries["condition"]
        try:
            condition = _parse_condition(reader.text(condition_node, "condition"))
        except _Refused as refused:
            reader.fail(condition_node, f"condition: {refused}")
    message = ""
    if "message" in entries:
        message = reader.display_text(entries["message"], "message", MESSAGE_MAX).strip()
    return PolicyRule(name, decision, condition, action, message, node.start_mark.line + 1)


# --- the condition language ------------------------------------------------------------------------------


class _Scanner:
    """Reads a condition left to right; values are read in context, so a bare regex may hold brackets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def at_end(self) -> bool:
        while self.at < len(self.text) and self.text[self.at].isspace():
            self.at += 1
        return self.at >= len(self.text)

    def take(self, char: str) -> bool:
        if not self.at_end() and self.text[self.at] == char:
            self.at += 1
            return True
        return False

    def word(self, stops: str = "") -> str:
        """The run of characters up to a space or one of ``stops``; empty at the end."""
        self.at_end()
        start = self.at
        while (
            self.at < len(self.text) and not self.text[self.at].isspace() and self.text[self.at] not in stops
        ):
            self.at += 1
        return self.text[start : self.at]

    def value(self, stops: str = "") -> str | None:
        """A quoted or bare value; None at the end or at one of ``stops``."""
        if self.at_end():
            return None
        quote = self.text[self.at]
        if quote not in "'\"":
            return self.word(stops) or None
        start = self.at + 1
        close = self.text.find(quote, start)
        if close == -1:
            raise _Refused(f"a {quote} quote is never closed")
        self.at = close + 1
        following = self.text[self.at : self.at + 1]
        if following and not following.isspace() and following not in stops:
            raise _Refused(f"a space should follow the closing quote, before {self.text[self.at :]!r}")
        return self.text[start:close]


def _parse_condition(text: str) -> Condition:
    scanner = _Scanner(text)
    if scanner.at_end():
        raise _Refused("it is empty; leave condition out to match every call")
    groups: list[tuple[Comparison, ...]] = []
    group = [_comparison(scanner)]
    while not scanner.at_end():
        joiner = scanner.word()
        if joiner == "or":
            groups.append(tuple(group))
            group = []
        elif joiner != "and":
            raise _Refused(f"expected 'and' or 'or' after a comparison, found {joiner!r}")
        group.append(_comparison(scanner))
    groups.append(tuple(group))
    return tuple(groups)


def _comparison(scanner: _Scanner) -> Comparison:
    name = scanner.word()
    if not name:
        raise _Refused(f"a comparison is missing at the end; it starts with a field: {_list(FIELDS)}")
    if name not in FIELDS:
        raise _Refused(f"unknown field {name!r}{_hint(name, FIELDS)}; fields are {_list(FIELDS)}")
    word = scanner.word()
    if word == "not":
        word = f"not {scanner.word()}".rstrip()
    if word not in Operator.__members__.values():
        shown = f"unknown operator {word!r}" if word else "the operator is missing"
        raise _Refused(f"{shown} after {name!r}; operators are {_list([o.value for o in Operator])}")
    operator = Operator(word)
    if operator is Operator.IN:
        return Comparison(name, operator, frozenset(_check(name, v) for v in _items(scanner, name)))
    value = scanner.value()
    if value is None:
        raise _Refused(f"a value should follow '{name} {operator}'")
    if operator is Operator.MATCHES:
        try:
            return Comparison(name, operator, re.compile(value))
        except re.error as error:
            raise _Refused(f"{value!r} is not a regular expression: {error.msg}") from error
    if value.startswith("["):
        raise _Refused(f"'{operator}' takes one value; for a list write '{name} in [a, b]'")
    return Comparison(name, operator, _check(name, value))


def _items(scanner: _Scanner, name: str) -> list[str]:
    if not scanner.take("["):
        raise _Refused(f"'in' takes a list in brackets, like '{name} in [a, b]'")
    if scanner.take("]"):
        raise _Refused(f"the list after '{name} in' is empty")
    items: list[str] = []
    while True:
        item = scanner.value(",]")
        if item is None:
            problem = "is not closed with ']'" if scanner.at_end() else "has an empty item"
            raise _Refused(f"the list after '{name} in' {problem}")
        items.append(item)
        if scanner.take("]"):
            return items
        if scanner.at_end():
            raise _Refused(f"the list after '{name} in' is not closed with ']'")
        if not scanner.take(","):
            raise _Refused(f"the list after '{name} in' needs a ',' between items and a closing ']'")


def _check(name: str, value: str) -> str:
    """``value`` when a call's ``name`` field could hold it; the empty string always can."""
    shape = _SHAPES.get(name)
    if value and shape is not None and not shape[0](value):
        raise _Refused(f"{name} {value!r} can never match: a {name} is {shape[1]}")
    return value


def _hint(word: str, known: Mapping[str, object] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(known))  # the closest first
    return f" (did you mean {close[0]!r}?)" if close else ""


def _list(words: Mapping[str, object] | tuple[str, ...] | list[str]) -> str:
    return ", ".join(words)
