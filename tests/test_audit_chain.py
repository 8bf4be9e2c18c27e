"""The audit journal's hash chain detects any change, and `tapgate audit verify` says where."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tapgate.domain.audit import GENESIS, AuditRecord, chain_entry, verify_chain
from tapgate.domain.errors import BrokenChain

AT = datetime(2026, 5, 1, tzinfo=UTC)


def _chain(n: int) -> list:
    entries, prev = [], GENESIS
    for i in range(1, n + 1):
        entry = chain_entry("acme", i, AT, AuditRecord("thing.done", "test", subject=f"s{i}"), prev)
        entries.append(entry)
        prev = entry.hash
    return entries


def test_an_untouched_chain_verifies() -> None:
    assert verify_chain("acme", _chain(4)) == 4


@pytest.mark.parametrize(
    "change",
    [
        {"reason": "edited"},
        {"outcome": "refused"},
        {"actor": "someone-else"},
        {"at": datetime(2027, 1, 1, tzinfo=UTC)},
        {"data": {"n": 1}},
    ],
)
def test_an_altered_entry_breaks_the_chain_at_that_entry(change: dict) -> None:
    entries = _chain(4)
    entries[2] = replace(entries[2], **change)
    with pytest.raises(BrokenChain) as broken:
        verify_chain("acme", entries)
    assert broken.value.seq == 3


def test_a_removed_entry_breaks_the_chain() -> None:
    entries = _chain(4)
    del entries[1]
    with pytest.raises(BrokenChain) as broken:
        verify_chain("acme", entries)
    assert broken.value.seq == 2


def test_a_rehashed_entry_no_longer_links_to_the_next() -> None:
    entries = _chain(3)
    forged = chain_entry("acme", 2, AT, AuditRecord("thing.undone", "test"), entries[0].hash)
    entries[1] = forged
    with pytest.raises(BrokenChain) as broken:
        verify_chain("acme", entries)
    assert broken.value.seq == 3


def test_the_same_entries_under_another_tenant_do_not_verify() -> None:
    with pytest.raises(BrokenChain):
        verify_chain("other", _chain(2))


def test_free_text_cannot_hide_in_audit_data() -> None:
    with pytest.raises(ValueError, match="free text"):
        chain_entry("acme", 1, AT, AuditRecord("x", "test", data={"body": "y" * 500}), GENESIS)
    with pytest.raises(TypeError):
        chain_entry("acme", 1, AT, AuditRecord("x", "test", data={"args": ["a"]}), GENESIS)  # type: ignore[dict-item]


def _tapgate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_audit_verify_finds_a_row_altered_in_the_database(tmp_path: Path) -> None:
    made = _tapgate("init", "--dir", str(tmp_path), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = str(tmp_path / "tapgate.toml")
    assert _tapgate("tenant", "create", "acme", "--config", config, cwd=tmp_path).returncode == 0
    good = _tapgate("audit", "verify", "--config", config, cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "4 entries in 2 tenants" in good.stdout

    with sqlite3.connect(tmp_path / "tapgate.db") as db:
        db.execute("UPDATE audit_entries SET subject = 'nobody' WHERE tenant_id = 'acme' AND seq = 1")

    bad = _tapgate("audit", "verify", "--config", config, cwd=tmp_path)
    assert bad.returncode == 1
    assert "tenant acme: audit entry 1 was altered" in bad.stderr


def test_audit_verify_finds_entries_cut_from_the_end(tmp_path: Path) -> None:
    assert _tapgate("init", "--dir", str(tmp_path), cwd=tmp_path).returncode == 0
    config = str(tmp_path / "tapgate.toml")
    with sqlite3.connect(tmp_path / "tapgate.db") as db:
        db.execute("DELETE FROM audit_entries WHERE tenant_id = 'default' AND seq = 2")
    bad = _tapgate("audit", "verify", "--config", config, cwd=tmp_path)
    assert bad.returncode == 1
    assert "audit entry 2 is missing" in bad.stderr


def test_audit_verify_of_an_unknown_tenant_says_so(tmp_path: Path) -> None:
    assert _tapgate("init", "--dir", str(tmp_path), cwd=tmp_path).returncode == 0
    run = _tapgate(
        "audit", "verify", "--tenant", "nope", "--config", str(tmp_path / "tapgate.toml"), cwd=tmp_path
    )
    assert run.returncode == 1
    assert "no tenant 'nope'" in run.stderr
