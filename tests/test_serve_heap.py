"""`tapgate serve`'s app tunes Python's collector once its gateway has started (docs/performance.md,
seventh step); an app built in a process it shares (tests, an embedding program) leaves it alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# Runs in a fresh interpreter: freezing the heap is for the whole process, and this one is pytest's.
_PROBE = """
import asyncio, gc, json, sys
from tapgate.bootstrap import app_from_environment, build_app
from tapgate.config import load_settings

async def started(app):
    async with app.router.lifespan_context(app):
        return {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()[0]}

before = gc.get_threshold()[0]
embedded = asyncio.run(started(build_app(load_settings())))
served = asyncio.run(started(app_from_environment()))
print(json.dumps({"before": before, "embedded": embedded, "served": served}))
"""


def test_the_served_app_moves_its_startup_heap_out_of_the_collectors_sight(
    sqlite_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "tapgate.toml"
    config.write_text(f'database_url = "{sqlite_url}"\n')
    env = os.environ | {"TAPGATE_CONFIG": str(config)}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert seen["embedded"] == {"frozen": 0, "threshold": seen["before"]}
    assert seen["served"]["frozen"] > 10_000  # the libraries and the schema, at least
    assert seen["served"]["threshold"] == 10_000
