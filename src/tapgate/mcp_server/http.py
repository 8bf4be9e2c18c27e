"""The MCP server over streamable HTTP, mounted at ``/mcp`` in the gateway's app: one session manager,
run by the app's lifespan, serving each request as the caller the app authenticated for it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from tapgate.domain.principals import Principal
from tapgate.gateway import Gateway
from tapgate.mcp_server.backends import Backend, LocalBackend
from tapgate.mcp_server.server import DEFAULT_WAIT, build_server

_CALLER = "tapgate.mcp.caller"
_LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]"]


def transport_security(public_url: str) -> TransportSecuritySettings:
    """DNS-rebinding protection that lets in the configured public host and loopback, and no other."""
    public = urlsplit(public_url)
    hosts = [*_LOOPBACK_HOSTS, *(f"{h}:*" for h in _LOOPBACK_HOSTS)]
    origins = [
        f"{scheme}://{h}{port}"
        for scheme in ("http", "https")
        for h in _LOOPBACK_HOSTS
        for port in ("", ":*")
    ]
    if public.netloc:
        hosts.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class McpHttp:
    """``/mcp``: the app authenticates every request, then ``handle`` serves it as that caller. A
    session belongs to the credential that opened it; another token gets 404 for it."""

    def __init__(self, gateway: Gateway, public_url: str, wait: float = DEFAULT_WAIT) -> None:
        self._gateway = gateway
        self.server = build_server(self._backend, wait=wait)
        self.manager = StreamableHTTPSessionManager(
            app=self.server, security_settings=transport_security(public_url)
        )

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The session manager's lifetime, for the app's lifespan to hold open.

        The manager's task group lives in a task of its own, so the lifespan may start and stop it from
        different tasks (as an in-process test harness does); a task group must exit where it entered.
        """
        up, down = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                up.set()
                await down.wait()

        holder = asyncio.create_task(hold())
        started = asyncio.create_task(up.wait())
        await asyncio.wait({holder, started}, return_when=asyncio.FIRST_COMPLETED)
        if holder.done():
            started.cancel()
            holder.result()  # the manager could not start: raise why
        try:
            yield
        finally:
            down.set()
            await holder

    async def handle(self, scope: Scope, receive: Receive, send: Send, caller: Principal) -> None:
        scope["state"] = {**scope.get("state", {}), _CALLER: caller}
        scope["user"] = AuthenticatedUser(
            AccessToken(
                token="",  # the secret stays out of the session manager's bookkeeping
                client_id=f"{caller.tenant_id}/{caller.credential_id}",
                scopes=sorted(caller.scopes),
                subject=caller.user_id,
            )
        )
        await self.manager.handle_request(scope, receive, send)

    def _backend(self, ctx: ServerRequestContext[Any, Any]) -> Backend:
        request = ctx.request
        if not isinstance(request, Request) or _CALLER not in request.scope.get("state", {}):
            raise MCPError(code=INTERNAL_ERROR, message="This MCP request carries no authenticated caller.")
        caller: Principal = request.scope["state"][_CALLER]
        return LocalBackend(self._gateway, caller, request.query_params.get("session_id") or None)
