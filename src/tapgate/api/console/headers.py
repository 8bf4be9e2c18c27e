"""The console's security headers: the browser app's strict policy, with forms posting to this origin."""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tapgate.api.routes.webapp import SECURITY_HEADERS

CONSOLE_HEADERS = {
    **SECURITY_HEADERS,
    "content-security-policy": SECURITY_HEADERS["content-security-policy"].replace(
        "form-action 'none'", "form-action 'self'"
    ),
    "cache-control": "no-store",
}


class ConsoleHeaders:
    """Adds the console's headers to every response under /console."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith("/console"):
            await self.app(scope, receive, send)
            return

        async def hardened(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in CONSOLE_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, hardened)


def static_files() -> ASGIApp:
    return StaticFiles(packages=[("tapgate.api.console", "static")])
