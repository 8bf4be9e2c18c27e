"""Standing mandates: the person's signed, bounded, revocable permission for an agent to make calls that
would otherwise each need an approval.

A mandate names exact tools, a constraint per parameter (``equals``, ``one_of``, ``matches``, ``max``,
``max_length``), how many calls in all and per server UTC day, and a window of at most 30 days. It is
live only once one of the person's approvers signed its ``mandate`` approval, whose action hash covers the
mandate's canonical JSON and the card that states every bound in words.

A ``matches`` constraint is a regular expression an agent wrote, so it is treated as hostile when the
mandate is asked for: at most 200 characters; no backreference, look-around or verbose mode; no repeated
group that itself repeats or alternates; at most one repetition unbounded or over 10; and at most 32 ways
to match through its bounded repetitions and alternatives together. A value over 1,000 characters never
matches (the person is asked). What is left is at worst quadratic in a bounded value (the slowest known
allowed shape, ``.*a?a?a?a?a?!`` on 1,000 characters, takes about 0.15 s).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from tapgate.domain.approvals import canonical_json
from tapgate.domain.capabilities import traits
from tapgate.domain.devices import Capability, ParamType
from tapgate.domain.errors import BoundsRefused, Conflict, InvalidInput, TooLongToShow
from tapgate.domain.shown import PREVIEW_MAX, shown, shown_time

MANDATE = "mandate"  # the approval kind, its tool, and the capability in its action hash
MAX_TOOLS = 16
MAX_ONE_OF = 50
MAX_PATTERN = 200
MAX_CHOICES = 32  # the ways a pattern's bounded repetitions and alternatives multiply to
MATCHED_MAX = 1000  # a longer value never matches: the person is asked
MAX_CALLS = 1000
MIN_WINDOW = 60
MAX_WINDOW = 30 * 24 * 3600
PURPOSE_MAX = 200
OPERATORS = ("equals", "one_of", "matches", "max", "max_length")
COVERABLE_HINT = (
    "a standing mandate could cover calls like this one: ask the person for one (POST /v1/mandates)"
)


class MandateStatus(StrEnum):
    AWAITING_SIGNATURE = "awaiting_signature"
    ACTIVE = "active"
    EXHAUSTED = "exhausted"
    EXPIRED = "expired"
    REVOKED = "revoked"
    DENIED = "denied"


# What the store keeps; exhausted, and expired until the sweep marks it, are read from the counts and clock.
STORED = (
    MandateStatus.AWAITING_SIGNATURE,
    MandateStatus.ACTIVE,
    MandateStatus.EXPIRED,  # once the expiry sweep announced it
    MandateStatus.REVOKED,
    MandateStatus.DENIED,
)


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the agent asked for, checked: the part of a mandate the person signs."""

    agent_id: str | None  # None: any agent of the user
    tools: tuple[str, ...]
    constraints: Mapping[str, Mapping[str, Any]]
    max_calls: int
    per_day: int | None
    expires_in_seconds: int
    purpose: str


@dataclass(frozen=True, slots=True)
class Mandate:
    tenant_id: str
    mandate_id: str
    user_id: str
    agent_id: str | None
    tools: tuple[str, ...]
    constraints: Mapping[str, Mapping[str, Any]]
    max_calls: int
    per_day: int | None
    purpose: str
    created_at: datetime
    expires_at: datetime
    sign_until: datetime  # its approval's window: unsigned by then, it is expired
    status: MandateStatus = MandateStatus.AWAITING_SIGNATURE
    approval_id: str | None = None
    used: int = 0
    used_today: int = 0
    day: str = ""  # the server UTC day used_today counts
    decided_at: datetime | None = None
    decided_by: str | None = None

    def status_at(self, now: datetime) -> MandateStatus:
        """What the mandate is now: its stored state, with the clock and the counts read in."""
        if self.status is MandateStatus.AWAITING_SIGNATURE and now >= self.sign_until:
            return MandateStatus.EXPIRED
        if self.status is not MandateStatus.ACTIVE:
            return self.status
        if now >= self.expires_at:
            return MandateStatus.EXPIRED
        if self.used >= self.max_calls:
            return MandateStatus.EXHAUSTED
        return MandateStatus.ACTIVE

    def used_on(self, now: datetime) -> int:
        """Calls made under it on ``now``'s server UTC day."""
        return self.used_today if self.day == utc_day(now) else 0

    def ended(self, status: MandateStatus, by: str, now: datetime) -> Mandate:
        """Signed, denied or revoked. Raises Conflict when that is no longer possible."""
        current = self.status_at(now)
        if status is MandateStatus.REVOKED:
            if current in (MandateStatus.REVOKED, MandateStatus.DENIED):
                raise Conflict(f"This mandate is {current.value} already.")
        elif current is not MandateStatus.AWAITING_SIGNATURE:
            raise Conflict(f"This mandate is {current.value}; it can no longer be signed.")
        return replace(self, status=status, decided_at=now, decided_by=by)

    def as_dict(self, now: datetime) -> dict[str, Any]:
        return {
            "mandate_id": self.mandate_id,
            "agent_id": self.agent_id,
            "tools": list(self.tools),
            "constraints": {k: dict(v) for k, v in self.constraints.items()},
            "max_calls": self.max_calls,
            "per_day": self.per_day,
            "purpose": self.purpose,
            "status": self.status_at(now).value,
            "used": self.used,
            "used_today": self.used_on(now),
            "created_at": self.created_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "approval_id": self.approval_id,
        }


def utc_day(now: datetime) -> str:
    """The server UTC day of ``now``, as ``YYYY-MM-DD``: what ``per_day`` counts by."""
    return now.astimezone(UTC).date().isoformat()


def _int(field: str, value: object, low: int, high: int, named: str = "") -> int:
    """``value`` as a whole number from ``low`` to ``high``. Raises InvalidInput on ``field``, the refusal
    naming ``named`` (the field itself by default)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(field, f"{named or field} must be a whole number from {low} to {high}.")
    return value


def check_bounds(body: Mapping[str, Any], tools: Mapping[str, Capability], agent_id: str | None) -> Bounds:
    """The asked-for mandate, checked against ``tools`` (the user's tools by name, each with its
    capability). ``agent_id`` is the agent it is for. Raises BoundsRefused with the reason for: an unknown
    tool, a parameter a tool does not declare, a constraint of the wrong type for its parameter, a regex
    that does not compile, is too long or could take exponential time, a count or window out of range."""
    try:
        return _check_bounds(body, tools, agent_id)
    except BoundsRefused:
        raise
    except InvalidInput as e:
        raise BoundsRefused(e.field, e.message) from None


def _check_bounds(body: Mapping[str, Any], tools: Mapping[str, Capability], agent_id: str | None) -> Bounds:
    known = {"agent_id", "tools", "constraints", "max_calls", "per_day", "expires_in_seconds", "purpose"}
    for key in body:
        if key not in known:
            raise InvalidInput(key, f"{key} is not a field of a mandate.")
    names = body.get("tools")
    if not isinstance(names, list) or not 1 <= len(names) <= MAX_TOOLS:
        raise InvalidInput("tools", f"tools must be a list of 1 to {MAX_TOOLS} tool names.")
    if len(set(map(str, names))) != len(names):
        raise InvalidInput("tools", "tools names a tool twice.")
    for name in names:
        if not isinstance(name, str) or name not in tools:
            raise InvalidInput(
                "tools", f"unknown tool: {str(name)[:80]!r} is not one of this person's tools."
            )
    raw = body.get("constraints") or {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("constraints", "constraints must be an object of parameter: constraint.")
    constraints = {param: _constraint(param, spec, [tools[n] for n in names]) for param, spec in raw.items()}
    max_calls = _int("max_calls", body.get("max_calls"), 1, MAX_CALLS)
    per_day = body.get("per_day")
    if per_day is not None:
        per_day = _int("per_day", per_day, 1, max_calls)
    window = _int("expires_in_seconds", body.get("expires_in_seconds"), MIN_WINDOW, MAX_WINDOW)
    purpose = body.get("purpose")
    if not isinstance(purpose, str) or not purpose.strip() or len(purpose) > PURPOSE_MAX:
        raise InvalidInput("purpose", f"purpose must be text of 1 to {PURPOSE_MAX} characters: why.")
    return Bounds(agent_id, tuple(names), constraints, max_calls, per_day, window, purpose.strip())


def _constraint(param: str, spec: object, capabilities: Sequence[Capability]) -> dict[str, Any]:
    types = set()
    for capability in capabilities:
        declared = {p.name: p for p in capability.params}.get(param)
        if declared is None:
            raise InvalidInput(
                "constraints",
                f"{param!r} is not a parameter of {capability.name}: every tool must declare it.",
            )
        types.add(declared.type)
    if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in OPERATORS:
        raise InvalidInput(
            "constraints", f"the constraint on {param!r} must be one of {{{', '.join(OPERATORS)}}}."
        )
    op, value = next(iter(spec.items()))
    text = types <= {ParamType.STRING, ParamType.ENUM}
    numeric = types <= {ParamType.NUMBER, ParamType.INTEGER}
    wrong = InvalidInput(
        "constraints", f"{op} does not fit the {'/'.join(sorted(types))} parameter {param!r}."
    )
    if op == "equals":
        if not _fits(value, types):
            raise wrong
    elif op == "one_of":
        if not isinstance(value, list) or not 1 <= len(value) <= MAX_ONE_OF:
            raise InvalidInput("constraints", f"one_of on {param!r} must list 1 to {MAX_ONE_OF} values.")
        if not all(_fits(item, types) for item in value):
            raise wrong
    elif op == "matches":
        if not text:
            raise wrong
        compile_pattern(param, value)
    elif op == "max":
        if not numeric or isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong
        if not math.isfinite(value):
            raise InvalidInput("constraints", f"max on {param!r} must be a finite number.")
    else:
        if not text:
            raise wrong
        _int("constraints", value, 0, 10_000, f"max_length on {param!r}")
    return {op: value}


def _fits(value: object, types: set[ParamType]) -> bool:
    """Whether ``value`` is a value of the parameter, of ``types`` across the tools that declare it."""
    if types <= {ParamType.STRING, ParamType.ENUM}:
        return isinstance(value, str) and len(value) <= 1000
    if types == {ParamType.BOOLEAN}:
        return isinstance(value, bool)
    if types == {ParamType.INTEGER}:
        return isinstance(value, int) and not isinstance(value, bool)
    if types <= {ParamType.NUMBER, ParamType.INTEGER}:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return False


_QUANTIFIER = re.compile(r"[*+?]|\{\d*,?\d*\}")
# One token of a pattern as Python's parser reads it: an escape; a whole class (a ] first, or right after
# its ^, is one of its characters); a group's opening with what comes before its body (a name, the group a
# conditional tests, flags, the text of a comment: its ) closes the group like any other); a {m,n}
# repetition; or one character.
_TOKEN = re.compile(
    r"\\.|\[\^?\]?(?:\\.|[^\\\]])*\]"
    r"|\((?:\?(?:P<[^>]*>|\([^)]*\)|>|#(?:\\.|[^\\)])*|(?P<flags>[a-zA-Z]*)(?:-[a-zA-Z]*)?:?))?"
    r"|\{\d*,?\d*\}|.",
    re.DOTALL,
)


def compile_pattern(param: str, pattern: object) -> re.Pattern[str]:
    """A ``matches`` pattern, compiled. Raises InvalidInput for one that is not text, is over 200
    characters, does not compile, or has a construct that can backtrack exponentially."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidInput("constraints", f"matches on {param!r} must be a regular expression.")
    if len(pattern) > MAX_PATTERN:
        raise InvalidInput("constraints", f"matches on {param!r} is over {MAX_PATTERN} characters.")
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise InvalidInput("constraints", f"matches on {param!r} does not compile: {e.msg}.") from None
    except (OverflowError, RecursionError):
        raise InvalidInput("constraints", f"matches on {param!r} repeats or nests too much.") from None
    reason = _risky(pattern)
    if reason:
        raise InvalidInput("constraints", f"matches on {param!r} is refused: {reason}.")
    return compiled


def _risky(pattern: str) -> str | None:
    """Why ``pattern`` could take exponential time, or None. Conservative: a repeated group that itself
    holds a repetition or an alternation is refused, as are backreferences, look-arounds and verbose mode
    (where whitespace and comments are not the pattern, so what is read here would not be what runs)."""
    if re.search(r"\\[1-9]|\(\?P=|\(\?<?[=!]", pattern):
        return "backreferences and look-arounds are not allowed"
    busy = [False]  # per open group: does it hold a repetition or alternation
    choices, large = 1, 0
    for token in _TOKEN.finditer(pattern):
        text = token.group()
        if token["flags"] and "x" in token["flags"]:
            return "verbose mode (?x) is not allowed"
        if text[0] == "(":
            busy.append(False)
        elif text == ")":
            inner = busy.pop()
            if inner and _QUANTIFIER.match(pattern, token.end()):
                return "a repeated group may not itself repeat or alternate"
            busy[-1] = busy[-1] or inner
        elif text == "|":
            busy[-1] = True
            choices *= 2
        elif _QUANTIFIER.fullmatch(text):
            busy[-1] = True
            choices *= _branching(text)
            large += _large(text)
    if large > 1:
        return "at most one repetition may be unbounded or over 10 (write {m,n} with n up to 10)"
    if choices > MAX_CHOICES:
        return "its repetitions and alternatives together allow too many ways to match: simplify it"
    return None


def _branching(quantifier: str) -> int:
    """How many ways a quantifier lets the matcher try (``{2,5}``: 4, ``?``: 2); 1 for the one large
    repetition allowed."""
    if _large(quantifier):
        return 1
    if quantifier == "?":
        return 2
    low, _, high = quantifier[1:-1].partition(",")  # {m}: m times, one way; {m,n}: n - m + 1 ways
    return int(high or low) - int(low or 0) + 1


def _large(quantifier: str) -> bool:
    """Whether a quantifier repeats without bound or more than 10 times."""
    if not quantifier.startswith("{"):
        return quantifier != "?"
    low, comma, high = quantifier[1:-1].partition(",")
    most = high if comma else low
    return not most or int(most) > 10


def canonical(mandate: Mandate) -> dict[str, Any]:
    """The mandate's signed content, as canonical-JSON-ready data (its hash is the action's)."""
    return {
        "mandate_id": mandate.mandate_id,
        "user_id": mandate.user_id,
        "agent_id": mandate.agent_id,
        "tools": list(mandate.tools),
        "constraints": {k: dict(v) for k, v in mandate.constraints.items()},
        "max_calls": mandate.max_calls,
        "per_day": mandate.per_day,
        "expires_at": int(mandate.expires_at.timestamp()),
        "purpose": mandate.purpose,
    }


def canonical_bytes(mandate: Mandate) -> bytes:
    return canonical_json(canonical(mandate))


def _tool_words(name: str, tools: Mapping[str, tuple[str, Capability]]) -> str:
    device, capability = tools[name]
    what = traits(capability.name).mandate_words or f"use {capability.name}"
    return f"{what} on {device}"


def _constraint_words(param: str, spec: Mapping[str, Any]) -> str:
    op, value = next(iter(spec.items()))
    # a text in quotes; a number or True/False as is (a bound is text, a number or a truth value)
    if op == "equals":
        return f"{param} exactly {value!r}"
    if op == "one_of":
        return f"{param} one of {', '.join(map(repr, value))}"
    if op == "matches":
        return f"{param} matching the pattern {value}"
    if op == "max":
        return f"{param} at most {value}"
    return f"{param} at most {value} characters long"


def _agent_words(mandate: Mandate, who: str) -> str:
    """The agent as the card names it: ``who`` (its name), else its id, or any agent of the person."""
    if mandate.agent_id is None:
        return "any of your agents"
    return who or mandate.agent_id


def summary(mandate: Mandate, tools: Mapping[str, tuple[str, Capability]], who: str) -> str:
    """Every bound in one sentence: who (``who``: the agent's name), which tools, which values, how many,
    until when, why."""
    who = _agent_words(mandate, who)
    who = who[:1].upper() + who[1:]
    what = " and ".join(_tool_words(n, tools) for n in mandate.tools)
    values = "; ".join(_constraint_words(p, s) for p, s in mandate.constraints.items())
    counts = f"at most {mandate.max_calls} in all"
    if mandate.per_day is not None:
        counts = f"at most {mandate.per_day} a day and {mandate.max_calls} in all"
    until = shown_time(mandate.expires_at)
    return (
        f"{who} may {what}{f' with {values}' if values else ''}, {counts}, until {until}, "
        f"without asking you each time — purpose: {mandate.purpose}"
    )


def preview(mandate: Mandate, tools: Mapping[str, tuple[str, Capability]], who: str = "") -> dict[str, Any]:
    """``{kind, fields}`` like every approval's preview, one bound a field. ``tools`` maps each tool to
    its device's name and capability; ``who`` is the agent's name. Raises TooLongToShow for bounds too
    long to show the person."""
    fields = [
        ("Mandate", summary(mandate, tools, who)),
        ("Agent", _agent_words(mandate, who)),
        ("Tools", "; ".join(f"{_tool_words(n, tools)} ({n})" for n in mandate.tools)),
        (
            "Values",
            "; ".join(_constraint_words(p, s) for p, s in mandate.constraints.items()) or "any values",
        ),
        ("Calls in all", str(mandate.max_calls)),
        ("Calls a day", "no daily limit" if mandate.per_day is None else str(mandate.per_day)),
        ("Until", shown_time(mandate.expires_at)),
        ("Purpose", mandate.purpose),
    ]
    rendered = [{"label": label, "value": shown(value)} for label, value in fields]
    if sum(len(f["value"]) for f in rendered) > PREVIEW_MAX:
        raise TooLongToShow()
    return {"kind": MANDATE, "fields": rendered}


def holds(spec: Mapping[str, Any], present: bool, value: object) -> bool:
    """Whether one constraint holds on an argument (absent: it does not)."""
    if not present:
        return False
    op, bound = next(iter(spec.items()))
    if op == "equals":
        return (type(value) is type(bound) and value == bound) or _same_number(value, bound)
    if op == "one_of":
        return any((type(value) is type(b) and value == b) or _same_number(value, b) for b in bound)
    if op == "matches":
        return isinstance(value, str) and len(value) <= MATCHED_MAX and re.search(bound, value) is not None
    if op == "max":
        return isinstance(value, int | float) and not isinstance(value, bool) and value <= bound
    return isinstance(value, str) and len(value) <= bound


def _same_number(a: object, b: object) -> bool:
    numbers = int | float
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ) and a == b


def covers(mandate: Mandate, agent_id: str, tool: str, arguments: Mapping[str, Any], now: datetime) -> bool:
    """Whether ``mandate`` lets this call through without an approval: live, for this agent (or any),
    the tool listed, every constraint holding on the arguments, a call left in all and today."""
    if mandate.status_at(now) is not MandateStatus.ACTIVE:
        return False
    if mandate.agent_id is not None and mandate.agent_id != agent_id:
        return False
    if tool not in mandate.tools:
        return False
    if mandate.per_day is not None and mandate.used_on(now) >= mandate.per_day:
        return False
    return all(holds(spec, p in arguments, arguments.get(p)) for p, spec in mandate.constraints.items())


def spending_order(mandate: Mandate) -> tuple[datetime, str]:
    """Where several cover a call, the one expiring first is spent first (a tie goes by id)."""
    return mandate.expires_at, mandate.mandate_id


def first_covering(
    mandates: Sequence[Mandate], agent_id: str, tool: str, arguments: Mapping[str, Any], now: datetime
) -> Iterator[Mandate]:
    """The mandates covering the call, the one expiring first first; each is checked only once the ones
    before it are passed over (a call usually spends the first)."""
    for mandate in sorted(mandates, key=spending_order):
        if covers(mandate, agent_id, tool, arguments, now):
            yield mandate
