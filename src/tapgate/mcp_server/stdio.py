"""``tapgate mcp``: the MCP server on stdio, for a desktop assistant or an IDE agent that starts it as a
subprocess; it speaks to a running gateway over HTTP with the agent's token."""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from tapgate.client import Client
from tapgate.mcp_server.backends import RemoteBackend
from tapgate.mcp_server.server import DEFAULT_WAIT, build_server


async def serve_stdio(
    url: str,
    token: str,
    session_id: str | None = None,
    wait: float = DEFAULT_WAIT,
    ca_file: str | None = None,
) -> None:
    """Serve on stdin and stdout until stdin closes.

    The gateway is asked for the tool list once before serving, so a bad token or a gateway that does
    not answer (GatewayUnreachable) is raised at start as a TapgateError, not on the client's first call.
    ``ca_file`` is a CA to trust for the gateway's https (else TAPGATE_CA_FILE, else the system's CAs).
    """
    async with Client(url, token, verify=ca_file) as client:
        backend = RemoteBackend(client, session_id)
        await backend.tools()
        server = build_server(lambda _ctx: backend, wait=wait)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
