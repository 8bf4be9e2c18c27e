"""FastAPI's own OpenTelemetry stays off in tapgate's app, even where the process has a tracer
provider: its log records carry exceptions' messages, which may quote what a request carried
(docs/security.md, "Nothing private in logs")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

# In a fresh interpreter: a global tracer provider can be set once per process.
_PROBE = """
import asyncio, json, sys
import httpx
from fastapi import FastAPI
from opentelemetry import trace
from tapgate.bootstrap import build_app
from tapgate.config import load_settings

started = []

class Recording(trace.TracerProvider):
    def get_tracer(self, *args, **kwargs):
        return Tracer()

class Tracer(trace.NoOpTracer):
    def start_span(self, name, *args, **kwargs):
        started.append(name)
        return super().start_span(name, *args, **kwargs)

    def start_as_current_span(self, name, *args, **kwargs):
        started.append(name)
        return super().start_as_current_span(name, *args, **kwargs)

trace.set_tracer_provider(Recording())

async def get(app):
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return (await client.get("/healthz")).status_code

plain = FastAPI()
plain.get("/healthz")(lambda: {"status": "ok"})
seen = {"plain": [asyncio.run(get(plain)), len(started)]}
started.clear()
seen["tapgate"] = [asyncio.run(get(build_app(load_settings()))), len(started)]
print(json.dumps(seen))
"""


def test_tapgates_app_starts_no_fastapi_span_where_a_plain_app_would(sqlite_url: str, tmp_path: Path) -> None:
    config = tmp_path / "tapgate.toml"
    config.write_text(f'database_url = "{sqlite_url}"\n')
    env = os.environ | {"TAPGATE_CONFIG": str(config)}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout.strip().splitlines()[-1])
    assert (
        seen["plain"][0] == 200 and seen["plain"][1] > 0
    )  # the probe sees FastAPI's spans where they are on
    assert seen["tapgate"] == [200, 0]
