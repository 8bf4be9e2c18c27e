"""The browser phone app as files the gateway serves: where, under which policy, and what ships with them."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import httpx
import pytest

from tapgate.bootstrap import build_app
from tapgate.config import Settings
from tapgate.domain.errors import ConfigurationError
from tests.conftest import asgi_client
from tests.pushfakes import new_accounts

WEB = Path(str(resources.files("tapgate") / "web"))


async def test_the_app_is_served_at_app_under_a_policy_that_runs_only_its_own_files(
    device_api: httpx.AsyncClient,
) -> None:
    r = await device_api.get("/app/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    policy = r.headers["content-security-policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    for path, kind in [
        ("/app/app.js", "text/javascript"),
        ("/app/sw.js", "text/javascript"),
        ("/app/manifest.webmanifest", "application/manifest+json"),
        ("/app/icon-192.png", "image/png"),
    ]:
        r = await device_api.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith(kind), path
        assert r.headers["content-security-policy"] == policy
    assert (await device_api.get("/app", follow_redirects=True)).status_code == 200


def test_the_pages_hold_no_inline_script_or_style_for_the_policy_to_refuse() -> None:
    html = (WEB / "index.html").read_text()
    for script in re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.DOTALL):
        assert script.strip() == ""
    assert all("src=" in tag for tag in re.findall(r"<script\b[^>]*>", html))
    assert "<style" not in html
    assert not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers either


def test_every_file_the_app_and_its_worker_load_is_in_the_package() -> None:
    shipped = {p.name for p in WEB.iterdir()}
    wanted = set()
    for module in WEB.glob("*.js"):
        text = module.read_text()
        wanted |= set(re.findall(r'from "\./([\w.-]+)"', text))
        wanted |= set(re.findall(r'serviceWorker\.register\("([\w.-]+)"', text))
    shell = re.search(r"const SHELL = \[(.*?)\];", (WEB / "sw.js").read_text(), re.DOTALL)
    assert shell is not None
    wanted |= set(re.findall(r'"([\w.-]+)"', shell.group(1)))
    html = (WEB / "index.html").read_text()
    wanted |= set(re.findall(r'(?:href|src)="([\w.-]+\.\w+)"', html))
    manifest = (WEB / "manifest.webmanifest").read_text()
    wanted |= set(re.findall(r'"src": "([\w.-]+)"', manifest))
    assert wanted - shipped == set()
    assert {"index.html", "app.js", "app.css", "sw.js", "manifest.webmanifest"} <= wanted


@pytest.mark.parametrize("vapid", [True, False])
async def test_the_app_reads_the_web_push_key_from_its_config(sqlite_url: str, vapid: bool) -> None:
    accounts = new_accounts()
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        webpush={"vapid_private_key": accounts.vapid_private_b64 if vapid else ""},
    )
    async with asgi_client(settings) as client:
        r = await client.get("/app/config.json")
    assert r.status_code == 200
    assert r.json() == {"vapid_public_key": accounts.vapid_public_b64 if vapid else None}
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_a_vapid_key_that_is_not_a_p256_private_key_stops_the_start(sqlite_url: str) -> None:
    settings = Settings(
        database_url=sqlite_url,
        device_channel_enabled=True,
        device_sms_enabled=True,
        webpush={"vapid_private_key": "bm90IGEga2V5"},
    )
    with pytest.raises(ConfigurationError, match="vapid_private_key"):
        build_app(settings)


async def test_with_the_device_flags_off_there_is_no_app(api: httpx.AsyncClient) -> None:
    """Gate G12: no device route mounts, and the app is one."""
    for path in ("/app/", "/app/app.js", "/app/config.json", "/app/sw.js"):
        assert (await api.get(path)).status_code == 404, path


async def test_a_device_fetching_its_work_sees_the_binding_code_of_an_approved_call(
    device_api: httpx.AsyncClient,
) -> None:
    from tapgate.domain.approvals import sign_decision, signed_text
    from tests.world import World, bearer, device_body, new_key

    world = await World(device_api).start()
    await world.person("ana")
    agent = await world.agent("ana")
    door = {
        "name": "unlock_door",
        "kind": "actuator",
        "description": "Unlock the front door.",
        "params": {},
        "confirm": True,
    }
    door_token = await world.enrol("ana", device_body("front-door", [door], grants=["unlock_door"]))
    key = new_key("ed25519")
    phone = await world.enrol("ana", device_body("ana-phone", [], key))
    r = await device_api.post(
        "/v1/invocations", json={"tool": "device__front_door__unlock_door"}, headers=bearer(agent)
    )
    call = r.json()
    [approval] = (await device_api.get("/v1/inbox", headers=bearer(phone))).json()["approvals"]
    sign = approval["sign"]
    text = signed_text(
        sign["format"],
        approval["id"],
        "approved",
        approval["kind"],
        approval["subject"],
        sign["action_sha256"],
        sign["challenge"],
        sign["expires_at"],
    )
    body = {"decision": "approved", "device_id": "ana-phone", "signature": sign_decision(key.private, text)}
    assert (
        await device_api.post(f"/v1/approvals/{approval['id']}", json=body, headers=bearer(phone))
    ).is_success
    [fetched] = (await device_api.get("/v1/device/invocations", headers=bearer(door_token))).json()[
        "invocations"
    ]
    assert fetched["id"] == call["id"]
    assert fetched["binding_code"] == call["binding_code"] == approval["binding_code"]
