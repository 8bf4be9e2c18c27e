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


def cpu_seconds(processes: Iterable[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = process.cpu_times()
            total += times.user + times.system
    return total


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
    groups: dict[str, float]


class Meter:
    """CPU used by named groups of processes between two snapshots, in cores."""

    def __init__(self, groups: dict[str, Group]) -> None:
        self.groups = groups

    def snapshot(self) -> Snapshot:
        return Snapshot(
            time.monotonic(),
            _busy_seconds(),
            {name: cpu_seconds(find()) for name, find in self.groups.items()},
        )

    @staticmethod
    def cores(before: Snapshot, after: Snapshot) -> dict[str, float]:
        """Each group's cores, ``machine`` (all busy time) and ``other`` (the machine less the groups);
        nothing for a window too short for the kernel's 10 ms CPU accounting to mean anything."""
        wall = after.wall - before.wall
        if wall < MIN_WINDOW:
            return {}
        used = {
            name: max(0.0, after.groups[name] - before.groups.get(name, 0.0)) / wall for name in after.groups
        }
        machine = min(float(psutil.cpu_count() or 1), max(0.0, after.busy - before.busy) / wall)
        used["machine"] = machine
        used["other"] = max(0.0, machine - sum(v for k, v in used.items() if k != "machine"))
        return {k: round(v, 2) for k, v in used.items()}
