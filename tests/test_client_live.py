"""The Python client (tapgate.client) against a real gateway on loopback: tools, invocations, typed
results, tapgate's own errors, and an event stream that survives a dropped connection."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest

from tapgate.adapters.store.migrate import migrate
from tapgate.client import Client, Event, Invocation, error_from_response
from tapgate.domain.errors import (
    Conflict,
    Forbidden,
    Gone,
    InvalidInput,
    NotFound,
    RateLimited,
    TapgateError,
    Unauthenticated,
)
from tests.agents import POLICIES, Home
from tests.conftest import blocking
from tests.live import Server, write_config

TIMEOUT = 30  # a call waits this long for its device: far above a busy machine's slowest answer


@dataclass
class Live:
    server: Server
    database_url: str


def _start(folder: Path) -> Live:
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    (folder / "policies.yaml").write_text(POLICIES)
    config = write_config(
        folder,
        url,
        invocation_timeout_seconds=TIMEOUT,
        device_call_timeout_seconds=TIMEOUT,
        policies_file="policies.yaml",
    )
    return Live(Server(config).start(), url)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    started = _start(tmp_path_factory.mktemp("client"))
    try:
        yield started
    finally:
        started.server.stop()


@pytest.fixture
async def home(live: Live) -> AsyncIterator[Home]:
    async with httpx.AsyncClient(base_url=live.server.url, timeout=30) as client:
        yield await Home(live.server.url, client).build(live.database_url)


@pytest.fixture
async def tapgate(live: Live, home: Home) -> AsyncIterator[Client]:
    async with Client(live.server.url, home.agent, timeout=10) as client:
        yield client


async def test_the_client_lists_the_tools_as_openai_functions_and_as_mcp_tools(tapgate: Client) -> None:
    openai = await tapgate.tools()
    mcp = await tapgate.tools(format="mcp")

    lamp = next(t for t in openai if t["function"]["name"] == "device__desk_lamp__set_light")
    assert lamp["type"] == "function"
    assert lamp["function"]["parameters"]["additionalProperties"] is False
    assert lamp["function"]["parameters"]["required"] == ["on"]
    assert {t["function"]["name"] for t in openai} == {t["name"] for t in mcp}
    assert all(set(t) == {"name", "title", "description", "inputSchema", "_meta"} for t in mcp)


async def test_an_invocation_waits_for_its_device_and_comes_back_typed(tapgate: Client, home: Home) -> None:
    with anyio.fail_after(120):  # guards against a hang; the call returns as soon as it is answered
        async with home.answering("desk-lamp"):
            call = await tapgate.invoke("device__desk_lamp__set_light", {"on": True}, wait=60)

    assert isinstance(call, Invocation)
    assert call.status == "done" and not call.open
    assert call.result is not None
    assert call.result.trust == "external_untrusted"
    assert call.result.message == "set_light done"
    assert call.resolved_at is not None and call.resolved_at >= call.created_at


async def test_a_refusal_is_an_invocation_with_its_reason_not_an_exception(tapgate: Client) -> None:
    blocked = await tapgate.invoke("device__front_door__unlock", {})
    shadow = await tapgate.invoke("device__desk_lamp__set_light", {"on": True}, shadow=True)

    assert blocked.status == "refused"
    assert blocked.reason == "[policy] Doors stay locked from here (rule 'doors-stay-locked', line 3)"
    assert shadow.status == "refused" and shadow.reason is not None and shadow.reason.startswith("[policy]")
    assert blocked.result is None


async def test_a_call_awaiting_the_person_carries_its_binding_code_and_its_result_comes_later(
    tapgate: Client, home: Home
) -> None:
    with anyio.fail_after(120):  # guards against a hang
        async with home.answering("kettle"):
            asked = await tapgate.invoke("device__kettle__boil", {}, wait=0.2)
            assert asked.status == "awaiting_approval" and asked.open
            assert asked.binding_code is not None
            await home.approve_the_waiting_card(asked.binding_code)
            done = await tapgate.result(asked.id, wait=60)

    assert done.status == "done"
    assert done.id == asked.id


async def test_http_errors_come_back_as_tapgates_own_error_classes(
    tapgate: Client, live: Live, home: Home
) -> None:
    await tapgate.invoke("device__hall_lamp__set_light", {"on": True}, invocation_id="call-1")

    with pytest.raises(NotFound) as unknown:
        await tapgate.result("inv_nothing")
    with pytest.raises(Conflict):
        await tapgate.invoke("device__hall_lamp__set_light", {"on": False}, invocation_id="call-1")
    with pytest.raises(InvalidInput) as invalid:
        await tapgate.invoke("device__hall_lamp__set_light", {"on": True}, invocation_id="not an id!")
    async with Client(live.server.url, home.agent + "x") as stranger:
        with pytest.raises(Unauthenticated):
            await stranger.tools()
    async with Client(live.server.url, home.user) as person:
        with pytest.raises(Forbidden):
            await person.invoke("device__hall_lamp__set_light", {"on": True})

    assert unknown.value.code == "not_found" and "inv_nothing" in unknown.value.message
    assert invalid.value.code == "invalid" and "invocation_id" in invalid.value.message


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected", "code"),
    [
        (
            429,
            {"code": "rate_limited", "message": "Too many."},
            {"Retry-After": "7"},
            RateLimited,
            "rate_limited",
        ),
        (410, {"code": "gone", "message": "Expired."}, {}, Gone, "gone"),
        (403, {"code": "signature_refused", "message": "No."}, {}, Forbidden, "signature_refused"),
        (500, {"code": "internal", "message": "Broke."}, {}, TapgateError, "internal"),
    ],
)
def test_an_error_answer_maps_to_its_class_by_code_then_by_status(
    status: int, body: dict[str, str], headers: dict[str, str], expected: type[TapgateError], code: str
) -> None:
    error = error_from_response(httpx.Response(status, json={"error": body}, headers=headers))
    assert type(error) is expected
    assert error.code == code
    assert error.message == body["message"]
    if isinstance(error, RateLimited):
        assert error.retry_after == 7


async def _resolve(home: Home, tapgate: Client, count: int) -> list[str]:
    """Make ``count`` invocation.resolved events, in order; their invocation ids."""
    ids = []
    async with home.answering("desk-lamp"):
        for _ in range(count):
            call = await tapgate.invoke("device__desk_lamp__set_light", {"on": True}, wait=10)
            while call.status == "pending":  # a loaded machine may take longer than one wait
                call = await tapgate.result(call.id, wait=10)
            assert call.status == "done", call
            ids.append(call.id)
    return ids


async def _take(stream: AsyncIterator[Event], count: int) -> list[Event]:
    taken: list[Event] = []
    async for event in stream:
        if event.type == "invocation.resolved":
            taken.append(event)
            if len(taken) == count:
                break
    return taken


async def test_events_resume_after_the_reader_stops_with_none_missed_and_none_repeated(
    tapgate: Client, home: Home
) -> None:
    with anyio.fail_after(120):  # a guard against a hang, not a speed check
        first_ids = await _resolve(home, tapgate, 3)
        stream = tapgate.events()
        first = await _take(stream, 2)
        await stream.aclose()  # the reader stops: its connection closes
        later_ids = await _resolve(home, tapgate, 2)
        resumed = await _take(tapgate.events(after=first[-1].id), 3)

    seen = first + resumed
    assert [e.data["invocation_id"] for e in seen] == first_ids + later_ids
    assert [e.id for e in seen] == sorted({e.id for e in seen})
    assert all(e.data["status"] == "done" and e.created_at is not None for e in seen), [
        (e.data, e.created_at) for e in seen
    ]


async def test_the_event_stream_reconnects_by_itself_when_the_server_drops_it(
    tmp_path: Path,
) -> None:
    live = _start(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=live.server.url, timeout=30) as http:
            home = await Home(live.server.url, http).build(live.database_url)
            async with Client(live.server.url, home.agent, timeout=5, max_backoff=1) as tapgate:
                with anyio.fail_after(60):
                    before = await _resolve(home, tapgate, 2)
                    stream = tapgate.events()
                    seen = await _take(stream, 2)
                    live.server.kill()  # the stream drops mid-read, as in a crash
                    live.server.start()  # the same port, the same database
                    after = await _resolve(home, tapgate, 2)
                    seen += await _take(stream, 2)  # the same iterator: it reconnected on its own
                    await stream.aclose()
    finally:
        live.server.stop()

    assert [e.data["invocation_id"] for e in seen] == before + after
    assert len({e.id for e in seen}) == 4


async def test_a_session_message_from_a_phone_brings_the_phone_action_tool(
    tapgate: Client, home: Home
) -> None:
    await tapgate.put_session("chat-1", "chat", attended=True)
    offered = await tapgate.record_message("chat-1", "ana-phone", ["phone_actions"])

    names = [t["function"]["name"] for t in await tapgate.tools(session_id="chat-1")]
    assert offered is True
    assert "phone_action" in names
    assert "phone_action" not in [t["function"]["name"] for t in await tapgate.tools()]
