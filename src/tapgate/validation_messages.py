"""What a person reads when a value has the wrong type or is out of bounds: tapgate's sentences for
pydantic's error kinds, shared by the HTTP API and the settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The sentence for each kind of problem pydantic finds, in the house style: the field first, then what it
# must be. A library's own wording ("Input should be a valid dictionary") never reaches a person.
_TYPES = {
    "string_type": "must be a string (text in quotes)",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "list_type": "must be a list ([…])",
    "tuple_type": "must be a list ([…])",
    "dict_type": "must be an object ({…})",
    "model_type": "must be an object ({…})",
    "model_attributes_type": "must be an object ({…})",
    "string_pattern_mismatch": "is not in the form this field takes (see its description at /docs)",
    "datetime_type": "must be a date and time in ISO 8601 with a time zone",
    "datetime_parsing": "must be a date and time in ISO 8601 with a time zone",
}
_BOUNDS = {
    "string_too_long": "is at most {max_length} characters",
    "string_too_short": "needs at least {min_length} characters",
    "too_long": "holds at most {max_length} items",
    "too_short": "needs at least {min_length} items",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "literal_error": "must be {expected}",
    "enum": "must be {expected}",
}


def sentence(kind: str, field: str, error: Mapping[str, Any]) -> str:
    """The sentence for one of pydantic's errors (its ``type``, the field's name, the error itself)."""
    if kind in _TYPES:
        return f"{field} {_TYPES[kind]}."
    if kind in _BOUNDS:
        try:
            return f"{field} {_BOUNDS[kind].format(**error.get('ctx', {}))}."
        except (KeyError, IndexError):
            pass
    if kind in ("value_error", "assertion_error"):  # our own validators' words
        return f"{field}: {str(error['msg']).removeprefix('Value error, ')}."
    return f"{field} does not hold a value this field takes; see /docs for what it takes."
