"""Moving the gateway: `tapgate serve` refuses a changed public_url while devices are paired under the old
one; with `--move` a linked terminal phone is told the new address, writes it into its state file and
carries on there, and the console lists the browser-app phones that must pair again."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from websockets.sync.client import connect

from tapgate.device.keyfile import generate_key, write_key
from tapgate.device.state import PhoneState
from tapgate.domain.keys import KeyAlgorithm
from tests.live import Server, free_port, tapgate
from tests.test_operator_commands import Lines
from tests.world import bearer, device_body, new_key

LAMP = '{"name": "set_light", "kind": "actuator", "params": {"on": {"type": "boolean", "required": true}}}'


def _settings(folder: Path, public_url: str) -> Path:
    config = folder / "tapgate.toml"
    text = re.sub(r'^public_url = ".*"\n', "", config.read_text(), flags=re.MULTILINE)
    config.write_text(f'public_url = "{public_url}"\n' + text)
    return config


def _pair_lamp(folder: Path, config: Path, operator: str, client: httpx.Client) -> Path:
    """The README's lamp, paired with `tapgate device pair` by its link and let in by the operator."""
    started = client.post("/v1/users/ana/pairings", headers=bearer(operator)).json()
    key, state = folder / "lamp.pem", folder / "lamp.json"
    write_key(key, generate_key(KeyAlgorithm.ED25519))
    paired = tapgate(
        "device", "pair", started["url"], str(key), "desk-lamp", "--kind", "lamp", "--capability", LAMP,
        "--state", str(state),
    )  # fmt: skip
    assert paired.returncode == 0, paired.stderr
    code = paired.stdout.strip().splitlines()[-1].split()[-1]
    consent = {"comparison_code": code, "approved": True, "grants": ["set_light"]}
    r = client.post(f"/v1/pairings/{started['pairing_id']}/consent", json=consent, headers=bearer(operator))
    assert r.status_code == 200, r.text
    return state


def _pair_browser_app(client: httpx.Client, operator: str) -> str:
    """A phone paired by the browser app, which says so in its pairing (``app: browser``)."""
    started = client.post("/v1/users/ana/pairings", headers=bearer(operator)).json()
    body = device_body("ana-phone", [{"name": "approvals"}], new_key()) | {
        "code": started["code"],
        "app": "browser",
    }
    claimed = client.post("/v1/pair", json=body)
    assert claimed.status_code == 201, claimed.text
    code = claimed.json()["comparison_code"]
    consent = {"comparison_code": code, "approved": True, "grants": ["approvals"]}
    r = client.post(f"/v1/pairings/{started['pairing_id']}/consent", json=consent, headers=bearer(operator))
    assert r.status_code == 200, r.text
    return str(claimed.json()["device_token"])


def _first_frame(host: str, token: str) -> str:
    """The type of the first frame a link opened at ``host`` gets, once it has sent an answer to a call
    that does not exist (the gateway always acknowledges it: a frame that comes for sure)."""
    with connect(f"ws://{host}/v1/device/connect", additional_headers=bearer(token), open_timeout=10) as link:
        link.send(json.dumps({"type": "device:result", "callId": "inv_none", "status": "done"}))
        return str(json.loads(link.recv(timeout=10))["type"])


def _console_devices(config: Path, url: str) -> str:
    """The Devices page of ana's console, signed in with the operator's one-time link."""
    link = tapgate("console", "link", "--user", "ana", "--config", str(config), "--url", url)
    assert link.returncode == 0, link.stderr
    path = link.stdout.strip().splitlines()[-1].split(url, 1)[1]
    with httpx.Client(base_url=url, timeout=10) as browser:
        form = {"content-type": "application/x-www-form-urlencoded"}
        signed_in = browser.post(path, content=b"", headers=form)
        assert signed_in.status_code == 303, signed_in.text
        page = browser.get("/console/devices")
        assert page.status_code == 200, page.text
        return page.text


def test_a_moved_gateway_sends_its_terminal_phone_to_the_new_address_and_asks_for_the_browser_app_again(
    tmp_path: Path,
) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    operator = made.stdout.strip().splitlines()[-1]
    port = free_port()
    old, new = f"http://127.0.0.1:{port}", f"http://localhost:{port}"
    config = _settings(tmp_path, old)
    server = Server(config, port=port).start()
    lamp: Lines | None = None
    try:
        with httpx.Client(base_url=old, timeout=10) as client:
            assert client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator)).is_success
            state = _pair_lamp(tmp_path, config, operator, client)
            browser_app = _pair_browser_app(client, operator)
        lamp = Lines("device", "run", "--state", str(state), "--auto", "done")
        lamp.expect("Connected over the WebSocket")
        server.stop()

        # The address changed and two devices hold the old one: serve refuses in one line, naming --move.
        config = _settings(tmp_path, new)
        refused = tapgate("serve", "--config", str(config), "--port", str(port))
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines() == [
            f"public_url is now {new}, but 2 devices are paired under {old}: set public_url back, or pass "
            "--move to move them (terminal phones follow when they next link; browser-app phones must pair "
            "again)."
        ]
        assert PhoneState.load(state).gateway_url == old

        server = Server(config, port=port, args=("--move",)).start()
        # Told only where it can follow: a terminal device at the old address, never the browser app, never
        # a link at the new address.
        terminal = PhoneState.load(state).token
        assert _first_frame(f"127.0.0.1:{port}", terminal) == "device:moved"
        assert _first_frame(f"localhost:{port}", terminal) == "device:ack"
        assert _first_frame(f"127.0.0.1:{port}", browser_app) == "device:ack"
        lamp.expect(f"The gateway moved to {new}; linking there")
        lamp.expect("Connected over the WebSocket")
        assert PhoneState.load(state).gateway_url == new
        agent = _agent(config)
        with httpx.Client(base_url=new, timeout=40) as client:
            call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}, "wait": 30}
            r = client.post("/v1/invocations", json=call, headers=bearer(agent))
            assert r.json()["status"] == "done", r.text
            journal = client.get("/v1/audit?limit=1000", headers=bearer(operator)).json()["entries"]
            [moved] = [e for e in journal if e["action"] == "gateway.moved"]
            assert (moved["actor"], moved["subject"], moved["data"]) == (
                "operator:cli",
                new,
                {"from": old, "devices": 2},
            )
        page = _console_devices(config, new)
        [notice] = re.findall(r'<section class="card" id="must-pair-again".*?</section>', page, re.DOTALL)
        assert "Ana phone" in notice and "desk-lamp" not in notice  # the terminal phone followed

        server.stop()  # served at the new address since the move: the next start needs no --move
        server = Server(config, port=port).start()
        lamp.expect("Connected over the WebSocket")
        assert "moved" not in "\n".join(lamp.seen[-3:])
    finally:
        if lamp is not None:
            lamp.close()
        server.stop()


def test_without_public_url_serve_follows_its_own_address_and_refuses_nothing(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    operator = made.stdout.strip().splitlines()[-1]
    config = tmp_path / "tapgate.toml"
    first = Server(config).start()
    try:
        with httpx.Client(base_url=first.url, timeout=10) as client:
            client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
            _pair_browser_app(client, operator)
    finally:
        first.stop()
    second = Server(config).start()  # another port: several processes on one database may do this
    second.stop()


def _agent(config: Path) -> str:
    minted = tapgate("token", "create", "--tenant", "default", "--user", "ana", "--kind", "agent",
                     "--config", str(config))  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    return minted.stdout.strip().splitlines()[-1]
