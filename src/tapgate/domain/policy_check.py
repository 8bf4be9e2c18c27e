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

import re
from dataclasses import dataclass
from typing import TypeAlias

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
    """A character every match of ``pattern`` holds that ``alphabet`` lacks, or ''.

    Read from the pattern's text: a sequence of characters, escapes, classes and groups, each needed when
    it must occur at least once. Whatever else a pattern holds (an alternative, a look-around, a scoped
    flag, a back-reference, verbose mode) is read as needing nothing, so a doubt ends in silence, never in
    a warning about a rule that can match."""
    if pattern.flags & re.VERBOSE:
        return ""
    if pattern.flags & re.IGNORECASE:
        alphabet = alphabet + alphabet.upper()
    try:
        return _first_outside(_Reader(pattern.pattern).sequence(), alphabet)
    except _Unread:
        return ""


class _Unread(Exception):
    """The pattern holds something the reader does not follow."""


# An atom of a pattern: the characters one occurrence can be (None: any, or not known), or a group's own
# sequence of atoms; each with whether it must occur at least once.
_Atom: TypeAlias = tuple["set[str] | list[_Atom] | None", bool]

_CLASS_ESCAPES = frozenset("dDwWsS")
_ZERO_WIDTH_ESCAPES = frozenset("bBAZ")
_CONTROL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v", "a": "\a"}
_ZERO_WIDTH = "zero-width"  # an anchor or a global flag: matches no character
_LARGEST_CLASS = 256  # a wider range is as good as any character


def _first_outside(atoms: list[_Atom], alphabet: str) -> str:
    for what, needed in atoms:
        if not needed or what is None:
            continue
        if isinstance(what, list):
            found = _first_outside(what, alphabet)
            if found:
                return found
        elif not any(ch in alphabet for ch in what):
            return next(iter(what)) if len(what) == 1 else "[" + "".join(sorted(what))[:10] + "]"
    return ""


class _Reader:
    """Reads a regular expression's text into atoms, left to right."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def _peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def _take(self) -> str:
        if self.at >= len(self.text):
            raise _Unread
        ch = self.text[self.at]
        self.at += 1
        return ch

    def sequence(self, until: str = "") -> list[_Atom]:
        """Atoms up to ``until`` (or the end); a sequence with an alternative needs nothing."""
        atoms: list[_Atom] = []
        alternative = False
        while self._peek() and self._peek() != until:
            ch = self._take()
            if ch == "|":
                alternative = True
                continue
            if ch in "^$":
                continue
            what = self._atom(ch)
            if isinstance(what, str):  # _ZERO_WIDTH
                continue
            atoms.append((what, self._needed_once()))
        if until:
            self._take()
        return [] if alternative else atoms

    def _atom(self, ch: str) -> set[str] | list[_Atom] | str | None:
        if ch == ".":
            return None
        if ch == "\\":
            return self._escape()
        if ch == "[":
            return self._class()
        if ch == "(":
            return self._group()
        if ch in "*+?{":
            raise _Unread  # a repeat of nothing: re would have refused it
        return {ch}

    def _escape(self) -> set[str] | str | None:
        ch = self._take()
        if ch in _ZERO_WIDTH_ESCAPES:
            return _ZERO_WIDTH
        if ch in _CLASS_ESCAPES or (ch.isalnum() and ch not in _CONTROL_ESCAPES):
            return None  # a class, a code point or a back-reference: not followed
        return {_CONTROL_ESCAPES.get(ch, ch)}

    def _class(self) -> set[str] | None:
        chars: set[str] | None = set()
        if self._peek() == "^":
            self._take()
            chars = None
        first = True
        while True:
            ch = self._take()
            if ch == "]" and not first:
                break
            first = False
            if ch == "\\":
                escaped = self._escape()
                if not isinstance(escaped, set):
                    chars = None
                    continue
                ch = next(iter(escaped))
            if self._peek() == "-" and self.text[self.at + 1 : self.at + 2] not in ("]", ""):
                self._take()
                end = self._take()
                if end == "\\":
                    raise _Unread
                if chars is not None and ord(end) - ord(ch) < _LARGEST_CLASS:
                    chars.update(chr(code) for code in range(ord(ch), ord(end) + 1))
                else:
                    chars = None
            elif chars is not None:
                chars.add(ch)
        return chars or None

    def _group(self) -> list[_Atom] | str | None:
        if self._peek() != "?":
            return self.sequence(")")
        self._take()
        kind = self._take()
        if kind == ":":
            return self.sequence(")")
        if kind == "P" and self._peek() == "<":
            while self._take() != ">":
                pass
            return self.sequence(")")
        if (
            kind.isalpha() and kind != "P"
        ):  # flags: global ones are in pattern.flags, scoped ones not followed
            while self._peek() not in (":", ")"):
                self._take()
            if self._take() == ")":
                return _ZERO_WIDTH
        self._skip_group()
        return None

    def _skip_group(self) -> None:
        """Past the ``)`` that closes the group being read."""
        depth = 1
        while depth:
            ch = self._take()
            if ch == "\\":
                self._take()
            elif ch == "[":
                self._class()
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1

    def _needed_once(self) -> bool:
        """Reads the repeat after an atom, if any: whether the atom must occur at least once."""
        ch = self._peek()
        if ch in ("*", "?"):
            self._take()
            needed = False
        elif ch == "+":
            self._take()
            needed = True
        elif ch == "{" and (repeat := re.match(r"\{(\d*)(,\d*)?\}", self.text[self.at :])):
            self.at += repeat.end()
            needed = int(repeat.group(1) or 0) >= 1
        else:
            return True
        if self._peek() in ("?", "+"):  # lazy or possessive
            self._take()
        return needed


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
