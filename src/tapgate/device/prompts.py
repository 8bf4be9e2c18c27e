"""Who answers the cards: the person at the terminal, or a fixed answer for scripts and tests."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from tapgate.device.phone import (
    Answer,
    ApprovalDecider,
    Call,
    CallDecider,
    Request,
    Verdict,
    in_daemon_thread,
)
from tapgate.domain.approvals import Decision

__all__ = ["Ask", "always", "always_decide"]

_CALL_KEYS = {"y": Answer.DONE, "n": Answer.DECLINED, "f": Answer.FAILED}


def always(answer: Answer) -> CallDecider:
    """Answer every call with ``answer`` (``run --auto``)."""

    async def decide(call: Call) -> Answer:
        return answer

    return decide


def always_decide(decision: Decision) -> ApprovalDecider:
    """Decide every approval with ``decision`` (``run --approve auto-approve|auto-deny``)."""

    async def decide(request: Request) -> Verdict:
        return Verdict(decision)

    return decide


class Ask:
    """Ask the person at the terminal. Standard input closing (nobody there) leaves the card undecided."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def _input(self, prompt: str) -> str | None:
        try:  # escaped: rich would read "[y]" as markup and drop the key letters
            return self.console.input(escape(prompt)).strip()
        except EOFError:
            return None

    async def call(self, call: Call) -> Answer | None:
        while True:
            said = await in_daemon_thread(self._input, "Carry it out? [y]es, [n]o (decline), [f]ailed: ")
            if said is None:
                return None
            if said[:1].lower() in _CALL_KEYS:
                return _CALL_KEYS[said[:1].lower()]

    async def approval(self, request: Request) -> Verdict | None:
        # "This wasn't me" pauses the agent that asked: only a card an agent's call waits on offers it.
        question = (
            "Decide: [a]pprove, [d]eny, or [w] this wasn't me (deny and pause the agent): "
            if request.agent_asks
            else "Decide: [a]pprove or [d]eny: "
        )
        keys = ("d", "w") if request.agent_asks else ("d",)
        while True:
            said = await in_daemon_thread(self._input, question)
            if said is None:
                return None
            key = said[:1].lower()
            if key == "a":
                return Verdict(Decision.APPROVED)
            if key in keys:
                words = await in_daemon_thread(self._input, "A word for the agent (Enter for none): ")
                return Verdict(Decision.DENIED, words or None, not_me=key == "w")
