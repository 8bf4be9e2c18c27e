"""``tapgate demo``: the whole story against a real gateway on a fresh temporary SQLite.

Every step is done the way a user would do it (the CLI, then HTTP), and checked; the demo exits 0 only
when every step did what it says.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from rich.console import Console

console = Console(stderr=False, highlight=False)


class StepFailed(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tapgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _step(title: str, ok: bool, detail: str = "") -> None:
    mark = "[green]ok[/green]  " if ok else "[red]FAIL[/red]"
    console.print(f"{mark} {title}" + (f" [dim]{detail}[/dim]" if detail else ""))
    if not ok:
        raise StepFailed(title)


@contextlib.contextmanager
def _gateway(config: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tapgate", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"TAPGATE_PUBLIC_URL": f"http://127.0.0.1:{port}"},
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(client: httpx.Client, process: subprocess.Popen[str], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(httpx.TransportError):
            if client.get("/readyz").status_code == 200:
                return True
        time.sleep(0.1)
    return False


def _public_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(der).decode()


LAMP = {
    "name": "set_light",
    "kind": "actuator",
    "description": "Turn the lamp on or off and set its brightness.",
    "params": {"on": {"type": "boolean", "required": True}, "brightness": {"type": "number"}},
}


def _devices(
    client: httpx.Client, operator: dict[str, str], user: dict[str, str], agent: dict[str, str]
) -> None:
    r = client.post(
        "/v1/users/ana/devices",
        headers=operator,
        json={
            "device_id": "desk-lamp",
            "name": "Desk lamp",
            "kind": "lamp",
            "alg": "p256",
            "public_key": _public_key(),
            "capabilities": [LAMP],
            "grants": ["set_light"],
        },
    )
    _step(
        "the operator enrols ana's desk lamp with its key, set_light granted",
        r.status_code == 201,
        r.text[:80],
    )
    r = client.post("/v1/users/ana/pairings", json={}, headers=user)
    _step(
        "ana asks for a pairing code (a link and a QR code)",
        r.status_code == 201,
        r.json().get("url", "")[:48],
    )
    pairing = r.json()
    qr = client.get(f"/v1/pairings/{pairing['pairing_id']}/qr.svg", headers=user)
    _step("the QR code draws as SVG", qr.status_code == 200 and "<svg" in qr.text)
    r = client.post(
        "/v1/pair",
        json={
            "code": pairing["code"],
            "device_id": "ana-phone",
            "name": "Ana's phone",
            "kind": "phone",
            "alg": "p256",
            "public_key": _public_key(),
            "capabilities": [{"name": "sms_send"}, {"name": "phone_actions"}],
        },
    )
    _step(
        "ana's phone claims the code and shows a comparison code",
        r.status_code == 201,
        r.json().get("comparison_code", ""),
    )
    r = client.post(
        f"/v1/pairings/{pairing['pairing_id']}/consent",
        headers=user,
        json={
            "comparison_code": r.json()["comparison_code"],
            "approved": True,
            "grants": ["sms_send"],
        },
    )
    _step("ana types the code and grants sms_send only", r.status_code == 200, r.json()["device"]["status"])
    r = client.get("/v1/tools", headers=agent)
    names = [t["function"]["name"] for t in r.json()["tools"]]
    _step(
        "the agent sees exactly the granted tools",
        names == ["device__desk_lamp__set_light", "device__ana_phone__sms_send"],
        ", ".join(names),
    )


def run_demo(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="tapgate-demo-"))
    console.print(f"[bold]tapgate demo[/bold] in {folder}")
    try:
        _story(folder)
    except StepFailed as e:
        console.print(f"[red]The demo stopped at: {e}[/red]")
        return 1
    finally:
        if keep:
            console.print(f"Kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    console.print("[bold green]Every step did what it says.[/bold green]")
    return 0


def _story(folder: Path) -> None:
    made = _tapgate("init", "--dir", str(folder))
    _step(
        "tapgate init writes tapgate.toml, migrates SQLite, creates tenant 'default'",
        made.returncode == 0,
        made.stderr.strip(),
    )
    operator = made.stdout.strip().splitlines()[-1]
    config = folder / "tapgate.toml"
    port = _free_port()
    with (
        _gateway(config, port) as process,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
    ):
        _step(f"tapgate serve answers /readyz on 127.0.0.1:{port}", _wait_ready(client, process))
        _step("/healthz says ok", client.get("/healthz").json() == {"status": "ok"})
        as_operator = {"Authorization": f"Bearer {operator}"}
        r = client.post("/v1/users", json={"user_id": "ana", "display_name": "Ana"}, headers=as_operator)
        _step("the operator adds the person 'ana'", r.status_code == 201, str(r.status_code))
        r = client.post(
            "/v1/users/ana/tokens", json={"kind": "agent", "agent_id": "assistant"}, headers=as_operator
        )
        _step(
            "the operator mints an agent token for ana", r.status_code == 201, ", ".join(r.json()["scopes"])
        )
        agent = r.json()["token"]
        r = client.post("/v1/users/ana/tokens", json={"kind": "user"}, headers=as_operator)
        _step("the operator mints ana's own user token", r.status_code == 201, ", ".join(r.json()["scopes"]))
        user = r.json()["token"]
        _devices(
            client, as_operator, {"Authorization": f"Bearer {user}"}, {"Authorization": f"Bearer {agent}"}
        )
        r = client.post("/v1/users", json={"user_id": "eve"}, headers={"Authorization": f"Bearer {agent}"})
        _step("an agent token cannot add people", r.status_code == 403, r.json()["error"]["message"])
        r = client.post("/v1/users", json={"user_id": "eve"})
        _step("no token, no entry", r.status_code == 401, r.json()["error"]["message"])
        r = client.get("/v1/audit", headers=as_operator)
        actions = [e["action"] for e in r.json()["entries"]]
        expected = [
            *("tenant.created", "token.created", "user.created", "token.created", "token.created"),
            *("device.enrolled", "pairing.started", "pairing.claimed", "pairing.confirmed"),
        ]
        _step("the audit journal holds every decision", actions == expected, " → ".join(actions))
        secret_free = all(token not in r.text for token in (operator, agent, user))
        _step("no token appears in the journal", secret_free)
    verified = _tapgate("audit", "verify", "--config", str(config))
    _step(
        "tapgate audit verify finds the hash chain intact",
        verified.returncode == 0,
        verified.stdout.strip().splitlines()[-1] if verified.stdout.strip() else verified.stderr.strip(),
    )
