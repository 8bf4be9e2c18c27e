"""The command line as a person uses it: init, tenants, tokens, serve on a real port, the demo."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def tapgate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=cwd,
        check=False,
    )


@pytest.fixture
def initialised(tmp_path: Path) -> tuple[Path, str]:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    return tmp_path / "tapgate.toml", made.stdout.strip().splitlines()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(config: Path) -> Iterator[httpx.Client]:
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tapgate", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.communicate()[1]
            with contextlib.suppress(httpx.TransportError):
                if client.get("/readyz").status_code == 200:
                    break
            assert time.monotonic() < deadline, "the gateway did not become ready in 30 s"
            time.sleep(0.05)
        yield client
    finally:
        client.close()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
        # uvicorn shuts down gracefully, then re-raises the signal it was stopped by.
        assert process.returncode in (0, -signal.SIGTERM), stderr
        assert "Traceback" not in stderr


def test_init_writes_settings_with_both_flags_on_and_prints_an_operator_token(
    initialised: tuple[Path, str],
) -> None:
    config, token = initialised
    text = config.read_text()
    assert "device_channel_enabled = true" in text and "device_sms_enabled = true" in text
    assert 'relay_secret = "' in text and "vapid_private_key" in text
    assert token.startswith("tgo_default_")
    assert oct(config.stat().st_mode)[-3:] == "600"
    assert oct((config.parent / "tapgate.db").stat().st_mode)[-3:] == "600"


def test_init_refuses_to_overwrite_without_force(initialised: tuple[Path, str]) -> None:
    config, _ = initialised
    before = config.read_text()
    again = tapgate("init", "--dir", str(config.parent))
    assert again.returncode == 1
    assert "--force" in again.stderr
    forced = tapgate("init", "--dir", str(config.parent), "--force")
    assert forced.returncode == 1
    assert "exists already" in forced.stderr
    assert config.read_text() == before  # the deployment's secrets are untouched


def test_tenant_and_token_commands_print_working_tokens(initialised: tuple[Path, str]) -> None:
    config, _ = initialised
    created = tapgate("tenant", "create", "acme", "--config", str(config))
    assert created.returncode == 0, created.stderr
    acme = created.stdout.strip().splitlines()[-1]
    assert acme.startswith("tgo_acme_")
    assert tapgate("tenant", "create", "acme", "--config", str(config)).returncode == 1
    with serving(config) as client:
        r = client.post("/v1/users", json={"user_id": "ana"}, headers={"Authorization": f"Bearer {acme}"})
        assert r.status_code == 201
    agent = tapgate(
        "token",
        "create",
        "--tenant",
        "acme",
        "--user",
        "ana",
        "--kind",
        "agent",
        "--scope",
        "tools",
        "--config",
        str(config),
    )
    assert agent.returncode == 0, agent.stderr
    assert agent.stdout.strip().startswith("tga_acme_")
    missing = tapgate(
        "token", "create", "--tenant", "acme", "--user", "bob", "--kind", "user", "--config", str(config)
    )
    assert missing.returncode == 1
    assert "no user 'bob'" in missing.stderr
    assert "tapgate user add --tenant acme bob" in missing.stderr
    usage = tapgate("token", "create", "--tenant", "acme", "--kind", "agent", "--config", str(config))
    assert usage.returncode == 2
    typo = tapgate(
        "token", "create", "--tenant", "amce", "--user", "ana", "--kind", "agent", "--config", str(config)
    )
    assert typo.returncode == 1
    assert typo.stderr.strip() == "There is no tenant 'amce'; did you mean 'acme'?"


def test_serve_answers_health_readiness_metrics_and_openapi_on_a_real_port(
    initialised: tuple[Path, str],
) -> None:
    config, operator = initialised
    with serving(config) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        r = client.post("/v1/users", json={"user_id": "ana"}, headers={"Authorization": f"Bearer {operator}"})
        assert r.status_code == 201
        metrics = client.get("/metrics").text
        assert 'tapgate_http_requests_total{method="POST",route="/v1/users",status="201"} 1.0' in metrics
        assert "/v1/users/{user_id}/tokens" in client.get("/openapi.json").json()["paths"]


def test_serve_refuses_a_database_that_is_not_migrated(tmp_path: Path) -> None:
    config = tmp_path / "tapgate.toml"
    config.write_text('database_url = "sqlite:///empty.db"\n')
    refused = tapgate("serve", "--config", str(config))
    assert refused.returncode == 1
    assert "tapgate migrate" in refused.stderr
    assert tapgate("migrate", "--config", str(config)).returncode == 0
    refused = tapgate("serve", "--config", str(config), "--workers", "2")
    assert refused.returncode == 1
    assert "PostgreSQL" in refused.stderr


def test_the_demo_runs_to_its_end() -> None:
    run = tapgate("demo")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Every step did what it says." in run.stdout
    assert "require_user_verification" in run.stdout  # the story mentions passkeys (DESIGN §22)
    # Each step is one line, however long: a link is never cut in two by the output's width.
    [printed] = [line for line in run.stdout.splitlines() if "tapgate console link prints" in line]
    assert re.search(r"https?://\S+/console/link\S*$", printed), printed
    # A detail cut short says so: a pairing link cut without a mark looks whole.
    [asked] = [line for line in run.stdout.splitlines() if "ana asks for a pairing link" in line]
    assert re.search(r"http://\S+/app/#pair=\S+…$", asked), asked
    # and the end names no spent link, but where a gateway with ana on it comes from
    ending = run.stdout.split("Every step did what it says.", 1)[1]
    assert "/console/link" not in ending and "tapgate console link --tenant default" in ending
    assert "Run it yourself" in ending


def test_help_shows_no_type_beside_a_flag_and_the_device_group_names_login() -> None:
    top = tapgate("--help")
    assert top.returncode == 0, top.stderr
    assert "<bool>" not in top.stdout
    assert "--version" in top.stdout
    group = tapgate("device", "--help")
    assert "decide, login, vectors" in " ".join(group.stdout.split())
    run = tapgate("device", "run", "--help")
    assert "--no-inbox" in run.stdout and "<bool>" not in run.stdout
    assert "<path>" in run.stdout  # an option that takes a value still says what kind
