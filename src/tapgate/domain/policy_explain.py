"""Why a call gets its verdict: each rule considered, whether it matched, and if not, which comparison
failed. The verdict is ``decide``'s own (the explanation never decides differently); the rest reads the
conditions as written. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tapgate.domain.policy import (
    FIELDS,
    Comparison,
    Operator,
    PolicyDecision,
    PolicyRequest,
    PolicyRule,
    PolicySet,
    decide,
)

__all__ = ["Considered", "Explanation", "explain"]


@dataclass(frozen=True, slots=True)
class Considered:
    """One rule of the file (or the call's profile entry) and what it made of the call."""

    rule: str
    line: int  # 0 for a profile entry
    decision: str  # allow | require_approval | block
    matched: bool
    why: str  # for a match, what it matched on; otherwise what failed


@dataclass(frozen=True, slots=True)
class Explanation:
    decision: PolicyDecision
    considered: tuple[Considered, ...]


_DECISION_WORDS = {"allow": "allow", "ask": "require_approval", "block": "block"}


def explain(policies: PolicySet, request: PolicyRequest) -> Explanation:
    """The verdict ``decide`` gives ``request`` and every rule of its action, in file order."""
    considered: list[Considered] = []
    entry_key = request.tool if request.tool in policies.profile else request.capability
    if entry_key in policies.profile:
        word = _DECISION_WORDS[policies.profile[entry_key].value]
        considered.append(Considered(f"profile:{entry_key}", 0, word, True, f"its key is {entry_key}"))
    for rule in policies.rules:
        word = _DECISION_WORDS[rule.decision.value]
        if rule.action != request.action:
            considered.append(Considered(rule.name, rule.line, word, False, f"its action is {rule.action}"))
            continue
        matched, why = _judge(rule, request)
        considered.append(Considered(rule.name, rule.line, word, matched, why))
    return Explanation(decide(policies, request), tuple(considered))


def _judge(rule: PolicyRule, request: PolicyRequest) -> tuple[bool, str]:
    if rule.condition is None:
        return True, "it has no condition"
    failures: list[str] = []
    for group in rule.condition:
        failed = next((c for c in group if not _holds(c, request)), None)
        if failed is None:
            return True, " and ".join(_said(c) for c in group)
        failures.append(_why_not(failed, request))
    return False, "; or ".join(failures)


def _read(comparison: Comparison, request: PolicyRequest) -> str:
    value: str = getattr(request, FIELDS[comparison.field])
    return value


def _holds(comparison: Comparison, request: PolicyRequest) -> bool:
    actual = _read(comparison, request)
    value = comparison.value
    if isinstance(value, re.Pattern):
        return value.search(actual) is not None
    if isinstance(value, frozenset):
        return actual in value
    if comparison.operator is Operator.NOT_EQUALS:
        return actual != value
    return actual == value


def _said(comparison: Comparison) -> str:
    value = comparison.value
    if isinstance(value, re.Pattern):
        shown = repr(value.pattern)
    elif isinstance(value, frozenset):
        shown = "[" + ", ".join(repr(v) for v in sorted(value)) + "]"
    else:
        shown = repr(value)
    return f"{comparison.field} {comparison.operator.value} {shown}"


def _why_not(comparison: Comparison, request: PolicyRequest) -> str:
    return f"{_said(comparison)} is false for {_read(comparison, request)!r}"
