"""deploy.md's "PostgreSQL" and "Backups and restore" sections, run as written on this machine's PostgreSQL:
migrate, make a tenant and serve with four workers; dump the database, lose it and its app role as a new
server would not have them, restore the dump, migrate again and serve the same tenant with the same
operator token; and SQLite's online backup of a running gateway, whose copy verifies. Only the names the
doc shows are changed: the database and app role get names of this test's own, the ports free ones, and
/srv and /backups folders under tmp_path."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_URL, HOW_TO_GET_POSTGRES, _drop, _reachable, blocking
from tests.live import free_port
from tests.test_docs_run import FENCE, ROOT, section

DOC_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
STARTS = 180  # seconds for a gateway of four workers to answer, on a busy machine


def _fences(heading: str, kind: str) -> list[str]:
    markdown = section((ROOT / "docs" / "deploy.md").read_text(), heading)
    return [fence.group(2) for fence in FENCE.finditer(markdown) if fence.group(1) == kind]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPGATE_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def _run(line: str, folder: Path, env: dict[str, str] | None = None) -> str:
    """One of the doc's command lines in bash; its output. A line that fails fails the test."""
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail\n{line}"], cwd=folder, env=env or _env(),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@contextlib.contextmanager
def _serving(line: str, folder: Path, port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """The doc's `tapgate serve` line, on ``port``, until /readyz answers; stopped with SIGTERM after."""
    process = subprocess.Popen(
        ["bash", "-c", f"exec {line} --port {port}"], cwd=folder, env=env or _env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTS
        while not _ready(url):
            assert process.poll() is None, process.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the gateway did not answer /readyz in time"
            time.sleep(0.2)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=60)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def _entries(url: str, token: str) -> int:
    answer = httpx.get(f"{url}/v1/audit", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return len(answer.json()["entries"])


@pytest.mark.postgres
def test_deploys_postgresql_path_serves_and_its_dump_restores_on_a_server_without_the_app_role(
    tmp_path: Path,
) -> None:
    if not blocking(_reachable()):
        if os.environ.get("TAPGATE_TEST_POSTGRES_REQUIRED"):
            pytest.fail(HOW_TO_GET_POSTGRES)
        pytest.skip(HOW_TO_GET_POSTGRES)
    if ADMIN_URL != DOC_ADMIN_URL:
        pytest.skip(f"deploy.md's commands name the admin role of {DOC_ADMIN_URL}; this run's is another")
    [settings] = _fences("## PostgreSQL", "toml")
    [commands] = _fences("## PostgreSQL", "sh")
    dump, restore, migrate_again = _fences("## Backups and restore", "sh")[1].strip().splitlines()
    suffix = secrets.token_hex(4)
    database, role = f"tapgate_doc_{suffix}", f"tapgate_app_doc_{suffix}"
    (tmp_path / "tapgate.toml").write_text(
        settings.replace("tapgate_app@", f"{role}@").replace('/tapgate"', f'/{database}"')
    )

    def ours(line: str) -> str:
        """The doc's database name, as this test's."""
        return re.sub(r"(-d|postgres) tapgate\b(?!\.)", rf"\1 {database}", line)

    try:
        migrate, create, serve = (line.split("#")[0].strip() for line in commands.strip().splitlines())
        assert serve.endswith("--workers 4")
        _run(migrate, tmp_path)
        token = _run(create, tmp_path).strip().splitlines()[-1]
        with _serving(serve, tmp_path, free_port()) as url:
            before = _entries(url, token)
        assert before >= 1

        _run(ours(dump), tmp_path)
        blocking(_drop(database, role))  # what a new server lacks: roles are not in a dump
        _run(ours(restore), tmp_path)
        _run(migrate_again.split("#")[0].strip(), tmp_path)
        with _serving(serve, tmp_path, free_port()) as url:
            assert _entries(url, token) >= before  # the same tenant, its token and its journal
        verified = _run("tapgate audit verify --config tapgate.toml", tmp_path)
        assert "chain intact" in verified, verified
    finally:
        blocking(_drop(database, role))


def test_deploys_sqlite_backup_of_a_running_gateway_verifies(tmp_path: Path) -> None:
    """`tapgate backup` while the gateway serves, then the doc's check of the copy."""
    [backup] = _fences("## Backups and restore", "sh")[:1]
    check = re.search(
        r"`(TAPGATE_DATABASE_URL=sqlite:////backups/tapgate-….db tapgate audit verify --config\s+"
        r"/srv/tapgate/tapgate.toml)`",
        section((ROOT / "docs" / "deploy.md").read_text(), "## Backups and restore"),
    )
    assert check is not None
    srv, backups = tmp_path / "srv" / "tapgate", tmp_path / "backups"
    srv.mkdir(parents=True)
    backups.mkdir()
    said = _run(f"tapgate init --dir {srv}", tmp_path)
    token = said.strip().splitlines()[said.strip().splitlines().index(
        "The operator token of tenant 'default' (shown once):") + 1]  # fmt: skip

    def ours(line: str) -> str:
        return line.replace("/srv/tapgate", str(srv)).replace("/backups", str(backups))

    with _serving(f"tapgate serve --config {srv}/tapgate.toml", tmp_path, free_port()) as url:
        assert _entries(url, token) >= 1
        _run(ours(backup.split("#")[0].strip()), tmp_path)
    [copy] = backups.glob("tapgate-*.db")
    verified = _run(ours(re.sub(r"\s+", " ", check[1])).replace("tapgate-….db", copy.name), tmp_path)
    assert "The audit journal verifies" in verified, verified
