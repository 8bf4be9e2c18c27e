"""Bad input gets Appendix A's error shape with the field named: never a 500, never a stack trace."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


@pytest.fixture
async def operator(api: httpx.AsyncClient) -> dict[str, str]:
    token = (await api.app.state.gateway.create_tenant("acme")).token  # type: ignore[attr-defined]
    return {"Authorization": f"Bearer {token}"}


def _error(r: httpx.Response, status: int) -> dict[str, str]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert "Traceback" not in r.text
    return body["error"]


async def test_malformed_json_is_400(api: httpx.AsyncClient, operator: dict[str, str]) -> None:
    r = await api.post(
        "/v1/users", content=b'{"user_id": "ana",', headers=operator | {"content-type": "application/json"}
    )
    assert _error(r, 400)["code"] == "malformed"


@pytest.mark.parametrize("body", ["[]", "7", '"ana"', "null"])
async def test_a_body_that_is_not_an_object_is_400(
    api: httpx.AsyncClient, operator: dict[str, str], body: str
) -> None:
    r = await api.post(
        "/v1/users", content=body.encode(), headers=operator | {"content-type": "application/json"}
    )
    assert _error(r, 400)["message"] == "The body must be a JSON object."


async def test_an_unknown_field_is_422_naming_it(api: httpx.AsyncClient, operator: dict[str, str]) -> None:
    r = await api.post("/v1/users", json={"user_id": "ana", "is_admin": True}, headers=operator)
    error = _error(r, 422)
    assert error["code"] == "invalid"
    assert "is_admin" in error["message"]


async def test_a_missing_field_is_422_naming_it(api: httpx.AsyncClient, operator: dict[str, str]) -> None:
    r = await api.post("/v1/users", json={"display_name": "Ana"}, headers=operator)
    assert _error(r, 422)["message"] == "user_id is required."


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user_id": 7}, "user_id"),
        ({"user_id": "ana", "display_name": ["A"]}, "display_name"),
        ({"user_id": "Ana Smith"}, "user_id"),
        ({"user_id": "ana", "display_name": "Ana\u202e"}, "display_name"),
        ({"user_id": "a" * 41}, "user_id"),
    ],
)
async def test_a_wrong_type_or_shape_is_422_naming_the_field(
    api: httpx.AsyncClient, operator: dict[str, str], body: dict[str, object], field: str
) -> None:
    r = await api.post("/v1/users", json=body, headers=operator)
    assert _error(r, 422)["message"].startswith(field)


async def test_a_token_kind_outside_the_list_is_422(api: httpx.AsyncClient, operator: dict[str, str]) -> None:
    await api.post("/v1/users", json={"user_id": "ana"}, headers=operator)
    r = await api.post("/v1/users/ana/tokens", json={"kind": "root"}, headers=operator)
    assert _error(r, 422)["message"].startswith("kind")


async def test_a_second_user_with_the_same_id_is_409(
    api: httpx.AsyncClient, operator: dict[str, str]
) -> None:
    assert (await api.post("/v1/users", json={"user_id": "ana"}, headers=operator)).status_code == 201
    r = await api.post("/v1/users", json={"user_id": "ana"}, headers=operator)
    assert _error(r, 409)["code"] == "conflict"


async def test_an_oversize_body_is_413_whether_announced_or_streamed(
    api: httpx.AsyncClient, operator: dict[str, str]
) -> None:
    big = json.dumps({"user_id": "ana", "display_name": "x" * 70_000}).encode()
    r = await api.post("/v1/users", content=big, headers=operator | {"content-type": "application/json"})
    assert _error(r, 413)["code"] == "too_large"

    async def chunks():  # no Content-Length: the limit counts what arrives
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    r = await api.post("/v1/users", content=chunks(), headers=operator | {"content-type": "application/json"})
    assert _error(r, 413)["code"] == "too_large"


async def test_a_bad_query_parameter_is_422_naming_it(
    api: httpx.AsyncClient, operator: dict[str, str]
) -> None:
    assert _error(await api.get("/v1/audit?limit=lots", headers=operator), 422)["message"].startswith("limit")
    assert _error(await api.get("/v1/audit?limit=0", headers=operator), 422)["message"].startswith("limit")
    assert _error(await api.get("/v1/audit?after=-1", headers=operator), 422)["message"].startswith("after")


async def test_unknown_paths_and_methods_answer_the_error_shape(api: httpx.AsyncClient) -> None:
    assert _error(await api.get("/v1/nothing-here"), 404)["code"] == "not_found"
    assert _error(await api.delete("/v1/users"), 405)["code"] == "method_not_allowed"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
bodies = json_values | st.fixed_dictionaries(
    {"user_id": json_values},
    optional={"display_name": json_values, "kind": json_values, "scopes": json_values},
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies, path=st.sampled_from(["/v1/users", "/v1/users/ana/tokens"]))
async def test_no_body_makes_the_api_fail(
    api: httpx.AsyncClient, operator: dict[str, str], body: object, path: str
) -> None:
    r = await api.post(path, json=body, headers=operator)
    assert r.status_code in (201, 400, 404, 409, 422), r.text
    if r.status_code >= 400:
        _error(r, r.status_code)


async def test_a_number_past_what_the_database_holds_is_422_not_a_crash(
    api: httpx.AsyncClient, operator: dict[str, str]
) -> None:
    r = await api.get(f"/v1/audit?after={2**70}", headers=operator)
    assert _error(r, 422)["message"].startswith("after")
