"""Log hygiene (G11): a run with a canary in every body, argument, recipient and message; every sink is
scanned (process log lines, the audit journal, events, push outbox rows) and the canary appears only in
the one content event, ``ingest.message``. On PostgreSQL, rows whose keys carry the canary are made to
break unique constraints: the driver's error text (``Key (…)=(…zq7canary…) already exists``) reaches no
log line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from tapgate.config import Settings
from tapgate.logs import JsonFormatter
from tests.conftest import PostgresDatabase, asgi_client
from tests.reliability import report
from tests.world import World, bearer, device_body

CANARY = "zq7canary"
NUMBER = "+15557391234"  # a recipient is a canary too
NOTE = {
    "name": "show_note",
    "kind": "actuator",
    "description": "Show a note on the screen.",
    "params": {"text": {"type": "string", "required": True}},
    "confirm": False,
}
ASK = NOTE | {"name": "ask_note", "confirm": True}


async def test_a_canary_in_every_text_reaches_no_sink_but_the_content_event(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = Settings(database_url=sqlite_url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings) as client:
        world = await World(client).start()
        await world.person("ana")
        agent = bearer(await world.agent("ana"))
        caps = [NOTE, ASK, {"name": "sms_send"}]
        phone = bearer(
            await world.enrol(
                "ana", device_body("ana-phone", caps, grants=["show_note", "ask_note", "sms_send"])
            )
        )
        user = bearer(await world.token("ana", "user"))
        calls = [
            ("device__ana_phone__sms_send", {"to": NUMBER, "body": f"meet at 6 {CANARY}"}),
            ("device__ana_phone__show_note", {"text": f"note {CANARY}"}),
        ]
        for tool, arguments in calls:
            r = await client.post(
                "/v1/invocations", json={"tool": tool, "arguments": arguments}, headers=agent
            )
            assert r.status_code == 200 and r.json()["status"] == "pending", r.text
            r = await client.post(
                f"/v1/device/invocations/{r.json()['id']}/result",
                json={"status": "done", "message": f"sent {CANARY}"},
                headers=phone,
            )
            assert r.status_code == 200
        # A refused call (bad argument) and an approval denied with the person's words.
        await client.post(
            "/v1/invocations",
            json={"tool": "device__ana_phone__show_note", "arguments": {"text": 7, "extra": CANARY}},
            headers=agent,
        )
        r = await client.post(
            "/v1/invocations",
            json={"tool": "device__ana_phone__ask_note", "arguments": {"text": f"ask {CANARY}"}},
            headers=agent,
        )
        [approval] = (await client.get("/v1/inbox", headers=user)).json()["approvals"]
        r = await client.post(
            f"/v1/approvals/{approval['id']}",
            json={"decision": "denied", "message": f"no {CANARY}"},
            headers=user,
        )
        assert r.status_code == 200, r.text
        r = await client.post(
            "/v1/device/ingest",
            json={
                "channel": "sms",
                "sender": NUMBER,
                "body": f"hi {CANARY}",
                "received_at": "2026-01-01T08:00:00Z",
            },
            headers=phone,
        )
        assert r.status_code == 202
        journal = (await client.get("/v1/audit?limit=1000", headers=bearer(world.operator))).text
    lines = [JsonFormatter().format(record) for record in caplog.records]
    rows = _rows(Path(sqlite_url.removeprefix("sqlite:///")))
    events = [r for r in rows if r.startswith("events ")]
    content = [e for e in events if '"ingest.message"' in e or "'ingest.message'" in e]
    hits = {
        "log lines": [line for line in lines if CANARY in line or NUMBER in line],
        "audit journal": [CANARY] if CANARY in journal or NUMBER in journal else [],
        "events other than ingest.message": [
            e for e in events if e not in content and (CANARY in e or NUMBER in e)
        ],
        "push outbox": [r for r in rows if r.startswith("push_outbox ") and (CANARY in r or NUMBER in r)],
        "audit rows": [r for r in rows if r.startswith("audit_") and (CANARY in r or NUMBER in r)],
    }
    assert len(content) == 1 and CANARY in content[0]  # the one place the body lives
    assert any(
        CANARY in line for line in rows if line.startswith("invocations ")
    )  # the canary was really sent
    report("log hygiene", sinks=len(hits), log_lines=len(lines), canary_hits=sum(map(len, hits.values())))
    assert not any(hits.values()), hits


def _rows(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return [
            f"{t} {json.dumps(list(map(str, row)))}"
            for t in tables
            for row in db.execute(f"SELECT * FROM {t}")
        ]


def test_at_debug_level_no_token_frame_or_body_reaches_a_real_servers_log(tmp_path: Path) -> None:
    """G11 at log_level = "debug": third-party loggers that print upgrade headers (the device's token),
    WebSocket frames, request lines or SQL parameters are capped (DESIGN §15, logs at every level)."""
    import asyncio

    import httpx
    import websockets

    from tapgate.adapters.store.migrate import migrate
    from tests.conftest import blocking
    from tests.live import Server, new_tenant, write_config

    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    blocking(migrate(url))
    server = Server(write_config(tmp_path, url, log_level="debug"))
    server.start()
    secrets_seen: list[str] = []

    async def run() -> None:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            world = World(client)
            world.operator = operator
            await world.person("ana")
            agent = await world.agent("ana")
            phone = await world.enrol("ana", device_body("ana-phone", [NOTE], grants=["show_note"]))
            secrets_seen.extend([operator, agent, phone])
            async with websockets.connect(
                server.url.replace("http", "ws") + "/v1/device/connect",
                additional_headers=bearer(phone),
                compression=None,
            ) as link:
                r = await client.post(
                    "/v1/invocations",
                    json={"tool": "device__ana_phone__show_note", "arguments": {"text": f"note {CANARY}"}},
                    headers=bearer(agent),
                )
                assert r.status_code == 200, r.text
                frame = json.loads(await asyncio.wait_for(link.recv(), timeout=10))
                assert CANARY in json.dumps(frame)  # the frame really carried it
                await link.send(json.dumps({"type": "device:result", "callId": frame["callId"],
                                            "status": "done", "message": f"shown {CANARY}"}))  # fmt: skip
                await link.send(f"not a frame {CANARY}")
                view = await client.get(f"/v1/invocations/{frame['callId']}?wait=10", headers=bearer(agent))
                assert view.json()["status"] == "done", view.text
            sms = {"channel": "sms", "sender": NUMBER, "body": f"hi {CANARY}"}
            sms["received_at"] = "2026-01-01T08:00:00Z"
            r = await client.post("/v1/device/ingest", json=sms, headers=bearer(phone))
            assert r.status_code == 202, r.text

    try:
        asyncio.run(run())
    finally:
        server.stop()
    log = server.logs()
    assert '"level": "debug"' in log or '"level": "info"' in log  # the server logged at all
    leaks = [s for s in [CANARY, NUMBER, *(t.rsplit("_", 1)[1] for t in secrets_seen)] if s in log]
    assert not leaks, [line for line in log.splitlines() if any(s in line for s in leaks)][:5]


@pytest.mark.postgres
async def test_a_canary_in_a_row_that_breaks_a_postgresql_constraint_reaches_no_log_line(
    postgres: PostgresDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = Settings(database_url=postgres.app_url, device_channel_enabled=True, device_sms_enabled=True)
    async with asgi_client(settings) as client:
        world = await World(client).start()
        operator = bearer(world.operator)
        # A user whose id is the canary, made twice: the second breaks the users' unique key (the service
        # does not look first; the store turns the driver's error into a 409).
        r = await client.post("/v1/users", json={"user_id": CANARY}, headers=operator)
        assert r.status_code == 201, r.text
        r = await client.post("/v1/users", json={"user_id": CANARY}, headers=operator)
        assert r.status_code == 409, r.text
        # A device enrolled twice under the canary's name, and one call made eight times at once under
        # an id that carries it: the replays that lose the race break the invocations' unique key.
        body = device_body(f"{CANARY}-lamp", [NOTE], grants=["show_note"])
        await world.enrol(CANARY, body)
        r = await client.post(f"/v1/users/{CANARY}/devices", json=body, headers=operator)
        assert r.status_code == 409, r.text
        agent = bearer(await world.agent(CANARY))
        call = {
            "tool": f"device__{CANARY}_lamp__show_note",
            "arguments": {"text": f"note {CANARY}"},
            "invocation_id": f"{CANARY}-call",
        }
        answers = await asyncio.gather(
            *[client.post("/v1/invocations", json=call, headers=agent) for _ in range(8)]
        )
        assert {r.status_code for r in answers} == {200}, [r.text for r in answers]
    # The test's own client logs each URL it calls (logger httpx, http://tapgate.test/…): not the gateway.
    ours = [r for r in caplog.records if not (r.name == "httpx" and "http://tapgate.test/" in r.getMessage())]
    lines = [JsonFormatter().format(record) for record in ours]
    leaked = [line for line in lines if CANARY in line]
    report("log hygiene postgres constraint errors", log_lines=len(lines), canary_hits=len(leaked))
    assert not leaked, leaked
