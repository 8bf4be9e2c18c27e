"""Real gateways for end-to-end tests: `tapgate serve` in a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

READY_SECONDS = 90.0  # a bound for a gateway that never gets ready; a busy machine takes seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tapgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env=env,
    )


@dataclass
class Server:
    """One `tapgate serve` process; it can be killed (SIGKILL) and started again on the same port."""

    config: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None
    log: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of the next start
    args: tuple[str, ...] = ()  # more arguments to `tapgate serve` (``--workers 2``)
    ca: Path | None = None  # with https (tls_cert in the settings): the CA that signed its certificate

    @property
    def url(self) -> str:
        return f"{'https' if self.ca else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=str(self.ca)) if self.ca else True

    def start(self) -> Server:
        self.log = self.config.parent / f"serve-{self.port}-{secrets.token_hex(2)}.log"
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tapgate",
                    "serve",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.port),
                    *self.args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=out,
                text=True,
                env=os.environ | {"PYTHONUNBUFFERED": "1"} | self.env,
            )
        deadline = time.monotonic() + READY_SECONDS
        with httpx.Client(base_url=self.url, timeout=2, verify=self.verify) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"tapgate serve exited: {self.log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/readyz").status_code == 200:
                        return self
                if time.monotonic() > deadline:
                    raise RuntimeError("tapgate serve did not become ready")
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, as a crash."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def logs(self) -> str:
        return self.log.read_text() if self.log and self.log.exists() else ""


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def write_config(folder: Path, database_url: str, **settings: object) -> Path:
    """A tapgate.toml with both device flags on and ``settings`` added (a dict becomes a table)."""
    values: dict[str, object] = {
        "database_url": database_url,
        "device_channel_enabled": True,
        "device_sms_enabled": True,
        **settings,
    }
    keys = [f"{key} = {_toml(value)}\n" for key, value in values.items() if not isinstance(value, dict)]
    tables = [
        f"[{name}]\n" + "".join(f"{key} = {_toml(value)}\n" for key, value in table.items())
        for name, table in values.items()
        if isinstance(table, dict)
    ]
    path = folder / "tapgate.toml"
    path.write_text("".join(keys + tables))
    return path


async def new_tenant(database_url: str, name: str | None = None) -> str:
    """A fresh tenant (named ``name``, or a random name), made beside the running server; its operator
    token."""
    from tapgate.adapters.clock import SystemClock
    from tapgate.adapters.store.sql import open_sql_store
    from tapgate.services.accounts import create_tenant

    store = open_sql_store(database_url)
    try:
        return (await create_tenant(store, SystemClock(), name or f"t-{secrets.token_hex(4)}")).token
    finally:
        await store.close()


def local_ca_gateway(folder: Path, *names: str) -> tuple[Server, str]:
    """`tapgate init` and `tapgate tls init --name …` in ``folder``: a gateway (not started yet) speaking
    https with a certificate from its own local CA, its plain-HTTP side on a free port; and the operator
    token of its tenant 'default'."""
    made = tapgate("init", "--dir", str(folder))
    assert made.returncode == 0, made.stderr
    port = free_port()
    config = folder / "tapgate.toml"
    named = [arg for name in names for arg in ("--name", name)]
    issued = tapgate("tls", "init", "--config", str(config), *named, "--port", str(port))
    assert issued.returncode == 0, issued.stderr
    server = Server(
        config, port=port, ca=folder / "tls" / "ca.pem", env={"TAPGATE_HTTP_PORT": str(free_port())}
    )
    return server, made.stdout.strip().splitlines()[-1]
