"""Push settings: the [apns] and [fcm] tables, the relays' secret, and a gateway that builds its senders
from them and sends through each (to the loopback fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tapgate.adapters.clock import FrozenClock
from tapgate.bootstrap import build_gateway
from tapgate.config import Settings, load_settings
from tapgate.domain.errors import ConfigurationError
from tests.conftest import asgi_client
from tests.live import tapgate, write_config
from tests.pushfakes import PushFakes
from tests.world import LAMP, World, bearer, device_body

APNS_TOKEN = "a1" * 32


def _key_files(folder: Path, fakes: PushFakes) -> None:
    (folder / "keys").mkdir(exist_ok=True)
    (folder / "keys" / "apns.p8").write_text(fakes.accounts.apns_pem)
    account = {
        "type": "service_account",
        "project_id": fakes.accounts.fcm_project,
        "private_key_id": fakes.accounts.fcm_key_id,
        "private_key": fakes.accounts.fcm_pem,
        "client_email": fakes.accounts.fcm_email,
        "token_uri": f"{fakes.base_url}/oauth2/token",
    }
    (folder / "keys" / "fcm.json").write_text(json.dumps(account))


def _push_settings(folder: Path, database_url: str, fakes: PushFakes) -> Path:
    _key_files(folder, fakes)
    a = fakes.accounts
    return write_config(
        folder,
        database_url,
        relay_secret=a.relay_secret,
        push_relays={"mipush": f"{fakes.base_url}/relay/ok"},
        apns={
            "team_id": a.apns_team,
            "key_id": a.apns_key_id,
            "private_key_file": "keys/apns.p8",
            "topic": a.apns_topic,
            "endpoint": fakes.base_url,
        },
        fcm={
            "project_id": a.fcm_project,
            "service_account_file": "keys/fcm.json",
            "endpoint": fakes.base_url,
        },
    )


def test_the_apns_and_fcm_tables_are_read_with_their_key_files_beside_the_settings_file(
    tmp_path: Path, fakes: PushFakes
) -> None:
    settings = load_settings(str(_push_settings(tmp_path, "sqlite:///x.db", fakes)))
    assert settings.apns.enabled and settings.fcm.enabled
    assert settings.apns.private_key_file == str(tmp_path / "keys" / "apns.p8")
    assert settings.fcm.service_account_file == str(tmp_path / "keys" / "fcm.json")
    assert settings.apns.topic == fakes.accounts.apns_topic
    assert settings.push_relays == {"mipush": f"{fakes.base_url}/relay/ok"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[apns]\nprivate_key_file = "k.p8"\nteam_id = "T"\n', "APNs needs key_id, topic"),
        ('[fcm]\nservice_account_file = "f.json"\n', "FCM needs project_id"),
        ('[push_relays]\nfcm = "https://relay.example/push"\n', "push_relays needs relay_secret"),
        ("push_retry_seconds = [2, -1]\n", "none may be negative"),
        ('[apns]\nteam = "T"\n', "apns.team: is not a tapgate setting"),
    ],
)
def test_push_settings_that_cannot_work_are_refused_with_the_reason(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "tapgate.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(str(path))
    assert said in refused.value.message


def test_serve_refuses_a_push_key_it_cannot_use_before_listening(tmp_path: Path, fakes: PushFakes) -> None:
    config = _push_settings(tmp_path, f"sqlite:///{tmp_path / 'db.sqlite'}", fakes)
    (tmp_path / "keys" / "apns.p8").unlink()
    run = tapgate("serve", "--config", str(config), "--port", "1")
    assert run.returncode == 1
    assert "apns.private_key_file" in run.stderr and "cannot be read" in run.stderr
    (tmp_path / "keys" / "apns.p8").write_text("not a key")
    run = tapgate("serve", "--config", str(config), "--port", "1")
    assert run.returncode == 1
    assert "The APNs key must be the PEM (.p8) key Apple issued." in run.stderr
    assert "Traceback" not in run.stderr


async def test_the_gateway_sends_through_the_senders_its_settings_name(
    tmp_path: Path, sqlite_url: str, fakes: PushFakes, push_clock: FrozenClock
) -> None:
    settings = load_settings(str(_push_settings(tmp_path, sqlite_url, fakes)))
    async with asgi_client(settings, push_clock) as client:  # no injected sender: bootstrap builds them
        world = await World(client).start()
        await world.person("ana")
        agent = bearer(await world.agent("ana"))
        targets = {
            "iphone": ("apns", APNS_TOKEN),
            "pixel": ("fcm", "fcm-token"),
            "mi": ("mipush", "mi-token"),
        }
        for device_id, (kind, token) in targets.items():
            body = device_body(device_id, [LAMP], grants=["set_light"], push={"kind": kind, "token": token})
            await world.enrol("ana", body)
            call = {"tool": f"device__{device_id}__set_light", "arguments": {"on": True}}
            assert (await client.post("/v1/invocations", json=call, headers=agent)).status_code == 200
        gateway = client.app.state.gateway  # type: ignore[attr-defined]
        await gateway.send_pushes()

        assert (fakes.hits["apns"], fakes.hits["fcm"], fakes.hits["relay"]) == (1, 1, 1)
        assert json.loads(fakes.route_seen("relay")[0].body)["device"]["id"] == "mi"
        assert gateway.push_stats.sent == 3


async def test_with_the_device_flags_off_the_gateway_builds_no_push_sender(
    tmp_path: Path, sqlite_url: str, fakes: PushFakes
) -> None:
    config = _push_settings(tmp_path, sqlite_url, fakes)
    settings = load_settings(str(config), device_channel_enabled=False, device_sms_enabled=False)
    gateway = build_gateway(settings)
    try:
        assert gateway.push_stats is None
        await gateway.send_pushes()  # nothing to do, and nothing sent
    finally:
        await gateway.close()
    assert fakes.seen == []
    assert Settings().devices_enabled is False
