"""docs/device-protocol.md stays true: every JSON example on it has the shape a running gateway really
sends (or takes), and the status codes it states for pairing, answering and ``device:ack`` are the ones
the gateway answers."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tapgate.domain.frames import Ack
from tests.conftest import blocking
from tests.live import Server, new_tenant, write_config
from tests.world import bearer, device_body

DOC = Path(__file__).parents[1] / "docs" / "device-protocol.md"
UNPLUG = {"name": "unplug", "kind": "actuator", "description": "Cut the lamp's power.", "confirm": True}


def _blocks() -> list[Any]:
    """Every ```json block of the page, parsed (a block that is not JSON fails here)."""
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)]


def _doc() -> str:
    return " ".join(DOC.read_text().split())  # sentences as one line, whatever the wrapping


def shape(value: Any) -> Any:
    """Keys all the way down; a list by its first item; every other value is just a value."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return "value"


def _example(test: Any) -> dict[str, Any]:
    [found] = [block for block in _blocks() if isinstance(block, dict) and test(block)]
    return dict(found)


def _frame_example(kind: str) -> dict[str, Any]:
    return _example(lambda block: block.get("type") == kind)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("protocol-doc")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    server = Server(write_config(folder, url, invocation_timeout_seconds=30)).start()
    server.database_url = url  # type: ignore[attr-defined]
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=15) as client:
        yield client


async def _frame(link: Any, kind: str) -> dict[str, Any]:
    async with asyncio.timeout(10):
        while True:
            frame = json.loads(await link.recv())
            if frame["type"] == kind:
                return dict(frame)


def test_every_json_example_is_one_the_test_below_checks() -> None:
    kinds = []
    for block in _blocks():
        assert isinstance(block, dict)
        if "type" in block:
            kinds.append(block["type"])
        else:
            kinds.append(
                next(k for k in ("name", "invocations", "approvals", "event", "grants_asked") if k in block)
            )
    assert sorted(kinds) == sorted(
        [
            "name",  # the manifest entry: enrolled below
            "device:invoke",
            "device:approval",
            "device:ack",
            "device:notice",
            "device:revoked",
            "device:moved",  # after `serve --move`: tests/test_moving.py
            "device:result",
            "invocations",
            "event",  # the push message: its senders' shape is tests/test_push_senders.py's
            "approvals",
            "grants_asked",  # the re-declaration's answer
        ]
    )


async def test_the_examples_have_the_shape_a_running_gateway_sends(
    server: Server, client: httpx.AsyncClient
) -> None:
    operator = await new_tenant(server.database_url)  # type: ignore[attr-defined]
    as_operator = bearer(operator)
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)).status_code == 201
    r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
    agent = bearer(r.json()["token"])
    manifest_entry = _example(lambda block: "name" in block)
    body = device_body("desk-lamp", [manifest_entry, UNPLUG], grants=["set_light", "unplug"])
    r = await client.post("/v1/users/ana/devices", json=body, headers=as_operator)
    assert r.status_code == 201, r.text  # the manifest entry on the page is one the gateway takes
    lamp = r.json()["device_token"]

    invoke = _frame_example("device:invoke")
    ws_url = server.url.replace("http", "ws") + "/v1/device/connect"
    async with websockets.connect(ws_url, additional_headers=bearer(lamp), compression=None) as link:
        call = (
            await client.post(
                "/v1/invocations",
                json={"tool": invoke["tool"], "arguments": invoke["input"]},
                headers=agent,
            )
        ).json()
        sent = await _frame(link, "device:invoke")
        assert shape(sent) == shape(invoke)
        assert sent["tool"] == invoke["tool"] and sent["capability"] == invoke["capability"]

        asked = (
            await client.post(
                "/v1/invocations", json={"tool": "device__desk_lamp__unplug", "arguments": {}}, headers=agent
            )
        ).json()
        approval = await _frame(link, "device:approval")
        assert shape(approval) == shape(_frame_example("device:approval"))
        assert approval["approval"]["binding_code"] == asked["binding_code"]

        result = _frame_example("device:result") | {"callId": call["id"]}
        await link.send(json.dumps(result))
        ack = await _frame(link, "device:ack")
        assert ack == _frame_example("device:ack") | {"callId": call["id"]}

        later = (
            await client.post(
                "/v1/invocations", json={"tool": invoke["tool"], "arguments": invoke["input"]}, headers=agent
            )
        ).json()
        await _frame(link, "device:invoke")
        r = await client.get("/v1/device/invocations", headers=bearer(lamp))
        assert r.json()["invocations"] == []  # the link holds it: not handed again at once
        r = await client.get("/v1/inbox", headers=bearer(lamp))
        assert shape(r.json()) == shape(_example(lambda block: "approvals" in block))

        notice = _frame_example("device:notice")["notice"]
        r = await client.post(
            "/v1/notices", json={"event": notice["event"], "data": notice["data"]}, headers=agent
        )
        assert r.status_code == 202, r.text
        heard = await _frame(link, "device:notice")
        assert shape(heard) == shape(_frame_example("device:notice"))
        assert heard["notice"] | {"id": notice["id"], "createdAt": notice["createdAt"]} == notice

        assert (
            await client.delete("/v1/users/ana/devices/desk-lamp", headers=as_operator)
        ).status_code == 204
        assert await _frame(link, "device:revoked") == _frame_example("device:revoked")
    assert later["status"] == "pending"


async def test_the_long_poll_item_has_the_shape_on_the_page(
    server: Server, client: httpx.AsyncClient
) -> None:
    operator = await new_tenant(server.database_url)  # type: ignore[attr-defined]
    as_operator = bearer(operator)
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)).status_code == 201
    r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
    agent = bearer(r.json()["token"])
    body = device_body("desk-lamp", [_example(lambda block: "name" in block)], grants=["set_light"])
    lamp = (await client.post("/v1/users/ana/devices", json=body, headers=as_operator)).json()["device_token"]
    example = _example(lambda block: "invocations" in block)
    item = example["invocations"][0]
    await client.post(
        "/v1/invocations", json={"tool": item["tool"], "arguments": item["arguments"]}, headers=agent
    )
    r = await client.get("/v1/device/invocations", headers=bearer(lamp))
    assert shape(r.json()) == shape(example)


async def test_the_redeclare_answer_has_the_shape_on_the_page(
    server: Server, client: httpx.AsyncClient
) -> None:
    operator = await new_tenant(server.database_url)  # type: ignore[attr-defined]
    as_operator = bearer(operator)
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)).status_code == 201
    phone = device_body("ana-phone", [], grants=[])  # an approver: the grant is asked of it
    assert (await client.post("/v1/users/ana/devices", json=phone, headers=as_operator)).status_code == 201
    lamp = device_body("desk-lamp", [], grants=[])
    token = (await client.post("/v1/users/ana/devices", json=lamp, headers=as_operator)).json()[
        "device_token"
    ]
    await client.post("/v1/device/heartbeat", headers=bearer(token))
    example = _example(lambda block: "grants_asked" in block)
    entry = example["device"]["capabilities"][0]
    asked = {k: entry[k] for k in ("name", "kind", "description")} | {"granted": True}
    r = await client.put("/v1/device/capabilities", json={"capabilities": [asked]}, headers=bearer(token))
    assert r.status_code == 200, r.text
    assert shape(r.json()) == shape(example)
    assert r.json()["grants_asked"] == example["grants_asked"] and r.json()["note"] == example["note"]


async def test_the_status_codes_on_the_page_are_the_ones_the_gateway_answers(
    server: Server, client: httpx.AsyncClient
) -> None:
    doc = _doc()
    operator = await new_tenant(server.database_url)  # type: ignore[attr-defined]
    as_operator = bearer(operator)
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)).status_code == 201

    # pairing: "`404` for a code that is not valid, `409` for one used already, `410` for one expired"
    assert "`404` for a code that is not valid, `409` for one used already, `410` for one expired" in doc
    pairing = (await client.post("/v1/users/ana/pairings", json={}, headers=as_operator)).json()
    code = pairing["url"].split("#pair=")[1]
    claim = device_body("ana-phone", []) | {"code": code}
    assert (await client.post("/v1/pair", json=claim)).status_code == 201
    assert (await client.post("/v1/pair", json=claim | {"device_id": "ana-tablet"})).status_code == 409
    forged = code[:-8] + "00000000"
    assert (await client.post("/v1/pair", json=claim | {"code": forged})).status_code == 404

    # answering: the table of §5 and its twin, device:ack's
    r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
    agent = bearer(r.json()["token"])
    body = device_body("desk-lamp", [_example(lambda block: "name" in block)], grants=["set_light"])
    lamp = bearer(
        (await client.post("/v1/users/ana/devices", json=body, headers=as_operator)).json()["device_token"]
    )
    call = (
        await client.post(
            "/v1/invocations",
            json={"tool": "device__desk_lamp__set_light", "arguments": {"on": True}},
            headers=agent,
        )
    ).json()
    answer = f"/v1/device/invocations/{call['id']}/result"
    for status, row in [
        (422, "| `422` |"),
        (200, "| `200` |"),
        (409, '| `409 {"error": …, "first": {"id", "status"}}` |'),
    ]:
        assert row in doc
        word = "maybe" if status == 422 else "done"
        r = await client.post(answer, json={"status": word}, headers=lamp)
        assert r.status_code == status, r.text
    assert r.json()["first"] == {"id": call["id"], "status": "done"}
    assert "| `404` |" in doc
    r = await client.post("/v1/device/invocations/inv_nope/result", json={"status": "done"}, headers=lamp)
    assert r.status_code == 404
    table = re.findall(r"\| `(\w+)` \| [^|]+ \| `(\d{3})` \|", doc)
    assert {word for word, _ in table} == {a.value for a in Ack}
    assert dict(table) == {
        "accepted": "200",
        "duplicate": "409",
        "expired": "410",
        "unknown": "404",
        "invalid": "422",
    }
