"""Text that a person or a model will read: refuse what can hide or forge a line."""

from __future__ import annotations

import unicodedata

from tapgate.domain.errors import InvalidInput

# Categories that never belong in text shown to a person or a model: control, line and paragraph
# separators, format (bidirectional
# overrides, zero-width joiners, the tag block), unassigned, private use and surrogates.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Zl", "Zp"})
INVISIBLE = frozenset({"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800"})


def unsafe_character(text: str, allow_newlines: bool = False) -> str | None:
    """The first character of ``text`` that must not be shown, as ``U+XXXX``, or None."""
    # Most text is printable throughout, which rules out every category above at C speed (a printable
    # string has no Cc, Cf, Cn, Co, Cs, Zl or Zp character); only the invisible ones are left to look for.
    if text.isprintable() and not any(ch in text for ch in INVISIBLE):
        return None
    for ch in text:
        if allow_newlines and ch in "\n\t":
            continue
        if unicodedata.category(ch) in HIDDEN_CATEGORIES or ch in INVISIBLE:
            return f"U+{ord(ch):04X}"
    return None


def check_display_text(value: str, field: str, max_length: int, allow_newlines: bool = False) -> str:
    """Return ``value`` if it is safe to show and not longer than ``max_length``; else raise InvalidInput."""
    if len(value) > max_length:
        raise InvalidInput(field, f"{field} is longer than {max_length} characters.")
    bad = unsafe_character(value, allow_newlines=allow_newlines)
    if bad is not None:
        raise InvalidInput(
            field, f"{field} contains {bad}, a control, format or invisible character; remove it."
        )
    return value


def reveal_hidden(text: str) -> tuple[str, bool]:
    """``text`` with every character that could hide or reorder what is read (bidirectional controls,
    zero-width and other format characters, the tag block, controls but newline and tab, invisible
    fillers) shown as a visible ``⟨U+XXXX⟩``; and whether there was any."""
    if unsafe_character(text, allow_newlines=True) is None and "\r" not in text:
        return text, False
    shown = []
    for ch in text:
        if ch not in "\n\t" and (unicodedata.category(ch) in HIDDEN_CATEGORIES or ch in INVISIBLE):
            shown.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            shown.append(ch)
    return "".join(shown), True
