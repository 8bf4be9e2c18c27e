"""Notices: a heads-up an agent sends to the person's devices. It can decide nothing, and it carries
ids and flags only; the person's own words travel only where the operator turned ``notice_text`` on."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tapgate.domain.errors import InvalidInput, SecretRefused
from tapgate.domain.push import PushValue
from tapgate.domain.secret_scan import check_outbound
from tapgate.domain.text import check_display_text

NOTICE_EVENTS = frozenset(
    {"goal.blocked", "goal.done", "memory.proposed", "suggestion.proposed", "run.finished", "run.failed"}
)
TITLE_MAX = 80
BODY_MAX = 240
DATA_MAX_KEYS = 16
DATA_MAX_BYTES = 1024  # Web Push, APNs and FCM each carry about 4 KB in all
VALUE_MAX = 200
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
# Keys the push envelope owns (and FCM refuses): a notice's data cannot use them.
_RESERVED = frozenset(
    {"event", "delivery_id", "device_id", "user_id", "notice_id", "from", "message_type", "collapse_key"}
)


@dataclass(frozen=True, slots=True)
class Notice:
    event: str
    data: Mapping[str, PushValue] = field(default_factory=dict)
    title: str | None = None  # set only when notice_text is on
    body: str | None = None


def check_notice(event: object, data: object, ui: object, show_text: bool) -> Notice:
    """A notice from an agent's request. ``ui`` (``{title?, body?}``) is checked always and kept only
    when ``show_text``. Raises InvalidInput naming the field."""
    if not isinstance(event, str) or event not in NOTICE_EVENTS:
        raise InvalidInput("event", "event must be one of: " + ", ".join(sorted(NOTICE_EVENTS)) + ".")
    checked = _data(data)
    title, body = _ui(ui)
    if not show_text:
        return Notice(event, checked)
    return Notice(event, checked, title, body)


def _data(data: object) -> dict[str, PushValue]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InvalidInput("data", "data must be an object of ids and flags.")
    if len(data) > DATA_MAX_KEYS:
        raise InvalidInput("data", f"data holds at most {DATA_MAX_KEYS} keys.")
    checked: dict[str, PushValue] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key) or key.startswith(("google", "gcm")):
            raise InvalidInput("data", "data keys are lower snake case names of at most 40 characters.")
        if key in _RESERVED:
            raise InvalidInput(f"data.{key}", f"data.{key} is a key the push itself carries; rename it.")
        checked[key] = _value(key, value)
    try:  # an id-shaped value can still be a key: data is scanned like ui
        check_outbound((f"data.{key}", value) for key, value in checked.items() if isinstance(value, str))
    except SecretRefused as e:
        raise InvalidInput(e.field, f"{e.field} looks like a secret; tapgate never sends secrets.") from None
    if len(json.dumps(checked, separators=(",", ":"))) > DATA_MAX_BYTES:
        raise InvalidInput("data", f"data takes at most {DATA_MAX_BYTES} bytes as JSON; send fewer ids.")
    return checked


def _value(key: str, value: object) -> PushValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise InvalidInput(f"data.{key}", f"data.{key} must be a finite number.")
        return value
    if isinstance(value, str) and len(value) <= VALUE_MAX and _ID.fullmatch(value):
        return value
    raise InvalidInput(
        f"data.{key}",
        f"data.{key} must be an id (letters, digits, '.', '_', ':' or '-', at most {VALUE_MAX} "
        "characters), a number or a boolean: a notice carries no text.",
    )


def _ui(ui: object) -> tuple[str | None, str | None]:
    if ui is None:
        return None, None
    if not isinstance(ui, Mapping) or set(ui) - {"title", "body"}:
        raise InvalidInput("ui", "ui must be an object with an optional title and body.")
    words: dict[str, str | None] = {}
    for name, limit in (("title", TITLE_MAX), ("body", BODY_MAX)):
        value = ui.get(name)
        if value is None:
            words[name] = None
            continue
        if not isinstance(value, str):
            raise InvalidInput(f"ui.{name}", f"ui.{name} must be a string.")
        value = check_display_text(value.strip(), f"ui.{name}", limit)
        words[name] = value or None
    try:
        check_outbound((f"ui.{name}", text) for name, text in words.items() if text)
    except SecretRefused as e:
        raise InvalidInput(e.field, f"{e.field} looks like a secret; tapgate never sends secrets.") from None
    return words["title"], words["body"]
