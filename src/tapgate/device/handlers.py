"""Capability handlers: plain Python functions that carry out what a card asks, registered by name.

    from tapgate.device.handlers import handler

    @handler("set_light")
    def set_light(arguments: dict) -> str | None:
        ...                          # do it; return a short message for the agent, or None
        return "the lamp is on"

``handler`` only marks the function; ``tapgate device run --handlers my.module`` collects every marked
function of the module (or ``my.module:name`` one function, a ``Handlers`` or a dict of them). A handler
that raises makes the call ``failed`` with the exception's message; it never stops the phone.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, TypeVar, cast

__all__ = ["Handler", "HandlerError", "Handlers", "handler", "load_handlers"]

Handler = Callable[[dict[str, Any]], str | None]
F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__tapgate_capability__"


class HandlerError(Exception):
    """A ``--handlers`` spec that names nothing usable; the message says what to change."""


def handler(capability: str) -> Callable[[F], F]:
    """Mark a function as the handler of ``capability``; it takes the call's arguments (a dict) and
    returns a short message for the agent or None, or raises to fail the call."""

    def mark(function: F) -> F:
        setattr(function, _MARK, capability)
        return function

    return mark


class Handlers(Mapping[str, Handler]):
    """Capability name → handler."""

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self._handlers: dict[str, Handler] = dict(handlers or {})

    def handler(self, capability: str) -> Callable[[F], F]:
        """Register (and mark) a handler of ``capability`` in this registry."""

        def register(function: F) -> F:
            self._handlers[capability] = handler(capability)(function)
            return function

        return register

    def add(self, other: Mapping[str, Handler]) -> None:
        self._handlers.update(other)

    def __getitem__(self, capability: str) -> Handler:
        return self._handlers[capability]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)

    @classmethod
    def of_module(cls, module: ModuleType) -> Handlers:
        """Every function in ``module`` marked with ``@handler``."""
        found: dict[str, Handler] = {}
        for _, function in inspect.getmembers(module, callable):
            if isinstance(getattr(function, _MARK, None), str):
                found[getattr(function, _MARK)] = cast(Handler, function)
        return cls(found)


def load_handlers(spec: str) -> Handlers:
    """The handlers ``spec`` names: ``module`` (its marked functions) or ``module:attr`` (a marked
    function, a Handlers or a mapping of name to function). Raises HandlerError."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise HandlerError(
            f"--handlers {spec}: the module {module_name!r} cannot be imported ({e})."
        ) from None
    if not attr:
        found = Handlers.of_module(module)
        if not found:
            raise HandlerError(f"--handlers {spec}: the module has no function marked @handler(...).")
        return found
    target = getattr(module, attr, None)
    if isinstance(target, Mapping):
        if not all(isinstance(k, str) and callable(v) for k, v in target.items()):
            raise HandlerError(f"--handlers {spec}: the mapping must map capability names to functions.")
        return Handlers(target)
    if callable(target) and isinstance(getattr(target, _MARK, None), str):
        return Handlers({getattr(target, _MARK): target})
    raise HandlerError(
        f"--handlers {spec}: {attr!r} is not a function marked @handler(...), a Handlers or a mapping."
    )
