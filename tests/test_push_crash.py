"""A gateway killed (SIGKILL) inside the push worker, after the relay took a push and before the worker
recorded it (crash point ``push.after_send``): after the restart the push goes out again, with the same
delivery id. The gateway delivers at least once; the relay's delivery cache (tapgate.relay.verify with
``seen``) refuses the second as ``replayed``, so the person is pushed once (docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx

from tapgate.adapters.store.migrate import migrate
from tapgate.adapters.store.sql import open_sql_store
from tapgate.domain.push import OutboxItem, OutboxStatus
from tapgate.relay import DELIVERY_HEADER
from tests.conftest import blocking
from tests.live import Server, free_port, new_tenant, write_config
from tests.pushfakes import PushFakes
from tests.pushworld import arrived
from tests.world import LAMP, bearer, device_body

LEASE = 2  # seconds a worker's claim on a row lasts; the restarted gateway waits it out


async def _row(url: str, subject_id: str) -> OutboxItem:
    store = open_sql_store(url)
    try:
        found = []
        for tenant in await store.tenant_ids():
            async with store.unit_of_work(tenant) as uow:
                found += await uow.outbox.for_subject(subject_id)
    finally:
        await store.close()
    [row] = found
    return row


async def test_a_gateway_killed_between_sending_a_push_and_recording_it_sends_it_again_once_restarted(
    tmp_path: Path, fakes: PushFakes
) -> None:
    url = f"sqlite:///{tmp_path / 'tapgate.db'}"
    blocking(migrate(url))
    config = write_config(
        tmp_path,
        url,
        relay_secret=fakes.accounts.relay_secret,
        push_relays={"fcm": f"{fakes.base_url}/relay/ok"},
        push_lease_seconds=LEASE,
        push_sweep_seconds=0.5,
    )
    server = Server(config, env={"TAPGATE_CRASH_AT": "push.after_send"})
    server.start()
    try:
        operator = await new_tenant(url)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            as_operator = bearer(operator)
            r = await client.post("/v1/users", json={"user_id": "ana"}, headers=as_operator)
            assert r.status_code == 201, r.text
            r = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=as_operator)
            agent = r.json()["token"]
            body = device_body("phone", [LAMP], grants=["set_light"], push={"kind": "fcm", "token": "t"})
            r = await client.post("/v1/users/ana/devices", json=body, headers=as_operator)
            assert r.status_code == 201, r.text
            call = {"tool": "device__phone__set_light", "arguments": {"on": True}, "invocation_id": "c-1"}
            r = await client.post("/v1/invocations", json=call, headers=bearer(agent))
            assert r.status_code == 200, r.text
        assert server.process is not None
        assert await anyio.to_thread.run_sync(server.process.wait, 60) == -9  # died at the point
        assert "crash point push.after_send reached" in server.logs()
        server.process = None
        await arrived(fakes, "relay", seconds=30)
        [first] = fakes.route_seen("relay")
        assert json.loads(first.body)["data"] == {"invocation_id": "c-1"}
        row = await _row(url, "c-1")
        assert (row.status, row.attempts) == (OutboxStatus.QUEUED, 1)  # sent, not recorded

        server.env = {}
        server.port = free_port()
        server.start()
        with anyio.fail_after(60):  # the lease lapses, the restarted worker claims and sends it again
            while True:
                row = await _row(url, "c-1")
                if row.status is not OutboxStatus.QUEUED:
                    break
                await anyio.sleep(0.1)
        assert (row.status, row.attempts) == (OutboxStatus.SENT, 2)
        assert fakes.hits["replayed"] == 1  # the second send: the same delivery id, refused as a replay
        assert fakes.route_seen("relay") == [first]  # the person was pushed once
        assert first.headers[DELIVERY_HEADER] == row.delivery_id
    finally:
        server.stop()
