"""The bench's CPU meter: a group's cores are summed per process, so a process that ends inside a window
(a database backend whose connection closed) does not take its whole life's CPU off its group."""

from __future__ import annotations

from bench.meter import Meter, Snapshot


def test_a_process_that_ends_or_starts_in_the_window_leaves_its_group_whole() -> None:
    before = Snapshot(wall=100.0, busy=1000.0, groups={"postgres": {1: 50.0, 2: 500.0}})
    # In 2 s: pid 1 used 0.6 s, pid 2 (its connection closed) ended, pid 3 started and used 0.4 s.
    after = Snapshot(wall=102.0, busy=1002.0, groups={"postgres": {1: 50.6, 3: 0.4}})
    cores = Meter.cores(before, after)
    assert cores["postgres"] == 0.5
    assert cores["machine"] == 1.0
    assert cores["other"] == 0.5
