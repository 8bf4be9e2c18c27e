"""`tapgate serve` hands out links for the address it listens on, and says when phones cannot use it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.live import Server, tapgate
from tests.world import bearer


@pytest.fixture
def initialised(tmp_path: Path) -> tuple[Path, str]:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    return tmp_path / "tapgate.toml", made.stdout.strip().splitlines()[-1]


def _warnings(server: Server) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in server.logs().splitlines() if line.startswith("{")]
    return [line for line in lines if line["level"] == "warning" and "public_url" in str(line["msg"])]


def test_a_pairing_link_points_at_the_port_serve_listens_on(initialised: tuple[Path, str]) -> None:
    config, operator = initialised
    server = Server(config).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert (
                client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator)).status_code == 201
            )
            started = client.post("/v1/users/ana/pairings", headers=bearer(operator)).json()
            assert started["url"] == f"{server.url}/app/#pair={started['code']}"
            # The QR code carries the same link, and the link's page is served there.
            assert client.get(
                f"/v1/pairings/{started['pairing_id']}/qr.svg", headers=bearer(operator)
            ).is_success
            assert client.get(started["url"].split("#")[0]).status_code == 200
        assert _warnings(server) == []  # loopback: a browser allows WebCrypto there
    finally:
        server.stop()


def test_a_public_url_set_in_the_settings_wins_over_the_serve_address(initialised: tuple[Path, str]) -> None:
    config, operator = initialised
    config.write_text('public_url = "https://tapgate.example"\n' + config.read_text())
    server = Server(config).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
            started = client.post("/v1/users/ana/pairings", headers=bearer(operator)).json()
            assert started["url"].startswith("https://tapgate.example/app/#pair=")
        assert _warnings(server) == []
    finally:
        server.stop()


def test_serve_warns_once_when_public_url_is_neither_https_nor_loopback(
    initialised: tuple[Path, str],
) -> None:
    config, _ = initialised
    config.write_text('public_url = "http://tapgate.example:8080"\n' + config.read_text())
    server = Server(config).start()
    try:
        [warning] = _warnings(server)
        assert warning["public_url"] == "http://tapgate.example:8080"
        assert "https" in str(warning["msg"]) and "docs/deploy.md" in str(warning["msg"])
    finally:
        server.stop()
