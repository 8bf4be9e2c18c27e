"""The official MCP TypeScript SDK client (tests/mcp_ts), run with Node.js against a live gateway.

Its packages come from tests/mcp_ts/package-lock.json through ``make mcp-ts`` (which ``make unit`` runs).
Where Node.js or those packages are missing the tests are skipped with the reason, unless
TAPGATE_TEST_NODE_REQUIRED is set (as .ci/run does), which turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

CLIENT = Path(__file__).parent / "mcp_ts"
SDK = CLIENT / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"


def require_node() -> str:
    """Node.js's path; skip (or, with TAPGATE_TEST_NODE_REQUIRED set, fail) when it or the SDK is missing."""
    node = shutil.which("node")
    if node is not None and SDK.exists():
        return node
    if node is None:
        reason = "the TypeScript SDK test needs Node.js (apt-get install -y nodejs npm), then `make mcp-ts`"
    else:
        reason = (
            f"the TypeScript SDK is not installed in {CLIENT}: run `make mcp-ts` (npm ci from its lockfile)"
        )
    if os.environ.get("TAPGATE_TEST_NODE_REQUIRED"):
        pytest.fail(reason)
    pytest.skip(reason)


async def list_tools(mcp_url: str, agent_token: str) -> dict[str, Any]:
    """What the TypeScript SDK's client sees of ``tools/list`` on ``mcp_url``: the negotiated protocol
    version and every tool, as parsed by the SDK."""
    node = require_node()
    env = {**os.environ, "TAPGATE_AGENT_TOKEN": agent_token}
    done = await anyio.run_process(
        [node, str(CLIENT / "list_tools.mjs"), mcp_url], cwd=CLIENT, env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    listed: dict[str, Any] = json.loads(done.stdout)
    return listed
