"""Every refusal speaks tapgate's words: each body field and query parameter the OpenAPI document declares,
sent with a wrong type, a value out of bounds or a choice that is not one, answers the error shape with a
sentence naming the field, never a library's wording."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.world import LAMP, World, bearer, device_body

LIBRARY_WORDING = re.compile(
    r"Input should|valid (dictionary|string|integer|list|boolean|number)|Value error|Field required|"
    r"Extra inputs|String should|List should|Dictionary should|unable to parse|pydantic|"
    r"\ba [aeiou]\w* (scope|token)\b|\[type=",
    re.IGNORECASE,
)
PATH_VALUES = {
    "user_id": "ana",
    "device_id": "desk-lamp",
    "session_id": "chat-1",
    "pairing_id": "0123456789abcdef",
    "invocation_id": "call-1",
    "approval_id": "apr_0123",
}


@pytest.fixture
async def world(device_api: httpx.AsyncClient) -> World:
    return await World(device_api).start()


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _resolve(spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], spec)
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        return _resolve(options[0], spec) | {k: v for k, v in schema.items() if k != "anyOf"}
    return schema


def _plausible(schema: dict[str, Any]) -> object:
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": "x", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
        schema.get("type", ""), "x"
    )


def _wrong(schema: dict[str, Any]) -> list[object]:
    """Values this field must refuse: the wrong type, then each bound or choice just missed."""
    kind = schema.get("type")
    values: list[object] = [12345 if kind in ("string", None) else "many" if kind != "array" else "x"]
    if kind in ("object", "array") or "anyOf" in schema:
        values.append(True)
    if "enum" in schema:
        values.append("not-one-of-them")
    if "maxLength" in schema:
        values.append("x" * (schema["maxLength"] + 1))
    if "maxItems" in schema:
        values.append(["x"] * (schema["maxItems"] + 1))
    if "maximum" in schema:
        values.append(schema["maximum"] + 1)
    if "minimum" in schema:
        values.append(schema["minimum"] - 1)
    return values


def _cases(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any] | None, dict[str, str], str]]:
    """(method, path, body, query, what is wrong) for every field of every route."""
    cases = []
    for template, operations in spec["paths"].items():
        path = template
        for name, value in PATH_VALUES.items():
            path = path.replace("{" + name + "}", value)
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if content:
                body_schema = _resolve(content["schema"], spec)
                properties = {k: _resolve(v, spec) for k, v in body_schema.get("properties", {}).items()}
                required = set(body_schema.get("required", []))
                base = {k: _plausible(v) for k, v in properties.items() if k in required}
                for name, schema in properties.items():
                    for value in _wrong(schema):
                        cases.append((method, path, base | {name: value}, {}, f"{name}={value!r:.40}"))
            for parameter in operation.get("parameters", []):
                if parameter["in"] != "query":
                    continue
                schema = _resolve(parameter["schema"], spec)
                for value in _wrong(schema):
                    cases.append((method, path, None, {parameter["name"]: str(value)}, parameter["name"]))
    return cases


async def test_no_refusal_of_any_field_uses_a_librarys_wording(world: World) -> None:
    await world.person("ana")
    tokens = {
        "operator": world.operator,
        "user": await world.token("ana", "user"),
        "agent": await world.agent("ana"),
    }
    tokens["device"] = await world.enrol("ana", device_body("desk-lamp", [LAMP], grants=["set_light"]))
    spec = (await world.client.get("/openapi.json")).json()
    cases = _cases(spec)
    assert len(cases) > 100  # every route's every field
    refused = 0
    for method, path, body, query, what in cases:
        for kind, token in tokens.items():
            r = await world.client.request(
                method.upper(), path, json=body, params=query, headers=bearer(token), timeout=10
            )
            if r.status_code < 400:
                continue
            assert r.status_code < 500, (method, path, what, kind, r.text)
            message = r.json()["error"]["message"]
            assert not LIBRARY_WORDING.search(message), (method, path, what, kind, message)
            assert message.endswith((".", ")")), (method, path, what, kind, message)
            refused += r.status_code == 422
    assert refused > 100  # the wrong values did reach validation


async def test_a_scope_of_another_kind_of_token_is_refused_in_plain_words(world: World) -> None:
    await world.person("ana")
    r = await world.client.post(
        "/v1/users/ana/tokens", json={"kind": "agent", "scopes": ["approve"]}, headers=bearer(world.operator)
    )
    assert r.status_code == 422
    assert r.json()["error"]["message"] == (
        "scopes: 'approve' is not a scope of agent tokens; choose from events, notices, tools."
    )
