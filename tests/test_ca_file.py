"""Every command that talks to a gateway, and the Python client, against a real `tapgate serve` whose
certificate comes from `tapgate tls init`'s local CA: without --ca-file (or TAPGATE_CA_FILE) each says in
one line that the certificate is not trusted and what to pass, and exits non-zero without a traceback;
with it, each reaches the gateway."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tapgate.client import Client, GatewayNotTrusted
from tests.live import Server, local_ca_gateway, tapgate
from tests.test_terminal_phone import RunningPhone
from tests.world import bearer

NOT_TRUSTED = "The gateway's certificate is not trusted ("
WHAT_TO_PASS = "): pass --ca-file with the CA that signed it (or set TAPGATE_CA_FILE)."
EXAMPLES = Path(__file__).parent.parent / "examples"


@dataclass
class Gateway:
    server: Server
    operator: str
    folder: Path
    agent: str = ""

    @property
    def ca(self) -> str:
        return str(self.server.ca)

    @property
    def config(self) -> str:
        return str(self.server.config)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, timeout=30, verify=self.server.verify)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    folder = tmp_path_factory.mktemp("ca-file")
    server, operator = local_ca_gateway(folder, "localhost", "127.0.0.1")
    server.start()
    running = Gateway(server, operator, folder)
    with running.client() as client:
        assert client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator)).status_code == 201
        r = client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(operator))
        running.agent = str(r.json()["token"])
    try:
        yield running
    finally:
        server.stop()


def without_ca_file() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TAPGATE_CA_FILE"}


def _said_not_trusted(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode != 0, run.stdout
    assert "Traceback" not in run.stderr, run.stderr
    lines = [line for line in run.stderr.splitlines() if NOT_TRUSTED in line]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(NOT_TRUSTED) and lines[0].endswith(WHAT_TO_PASS), lines[0]
    assert "did not answer" not in run.stderr and "cannot be reached" not in run.stderr


def _pairing_link(gateway: Gateway) -> dict[str, str]:
    with gateway.client() as client:
        r = client.post("/v1/users/ana/pairings", json={}, headers=bearer(gateway.operator))
        assert r.status_code == 201, r.text
        return dict(r.json())


def _paired_phone(gateway: Gateway, device_id: str) -> Path:
    key, state = gateway.folder / f"{device_id}.pem", gateway.folder / f"{device_id}.json"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    started = _pairing_link(gateway)
    paired = tapgate(
        "device", "pair", started["url"], str(key), device_id, "--state", str(state), "--ca-file", gateway.ca
    )
    assert paired.returncode == 0, paired.stderr
    code = paired.stdout.strip().splitlines()[-1].split()[-1]
    with gateway.client() as client:
        consent = {"comparison_code": code, "approved": True, "grants": ["approvals"]}
        r = client.post(
            f"/v1/pairings/{started['pairing_id']}/consent", json=consent, headers=bearer(gateway.operator)
        )
        assert r.status_code == 200, r.text
    return state


def test_device_pair_says_the_certificate_is_not_trusted_and_pairs_with_ca_file(gateway: Gateway) -> None:
    key = gateway.folder / "pairing.pem"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    started = _pairing_link(gateway)
    args = [
        "device",
        "pair",
        started["url"],
        str(key),
        "pairing-phone",
        "--state",
        str(gateway.folder / "p.json"),
    ]
    _said_not_trusted(tapgate(*args, env=without_ca_file()))
    paired = tapgate(*args, env=without_ca_file() | {"TAPGATE_CA_FILE": gateway.ca})
    assert paired.returncode == 0, paired.stderr
    assert "comparison code:" in paired.stdout


def test_device_enrol_says_the_certificate_is_not_trusted_and_enrols_with_ca_file(gateway: Gateway) -> None:
    key = gateway.folder / "enrolled.pem"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    args = ["device", "enrol", str(key), "enrolled-lamp", "--kind", "lamp", "--url", gateway.server.url]
    args += ["--user", "ana", "--operator-token", gateway.operator]
    _said_not_trusted(tapgate(*args, env=without_ca_file()))
    enrolled = tapgate(*args, "--ca-file", gateway.ca, env=without_ca_file())
    assert enrolled.returncode == 0, enrolled.stderr
    assert "Enrolled enrolled-lamp for ana" in enrolled.stdout


def test_device_decide_and_login_say_the_certificate_is_not_trusted_and_reach_the_gateway_with_ca_file(
    gateway: Gateway,
) -> None:
    state = _paired_phone(gateway, "deciding-phone")
    decide = ["device", "decide", "apr-none", "approved", "--state", str(state)]
    _said_not_trusted(tapgate(*decide, env=without_ca_file()))
    reached = tapgate(*decide, "--ca-file", gateway.ca, env=without_ca_file())
    assert reached.returncode == 1 and "There is no pending approval apr-none" in reached.stderr, (
        reached.stderr
    )
    login = [
        "device",
        "login",
        f"{gateway.server.url}/app/#console=default.si-none",
        "--state",
        str(state),
        "--yes",
    ]
    _said_not_trusted(tapgate(*login, env=without_ca_file()))
    reached = tapgate(*login, "--ca-file", gateway.ca, env=without_ca_file())
    assert reached.returncode == 1 and "The gateway did not open the sign-in" in reached.stderr, (
        reached.stderr
    )


def test_device_run_stops_at_once_on_an_untrusted_certificate_and_links_with_ca_file(
    gateway: Gateway,
) -> None:
    state = _paired_phone(gateway, "running-phone")
    refused = subprocess.run(
        [sys.executable, "-m", "tapgate", "device", "run", "--state", str(state), "--auto", "done"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=without_ca_file(),
    )
    _said_not_trusted(refused)
    phone = RunningPhone("--state", str(state), "--auto", "done", "--ca-file", gateway.ca)
    try:
        phone.expect("Connected over the WebSocket")
    finally:
        phone.kill()


def test_mcp_says_the_certificate_is_not_trusted_and_serves_with_ca_file(gateway: Gateway) -> None:
    args = ["mcp", "--url", gateway.server.url, "--token", gateway.agent]
    _said_not_trusted(tapgate(*args, env=without_ca_file()))
    served = subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        input="",
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=without_ca_file() | {"TAPGATE_CA_FILE": gateway.ca},
    )
    assert served.returncode == 0, served.stderr


def test_console_link_says_the_certificate_is_not_trusted_and_prints_the_link_with_ca_file(
    gateway: Gateway,
) -> None:
    args = ["console", "link", "--tenant", "default", "--user", "ana", "--config", gateway.config]
    _said_not_trusted(tapgate(*args, env=without_ca_file()))
    linked = tapgate(*args, "--ca-file", gateway.ca, env=without_ca_file())
    assert linked.returncode == 0, linked.stderr
    assert linked.stdout.strip().startswith(f"https://localhost:{gateway.server.port}/console/link/")


def test_pair_says_the_certificate_is_not_trusted_and_shows_the_link_with_ca_file(gateway: Gateway) -> None:
    args = [sys.executable, "-m", "tapgate", "pair", "--user", "ana", "--config", gateway.config]
    _said_not_trusted(
        subprocess.run(args, capture_output=True, text=True, timeout=90, check=False, env=without_ca_file())
    )
    waiting = subprocess.Popen(
        [*args, "--ca-file", gateway.ca],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=without_ca_file() | {"PYTHONUNBUFFERED": "1"},
    )
    try:
        assert waiting.stdout is not None
        first = waiting.stdout.readline()
        assert first.startswith("Pairing a device for ana"), first + (
            waiting.stderr.read() if waiting.poll() is not None else ""
        )
        assert waiting.stdout.readline().startswith(f"https://localhost:{gateway.server.port}/app/#pair=")
    finally:
        waiting.kill()
        waiting.communicate(timeout=10)  # reads and closes both pipes


async def test_the_python_client_says_the_certificate_is_not_trusted_and_trusts_tapgate_ca_file(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAPGATE_CA_FILE", raising=False)
    async with Client(gateway.server.url, gateway.agent) as untrusting:
        with pytest.raises(GatewayNotTrusted) as refused:
            await untrusting.tools()
    said = str(refused.value)
    assert said.startswith(NOT_TRUSTED) and said.endswith(WHAT_TO_PASS)
    monkeypatch.setenv("TAPGATE_CA_FILE", gateway.ca)
    async with Client(gateway.server.url, gateway.agent) as trusting:
        assert await trusting.tools() == []
    monkeypatch.delenv("TAPGATE_CA_FILE")
    async with Client(gateway.server.url, gateway.agent, verify=gateway.ca) as trusting:
        assert await trusting.tools() == []


@pytest.mark.parametrize("example", ["mcp_lamp.py", "triage_runtime.py"])
def test_an_example_says_the_certificate_is_not_trusted_without_a_traceback_and_runs_with_ca_file(
    gateway: Gateway, example: str
) -> None:
    command = [sys.executable, str(EXAMPLES / example), "--url", gateway.server.url, "--token", gateway.agent]
    _said_not_trusted(
        subprocess.run(
            command, capture_output=True, text=True, timeout=90, check=False, env=without_ca_file()
        )
    )
    if example == "mcp_lamp.py":
        reached = subprocess.run(
            [*command, "--ca-file", gateway.ca],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            env=without_ca_file(),
        )
        assert "No lamp among the tools" in reached.stderr, reached.stderr
