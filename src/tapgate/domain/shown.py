"""What the person is shown of a value: all of it, with nothing hidden.

A value is never cut: one too long to show raises ``TooLongToShow`` and the call is refused. Runs of more
than three whitespace characters are shown as their count (``⟨40 spaces⟩``), so text cannot hide behind a
screenful of blanks, and every character outside the display-safe set (controls other than the line
break, format and bidirectional characters, invisible fillers, unassigned or private-use code points,
and whitespace other than the space and the line break) is shown as its code point (``⟨U+202E⟩``).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from tapgate.domain.errors import TOO_LONG as TOO_LONG
from tapgate.domain.errors import TooLongToShow
from tapgate.domain.text import unsafe_character

VALUE_MAX = 1000  # characters of one shown value
PREVIEW_MAX = 4000  # characters of all of a preview's shown values
_WHITESPACE_RUN = re.compile(r"\s{4,}")


def _character(ch: str) -> str:
    if ch in " \n" or (not ch.isspace() and unsafe_character(ch) is None):
        return ch
    return f"⟨U+{ord(ch):04X}⟩"


def _run(match: re.Match[str]) -> str:
    run = match.group(0)
    if set(run) == {" "}:
        return f"⟨{len(run)} spaces⟩"
    if set(run) == {"\n"}:
        return f"⟨{len(run)} line breaks⟩"
    return f"⟨{len(run)} whitespace characters⟩"


def visible(text: str) -> str:
    """``text`` with long whitespace runs counted and unsafe characters named."""
    out: list[str] = []
    last = 0
    for match in _WHITESPACE_RUN.finditer(text):
        out.extend(_character(ch) for ch in text[last : match.start()])
        out.append(_run(match))
        last = match.end()
    out.extend(_character(ch) for ch in text[last:])
    return "".join(out)


def shown(value: object) -> str:
    """The whole value as the person sees it. Raises TooLongToShow."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = visible(text)
    if len(text) > VALUE_MAX:
        raise TooLongToShow()
    return text


TIME_FORMAT = "%d %b %Y %H:%M UTC"  # 11 Dec 2026 23:30 UTC


def shown_time(at: datetime) -> str:
    """A moment as the person reads it wherever tapgate writes one: the phone's mandate card and the
    console alike, in UTC, so two screens never show one moment two ways."""
    if at.tzinfo is None:  # the stores keep UTC; a reading without its zone is still UTC
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).strftime(TIME_FORMAT)
