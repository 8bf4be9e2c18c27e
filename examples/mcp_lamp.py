"""The official MCP client on a running gateway's /mcp: list the person's tools and switch a lamp on.

    python examples/mcp_lamp.py --url http://127.0.0.1:8080 --token "$TAPGATE_AGENT_TOKEN"

A gateway with a certificate from its own CA (tapgate tls init) needs --ca-file tls/ca.pem (or
TAPGATE_CA_FILE).

The agent token goes in the Authorization header of every request. A call the device has not answered
within the gateway's wait comes back with its invocation id; tapgate_result fetches the answer later.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

import httpx2
import mcp
from mcp.client.streamable_http import streamable_http_client

from tapgate.trust import UnreadableCaFile, trust, untrusted_line


def text_of(result: mcp.types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, mcp.types.TextContent))


async def run(url: str, token: str, brightness: int, ca_file: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120, verify=trust(ca_file)) as http,
        mcp.Client(streamable_http_client(f"{url.rstrip('/')}/mcp", http_client=http)) as client,
    ):
        tools = (await client.list_tools()).tools
        for tool in tools:
            print(f"tool {tool.name}: {tool.description}")
        found = next((t for t in tools if t.name.endswith("__set_light")), None)
        if found is None:
            print("No lamp among the tools: grant set_light on a lamp first.", file=sys.stderr)
            return 1
        lamp = found.name
        # Only what the lamp declares: the README's lamp has no brightness, and a call with an
        # undeclared argument is refused.
        arguments: dict[str, object] = {"on": True}
        if "brightness" in (found.input_schema or {}).get("properties", {}):
            arguments["brightness"] = brightness
        result = await client.call_tool(lamp, arguments)
        view = result.structured_content or {}
        if view.get("status") in ("pending", "awaiting_approval"):
            print(text_of(result))
            result = await client.call_tool("tapgate_result", {"invocation_id": view["id"], "wait": 60})
        print(f"{lamp}: {'error' if result.is_error else 'ok'}: {text_of(result)}")
        return 1 if result.is_error else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=os.environ.get("TAPGATE_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("TAPGATE_AGENT_TOKEN"), help="An agent token.")
    parser.add_argument("--brightness", type=int, default=60, help="Sent when the lamp declares it.")
    parser.add_argument(
        "--ca-file", default=os.environ.get("TAPGATE_CA_FILE"), help="A CA to trust for the gateway's https."
    )
    args = parser.parse_args()
    if not args.token:
        parser.error("an agent token is needed: --token or TAPGATE_AGENT_TOKEN")
    try:
        return asyncio.run(run(args.url, args.token, args.brightness, args.ca_file))
    except UnreadableCaFile as e:
        parser.error(str(e))
    except Exception as e:
        line = untrusted_line(e)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
