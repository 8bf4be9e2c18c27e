"""The operator's commands for people and devices: user add|list, device list|grant|revoke, pair, backup."""

from __future__ import annotations

import queue
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tapgate.cli import app
from tests.live import Server, tapgate
from tests.world import LAMP, bearer, device_body

runner = CliRunner()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    made = runner.invoke(app, ["init", "--dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    return tmp_path / "tapgate.toml"


def _tapgate(config: Path, *args: str, code: int = 0) -> str:
    result = runner.invoke(app, [*args, "--config", str(config)])
    assert result.exit_code == code, result.output
    return result.output


def test_user_add_and_list_show_the_tenants_people(config: Path) -> None:
    assert "Tenant default has no users yet" in _tapgate(config, "user", "list")
    assert (
        _tapgate(config, "user", "add", "ana", "--name", "Ana").strip()
        == "Added ana (Ana) to tenant default."
    )
    _tapgate(config, "user", "add", "bob")
    listed = [line.split("\t")[:2] for line in _tapgate(config, "user", "list").splitlines()]
    assert listed == [["ana", "Ana"], ["bob", "bob"]]
    assert "exists already" in _tapgate(config, "user", "add", "ana", code=1)
    assert "user_id must be lower-case" in _tapgate(config, "user", "add", "Ana Smith", code=1)
    assert "tenant" in _tapgate(config, "user", "list", "--tenant", "nobody").lower()


def _enrol_lamp(config: Path) -> None:
    """ana with an enrolled lamp that declares set_light, nothing granted (set up through the API's use
    case, as `tapgate device enrol --url` would)."""
    import asyncio

    from tapgate.bootstrap import build_gateway
    from tapgate.config import load_settings
    from tapgate.domain.principals import Principal, TokenKind

    _tapgate(config, "user", "add", "ana")
    assert "ana has no devices" in _tapgate(config, "device", "list", "--user", "ana")
    operator = Principal(tenant_id="default", credential_id="t", kind=TokenKind.OPERATOR, scopes=frozenset())

    async def enrol() -> None:
        gateway = build_gateway(load_settings(str(config)))
        try:
            await gateway.enrol_device(operator, "ana", device_body("desk-lamp", [LAMP]))
        finally:
            await gateway.close()

    asyncio.run(enrol())


def test_device_list_grant_and_revoke_act_on_a_persons_devices(config: Path) -> None:
    _enrol_lamp(config)
    [line] = _tapgate(config, "device", "list", "--user", "ana").splitlines()
    assert line.startswith("desk-lamp\t") and "granted: none" in line and "active" in line
    granted = _tapgate(config, "device", "grant", "desk-lamp", "set_light", "--user", "ana")
    assert "granted: set_light" in granted
    assert "granted: set_light" in _tapgate(config, "device", "list", "--user", "ana")
    withdrawn = _tapgate(config, "device", "grant", "desk-lamp", "set_light", "--off", "--user", "ana")
    assert "granted: none" in withdrawn
    assert "does not declare" in _tapgate(
        config, "device", "grant", "desk-lamp", "fly", "--user", "ana", code=1
    )
    assert (
        _tapgate(config, "device", "revoke", "desk-lamp", "--user", "ana").strip()
        == "Revoked desk-lamp of ana."
    )
    assert "ana has no devices" in _tapgate(config, "device", "list", "--user", "ana")  # live ones only
    assert "has no device 'nope'" in _tapgate(config, "device", "revoke", "nope", "--user", "ana", code=1)


def test_device_grant_approvals_makes_a_device_that_declares_it_an_approver(config: Path) -> None:
    import asyncio

    from tapgate.bootstrap import build_gateway
    from tapgate.config import load_settings
    from tapgate.domain.principals import Principal, TokenKind

    _enrol_lamp(config)
    operator = Principal(tenant_id="default", credential_id="t", kind=TokenKind.OPERATOR, scopes=frozenset())

    async def enrol_tablet() -> None:
        gateway = build_gateway(load_settings(str(config)))
        try:  # a phone declares approvals; enrolled without grants, it approves nothing yet
            await gateway.enrol_device(operator, "ana", device_body("tablet", []))
        finally:
            await gateway.close()

    async def approvers() -> list[str]:
        gateway = build_gateway(load_settings(str(config)))
        try:
            found = await gateway.list_devices(operator, "ana")
            return sorted(d.device_id for d in found if d.approver)
        finally:
            await gateway.close()

    asyncio.run(enrol_tablet())
    assert asyncio.run(approvers()) == []
    granted = _tapgate(config, "device", "grant", "tablet", "approvals", "--user", "ana")
    assert "granted: approvals" in granted
    assert asyncio.run(approvers()) == ["tablet"]
    # A lamp that does not declare approvals cannot be made one: it shows no cards to sign.
    refused = _tapgate(config, "device", "grant", "desk-lamp", "approvals", "--user", "ana", code=1)
    assert "does not declare 'approvals'" in refused
    assert asyncio.run(approvers()) == ["tablet"]


def test_backup_copies_the_sqlite_database_into_a_file_that_opens(config: Path, tmp_path: Path) -> None:
    _tapgate(config, "user", "add", "ana")
    copy = tmp_path / "copy.db"
    assert f"to {copy}" in _tapgate(config, "backup", str(copy))
    with sqlite3.connect(copy) as db:
        assert db.execute("SELECT user_id FROM users").fetchall() == [("ana",)]
    assert oct(copy.stat().st_mode)[-3:] == "600"
    assert "exists already" in _tapgate(config, "backup", str(copy), code=1)


def test_backup_on_postgresql_says_to_use_pg_dump(tmp_path: Path) -> None:
    config = tmp_path / "tapgate.toml"
    config.write_text('database_url = "postgresql://tapgate_app@127.0.0.1:5432/tapgate"\n')
    said = _tapgate(config, "backup", str(tmp_path / "x.dump"), code=1)
    assert "pg_dump" in said and not (tmp_path / "x.dump").exists()


class Lines:
    """A subprocess whose standard output is read line by line on a thread."""

    def __init__(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tapgate", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, seconds: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        pytest.fail(f"no line matched {pattern!r}:\n" + "\n".join(self.seen))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


def test_pair_prints_a_link_and_qr_code_for_the_served_port_and_lets_the_device_in(config: Path) -> None:
    _tapgate(config, "user", "add", "ana")
    server = Server(config).start()
    try:
        refused = tapgate("pair", "--user", "ana", "--config", str(config), "--url", "http://127.0.0.1:9")
        assert refused.returncode == 1 and "Nothing answers at http://127.0.0.1:9" in refused.stderr
        assert "18231" not in refused.stderr  # no port of our own making up: the one serve printed
        operator = Lines("pair", "--user", "ana", "--config", str(config), "--url", server.url)
        try:
            link = operator.expect(r"^(http://\S+/app/#pair=\S+)$")[1]
            assert link.startswith(f"{server.url}/app/#pair=")
            operator.expect("▀")  # the QR code, drawn in the terminal
            operator.expect("Waiting for the device")
            key = config.parent / "lamp.pem"
            assert tapgate("device", "keygen", str(key)).returncode == 0
            lamp = '{"name": "set_light", "kind": "actuator", "params": {"on": {"type": "boolean"}}}'
            state = str(config.parent / "lamp.json")
            paired = tapgate(
                "device", "pair", link, str(key), "desk-lamp", "--capability", lamp, "--state", state
            )
            assert paired.returncode == 0, paired.stderr
            code = paired.stdout.strip().splitlines()[-1].split()[-1]
            operator.expect("desk-lamp.*wants in; it can: set_light")
            operator.say("")  # Enter: grant everything it declares
            operator.say("000000" if code != "000000" else "111111")
            operator.expect("does not match")
            operator.say(code)
            operator.expect("Paired desk-lamp for ana; granted: set_light.")
            assert operator.process.wait(timeout=30) == 0
        finally:
            operator.close()
        devices = _tapgate(config, "device", "list", "--user", "ana")
        assert "granted: set_light" in devices and "active" in devices
        with httpx.Client(base_url=server.url, timeout=10) as client:
            token = (
                tapgate(
                    "token",
                    "create",
                    "--tenant",
                    "default",
                    "--user",
                    "ana",
                    "--kind",
                    "agent",
                    "--config",
                    str(config),
                )
                .stdout.strip()
                .splitlines()[-1]
            )
            tools = client.get("/v1/tools", headers=bearer(token)).json()["tools"]
            assert [t["function"]["name"] for t in tools] == ["device__desk_lamp__set_light"]
    finally:
        server.stop()


def test_console_link_points_at_the_served_port_and_refuses_one_where_nothing_answers(config: Path) -> None:
    _tapgate(config, "user", "add", "ana")
    refused = runner.invoke(
        app, ["console", "link", "--tenant", "default", "--user", "ana", "--config", str(config), "--url",
              "http://127.0.0.1:9"],
    )  # fmt: skip
    assert refused.exit_code == 1 and "Nothing answers at http://127.0.0.1:9" in refused.output
    server = Server(config).start()
    try:
        printed = _tapgate(
            config, "console", "link", "--tenant", "default", "--user", "ana", "--url", server.url
        )
        link = printed.strip().splitlines()[-1]
        assert link.startswith(f"{server.url}/console/link/")
    finally:
        server.stop()
