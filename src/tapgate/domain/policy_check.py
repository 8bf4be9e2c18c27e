"""``tapgate policy check``: every problem of a policies file, each with its line, without a gateway.

Errors are what stops the file loading (the server refuses to start with the first of them, and a reload
keeps the old rules). Warnings are rules that load but cannot do what they say:

- a rule that can never match: a regular expression that needs a character no value of its field holds
  (``deviceId matches desk_lamp``: device ids join words with ``-``), one no value of a field with a fixed
  set of values meets (``sessionKind matches ^chats$``), an ``origin`` that is neither ``owner`` nor
  ``untrusted``, or one field required to equal two different values at once;
- a rule shadowed by a stricter one: whenever it matches, a rule at least as strict (earlier in the file
  when equally strict) matches too, so it never decides. Shadowing is judged on the conditions as written
  (a comparison implies another when it is the same, an ``equals`` inside an ``in``, or an ``equals`` the
  other's expression finds), so it errs toward silence, never toward a false alarm.

Pure: the text in, the problems out.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from tapgate.domain.errors import PolicyFileError
from tapgate.domain.policy import (
    Comparison,
    Condition,
    Operator,
    PolicyRule,
    parse_policies_reporting,
    strictness,
)

__all__ = ["Problem", "check_policies"]

# Fields whose every value is known (the empty string: a call without it).
_FIXED: dict[str, tuple[str, ...]] = {
    "capabilityKind": ("sensor", "actuator"),
    "sessionKind": ("chat", "schedule", "subagent", "triage", ""),
    "origin": ("owner", "untrusted"),
}
# Fields whose values are drawn from a known set of characters.
_ALPHABETS: dict[str, str] = {
    "deviceId": "abcdefghijklmnopqrstuvwxyz0123456789-",
    "capability": "abcdefghijklmnopqrstuvwxyz0123456789_",
    "tool": "abcdefghijklmnopqrstuvwxyz0123456789_",
}
_WHAT: dict[str, str] = {
    "deviceId": "a device id is lower-case words joined by '-'",
    "capability": "a capability is lower snake case",
    "tool": "a tool name is lower snake case joined by '__'",
}


_WORDS = {"allow": "allow", "ask": "require_approval", "block": "block"}  # as the file writes them


@dataclass(frozen=True, slots=True)
class Problem:
    line: int
    reason: str
    warning: bool = False

    def render(self, source: str) -> str:
        return f"{source}:{self.line}: {'warning: ' if self.warning else ''}{self.reason}"


def check_policies(text: str, source: str = "policies.yaml") -> list[Problem]:
    """Every problem of the file, in line order; empty when it is clean."""
    try:
        policies, errors = parse_policies_reporting(text, source)
    except PolicyFileError as error:
        return [Problem(error.line, error.reason)]
    problems = [Problem(e.line, e.reason) for e in errors]
    for rule in policies.rules:
        never = _never_matches(rule)
        if never:
            problems.append(Problem(rule.line, f"the rule '{rule.name}' can never match: {never}", True))
    for index, rule in enumerate(policies.rules):
        shadow = _shadowed_by(rule, policies.rules[:index], policies.rules[index + 1 :])
        if shadow is not None:
            problems.append(
                Problem(
                    rule.line,
                    f"the rule '{rule.name}' never decides: whenever it matches, the rule "
                    f"'{shadow.name}' (line {shadow.line}, {_WORDS[shadow.decision.value]}) "
                    "matches too and wins",
                    True,
                )
            )
    return sorted(problems, key=lambda p: p.line)


# --- rules that can never match ---------------------------------------------------------------------------


def _never_matches(rule: PolicyRule) -> str:
    if rule.condition is None:
        return ""
    reasons = [_group_never(group) for group in rule.condition]
    return "" if not all(reasons) else "; ".join(dict.fromkeys(reasons))


def _group_never(group: tuple[Comparison, ...]) -> str:
    equal: dict[str, str] = {}
    for comparison in group:
        reason = _comparison_never(comparison)
        if reason:
            return reason
        value = comparison.value
        if comparison.operator is Operator.EQUALS and isinstance(value, str):
            if comparison.field in equal and equal[comparison.field] != value:
                return f"{comparison.field} cannot equal both {equal[comparison.field]!r} and {value!r}"
            equal[comparison.field] = value
    return ""


def _comparison_never(comparison: Comparison) -> str:
    name, value = comparison.field, comparison.value
    fixed = _FIXED.get(name)
    if isinstance(value, re.Pattern):
        if fixed is not None:
            if not any(value.search(v) for v in fixed):
                return f"{name} is one of {_shown(fixed)}, and {value.pattern!r} finds none of them"
            return ""
        alphabet = _ALPHABETS.get(name)
        if alphabet is not None:
            missing = _needed_outside(value, alphabet)
            if missing:
                return f"{name} matches {value.pattern!r} needs {missing!r}, and {_WHAT[name]}"
        return ""
    if fixed is not None and comparison.operator in (Operator.EQUALS, Operator.IN):
        values = value if isinstance(value, frozenset) else frozenset({value})
        if not values & set(fixed):
            return f"{name} is one of {_shown(fixed)}"
    return ""


def _shown(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def _needed_outside(pattern: re.Pattern[str], alphabet: str) -> str:
    """A character every match of ``pattern`` holds that ``alphabet`` lacks, or ''."""
    if pattern.flags & re.IGNORECASE:
        alphabet = alphabet + alphabet.upper()
    try:
        parsed = _PARSER.parse(pattern.pattern, pattern.flags)
    except Exception:  # re compiled it; a parser that disagrees just stays silent
        return ""
    return _walk(list(parsed), alphabet)


_PARSER: Any = importlib.import_module("re._parser")  # the parser re itself compiles with (3.11+)
_CONSTANTS: Any = importlib.import_module("re._constants")


def _walk(items: list[tuple[Any, Any]], alphabet: str) -> str:
    c = _CONSTANTS
    for op, av in items:
        if op is c.LITERAL:
            if chr(av) not in alphabet:
                return chr(av)
        elif op is c.IN:
            chars = _class_chars(av)
            if chars is not None and not any(ch in alphabet for ch in chars):
                return "[" + "".join(sorted(chars))[:10] + "]"
        elif op is c.SUBPATTERN:
            found = _walk(list(av[-1]), alphabet)
            if found:
                return found
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)) and av[0] >= 1:
            found = _walk(list(av[2]), alphabet)
            if found:
                return found
    return ""


def _class_chars(items: list[tuple[Any, Any]]) -> set[str] | None:
    """The characters of a small character class, or None for a negated, category or large one."""
    c = _CONSTANTS
    chars: set[str] = set()
    for op, av in items:
        if op is c.LITERAL:
            chars.add(chr(av))
        elif op is c.RANGE and av[1] - av[0] < 256:
            chars.update(chr(code) for code in range(av[0], av[1] + 1))
        else:
            return None
    return chars


# --- rules shadowed by a stricter one ---------------------------------------------------------------------


def _shadowed_by(
    rule: PolicyRule, before: tuple[PolicyRule, ...], after: tuple[PolicyRule, ...]
) -> PolicyRule | None:
    mine = strictness(rule.decision)
    candidates = [r for r in before if strictness(r.decision) >= mine]
    candidates += [r for r in after if strictness(r.decision) > mine]
    for other in candidates:
        if other.action == rule.action and _implies(rule.condition, other.condition):
            return other
    return None


def _implies(condition: Condition | None, other: Condition | None) -> bool:
    """Whenever ``condition`` holds, ``other`` holds (judged on the text of both)."""
    if other is None:
        return True
    if condition is None:
        return False
    return all(any(_group_implies(mine, theirs) for theirs in other) for mine in condition)


def _group_implies(group: tuple[Comparison, ...], other: tuple[Comparison, ...]) -> bool:
    return all(any(_comparison_implies(mine, theirs) for mine in group) for theirs in other)


def _comparison_implies(mine: Comparison, theirs: Comparison) -> bool:
    if mine.field != theirs.field:
        return False
    if mine == theirs:
        return True
    value, other = mine.value, theirs.value
    if mine.operator is Operator.EQUALS and isinstance(value, str):
        if isinstance(other, frozenset):
            return value in other
        if isinstance(other, re.Pattern):
            return other.search(value) is not None
        return False
    if mine.operator is Operator.IN and isinstance(value, frozenset):
        if isinstance(other, frozenset):
            return value <= other
        if isinstance(other, re.Pattern):
            return all(other.search(v) for v in value)
    return False
