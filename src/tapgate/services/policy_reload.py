"""Reload the policies file without a restart: on SIGHUP and when the file changes.

Each second the watcher compares the file's modification time and size with those of the rules in force
(one ``stat``). A change is read once two looks in a row agree, so a file still being written is left
alone for a second; an editor's save (a new file renamed over the old) is whole at once, and so is a
SIGHUP's reading, which does not wait. It compares the text's SHA-256 with the rules in force, so a touch
without a change does nothing. New rules are parsed whole, then swapped in as one reference
(``Context.swap_policies``): a call reads the reference once, so it sees the old rules or the new, never
part of a file. A file that does not parse leaves the old rules in force, logs one line with the line and
reason, and journals ``policy.reload_failed``; a good one journals ``policy.reloaded`` with its SHA-256.
The journal is per tenant, so each tenant's chain gets the entry. Every process watches for itself, so
with several workers each one reloads (and journals) on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import signal
from pathlib import Path

from tapgate import tasks
from tapgate.domain.audit import AuditRecord
from tapgate.domain.errors import PolicyFileError
from tapgate.domain.policy import parse_policies
from tapgate.services.context import Context

log = logging.getLogger(__name__)

ACTOR = "tapgate"


class PolicyReloader(tasks.Periodic):
    """A background service of the gateway; ``reload()`` is also what SIGHUP calls."""

    def __init__(self, ctx: Context, path: str, poll_seconds: float = 1.0, sighup: bool = False) -> None:
        # A round that fails (a database that is down) is logged and ends no watch.
        super().__init__(
            "tapgate-policy-reload",
            self._look,
            self._wait,
            failed="policy reload could not be journalled",
            log=log,
            at_start=False,
        )
        self._ctx = ctx
        self._path = Path(path)
        self._poll = poll_seconds
        self._sighup = sighup
        self._seen: tuple[int, int] | None = None  # (mtime_ns, size) of the text last read
        self._looked: tuple[int, int] | None = None  # ... at the last look
        self._sha = ""  # the SHA-256 of the text last read, parsed or not
        self._asked = asyncio.Event()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        # The gateway was built with this file's rules: remember them as in force.
        self._seen = self._looked = self._stat()
        with contextlib.suppress(OSError):
            self._sha = hashlib.sha256(self._path.read_bytes()).hexdigest()
        await super().start()
        if self._sighup:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._asked.set)

    async def close(self) -> None:
        if self._sighup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await super().close()

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = self._path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    async def _wait(self, _failed: bool) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._asked.wait(), self._poll)

    async def _look(self) -> None:
        forced = self._asked.is_set()
        self._asked.clear()
        look, self._looked = self._looked, self._stat()
        if forced or (self._looked != self._seen and self._looked == look):
            await self.reload(force=forced)

    async def reload(self, force: bool = False) -> bool:
        """Read the file; swap in its rules when they parse and differ from those in force. True when
        new rules were swapped in. ``force`` (SIGHUP) journals even an unchanged file's reload."""
        async with self._lock:
            self._seen = self._stat()
            try:
                data = await asyncio.to_thread(self._path.read_bytes)
            except OSError as e:
                await self._failed(0, f"the file cannot be read: {e.strerror}")
                return False
            sha = hashlib.sha256(data).hexdigest()
            if sha == self._sha and not force:
                return False
            self._sha = sha
            try:
                policies = parse_policies(data.decode("utf-8"), source=str(self._path))
            except UnicodeDecodeError:
                await self._failed(1, "the file is not UTF-8 text")
                return False
            except PolicyFileError as e:
                await self._failed(e.line, e.reason)
                return False
            self._ctx.swap_policies(policies)
            log.info(
                "policies reloaded",
                extra={"path": str(self._path), "sha256": sha, "rules": len(policies.rules)},
            )
            await self._journal(
                AuditRecord(
                    "policy.reloaded",
                    ACTOR,
                    subject=self._path.name,
                    data={"sha256": sha, "rules": len(policies.rules)},
                )
            )
            return True

    async def _failed(self, line: int, reason: str) -> None:
        log.warning(
            f"policies not reloaded, the rules in force stay: {self._path} line {line}: {reason}",
            extra={"path": str(self._path), "line": line},
        )
        await self._journal(
            AuditRecord(
                "policy.reload_failed",
                ACTOR,
                "failed",
                subject=self._path.name,
                reason=f"line {line}: {reason}",
                data={"line": line, "sha256": self._sha or None},
            )
        )

    async def _journal(self, record: AuditRecord) -> None:
        now = self._ctx.clock.now()
        for tenant_id in await self._ctx.store.tenant_ids():
            async with self._ctx.store.unit_of_work(tenant_id) as uow:
                await uow.journal.append(record, now)
