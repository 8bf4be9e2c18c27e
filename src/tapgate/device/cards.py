"""What the terminal phone shows: a card per call and per approval, and one line per outcome.

Everything on a card comes from an agent or a device, so it is shown as text, never as markup, and control
and format characters are shown as escapes (``\\u001b``) rather than sent to the terminal.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from tapgate.device.phone import Call, Request

__all__ = ["Screen", "clean", "clock", "comparison_panel"]

_SHOWN_AS_IS = frozenset("\n\t")


def clean(text: str) -> str:
    """``text`` with control, format, private-use and surrogate characters written as ``\\uXXXX``."""
    return "".join(
        ch
        if ch in _SHOWN_AS_IS or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cs")
        else f"\\u{ord(ch):04x}"
        for ch in text
    )


def clock(iso: str) -> str:
    """A moment as this machine's local hours and minutes (``14:05``), as the browser app shows it."""
    try:
        return datetime.fromisoformat(iso).astimezone().strftime("%H:%M")
    except ValueError:
        return clean(iso)


def _value(value: Any) -> str:
    return clean(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def _rows(rows: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        table.add_row(Text(clean(label)), Text(value))
    return table


class Screen:
    """Draws the run loop's cards and outcomes on a rich console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def call(self, call: Call) -> None:
        rows = [("tool", clean(call.tool)), ("capability", clean(call.capability))]
        if call.summary:
            rows.append(("summary", clean(call.summary)))
        if call.binding_code:
            rows.append(("binding code", clean(call.binding_code)))
        for name, value in call.arguments.items():
            rows.append((f"  {name}", _value(value)))
        if call.expires_at:
            rows.append(("answer by", clock(call.expires_at)))
        title = Text(f"Call {call.id}", style="bold cyan")
        self.console.print(Panel(_rows(rows), title=title, title_align="left", expand=False))

    def approval(self, request: Request) -> None:
        rows = []
        if request.why:
            rows.append(("why", clean(request.why)))
        rows += [(label, clean(value)) for label, value in request.fields]
        if request.expires_at:
            rows.append(("answer by", clock(request.expires_at)))
        parts: list[Any] = [Text(clean(request.prompt), style="bold")]
        if request.description:
            parts.append(Text(clean(request.description), style="dim"))
        if request.binding_code:
            parts.append(Text.assemble(("binding code  ", "bold"), (clean(request.binding_code), "reverse")))
        parts.append(_rows(rows))
        title = Text(f"Approval {request.id}", style="bold yellow")
        self.console.print(Panel(Group(*parts), title=title, title_align="left", expand=False))

    def answered(self, call: Call, status: str, message: str | None, outcome: str) -> None:
        said = f": {clean(message)}" if message else ""
        self._line(
            f"answered {call.id} {status}{said} ({outcome})", "green" if status == "done" else "yellow"
        )

    def decided(self, request: Request, status: str, outcome: str) -> None:
        self._line(
            f"decided {request.id} {status} ({outcome})", "green" if status == "approved" else "yellow"
        )

    def note(self, text: str) -> None:
        self._line(clean(text), "dim")

    def _line(self, text: str, style: str) -> None:
        self.console.print(Text(text, style=style), soft_wrap=True)


def comparison_panel(code: str) -> Panel:
    """The pairing's comparison code, big enough to read across a desk."""
    digits = Text(f"  {clean(code)}  ", style="bold reverse")
    body = Group(
        Text("Comparison code", style="bold"),
        Text(),
        digits,
        Text(),
        Text(
            "Type these six digits where you started the pairing to let this device in, or, if you have "
            "a device paired already, approve this one there when it shows the same code."
        ),
    )
    return Panel(body, expand=False, padding=(1, 4))
