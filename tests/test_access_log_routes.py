"""The access log and the request metrics name the route of every request, the browser app's files too."""

from __future__ import annotations

import logging

import httpx
import pytest


async def test_the_browser_apps_files_are_logged_and_counted_under_their_mount(
    device_api: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tapgate.access")
    for path in ("/app/", "/app/app.js", "/app/icon-192.png"):
        assert (await device_api.get(path)).status_code == 200, path
    assert (await device_api.get("/no/such/path")).status_code == 404
    routes = [getattr(r, "route", None) for r in caplog.records if r.name == "tapgate.access"]
    assert routes == ["/app/{path}", "/app/{path}", "/app/{path}", "unmatched"]
    metrics = (await device_api.get("/metrics")).text
    assert 'tapgate_http_requests_total{method="GET",route="/app/{path}",status="200"} 3.0' in metrics
