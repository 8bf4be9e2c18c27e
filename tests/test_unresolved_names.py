"""A gateway's name that does not resolve on this machine (an example name copied from deploy.md, a
`.local` name without mDNS): each command that talks to the gateway says so, never "nothing answers,
start tapgate serve" about a gateway that may well be running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.live import tapgate

URL = "https://tapgate.invalid:8443"  # .invalid never resolves (RFC 6761)
SAID = "The name tapgate.invalid does not resolve on this machine"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    assert tapgate("init", "--dir", str(tmp_path)).returncode == 0
    assert tapgate("user", "add", "ana", "--config", str(tmp_path / "tapgate.toml")).returncode == 0
    assert tapgate("device", "keygen", str(tmp_path / "phone.pem")).returncode == 0
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["console", "link", "--user", "ana", "--url", URL],
        ["pair", "--user", "ana", "--url", URL],
        ["mcp", "--url", URL, "--token", "tga_unused"],
        ["device", "pair", f"{URL}/app/#pair=tgp_default_0123456789abcdef_0123456789abcdef", "{phone}", "ph"],
    ],
    ids=["console link", "pair", "mcp", "device pair"],
)
def test_a_gateway_name_that_does_not_resolve_is_named_as_the_reason(
    folder: Path, command: list[str]
) -> None:
    words = [word.replace("{phone}", str(folder / "phone.pem")) for word in command]
    state = ["--state", str(folder / "state.json")] if command[0] == "device" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    done = tapgate(*words, *state, env={**env, "TAPGATE_CONFIG": str(folder / "tapgate.toml")})
    assert done.returncode == 1
    assert SAID in done.stderr, done.stderr
    assert "Nothing answers" not in done.stderr and "Traceback" not in done.stderr
