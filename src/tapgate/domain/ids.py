"""Identifiers: the slugs people choose and the ids tapgate mints."""

from __future__ import annotations

import re
import secrets

from tapgate.domain.errors import InvalidInput

SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SLUG_MAX = 40


def check_slug(value: str, field: str, max_length: int = SLUG_MAX) -> str:
    """Return ``value`` when it is lower-case words joined by ``-``; raise InvalidInput naming ``field``."""
    if not isinstance(value, str) or not SLUG.fullmatch(value) or len(value) > max_length:
        raise InvalidInput(
            field,
            f"{field} must be lower-case letters and digits in words joined by '-', "
            f"at most {max_length} characters (like 'ana' or 'desk-lamp').",
        )
    return value


def new_id(prefix: str, random_bytes: int = 16) -> str:
    """An unguessable id: ``prefix`` and 128 random bits (by default) in hex."""
    return f"{prefix}_{secrets.token_hex(random_bytes)}"
