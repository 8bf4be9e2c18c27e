"""`tapgate serve` hands out links for the address it listens on, and says when phones cannot use it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tapgate import __version__
from tapgate.listening import needs_https_warning, serve_url
from tests.live import Server, free_port, tapgate
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


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_serve_without_a_settings_file_says_what_to_do_in_one_line_and_creates_nothing(
    tmp_path: Path,
) -> None:
    refused = _run("serve", "--port", str(free_port()), cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip().count("\n") == 0
    assert "tapgate init" in refused.stderr and "--config" in refused.stderr
    assert list(tmp_path.iterdir()) == []


def test_serve_naming_a_sqlite_file_that_is_not_there_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "tapgate.toml").write_text('database_url = "sqlite:///typo.db"\n')
    refused = _run("serve", cwd=tmp_path)
    assert refused.returncode == 1
    assert "typo.db does not exist" in refused.stderr and refused.stderr.strip().count("\n") == 0
    assert not (tmp_path / "typo.db").exists()


def test_serve_on_a_port_in_use_says_so_in_one_line_and_exits_1(initialised: tuple[Path, str]) -> None:
    config, _ = initialised
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = _run("serve", "--config", str(config), "--port", str(port), cwd=config.parent)
    assert refused.returncode == 1
    assert (
        refused.stderr.strip()
        == f"Port {port} on 127.0.0.1 is in use by another program; pass another --port."
    )


def test_version_and_short_help_work(tmp_path: Path) -> None:
    version = _run("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"tapgate {__version__}"
    for args in (["-h"], ["serve", "-h"], ["device", "-h"]):
        shown = _run(*args, cwd=tmp_path)
        assert shown.returncode == 0 and "Usage: " in shown.stdout, args


def test_token_create_lists_the_kinds_it_takes(tmp_path: Path) -> None:
    shown = _run("token", "create", "-h", cwd=tmp_path)
    assert "user|agent|operator" in shown.stdout
    wrong = _run("token", "create", "--tenant", "default", "--kind", "robot", cwd=tmp_path)
    assert wrong.returncode == 2
    said = " ".join(wrong.stderr.replace("│", " ").split())
    assert "'robot' is not one of 'user', 'agent', 'operator'" in said


@pytest.mark.parametrize(
    ("host", "port", "tls", "url"),
    [
        ("127.0.0.1", 18231, False, "http://127.0.0.1:18231"),
        ("localhost", 8443, True, "https://localhost:8443"),
        ("::1", 8080, False, "http://[::1]:8080"),
        ("0.0.0.0", 8080, False, f"http://{socket.gethostname()}:8080"),  # noqa: S104 - a name, not a bind
    ],
)
def test_the_serve_address_becomes_the_url_phones_are_given(
    host: str, port: int, tls: bool, url: str
) -> None:
    assert serve_url(host, port, tls) == url


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://127.0.0.1:8080", False),
        ("http://localhost:8080", False),
        ("http://[::1]:8080", False),
        ("https://tapgate.example", False),
        ("http://192.168.1.20:8080", True),
        ("http://tapgate.example", True),
    ],
)
def test_only_an_address_a_phones_browser_refuses_is_warned_about(url: str, warned: bool) -> None:
    assert needs_https_warning(url) is warned
