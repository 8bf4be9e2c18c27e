"""deploy.md's "A systemd unit", run as written: its install block installs this checkout for a system
user, `tapgate init` makes the deployment, the unit's own commands start the gateway, and it stops on
SIGTERM within the time the doc says."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from tests.live import free_port
from tests.test_docs_run import FENCE, ROOT, Block, _script, section

SHIMS = Path(__file__).with_name("deploy_shims.py")
# A venv and a real `pip install` of the checkout with all its dependencies: minutes on a busy machine.
INSTALL_SECONDS = 900
NOT_THE_CLONES = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "mutants", "build", "dist", "work", "artifacts", "*.egg-info",
    "__pycache__", ".*_cache", ".hypothesis", "*.db", "*.db-*",
)  # fmt: skip


def _the_doc() -> tuple[str, str, str]:
    """The unit, the install block and the sentence naming an operator's command as the tapgate user."""
    markdown = section((ROOT / "docs" / "deploy.md").read_text(), "## A systemd unit")
    [unit] = [fence.group(2) for fence in FENCE.finditer(markdown) if fence.group(1) == "ini"]
    [install] = [fence.group(2) for fence in FENCE.finditer(markdown) if fence.group(1) == "sh"]
    operator = re.search(r"`(sudo -u tapgate [^`]+ user add [^`]+)`", markdown.replace("\n", " "))
    assert operator is not None
    return unit, install, operator[1]


def _a_clone(folder: Path) -> Path:
    """The checkout as a person's clone of it: its files (edits not yet committed too), one commit."""
    shutil.copytree(ROOT, folder, ignore=NOT_THE_CLONES, symlinks=True)
    git = ["git", "-C", str(folder), "-c", "user.name=Ana", "-c", "user.email=ana@example.com"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "tapgate"]):
        subprocess.run([*git, *command], check=True, capture_output=True, timeout=120)
    return folder


def _wait_for(
    what: str, ready: Callable[[], bool], deadline: float, block: subprocess.Popen[str], said: Path
) -> None:
    while not ready():
        if block.poll() is not None:
            raise AssertionError(f"the install block ended before {what}:\n{said.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} in time")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextlib.contextmanager
def _reaping(run: Path, block: subprocess.Popen[str]) -> Iterator[None]:
    """Whatever happens, the block's shell and the service it started end with the test."""
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            os.kill(int((run / "tapgate.pid").read_text()), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(block.pid, signal.SIGTERM)
        block.wait(timeout=60)


def test_deploys_install_block_runs_as_written_and_the_unit_serves_until_sigterm(tmp_path: Path) -> None:
    """Real: `python3 -m venv` (the system's Python, found on sudo's secure_path), `git archive` of a clone
    of this checkout, `pip install` of it with every dependency from the package index (pip's cache
    helps), `tapgate init --dir`, then the unit's ExecStartPre (`tapgate migrate`) and ExecStart
    (`tapgate serve`, on a free port instead of 8080) from the installed venv, in its WorkingDirectory,
    with a systemd service's environment; an agent's event stream held open while SIGTERM stops it.

    Shimmed (tests/deploy_shims.py): `sudo`, `useradd`, `systemctl` and `journalctl`, because the test
    may not add users or units to the machine it runs on and has no systemd. `/srv` and `/tmp` are
    folders under tmp_path; as one user the test cannot be denied a write, so the `sudo -u tapgate`
    stand-in checks after each command that it wrote under the tapgate user's home only (not in /srv
    around it, not in the clone), and refuses to run when that home does not exist."""
    unit, install, operator = _the_doc()
    root, port = tmp_path / "root", free_port()
    srv, clone, shims, run = root / "srv", _a_clone(tmp_path / "clone"), tmp_path / "shims", root / "run"
    for folder in (srv, root / "tmp", root / "etc" / "systemd" / "system", shims, tmp_path / "admin"):
        folder.mkdir(parents=True)

    def here(text: str) -> str:
        """The doc's paths, in the test's folders."""
        real = {"/srv/": f"{srv}/", "/tmp/": f"{root}/tmp/", "/path/to/tapgate": str(clone)}  # noqa: S108
        return re.sub("|".join(map(re.escape, real)), lambda shown: real[shown[0]], text)

    assert "--port 8080" in unit
    (root / "etc" / "systemd" / "system" / "tapgate.service").write_text(
        here(unit).replace("--port 8080", f"--port {port}")
    )
    (shims / "system.json").write_text(json.dumps({"root": str(root), "srv": str(srv), "clone": str(clone)}))
    for tool in ("sudo", "useradd", "systemctl", "journalctl"):
        (shims / tool).write_text(f'#!/bin/sh\nexec {sys.executable} {SHIMS} {shims} {tool} "$@"\n')
        (shims / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAPGATE_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{shims}:{env['PATH']}"
    with (tmp_path / "block.out").open("w") as out:
        block = subprocess.Popen(
            ["bash", "-c", _script([Block(f"set -e\n{here(install)}", None)])],  # to the first failure
            cwd=tmp_path / "admin",
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    home = srv / "tapgate"
    url = f"http://127.0.0.1:{port}"
    with _reaping(run, block):
        ready = time.monotonic() + INSTALL_SECONDS
        _wait_for("/healthz", lambda: _answers(f"{url}/healthz"), ready, block, tmp_path / "block.out")
        said = (tmp_path / "block.out").read_text()
        assert "@@failed" not in said, said[-4000:]
        shown = said.splitlines()
        token = shown[shown.index("The operator token of tenant 'default' (shown once):") + 1]
        audit = httpx.get(f"{url}/v1/audit", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert audit.status_code == 200, audit.text  # the token init printed is the served one's

        added = subprocess.run(
            shlex.split(here(operator)), cwd=tmp_path / "admin", env=env, capture_output=True, text=True,
            timeout=90, check=False,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        made = subprocess.run(
            ["sudo", "-u", "tapgate", str(home / ".venv" / "bin" / "tapgate"), "token", "create", "--tenant",
             "default", "--user", "ana", "--kind", "agent", "--config", str(home / "tapgate.toml")],
            env=env, capture_output=True, text=True, timeout=90, check=True,
        )  # fmt: skip
        agent = made.stdout.strip().splitlines()[-1]
        with httpx.stream(
            "GET", f"{url}/v1/events", headers={"Authorization": f"Bearer {agent}"}, timeout=60
        ) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()  # kept: a dropped iterator closes the stream
            assert next(lines) == "retry: 2000"  # open, as an agent's is
            sent = time.time()
            pid = int((run / "tapgate.pid").read_text())
            os.kill(pid, signal.SIGTERM)  # systemctl stop's signal
            _wait_for(
                "stop", (run / "tapgate.exited").exists, time.monotonic() + 60, block, tmp_path / "block.out"
            )
            with contextlib.suppress(httpx.RemoteProtocolError):  # cut mid-stream
                assert all(line in ("", ": keep-alive") for line in lines)
        code, stopped_at = (run / "tapgate.exited").read_text().split()
        assert float(stopped_at) - sent < 10, "deploy.md: serve stops within 10 seconds of a SIGTERM"
        assert code in ("0", "-15")  # uvicorn ends on the signal it got, which systemd counts a clean stop
        assert block.wait(timeout=60) == 0  # journalctl -f followed the service to its end

    said = (tmp_path / "block.out").read_text()
    assert "@@failed" not in said and "@@end" in said, said[-4000:]
    journal = (run / "journal").read_text()
    assert said.split("@@end")[0].rstrip().endswith(journal.rstrip())  # what journalctl printed, last
    migrated, *served = journal.splitlines()
    assert migrated.endswith("is at the latest schema.")  # ExecStartPre's, before serve's log
    logged = [json.loads(line) for line in served]  # "serve's log: one JSON object per line"
    assert all(isinstance(line, dict) for line in logged)
    [streamed] = [line for line in logged if line.get("route") == "/v1/events"]
    assert streamed["ms"] >= 4000, streamed  # open through the grace, until the cut
    messages = [line["msg"] for line in logged]
    assert f"Uvicorn running on {url} (Press CTRL+C to quit)" in messages
    cut = {"level": "error", "msg": "Cancel 1 running task(s), timeout graceful shutdown exceeded"}
    assert any(line.items() >= cut.items() for line in logged), messages  # as deploy.md says the cut shows
    assert any(line.get("exc") == "CancelledError" for line in logged), messages
    assert messages[-2:] == ["Application shutdown complete.", f"Finished server process [{pid}]"], messages
    assert (root / "etc" / "systemd" / "system" / "multi-user.target.wants" / "tapgate.service").exists()
