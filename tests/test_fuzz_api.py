"""Fuzzing the HTTP API of a real gateway on loopback: schemathesis generates requests for every operation
of its OpenAPI (with a token of the kind each route admits, so requests reach the checks behind the
door), and hostile bodies (repeated keys, invalid UTF-8, huge and deep) go to every route with a body.
No answer is a 5xx, and a refused request (4xx) changes nothing: the database reads the same after it,
but for the journal entry a refusal writes, a device's presence mark, and the hand-over mark an earlier
long-poll left to its batch (``services/handed.py``), stamped with that fetch's time."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tapgate.adapters.store.migrate import migrate
from tests.conftest import blocking
from tests.live import Server, write_config
from tests.reliability import new_tenant, report, scaled
from tests.test_authorization_matrix import RULES
from tests.world import LAMP, bearer, device_body

DOOR = LAMP | {"name": "unlock_door", "description": "Unlock the front door.", "confirm": True}
EXAMPLES = scaled(6, 150)
# What a refused request may still write: its refusal's journal entry, a device's presence and a token's
# last use.
VOLATILE = {"audit_entries", "audit_heads", "devices", "credentials"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path, dict[str, str]]]:
    folder = tmp_path_factory.mktemp("fuzz")
    db = folder / "tapgate.db"
    blocking(migrate(f"sqlite:///{db}"))
    server = Server(write_config(folder, f"sqlite:///{db}", max_devices_per_user=1000)).start()
    try:
        _, operator = blocking(new_tenant(f"sqlite:///{db}"))
        tokens = {"operator": operator}
        with httpx.Client(base_url=server.url, headers=bearer(operator)) as c:
            c.post("/v1/users", json={"user_id": "ana"}).raise_for_status()
            for kind in ("user", "agent"):
                tokens[kind] = c.post("/v1/users/ana/tokens", json={"kind": kind}).json()["token"]
            for device_id, caps in (("desk-lamp", [LAMP, {"name": "sms_send"}]), ("front-door", [DOOR])):
                body = device_body(device_id, caps, grants=[c["name"] for c in caps])
                r = c.post("/v1/users/ana/devices", json=body)
                r.raise_for_status()
                tokens.setdefault("device", r.json()["device_token"])
            call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
            c.post("/v1/invocations", json=call, headers=bearer(tokens["agent"])).raise_for_status()
        yield server, db, tokens
    finally:
        server.stop()


def _snapshot(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        snap = {t: sorted(map(repr, conn.execute(f"SELECT * FROM {t}"))) for t in tables if t not in VOLATILE}
        snap["devices"] = sorted(
            map(repr, conn.execute("SELECT tenant_id, device_uid, status, revoked_at FROM devices"))
        )
        snap["credentials"] = sorted(
            map(
                repr,
                conn.execute(
                    "SELECT tenant_id, credential_id, kind, revoked_at, expires_at FROM credentials"
                ),
            )
        )
        snap["journal"] = sorted(
            map(repr, conn.execute("SELECT seq, action FROM audit_entries WHERE action NOT LIKE '%refused'"))
        )
        columns = [r[1] for r in conn.execute("PRAGMA table_info(invocations)") if r[1] != "delivered_at"]
        snap["invocations"] = sorted(map(repr, conn.execute(f"SELECT {', '.join(columns)} FROM invocations")))
        snap["handed"] = dict(conn.execute("SELECT invocation_id, delivered_at FROM invocations"))
    return snap  # type: ignore[return-value]


def _unchanged(before: dict[str, Any], after: dict[str, Any], started: datetime) -> bool:
    """Nothing changed, but for hand-over marks of calls handed before the request began: a long-poll
    notes them and a batch writes them half a second later, stamped with the fetch's time."""

    def rest(snap: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in snap.items() if k != "handed"}

    if rest(after) != rest(before):
        return False
    for invocation_id, mark in after["handed"].items():
        was = before["handed"].get(invocation_id)
        if mark != was and not (was is None and datetime.fromisoformat(mark) < started):
            return False
    return True


def _token_for(method: str, path: str, tokens: dict[str, str]) -> dict[str, str]:
    rule = RULES[(method, path)]
    for kind in ("operator", "user", "agent", "device"):
        if kind in rule.kinds:
            return bearer(tokens[kind])
    return {}


def test_generated_requests_to_every_operation_never_get_a_5xx_and_a_refusal_changes_nothing(
    gateway: tuple[Server, Path, dict[str, str]],
) -> None:
    server, db, tokens = gateway
    spec = httpx.get(server.url + "/openapi.json").json()
    schema = schemathesis.openapi.from_dict(spec)
    counts = {"requests": 0, "refused_unchanged": 0, "operations": 0}
    for result in schema.get_all_operations():
        operation = result.ok()
        method, path = operation.method.upper(), operation.path
        if path == "/v1/events":
            continue  # an event stream never ends; test_authorization_matrix checks its door
        counts["operations"] += 1
        _fuzz(operation, server.url, _token_for(method, path, tokens), db, counts)
    report("fuzz schemathesis", **counts, examples_per_operation=EXAMPLES)
    assert counts["operations"] == len(RULES) - 1


def _fuzz(operation: Any, url: str, headers: dict[str, str], db: Path, counts: dict[str, int]) -> None:
    label = f"{operation.method.upper()} {operation.path}"

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=operation.as_strategy())
    def check(case: Any) -> None:
        before = _snapshot(db)
        started = datetime.now(UTC).replace(tzinfo=None)  # the store keeps UTC without a zone on SQLite
        params = dict(case.query or {})
        if "wait" in params:
            params["wait"] = 0  # a long-poll would only make the run slow
        response = case.call(base_url=url, headers=headers, params=params, timeout=30)
        counts["requests"] += 1
        assert response.status_code < 500, (label, response.text)
        if 400 <= response.status_code < 500:
            after = _snapshot(db)
            assert _unchanged(before, after, started), (label, response.status_code, response.text, after)
            counts["refused_unchanged"] += 1

    check()


HOSTILE = {
    "repeated key": b'{"decision": "approved", "decision": "denied", "user_id": "a", "user_id": "b"}',
    "invalid utf-8": b'{"user_id": "\xff\xfe\xc3\x28"}',
    "lone surrogate": b'{"user_id": "\\ud800"}',
    "deep": b'{"a": ' * 5000 + b"1" + b"}" * 5000,
    "deep array": b"[" * 100_000 + b"]" * 100_000,
    "huge": b'{"user_id": "' + b"a" * 2_000_000 + b'"}',
    "not json": b"\x00\x01\x02",
    "number bomb": b'{"user_id": 1' + b"0" * 100_000 + b"}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_bodies_to_every_route_are_refused_without_a_change(
    gateway: tuple[Server, Path, dict[str, str]], name: str
) -> None:
    server, db, tokens = gateway
    before = _snapshot(db)
    started = datetime.now(UTC).replace(tzinfo=None)
    sent = 0
    with httpx.Client(base_url=server.url, timeout=30) as client:
        spec = client.get("/openapi.json").json()["paths"]
        for method, path in sorted(RULES):
            if "requestBody" not in spec[path].get(method.lower(), {}):
                continue  # a route that reads no body
            url = path.replace("{user_id}", "ana").replace("{device_id}", "desk-lamp")
            url = url.replace("{session_id}", "s1").replace("{pairing_id}", "x").replace("{approval_id}", "x")
            url = url.replace("{invocation_id}", "x")
            headers = _token_for(method, path, tokens) | {"content-type": "application/json"}
            r = client.request(method, url, content=HOSTILE[name], headers=headers)
            sent += 1
            assert 400 <= r.status_code < 500, (name, method, path, r.status_code, r.text[:300])
            assert json.loads(r.text)["error"]["code"]
    assert _unchanged(before, _snapshot(db), started)
    report(f"fuzz hostile body {name}", routes=sent)
