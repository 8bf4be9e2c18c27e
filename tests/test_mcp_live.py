"""The MCP server, driven by the official MCP client: over stdio (``tapgate mcp`` as the client's
subprocess) and over streamable HTTP (``/mcp`` on a real gateway), in both protocol eras."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import mcp
import pytest
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tapgate.adapters.store.migrate import migrate
from tests import ts_client
from tests.agents import POLICIES, Home, mcp_over_http, mcp_over_stdio, text_of
from tests.conftest import blocking
from tests.live import Server, tapgate, write_config
from tests.world import bearer

TIMEOUT = 4  # seconds an invocation waits for its device on this gateway
WAIT = 1.5  # seconds an MCP tool call is held (the gateway's mcp_wait_seconds, and --wait for stdio)
PUBLIC = "https://tapgate.example:8443"


@dataclass
class Live:
    server: Server
    database_url: str
    folder: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("mcp")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    (folder / "policies.yaml").write_text(POLICIES)
    config = write_config(
        folder,
        url,
        invocation_timeout_seconds=TIMEOUT,
        device_call_timeout_seconds=TIMEOUT,
        mcp_wait_seconds=WAIT,
        policies_file="policies.yaml",
        public_url=PUBLIC,
    )
    server = Server(config).start()
    try:
        yield Live(server, url, folder)
    finally:
        server.stop()


@pytest.fixture
async def home(live: Live) -> AsyncIterator[Home]:
    async with httpx.AsyncClient(base_url=live.server.url, timeout=30) as client:
        yield await Home(live.server.url, client).build(live.database_url)


@contextlib.asynccontextmanager
async def connect(
    transport: str, live: Live, home: Home, mode: str = "auto", **client: Any
) -> AsyncIterator[mcp.Client]:
    """An official MCP client connected to ana's tools over ``transport``."""
    if transport == "http":
        async with mcp_over_http(f"{live.server.url}/mcp", home.agent, mode, **client) as session:
            yield session
        return
    with (live.folder / "tapgate-mcp.log").open("a") as errlog:
        extra = ("--wait", str(WAIT))
        async with mcp_over_stdio(
            live.server.url, home.agent, errlog, *extra, mode=mode, **client
        ) as session:
            yield session


TRANSPORTS = ["stdio", "http"]
ERAS = [("stdio", "auto"), ("stdio", "legacy"), ("http", "auto"), ("http", "legacy")]


@pytest.mark.parametrize(("transport", "mode"), ERAS)
async def test_an_mcp_client_lists_the_granted_device_tools_and_calls_one_its_device_answers(
    transport: str, mode: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with home.answering("desk-lamp") as seen, connect(transport, live, home, mode) as session:
            assert session.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == {
                "device__desk_lamp__set_light",
                "device__hall_lamp__set_light",
                "device__front_door__unlock",
                "device__kettle__boil",
                "device__ana_phone__sms_send",
                "tapgate_result",
                "tapgate_request_mandate",
            }  # read_temperature is declared but not granted; phone_action needs a session
            lamp = tools["device__desk_lamp__set_light"]
            assert lamp.description is not None and lamp.description.startswith("[DEVICE Desk lamp (lamp)")
            assert lamp.input_schema["required"] == ["on"]
            assert lamp.input_schema["additionalProperties"] is False

            result = await session.call_tool("device__desk_lamp__set_light", {"on": True, "brightness": 40})

    assert result.is_error is False
    assert text_of(result).endswith("The device says: set_light done")
    assert result.structured_content["status"] == "done"
    assert result.structured_content["result"]["trust"] == "external_untrusted"
    [call] = seen
    assert call["device"] == "desk-lamp"
    assert call["arguments"] == {"on": True, "brightness": 40}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_refused_calls_are_errors_with_the_reason_the_model_reads_and_reach_no_device(
    transport: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with home.answering("desk-lamp") as seen, connect(transport, live, home) as session:
            blocked = await session.call_tool("device__front_door__unlock", {})
            ungranted = await session.call_tool("device__desk_lamp__read_temperature", {})
            off_schema = await session.call_tool("device__desk_lamp__set_light", {"on": "yes", "colour": 1})
            unknown = await session.call_tool("device__garage__open", {})
            bad_result_call = await session.call_tool("tapgate_result", {"wait": 5})

    assert blocked.is_error
    assert text_of(blocked) == "[policy] Doors stay locked from here (rule 'doors-stay-locked', line 3)"
    assert ungranted.is_error and text_of(ungranted).startswith(
        "[deny] capability not granted: the person has not granted read_temperature"
    )
    assert off_schema.is_error and text_of(off_schema).startswith("[deny] ")
    assert unknown.is_error and text_of(unknown) == "[deny] unknown tool"
    assert bad_result_call.is_error
    assert "invocation_id" in text_of(bad_result_call) and "required" in text_of(bad_result_call)
    assert seen == []
    audit = await home.client.get("/v1/audit?limit=1000", headers=bearer(home.operator))
    refused = [e for e in audit.json()["entries"] if e["action"] == "invocation.refused"]
    assert len(refused) == 4  # every refusal is journalled by the check chain


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_model_reads_why_a_call_was_refused_and_that_its_device_is_offline(
    transport: str, live: Live, home: Home
) -> None:
    r = await home.client.delete("/v1/users/ana/devices/hall-lamp", headers=bearer(home.operator))
    assert r.status_code == 204, r.text
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            revoked = await session.call_tool("device__hall_lamp__set_light", {"on": True})
            typo = await session.call_tool("device__kettle__bol", {})
            no_session = await session.call_tool("phone_action", {"action": "torch"})
            offline = await session.call_tool("device__desk_lamp__set_light", {"on": True})

    assert revoked.is_error and text_of(revoked).startswith("[deny] device revoked")
    assert typo.is_error and text_of(typo) == "[deny] unknown tool; did you mean device__kettle__boil?"
    assert no_session.is_error and text_of(no_session).startswith("[deny] phone_action needs a session_id")
    assert not offline.is_error and offline.structured_content["device_online"] is False
    assert "The device is offline" in text_of(offline)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_its_device_never_answers_returns_its_id_and_tapgate_result_later_shows_it_expired(
    transport: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            waiting = await session.call_tool("device__hall_lamp__set_light", {"on": True})
            invocation_id = waiting.structured_content["id"]
            later = await session.call_tool(
                "tapgate_result", {"invocation_id": invocation_id, "wait": TIMEOUT + 5}
            )

    assert waiting.is_error is False
    assert waiting.structured_content["status"] == "pending"
    assert f"Call tapgate_result with invocation_id={invocation_id}" in text_of(waiting)
    assert later.is_error is True
    assert later.structured_content["status"] == "expired"
    assert text_of(later).startswith("tool.device_offline:")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_call_the_person_must_approve_gives_the_binding_code_and_a_late_yes_is_not_lost(
    transport: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with home.answering("kettle") as seen, connect(transport, live, home) as session:
            asked = await session.call_tool("device__kettle__boil", {})
            code = asked.structured_content["binding_code"]
            assert seen == []  # nothing reaches the kettle before the person says yes
            await home.approve_the_waiting_card(code)
            later = await session.call_tool(
                "tapgate_result", {"invocation_id": asked.structured_content["id"], "wait": TIMEOUT}
            )

    assert asked.is_error is False
    assert asked.structured_content["status"] == "awaiting_approval"
    assert re.search(rf"the card shows the code {code}\b", text_of(asked))
    assert "Call tapgate_result with invocation_id=" in text_of(asked)
    assert later.structured_content["status"] == "done"
    assert text_of(later).endswith("The device says: boil done")
    assert [call["capability"] for call in seen] == ["boil"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_agent_asks_for_a_mandate_over_mcp_and_reads_that_it_waits_for_the_persons_signature(
    transport: str, live: Live, home: Home
) -> None:
    asked = {
        "tools": ["device__kettle__boil"],
        "max_calls": 5,
        "per_day": 2,
        "expires_in_seconds": 86400,
        "purpose": "morning tea",
    }
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            answer = await session.call_tool("tapgate_request_mandate", asked)
            wrong = await session.call_tool(
                "tapgate_request_mandate", asked | {"tools": ["device__kettle__fly"]}
            )
            too_long = await session.call_tool(
                "tapgate_request_mandate", asked | {"expires_in_seconds": 10**8}
            )

    assert answer.is_error is False
    mandate = answer.structured_content
    assert mandate["status"] == "awaiting_signature"
    assert f"Mandate {mandate['mandate_id']} is awaiting_signature" in text_of(answer)
    assert wrong.is_error is True and "unknown tool" in text_of(wrong)
    assert too_long.is_error is True and "expires_in_seconds" in text_of(too_long)
    r = await home.client.get(f"/v1/mandates/{mandate['mandate_id']}", headers=bearer(home.user))
    assert r.json()["status"] == "awaiting_signature" and r.json()["agent_id"] == "assistant"
    inbox = (await home.client.get("/v1/inbox", headers=bearer(home.user))).json()["approvals"]
    assert [a["kind"] for a in inbox if a["subject"] == mandate["mandate_id"]] == ["mandate"]


@pytest.mark.parametrize(("transport", "mode"), ERAS)
async def test_the_client_hears_that_the_tool_list_changed_when_a_grant_is_withdrawn(
    transport: str, mode: str, live: Live, home: Home
) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, mcp.types.ToolListChangedNotification):
            changed.set()

    with anyio.fail_after(30):
        async with connect(transport, live, home, mode, message_handler=on_message) as session:
            before = {tool.name for tool in (await session.list_tools()).tools}
            assert "device__desk_lamp__set_light" in before
            if mode == "legacy":
                await home.grant("desk-lamp", "set_light", False)
                await changed.wait()
            else:
                async with session.listen(tools_list_changed=True) as events:
                    await home.grant("desk-lamp", "set_light", False)
                    async for _ in events:
                        break
            after = {tool.name for tool in (await session.list_tools()).tools}

    assert before - after == {"device__desk_lamp__set_light"}


async def test_the_mcp_endpoint_wants_an_agent_token_on_every_request(live: Live, home: Home) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    post = home.client.post

    nobody = await post("/mcp", json=initialize, headers=headers)
    stranger = await post("/mcp", json=initialize, headers=headers | bearer("tg_nope"))
    person = await post("/mcp", json=initialize, headers=headers | bearer(home.user))
    agent = await post("/mcp", json=initialize, headers=headers | bearer(home.agent))

    assert nobody.status_code == 401 and nobody.json()["error"]["code"] == "unauthenticated"
    assert nobody.headers["WWW-Authenticate"] == "Bearer"
    assert stranger.status_code == 401 and stranger.json()["error"]["code"] == "unauthenticated"
    assert person.status_code == 403 and person.json()["error"]["code"] == "forbidden"
    assert agent.status_code == 200
    session_id = agent.headers["mcp-session-id"]
    other_agent = await home.token("agent", agent_id="other")
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    taken = await post(
        "/mcp", json=listed, headers=headers | bearer(other_agent) | {"mcp-session-id": session_id}
    )
    assert taken.status_code == 404  # a session belongs to the token that opened it


async def test_the_mcp_endpoint_answers_the_public_host_and_loopback_and_no_other(
    live: Live, home: Home
) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    headers |= bearer(home.agent)
    probe = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

    async def status(host: str) -> int:
        r = await home.client.post("/mcp", json=probe, headers=headers | {"Host": host})
        return r.status_code

    assert await status("tapgate.example:8443") != 421
    assert await status(f"localhost:{live.server.port}") != 421
    assert await status("attacker.example") == 421


async def test_tapgate_mcp_says_why_it_cannot_start(live: Live, home: Home) -> None:
    bad_token = tapgate("mcp", "--url", live.server.url, "--token", home.agent + "x")
    nobody_there = tapgate("mcp", "--url", "http://127.0.0.1:9", "--token", home.agent)
    https_to_plain = live.server.url.replace("http://", "https://")
    wrong_scheme = tapgate("mcp", "--url", https_to_plain, "--token", home.agent)

    assert bad_token.returncode == 1
    assert "token" in bad_token.stderr.lower() and "Traceback" not in bad_token.stderr
    assert nobody_there.returncode == 1 and "Traceback" not in nobody_there.stderr
    assert nobody_there.stderr.strip() == (
        "The gateway at http://127.0.0.1:9 cannot be reached (ConnectError); check the URL and that it runs."
    )
    assert wrong_scheme.returncode == 1 and "Traceback" not in wrong_scheme.stderr
    assert wrong_scheme.stderr.strip() == (
        f"The gateway at 127.0.0.1:{live.server.port} answers plain http, not HTTPS: use {live.server.url}."
    )


async def test_with_the_device_flags_off_there_is_no_mcp_endpoint(api: httpx.AsyncClient) -> None:
    """Gate G12."""
    r = await api.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status_code == 404
    assert json.loads(r.text)["error"]["code"] == "not_found"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_argument_text_reaches_a_log_line(transport: str, live: Live, home: Home) -> None:
    """Gate G11, through MCP."""
    secretish = "purple-elephant-4242"
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            sent = await session.call_tool(
                "device__ana_phone__sms_send", {"to": "+15550001111", "body": f"Meet at {secretish}"}
            )
            await session.call_tool("device__desk_lamp__set_light", {"on": secretish})

    assert sent.structured_content["status"] == "pending"  # nobody runs the phone here
    stdio_log = live.folder / "tapgate-mcp.log"  # what the tapgate mcp processes wrote
    logs = live.server.logs() + (stdio_log.read_text() if stdio_log.exists() else "")
    assert secretish not in logs


# What a client is told of a sensor's, an actuator's and sms_send's tool before it calls:
# (title, readOnlyHint, destructiveHint, openWorldHint).
DEVICE_TOOL_HINTS = {
    "device__desk_lamp__read_temperature": ("Read temperature", True, False, False),
    "device__desk_lamp__set_light": ("Set light", False, True, False),
    "device__ana_phone__sms_send": ("Send a text message", False, True, True),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_device_tool_carries_the_title_and_hints_of_its_capability(
    transport: str, live: Live, home: Home
) -> None:
    await home.grant("desk-lamp", "read_temperature", True)
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}

    def hints(name: str) -> tuple[str | None, bool | None, bool | None, bool | None]:
        tool = tools[name]
        assert tool.annotations is not None, name
        assert tool.annotations.title == tool.title, name
        a = tool.annotations
        return tool.title, a.read_only_hint, a.destructive_hint, a.open_world_hint

    assert {name: hints(name) for name in DEVICE_TOOL_HINTS} == DEVICE_TOOL_HINTS
    assert hints("tapgate_result")[1:] == (True, False, False)
    assert hints("tapgate_request_mandate")[1:] == (False, False, False)


async def test_the_typescript_sdk_client_sees_each_device_tool_with_its_title_and_hints(
    live: Live, home: Home
) -> None:
    await home.grant("desk-lamp", "read_temperature", True)
    with anyio.fail_after(60):
        listed = await ts_client.list_tools(f"{live.server.url}/mcp", home.agent)
    tools = {tool["name"]: tool for tool in listed["tools"]}

    def hints(name: str) -> tuple[str | None, bool | None, bool | None, bool | None]:
        tool = tools[name]
        a = tool["annotations"]
        assert a.get("title") == tool.get("title"), name
        return tool.get("title"), a.get("readOnlyHint"), a.get("destructiveHint"), a.get("openWorldHint")

    assert listed["protocolVersion"] == "2025-11-25"  # the SDK's newest, which the gateway also speaks
    assert {name: hints(name) for name in DEVICE_TOOL_HINTS} == DEVICE_TOOL_HINTS


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_mandate_tool_is_listed_with_its_schema_and_a_call_outside_it_asks_nobody(
    transport: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with connect(transport, live, home) as session:
            [listed] = [t for t in (await session.list_tools()).tools if t.name == "tapgate_request_mandate"]
            no_purpose = await session.call_tool(
                "tapgate_request_mandate",
                {"tools": ["device__kettle__boil"], "max_calls": 5, "expires_in_seconds": 3600},
            )
            zero_calls = await session.call_tool(
                "tapgate_request_mandate",
                {
                    "tools": ["device__kettle__boil"],
                    "max_calls": 0,
                    "expires_in_seconds": 3600,
                    "purpose": "tea",
                },
            )

    assert listed.input_schema["required"] == ["tools", "max_calls", "expires_in_seconds", "purpose"]
    assert listed.input_schema["additionalProperties"] is False
    assert listed.input_schema["properties"]["max_calls"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
    }
    assert no_purpose.is_error and text_of(no_purpose).startswith("tapgate_request_mandate: arguments: ")
    assert "'purpose' is a required property" in text_of(no_purpose)
    assert zero_calls.is_error and text_of(zero_calls).startswith("tapgate_request_mandate: max_calls: ")
    inbox = (await home.client.get("/v1/inbox", headers=bearer(home.user))).json()["approvals"]
    assert inbox == []


class PageOpener:
    """An MCP client's elicitation callback that records each page it was asked to open, and answers
    "accept" (it opened it) as a desktop assistant does."""

    def __init__(self) -> None:
        self.pages: list[mcp.types.ElicitRequestURLParams] = []

    async def __call__(
        self, context: object, params: mcp.types.ElicitRequestParams
    ) -> mcp.types.ElicitResult:
        assert isinstance(params, mcp.types.ElicitRequestURLParams), params
        self.pages.append(params)
        return mcp.types.ElicitResult(action="accept")


def console_of(transport: str, live: Live) -> str:
    """Where the person at the desk opens the console: the gateway's public URL for /mcp, the URL
    ``tapgate mcp`` was given for stdio."""
    return PUBLIC if transport == "http" else live.server.url


@pytest.mark.parametrize(("transport", "mode"), ERAS)
async def test_a_client_that_opens_pages_is_shown_the_approvals_page_and_its_accept_approves_nothing(
    transport: str, mode: str, live: Live, home: Home
) -> None:
    opener = PageOpener()
    with anyio.fail_after(30):
        async with (
            home.answering("kettle") as seen,
            connect(transport, live, home, mode, elicitation_callback=opener) as session,
        ):
            asked = await session.call_tool("device__kettle__boil", {})
            code = asked.structured_content["binding_code"]
            still = await session.call_tool(
                "tapgate_result", {"invocation_id": asked.structured_content["id"], "wait": 0}
            )
            assert seen == []  # the client's "accept" reached no kettle
            await home.approve_the_waiting_card(code)
            later = await session.call_tool(
                "tapgate_result", {"invocation_id": asked.structured_content["id"], "wait": TIMEOUT}
            )

    [page] = opener.pages
    assert page.mode == "url"
    assert page.url == f"{console_of(transport, live)}/console/approvals"
    assert f"the card shows the code {code}" in page.message and "device__kettle__boil" in page.message
    assert asked.is_error is False and asked.structured_content["status"] == "awaiting_approval"
    assert re.search(rf"the card shows the code {code}\b", text_of(asked))
    assert still.structured_content["status"] == "awaiting_approval"
    assert later.structured_content["status"] == "done"
    assert [call["capability"] for call in seen] == ["boil"]


@pytest.mark.parametrize(("transport", "mode"), ERAS)
async def test_a_client_that_opens_pages_is_shown_where_a_mandate_waits_and_its_accept_signs_nothing(
    transport: str, mode: str, live: Live, home: Home
) -> None:
    opener = PageOpener()
    asked = {"tools": ["device__kettle__boil"], "max_calls": 5, "expires_in_seconds": 3600, "purpose": "tea"}
    with anyio.fail_after(30):
        async with connect(transport, live, home, mode, elicitation_callback=opener) as session:
            answer = await session.call_tool("tapgate_request_mandate", asked)

    [page] = opener.pages
    assert page.url == f"{console_of(transport, live)}/console/approvals"
    assert "mandate" in page.message
    mandate = answer.structured_content
    assert answer.is_error is False and mandate["status"] == "awaiting_signature"
    r = await home.client.get(f"/v1/mandates/{mandate['mandate_id']}", headers=bearer(home.user))
    assert r.json()["status"] == "awaiting_signature"


@pytest.mark.parametrize(("transport", "mode"), ERAS)
async def test_a_client_that_cannot_open_pages_gets_the_same_answers_as_before(
    transport: str, mode: str, live: Live, home: Home
) -> None:
    with anyio.fail_after(30):
        async with connect(transport, live, home, mode) as session:  # no elicitation callback: none declared
            asked = await session.call_tool("device__kettle__boil", {})
            mandate = await session.call_tool(
                "tapgate_request_mandate",
                {
                    "tools": ["device__kettle__boil"],
                    "max_calls": 5,
                    "expires_in_seconds": 3600,
                    "purpose": "tea",
                },
            )

    assert asked.is_error is False and asked.structured_content["status"] == "awaiting_approval"
    assert "Call tapgate_result with invocation_id=" in text_of(asked)
    assert mandate.is_error is False and mandate.structured_content["status"] == "awaiting_signature"


async def test_a_client_that_declared_forms_only_is_sent_no_page(live: Live, home: Home) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    headers |= bearer(home.agent)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "forms-only", "version": "1"},
        },
    }
    opened = await home.client.post("/mcp", json=initialize, headers=headers)
    assert opened.status_code == 200, opened.text
    headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await home.client.post("/mcp", json=ready, headers=headers)).status_code == 202
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "device__kettle__boil", "arguments": {}},
    }

    answered = await home.client.post("/mcp", json=call, headers=headers)

    assert answered.status_code == 200, answered.text
    assert "elicitation/create" not in answered.text
    assert '"status":"awaiting_approval"' in answered.text.replace(" ", "")


def guide_configuration(heading: str) -> dict[str, Any]:
    """The ``tapgate`` entry of the first JSON block under ``heading`` in docs/agents.md."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    part = guide[guide.index(heading) :]
    block = part[part.index("```json\n") + len("```json\n") : part.index("\n```", part.index("```json\n"))]
    return dict(json.loads(block)["mcpServers"]["tapgate"])


async def test_the_agents_guides_stdio_configuration_starts_tapgate_mcp_as_a_desktop_assistant_does(
    live: Live, home: Home
) -> None:
    entry = guide_configuration("### stdio: `tapgate mcp`")
    args = [live.server.url if arg == "http://127.0.0.1:8080" else arg for arg in entry["args"]]
    assert args != entry["args"]  # the guide's URL was the one replaced
    args += ["--wait", str(WAIT)]  # held shorter than this gateway's approvals live
    env = {name: home.agent if value == "tga_…" else value for name, value in entry["env"].items()}
    params = mcp.StdioServerParameters(
        command=str(Path(sys.executable).parent / entry["command"]), args=args, env=env
    )  # only the entry's environment, over the SDK's safe defaults, as a desktop client passes it
    opener = PageOpener()
    with anyio.fail_after(30), (live.folder / "tapgate-mcp.log").open("a") as errlog:
        async with mcp.Client(stdio_client(params, errlog=errlog), elicitation_callback=opener) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            asked = await session.call_tool("device__kettle__boil", {})

    assert {"device__kettle__boil", "tapgate_result", "tapgate_request_mandate"} <= tools
    assert asked.structured_content["status"] == "awaiting_approval"
    assert [page.url for page in opener.pages] == [f"{live.server.url}/console/approvals"]


async def test_the_agents_guides_http_configuration_reaches_mcp_with_its_header(
    live: Live, home: Home
) -> None:
    entry = guide_configuration("### streamable HTTP: `/mcp`")
    assert entry["type"] == "http" and entry["url"] == "https://tapgate.example.com/mcp"
    headers = {k: v.replace("tga_…", home.agent) for k, v in entry["headers"].items()}
    opener = PageOpener()
    with anyio.fail_after(30):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            mcp.Client(
                streamable_http_client(f"{live.server.url}/mcp", http_client=http),
                elicitation_callback=opener,
            ) as session,
        ):
            tools = {tool.name for tool in (await session.list_tools()).tools}
            asked = await session.call_tool("device__kettle__boil", {})

    assert {"device__kettle__boil", "tapgate_result", "tapgate_request_mandate"} <= tools
    assert asked.structured_content["status"] == "awaiting_approval"
    assert [page.url for page in opener.pages] == [f"{PUBLIC}/console/approvals"]
