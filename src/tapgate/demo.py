"""``tapgate demo``: the whole story against a real gateway on a fresh temporary SQLite.

Every step is done the way a user would do it (the CLI, then HTTP), and checked; the demo exits 0 only
when every step did what it says.
"""

from __future__ import annotations

import contextlib
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
        r = client.post("/v1/users", json={"user_id": "eve"}, headers={"Authorization": f"Bearer {agent}"})
        _step("an agent token cannot add people", r.status_code == 403, r.json()["error"]["message"])
        r = client.post("/v1/users", json={"user_id": "eve"})
        _step("no token, no entry", r.status_code == 401, r.json()["error"]["message"])
        r = client.get("/v1/audit", headers=as_operator)
        actions = [e["action"] for e in r.json()["entries"]]
        _step(
            "the audit journal holds every decision",
            actions == ["tenant.created", "token.created", "user.created", "token.created", "token.created"],
            " → ".join(actions),
        )
        secret_free = all(token not in r.text for token in (operator, agent))
        _step("no token appears in the journal", secret_free)
    verified = _tapgate("audit", "verify", "--config", str(config))
    _step(
        "tapgate audit verify finds the hash chain intact",
        verified.returncode == 0,
        verified.stdout.strip().splitlines()[-1] if verified.stdout.strip() else verified.stderr.strip(),
    )
