"""The MCP server: the person's device tools for MCP clients, over streamable HTTP (``/mcp``, mounted in
the gateway) and stdio (``tapgate mcp``, speaking to a running gateway with the Python client).

Both list the agent's user's tools and call them through the gateway's check chain with a wait; both
tell the client when the list changes (``notifications/tools/list_changed``, or a ``subscriptions/listen``
event on the 2026-07-28 protocol).
"""

from tapgate.mcp_server.backends import Backend, LocalBackend, RemoteBackend
from tapgate.mcp_server.server import RESULT_TOOL, build_server

__all__ = ["RESULT_TOOL", "Backend", "LocalBackend", "RemoteBackend", "build_server"]
