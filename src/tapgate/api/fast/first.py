"""The application: FastAPI, with the device link and the requests every call runs served ahead of it.

A device's link lives for hours, and a long-poll or an agent's call may wait a minute; each layer such a
request passed through (Starlette's and FastAPI's middleware, routing and exception layers, and tapgate's
own) would hold its state for as long, and each costs CPU on every call (the package's docstring). So the
link is served here at once (no layer acts on a WebSocket), and an API request goes to ``ServedAhead``
(``ahead.py``), which serves it with what the layers would do where its route has a plan, or hands it to
the whole stack.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from tapgate.api.fast.ahead import ServedAhead
from tapgate.api.routes.link import PATH, connect


class FirstApp(FastAPI):
    link_served = False  # set where the device channel is on (gate G12: otherwise no such path)
    ahead: ServedAhead | None = None  # set once the routes are in place

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.link_served and scope["type"] == "websocket" and scope["path"] == PATH:
            scope["app"] = self  # as Starlette gives it to every request
            await connect(WebSocket(scope, receive, send))
            return
        if self.ahead is not None and self.ahead.takes(scope):
            await self.ahead.serve(self, super().__call__, scope, receive, send)
            return
        await super().__call__(scope, receive, send)
