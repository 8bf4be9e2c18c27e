"""Every JSON body refuses repeated keys with 400 (DESIGN §15), not only signed decisions: which of two
values counts is never left to a parser."""

from __future__ import annotations

import httpx
import pytest

from tests.world import LAMP, World, bearer, device_body

BODIES = [
    ("POST", "/v1/users", '{"user_id": "ana2", "user_id": "root"}', "operator"),
    ("POST", "/v1/users/ana/tokens", '{"kind": "user", "kind": "agent"}', "operator"),
    ("PUT", "/v1/sessions/s1", '{"kind": "chat", "attended": false, "attended": true}', "agent"),
    (
        "POST",
        "/v1/invocations",
        '{"tool": "device__desk_lamp__set_light", "arguments": {"on": false, "on": true}}',
        "agent",
    ),
    ("POST", "/v1/notices", '{"event": "a.b", "user_id": "ana", "data": {"x": 1, "x": 2}}', "agent"),
    ("PUT", "/v1/device/capabilities", '{"capabilities": [], "capabilities": []}', "device"),
    ("POST", "/v1/pair", '{"code": "x", "code": "y"}', None),
]


@pytest.mark.parametrize(("method", "path", "text", "who"), BODIES)
async def test_a_body_that_repeats_a_key_at_any_depth_is_400_and_changes_nothing(
    device_api: httpx.AsyncClient, method: str, path: str, text: str, who: str | None
) -> None:
    world = await World(device_api).start()
    await world.person("ana")
    tokens = {
        "operator": world.operator,
        "agent": await world.agent("ana"),
        "device": await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"])),
    }
    headers = {"content-type": "application/json"} | (bearer(tokens[who]) if who else {})
    r = await device_api.request(method, path, content=text.encode(), headers=headers)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "malformed" and "repeats the key" in error["message"]
    once = text.replace(', "user_id": "root"', "").replace('"kind": "user", ', "")
    if path == "/v1/users":
        r = await device_api.request(method, path, content=once.encode(), headers=headers)
        assert r.status_code == 201, r.text  # the same body, each key once, is taken
