"""``/mcp``: the MCP endpoint's HTTP side. Every request carries an agent token with the ``tools`` scope;
any other request is answered in the API's error shape before MCP sees it."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from tapgate.api.errors import error_response, status_of
from tapgate.domain.errors import TapgateError, Unauthenticated
from tapgate.domain.principals import Scope as TokenScope
from tapgate.domain.principals import TokenKind
from tapgate.gateway import Gateway
from tapgate.mcp_server.http import McpHttp


class McpEndpoint:
    """The ASGI app routed at ``/mcp``: authenticate, then hand the request to the MCP server."""

    path = "/mcp"  # the route template the request metrics and the access log name

    def __init__(self, gateway: Gateway, mcp: McpHttp) -> None:
        self._gateway = gateway
        self._mcp = mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("This needs an agent token: send 'Authorization: Bearer <token>'.")
            caller = await self._gateway.authenticate(token.strip())
            caller.require(TokenKind.AGENT, scope=TokenScope.TOOLS)
        except TapgateError as e:
            status = status_of(e)
            headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            await error_response(status, e.code, e.message, headers)(scope, receive, send)
            return
        await self._mcp.handle(scope, receive, send, caller)
