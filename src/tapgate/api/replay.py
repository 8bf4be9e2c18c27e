"""A request's body read whole, and given again to the app that serves the request after it."""

from __future__ import annotations

from starlette.types import Message, Receive


async def read_whole(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """The body and the messages it came in; None if the client left before its end."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return None, messages
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), messages


def replaying(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages``, read from it already, given first."""
    if not messages:
        return receive
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
