"""Who used the machine during a measurement: the servers, the load clients, PostgreSQL and the rest.

On two cores a benchmark easily measures its own client, or another job on the machine. Every timed
window therefore records the CPU each side used (in cores: CPU seconds over wall seconds), so the
report can say which side saturated.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

Group = Callable[[], Iterable[psutil.Process]]
MIN_WINDOW = 0.5  # seconds


def cpu_by_process(processes: Iterable[psutil.Process]) -> dict[int, float]:
    """Each process's CPU seconds so far, by pid."""
    found: dict[int, float] = {}
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            found[process.pid] = times.user + times.system
    return found


def rss_bytes(processes: Iterable[psutil.Process]) -> int:
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += process.memory_info().rss
    return total


def postgres_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["name", "username"]):
        if process.info["name"] == "postgres" or process.info["username"] == "postgres":
            found.append(process)
    return found


def _busy_seconds() -> float:
    times = psutil.cpu_times()
    return float(sum(times)) - times.idle - getattr(times, "iowait", 0.0)


@dataclass
class Snapshot:
    wall: float
    busy: float
    groups: dict[str, dict[int, float]]  # each group's processes: their CPU seconds so far, by pid


class Meter:
    """CPU used by named groups of processes between two snapshots, in cores."""

    def __init__(self, groups: dict[str, Group]) -> None:
        self.groups = groups

    def snapshot(self) -> Snapshot:
        return Snapshot(
            time.monotonic(),
            _busy_seconds(),
            {name: cpu_by_process(find()) for name, find in self.groups.items()},
        )

    @staticmethod
    def cores(before: Snapshot, after: Snapshot) -> dict[str, float]:
        """Each group's cores, ``machine`` (all busy time) and ``other`` (the machine less the groups);
        nothing for a window too short for the kernel's 10 ms CPU accounting to mean anything."""
        wall = after.wall - before.wall
        if wall < MIN_WINDOW:
            return {}
        # Per process: one that started in the window counts whole, and one that ended in it (a database
        # backend whose connection closed) drops out without taking its whole life's CPU off the group
        # (which then showed as "other", and the machine as busy).
        used = {
            name: sum(
                max(0.0, seconds - before.groups.get(name, {}).get(pid, 0.0))
                for pid, seconds in after.groups[name].items()
            )
            / wall
            for name in after.groups
        }
        machine = min(float(psutil.cpu_count() or 1), max(0.0, after.busy - before.busy) / wall)
        used["machine"] = machine
        used["other"] = max(0.0, machine - sum(v for k, v in used.items() if k != "machine"))
        return {k: round(v, 2) for k, v in used.items()}
