"""The long-poll's hand-over marks (services/handed.py): read at once in the process that handed the call,
written in a batch, and from then on read by every other gateway too (DESIGN §17, §18)."""

from __future__ import annotations

import httpx

from tapgate.config import Settings
from tests.conftest import asgi_client
from tests.world import LAMP, World, bearer, device_body

TOOL = "device__desk_lamp__set_light"


async def _ids(client: httpx.AsyncClient, lamp: str) -> list[str]:
    r = await client.get("/v1/device/invocations", headers=bearer(lamp))
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["invocations"]]


async def test_a_call_handed_by_one_gateway_is_held_back_by_another_once_the_batch_is_written(
    device_settings: Settings,
) -> None:
    async with (
        asgi_client(device_settings) as one,
        asgi_client(device_settings) as two,
        asgi_client(device_settings) as three,
    ):
        hands = one.app.state.gateway.hands  # type: ignore[attr-defined]
        hands.flush_seconds = 3600  # written below, when the test says
        world = await World(one).start()
        await world.person("ana")
        agent = await world.agent("ana")
        lamp = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
        r = await one.post(
            "/v1/invocations", json={"tool": TOOL, "arguments": {"on": True}}, headers=bearer(agent)
        )
        call = r.json()["id"]
        assert await _ids(one, lamp) == [call]
        assert await _ids(one, lamp) == []  # this gateway remembers it handed the call
        assert await _ids(two, lamp) == [call]  # the other one cannot know yet: handed once more
        await hands.flush()
        assert await _ids(three, lamp) == []  # written: every gateway holds it back now
        assert len(hands) == 1  # remembered until its redelivery is due, then forgotten
