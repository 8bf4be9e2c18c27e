"""Gates G2-G7 and G17 at the HTTP level against a real uvicorn, on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
import websockets

from tapgate.adapters.store.migrate import migrate
from tests.conftest import PostgresDatabase, blocking
from tests.live import Server, new_tenant, write_config
from tests.world import LAMP, bearer, device_body

TIMEOUT = 3  # seconds an invocation waits for its device on these servers


@dataclass
class Live:
    server: Server
    database_url: str


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp(f"live-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'tapgate.db'}"
        blocking(migrate(url))
    else:
        postgres: PostgresDatabase = request.getfixturevalue("postgres")
        url = postgres.app_url
    config = write_config(
        folder, url, invocation_timeout_seconds=TIMEOUT, device_call_timeout_seconds=TIMEOUT
    )
    server = Server(config).start()
    try:
        yield Live(server, url)
    finally:
        server.stop()


@dataclass
class Scene:
    """A fresh tenant on the live server: ana, her agent, her desk lamp (set_light granted), bob's lamp."""

    client: httpx.AsyncClient
    operator: str
    agent: str
    lamp: str
    other_lamp: str
    bob_lamp: str

    async def invoke(self, **body: object) -> httpx.Response:
        call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}} | body
        return await self.client.post("/v1/invocations", json=call, headers=bearer(self.agent))


@pytest.fixture
async def scene(live: Live) -> AsyncIterator[Scene]:
    operator = await new_tenant(live.database_url)
    async with httpx.AsyncClient(base_url=live.server.url, timeout=10) as client:
        as_operator = bearer(operator)
        for user in ("ana", "bob"):
            assert (
                await client.post("/v1/users", json={"user_id": user}, headers=as_operator)
            ).status_code == 201
        r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
        agent = r.json()["token"]

        async def enrol(user: str, device_id: str) -> str:
            body = device_body(device_id, [LAMP], grants=["set_light"], push={"kind": "fcm", "token": "T"})
            r = await client.post(f"/v1/users/{user}/devices", json=body, headers=as_operator)
            assert r.status_code == 201, r.text
            return str(r.json()["device_token"])

        yield Scene(
            client,
            operator,
            agent,
            await enrol("ana", "desk-lamp"),
            await enrol("ana", "hall-lamp"),
            await enrol("bob", "desk-lamp"),
        )


async def _fetch(scene: Scene, token: str, wait: float = 0) -> list[dict[str, object]]:
    r = await scene.client.get(f"/v1/device/invocations?wait={wait}", headers=bearer(token))
    assert r.status_code == 200, r.text
    return list(r.json()["invocations"])


async def _audit(scene: Scene) -> list[dict[str, object]]:
    r = await scene.client.get("/v1/audit?limit=1000", headers=bearer(scene.operator))
    return list(r.json()["entries"])


async def test_an_invocation_reaches_its_device_and_its_answer_reaches_the_agent(scene: Scene) -> None:
    r = await scene.invoke(arguments={"on": True, "brightness": 40})
    assert r.status_code == 200, r.text
    call = r.json()
    assert call["status"] == "pending"
    assert call["result"] is None
    [fetched] = await _fetch(scene, scene.lamp)
    assert fetched["id"] == call["id"]
    assert fetched["arguments"] == {"on": True, "brightness": 40}
    r = await scene.client.post(
        f"/v1/device/invocations/{call['id']}/result",
        json={"status": "done", "message": "on at 40%"},
        headers=bearer(scene.lamp),
    )
    assert r.json() == {"id": call["id"], "status": "done"}
    r = await scene.client.get(f"/v1/invocations/{call['id']}", headers=bearer(scene.agent))
    done = r.json()
    assert done["status"] == "done"
    assert done["result"]["message"] == "on at 40%"
    assert done["result"]["trust"] == "external_untrusted"  # G6


async def test_replaying_an_invocation_id_makes_one_row_and_one_push(scene: Scene, live: Live) -> None:
    """Gate G2, twenty replays at once."""
    replies = await asyncio.gather(*(scene.invoke(invocation_id="call-7") for _ in range(20)))
    assert {r.status_code for r in replies} == {200}
    assert {r.json()["id"] for r in replies} == {"call-7"}
    assert len(await _fetch(scene, scene.lamp)) == 1
    created = [e for e in await _audit(scene) if e["action"] == "invocation.created"]
    assert len(created) == 1
    pushes = await _outbox_rows(live, "call-7")
    assert pushes == 1
    other = await scene.invoke(invocation_id="call-7", arguments={"on": False})
    assert other.status_code == 409


async def _outbox_rows(live: Live, subject: str) -> int:
    from tapgate.adapters.store.sql import open_sql_store

    store = open_sql_store(live.database_url)
    try:
        total = 0
        for tenant in await store.tenant_ids():
            async with store.unit_of_work(tenant) as uow:
                total += len(await uow.outbox.for_subject(subject))
        return total
    finally:
        await store.close()


async def test_a_foreign_or_revoked_device_can_neither_fetch_nor_answer(scene: Scene) -> None:
    """Gate G3."""
    call = (await scene.invoke()).json()
    for foreign in (scene.other_lamp, scene.bob_lamp):
        assert await _fetch(scene, foreign) == []
        r = await scene.client.post(
            f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(foreign)
        )
        assert r.status_code == 404
    r = await scene.client.delete("/v1/users/ana/devices/desk-lamp", headers=bearer(scene.operator))
    assert r.status_code == 204
    assert (await scene.client.get("/v1/device/invocations", headers=bearer(scene.lamp))).status_code == 401
    r = await scene.client.post(
        f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(scene.lamp)
    )
    assert r.status_code == 401
    # G7: revocation resolved the open call at once, and never as done (G4).
    view = (await scene.client.get(f"/v1/invocations/{call['id']}", headers=bearer(scene.agent))).json()
    assert view["status"] == "failed"


async def test_only_a_device_result_makes_done_and_a_second_answer_gets_the_first(scene: Scene) -> None:
    """Gate G4: the server's own paths end in expired or failed; only the device says done."""
    call = (await scene.invoke()).json()
    answers = await asyncio.gather(
        *(
            scene.client.post(
                f"/v1/device/invocations/{call['id']}/result",
                json={"status": status},
                headers=bearer(scene.lamp),
            )
            for status in ("done", "declined", "failed", "sent")
        )
    )
    assert sorted(r.status_code for r in answers) == [200, 409, 409, 409]
    winner = next(r.json()["status"] for r in answers if r.status_code == 200)
    for r in answers:
        if r.status_code == 409:
            assert r.json()["first"] == {"id": call["id"], "status": winner}
    view = (await scene.client.get(f"/v1/invocations/{call['id']}", headers=bearer(scene.agent))).json()
    assert view["status"] == winner


async def test_an_unanswered_invocation_expires_as_device_offline(scene: Scene) -> None:
    """Gate G5, and a late answer kept as a report that never reopens it."""
    call = (await scene.invoke()).json()
    r = await scene.client.get(
        f"/v1/invocations/{call['id']}?wait={TIMEOUT + 5}", headers=bearer(scene.agent)
    )
    view = r.json()
    assert view["status"] == "expired"
    assert view["result"]["text"].startswith("tool.device_offline")
    assert view["result"]["trust"] == "external_untrusted"
    late = await scene.client.post(
        f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(scene.lamp)
    )
    assert late.status_code == 410
    view = (await scene.client.get(f"/v1/invocations/{call['id']}", headers=bearer(scene.agent))).json()
    assert view["status"] == "expired"
    actions = [e["action"] for e in await _audit(scene) if e["subject"] == call["id"]]
    assert actions == ["invocation.created", "invocation.expired", "invocation.late_report"]


async def test_a_device_waiting_on_long_poll_gets_the_call_at_once(scene: Scene) -> None:
    waiting = asyncio.create_task(_fetch(scene, scene.lamp, wait=20))
    await asyncio.sleep(0.2)  # let the long-poll reach the server before the call is made
    loop = asyncio.get_running_loop()
    started = loop.time()
    call = (await scene.invoke()).json()
    [fetched] = await asyncio.wait_for(waiting, timeout=30)
    assert fetched["id"] == call["id"]
    # Woken by the write: one process wakes its waiters by event, never by a poll, so without the wake
    # the long-poll would run its full 20 s (the bound leaves a busy machine room).
    assert loop.time() - started < 10


async def test_an_agent_waiting_on_the_call_gets_the_answer_when_it_is_posted(scene: Scene) -> None:
    agent_waits = asyncio.create_task(scene.invoke(wait=20))
    [fetched] = await _fetch(scene, scene.lamp, wait=10)
    await scene.client.post(
        f"/v1/device/invocations/{fetched['id']}/result",
        json={"status": "declined"},
        headers=bearer(scene.lamp),
    )
    view = (await asyncio.wait_for(agent_waits, timeout=30)).json()
    assert view["status"] == "declined"
    assert view["result"]["text"].startswith("Declined")


async def test_the_websocket_link_carries_calls_and_answers(scene: Scene, live: Live) -> None:
    ws_url = live.server.url.replace("http", "ws") + "/v1/device/connect"
    async with websockets.connect(ws_url, additional_headers=bearer(scene.lamp), compression=None) as link:
        call = (await scene.invoke(arguments={"on": False})).json()
        frame = json.loads(await asyncio.wait_for(link.recv(), timeout=30))
        assert frame["type"] == "device:invoke"
        assert frame["callId"] == call["id"]
        assert frame["input"] == {"on": False}
        await link.send("this is not json")
        await link.send(json.dumps({"type": "device:unknown"}))
        await link.send(
            json.dumps({"type": "device:result", "callId": call["id"], "ok": True, "result": "off"})
        )
        ack = json.loads(await asyncio.wait_for(link.recv(), timeout=5))
        assert ack == {"type": "device:ack", "callId": call["id"], "status": "accepted"}
        view = (
            await scene.client.get(f"/v1/invocations/{call['id']}?wait=5", headers=bearer(scene.agent))
        ).json()
        assert view["status"] == "done"
        assert view["result"]["message"] == "off"
        second = (await scene.invoke(arguments={"on": True})).json()  # the link lived on after bad frames
        frame = json.loads(await asyncio.wait_for(link.recv(), timeout=30))
        assert frame["callId"] == second["id"]
        await scene.client.delete("/v1/users/ana/devices/desk-lamp", headers=bearer(scene.operator))
        frame = json.loads(await asyncio.wait_for(link.recv(), timeout=30))
        assert frame == {"type": "device:revoked"}
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(link.recv(), timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    metrics = (await scene.client.get("/metrics")).text
    dropped = [line for line in metrics.splitlines() if line.startswith("tapgate_ws_frames_dropped_total")]
    assert float(dropped[0].split()[-1]) >= 2


async def test_a_websocket_may_authenticate_with_its_first_frame(scene: Scene, live: Live) -> None:
    ws_url = live.server.url.replace("http", "ws") + "/v1/device/connect"
    async with websockets.connect(ws_url, compression=None) as link:
        await link.send(json.dumps({"type": "device:auth", "deviceId": "desk-lamp", "token": scene.lamp}))
        call = (await scene.invoke()).json()
        frame = json.loads(await asyncio.wait_for(link.recv(), timeout=30))
        assert frame["callId"] == call["id"]
    async with websockets.connect(ws_url, compression=None) as link:
        await link.send(
            json.dumps({"type": "device:auth", "deviceId": "desk-lamp", "token": scene.lamp + "0"})
        )
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(link.recv(), timeout=30)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


async def test_the_event_stream_resumes_without_missing_an_event(scene: Scene) -> None:
    ids = []
    for _ in range(3):
        call = (await scene.invoke()).json()
        await scene.client.post(
            f"/v1/device/invocations/{call['id']}/result", json={"status": "done"}, headers=bearer(scene.lamp)
        )
        ids.append(call["id"])

    async def read(after: str | None, count: int) -> list[tuple[str, dict[str, object]]]:
        headers = bearer(scene.agent) | ({"Last-Event-ID": after} if after else {})
        seen: list[tuple[str, dict[str, object]]] = []
        async with scene.client.stream("GET", "/v1/events", headers=headers) as r:
            assert r.status_code == 200
            event_id = ""
            async for line in r.aiter_lines():
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if data["type"] == "tools.changed" or data["type"].startswith("device."):
                        continue  # the enrolments of the scene
                    seen.append((event_id, data))
                    if len(seen) == count:
                        return seen
        return seen

    first = await asyncio.wait_for(read(None, 3), timeout=30)
    assert [data["invocation_id"] for _, data in first] == ids
    assert {data["type"] for _, data in first} == {"invocation.resolved"}
    resumed = await asyncio.wait_for(read(first[0][0], 2), timeout=30)
    assert [data["invocation_id"] for _, data in resumed] == ids[1:]
