"""Safe defaults (§15): ``tapgate init`` requires device signatures, and ``serve`` says so in one warning
line when a deployment turns them off."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tapgate.config import load_settings
from tests.test_cli import _free_port, tapgate


def _serve_log(config: Path) -> list[dict[str, object]]:
    """Start ``tapgate serve``, wait until it is ready, stop it; its JSON log lines."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tapgate", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, process.communicate()[1]
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/readyz").status_code == 200:
                        break
                assert time.monotonic() < deadline, "the gateway did not become ready in 60 s"
                time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def _warnings(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    return [line for line in lines if "require_device_signature" in str(line.get("msg"))]


def test_init_requires_device_signatures_and_serve_does_not_warn(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = tmp_path / "tapgate.toml"
    assert "require_device_signature = true" in config.read_text()
    assert load_settings(str(config)).require_device_signature is True
    assert _warnings(_serve_log(config)) == []


def test_serve_warns_in_one_line_when_device_signatures_are_off(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = tmp_path / "tapgate.toml"
    text = config.read_text()
    config.write_text(text.replace("require_device_signature = true", "require_device_signature = false"))
    [warning] = _warnings(_serve_log(config))
    assert warning["level"] == "warning"
    assert "set require_device_signature = true" in str(warning["msg"])
