"""tapgate's Python client for agent runtimes: list tools, invoke them, read results, follow the events.

It speaks the HTTP API with an agent token and nothing else: it never imports the server side. An HTTP
error comes back as the class of tapgate's error tree that the server raised (``NotFound``, ``Conflict``,
``RateLimited`` …, with the server's ``code`` and message), so an agent catches the same names the
server documents. Network failures stay ``httpx`` errors, except that a request safe to repeat (a GET, or
``invoke``, which always sends an ``invocation_id`` so that a replay answers the same call) is sent once
more when its connection dropped before any answer, as a stale keep-alive connection does
(``tapgate.dropped``).

    async with Client("http://127.0.0.1:8080", agent_token) as tapgate:
        tools = await tapgate.tools(format="openai")
        call = await tapgate.invoke("device__desk_lamp__set_light", {"on": True}, wait=30)
        if call.open:  # the person has not answered yet
            call = await tapgate.result(call.id, wait=60)
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import httpx

from tapgate import __version__
from tapgate.domain import errors
from tapgate.domain.ids import new_id
from tapgate.dropped import RETRY_DROPPED, RetryDropped
from tapgate.trust import trust, trust_from_environment, untrusted_line

__all__ = ["Client", "Event", "GatewayNotTrusted", "Invocation", "InvocationStatus", "Result"]

InvocationStatus = Literal[
    "pending", "awaiting_approval", "done", "declined", "failed", "expired", "refused", "unavailable"
]
OPEN: frozenset[str] = frozenset({"pending", "awaiting_approval"})
_SLACK = 10.0  # seconds a held request may take beyond its wait before the client gives up on it
_KEEPALIVE = 15.0  # the server's idle interval on the event stream


@dataclass(frozen=True, slots=True)
class Result:
    """What the device answered (or that it did not): text for the model, and the device's own words.
    Always ``trust == "external_untrusted"``: a device's message is third-party data, not instructions."""

    text: str
    message: str | None
    trust: str


@dataclass(frozen=True, slots=True)
class Invocation:
    """The invocation view: one tool call and where it stands."""

    id: str
    tool: str
    status: InvocationStatus
    result: Result | None
    reason: str | None
    created_at: datetime
    resolved_at: datetime | None
    binding_code: str | None = None
    device_online: bool | None = None  # the device has a live link or a push route now
    mandate_id: str | None = None  # the standing mandate it went under, without asking the person

    @property
    def open(self) -> bool:
        """Still waiting for the device or for the person; ``result(id, wait=…)`` gets the answer."""
        return self.status in OPEN

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Invocation:
        result = body.get("result")
        return cls(
            id=str(body["id"]),
            tool=str(body["tool"]),
            status=body["status"],
            result=Result(result["text"], result.get("message"), result["trust"]) if result else None,
            reason=body.get("reason"),
            created_at=datetime.fromisoformat(body["created_at"]),
            resolved_at=datetime.fromisoformat(body["resolved_at"]) if body.get("resolved_at") else None,
            binding_code=body.get("binding_code"),
            device_online=body.get("device_online"),
            mandate_id=body.get("mandate_id"),
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the user's stream; ``id`` is its sequence number, the resume point."""

    id: int
    type: str
    data: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None


_BY_CODE: dict[str, type[errors.TapgateError]] = {
    cls.code: cls
    for cls in (
        errors.InvalidInput,
        errors.MalformedRequest,
        errors.Unauthenticated,
        errors.Forbidden,
        errors.NotFound,
        errors.Conflict,
        errors.Gone,
        errors.TooLarge,
        errors.RateLimited,
        errors.ConfigurationError,
        errors.StorageError,
    )
}
# A code the client does not know (a subclass such as signature_refused) maps by its status's family.
_BY_STATUS: dict[int, type[errors.TapgateError]] = {
    400: errors.MalformedRequest,
    401: errors.Unauthenticated,
    403: errors.Forbidden,
    404: errors.NotFound,
    409: errors.Conflict,
    410: errors.Gone,
    413: errors.TooLarge,
    422: errors.InvalidInput,
    429: errors.RateLimited,
    503: errors.StorageError,
}


def error_from_response(response: httpx.Response) -> errors.TapgateError:
    """The error of tapgate's tree that an HTTP error answer stands for, with the server's code and
    message (and ``retry_after`` for 429)."""
    try:
        body = response.json()["error"]
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", f"tapgate answered HTTP {response.status_code}."
    cls = _BY_CODE.get(code) or _BY_STATUS.get(response.status_code, errors.TapgateError)
    error: errors.TapgateError
    if issubclass(cls, errors.RateLimited):
        retry_after = response.headers.get("Retry-After", "")
        error = cls(message, int(retry_after) if retry_after.isdigit() else 1)
    elif issubclass(cls, errors.MalformedRequest):
        error = cls(message)
    elif issubclass(cls, errors.InvalidInput):
        error = cls("", message)  # the message names the field
    else:
        error = cls(message)
    error.code = code
    return error


class GatewayNotTrusted(httpx.ConnectError):
    """The gateway's certificate is not signed by a CA this client trusts."""


class _NamingUntrusted(httpx.AsyncBaseTransport):
    """A transport whose certificate failures say what they are and what to pass."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self._inner.handle_async_request(request)
        except httpx.ConnectError as e:
            line = untrusted_line(e)
            if line is None:
                raise
            raise GatewayNotTrusted(line, request=request) from e

    async def aclose(self) -> None:
        await self._inner.aclose()


class Client:
    """An agent's connection to a tapgate gateway. Use it as an async context manager, or call
    ``aclose()``. ``verify`` is what https is checked against: ``True`` (the system's CAs), the path of a
    CA file (PEM, e.g. the ``ca.pem`` of ``tapgate tls init``), or an ``ssl.SSLContext``; left out, the CA
    file named by TAPGATE_CA_FILE if set. A certificate it does not trust raises GatewayNotTrusted (an
    ``httpx.ConnectError``) saying so. ``transport``
    replaces the network (``httpx.ASGITransport`` or a mock) in tests; either way a request safe to repeat
    is sent once more when its connection dropped before any answer."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        max_backoff: float = 10.0,
        verify: bool | str | ssl.SSLContext | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._timeout = timeout
        self._max_backoff = max_backoff
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {token}", "User-Agent": f"tapgate-client/{__version__}"},
            timeout=timeout,
            transport=RetryDropped(
                transport
                or _NamingUntrusted(
                    httpx.AsyncHTTPTransport(
                        verify=trust_from_environment()
                        if verify is None
                        else trust(verify)
                        if isinstance(verify, str)
                        else verify
                    )
                )
            ),
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _json(self, method: str, path: str, *, wait: float = 0, **kwargs: Any) -> Any:
        timeout = httpx.Timeout(self._timeout, read=max(self._timeout, wait + _SLACK))
        response = await self._http.request(method, path, timeout=timeout, **kwargs)
        if response.is_error:
            raise error_from_response(response)
        return response.json() if response.content else None

    async def tools(
        self, session_id: str | None = None, format: Literal["openai", "mcp"] = "openai"
    ) -> list[dict[str, Any]]:
        """The tools this agent may call now, as OpenAI functions or MCP tools. Raises NotFound for an
        unknown session."""
        params = {"format": format} | ({"session_id": session_id} if session_id else {})
        return list((await self._json("GET", "/v1/tools", params=params))["tools"])

    async def invoke(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        invocation_id: str | None = None,
        run_id: str | None = None,
        origin: Literal["owner", "untrusted"] = "owner",
        shadow: bool = False,
        wait: float = 0,
        if_offline: Literal["wait", "fail"] = "wait",
    ) -> Invocation:
        """Call a tool through tapgate's checks, holding up to ``wait`` seconds for the answer.
        ``if_offline="fail"`` answers ``unavailable`` at once when the device is offline.

        A refusal is not an exception: it is an invocation whose status is ``refused`` or ``unavailable``
        with the ``reason`` to show the model. Raises InvalidInput (a bad call shape), Conflict (an
        ``invocation_id`` reused with other arguments), Unauthenticated, Forbidden.

        Without an ``invocation_id`` the client makes one, so the call is idempotent: sent again after a
        dropped connection, it answers the same call rather than making a second.
        """
        body: dict[str, Any] = {
            "tool": tool,
            "arguments": dict(arguments or {}),
            "origin": origin,
            "shadow": shadow,
            "wait": wait,
        }
        body["invocation_id"] = invocation_id or new_id("inv")
        if if_offline != "wait":
            body["if_offline"] = if_offline
        extra = {"session_id": session_id, "run_id": run_id}
        body |= {key: value for key, value in extra.items() if value is not None}
        answer = await self._json(
            "POST", "/v1/invocations", json=body, wait=wait, extensions={RETRY_DROPPED: True}
        )
        return Invocation.from_json(answer)

    async def result(self, invocation_id: str, wait: float = 0) -> Invocation:
        """The invocation as it stands, waiting up to ``wait`` seconds for its answer. Raises NotFound."""
        path = f"/v1/invocations/{invocation_id}"
        return Invocation.from_json(await self._json("GET", path, params={"wait": wait}, wait=wait))

    async def request_mandate(
        self,
        tools: Sequence[str],
        *,
        max_calls: int,
        expires_in_seconds: int,
        purpose: str,
        constraints: Mapping[str, Mapping[str, Any]] | None = None,
        per_day: int | None = None,
        any_agent: bool = False,
    ) -> dict[str, Any]:
        """Ask the person for a standing mandate: calls to ``tools`` inside these bounds then go through
        without an approval each, once the person signs it on their phone. ``constraints`` maps a
        parameter to ``{"equals": v}``, ``{"one_of": [...]}``, ``{"matches": regex}``, ``{"max": n}`` or
        ``{"max_length": n}``. Answers ``{mandate_id, status: "awaiting_signature", approval_id}``; read it
        again with ``mandate()``. Raises InvalidInput with the reason for bounds out of range, Conflict
        when the person has no device that approves for them."""
        body: dict[str, Any] = {
            "tools": list(tools),
            "max_calls": max_calls,
            "expires_in_seconds": expires_in_seconds,
            "purpose": purpose,
            "constraints": {k: dict(v) for k, v in (constraints or {}).items()},
        }
        if per_day is not None:
            body["per_day"] = per_day
        if any_agent:
            body["agent_id"] = None
        return dict(await self._json("POST", "/v1/mandates", json=body))

    async def mandate(self, mandate_id: str) -> dict[str, Any]:
        """A mandate with its ``status`` (awaiting_signature, active, exhausted, expired, revoked, denied),
        ``used`` and ``used_today``. Raises NotFound."""
        return dict(await self._json("GET", f"/v1/mandates/{mandate_id}"))

    async def put_session(
        self, session_id: str, kind: Literal["chat", "schedule", "subagent"] = "chat", attended: bool = True
    ) -> dict[str, Any]:
        """Create or update a session (the conversation, as tapgate knows it)."""
        body = {"kind": kind, "attended": attended}
        return dict((await self._json("PUT", f"/v1/sessions/{session_id}", json=body))["session"])

    async def record_message(
        self, session_id: str, device_id: str | None = None, capabilities: Sequence[str] = ()
    ) -> bool:
        """Record which device a session's latest message came from and what it could do; whether
        ``phone_action`` is now offered in the session."""
        body = {"device_id": device_id, "capabilities": list(capabilities)}
        answer = await self._json("POST", f"/v1/sessions/{session_id}/messages", json=body)
        return bool(answer["phone_action"])

    async def events(self, after: int | None = None) -> AsyncIterator[Event]:
        """The user's events after ``after`` (from the first when None), then new ones as they happen.

        A dropped stream is reopened with ``Last-Event-ID`` after a back-off that doubles up to
        ``max_backoff`` seconds, so no event is missed and none repeats. An HTTP error other than a 5xx
        (a bad token, a missing ``events`` scope) is raised, not retried, as is GatewayNotTrusted.
        """
        last = after
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last is not None:
                headers["Last-Event-ID"] = str(last)
            timeout = httpx.Timeout(self._timeout, read=max(self._timeout, 3 * _KEEPALIVE))
            retry: float | None = None
            try:
                async with self._http.stream(
                    "GET", "/v1/events", headers=headers, timeout=timeout
                ) as response:
                    if response.is_error:
                        await response.aread()
                        if response.status_code < 500:
                            raise error_from_response(response)
                    else:
                        async for event, hint in _parse_sse(response.aiter_lines()):
                            retry = hint
                            if event is None:
                                continue
                            failures = 0
                            if last is not None and event.id <= last:
                                continue  # never hand out an event twice, whatever a server resends
                            last = event.id
                            yield event
            except GatewayNotTrusted:
                raise  # trying again would never help
            except (httpx.TransportError, httpx.RemoteProtocolError):
                pass
            failures += 1
            await asyncio.sleep(_backoff(failures, retry, self._max_backoff))


def _backoff(failures: int, retry: float | None, cap: float) -> float:
    base = retry if retry is not None else 0.5
    return float(min(cap, base * 2 ** (failures - 1)) * random.uniform(0.8, 1.0))


async def _parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[Event | None, float | None]]:
    """Server-Sent Events, one dispatched event at a time, with the server's ``retry`` hint (seconds)."""
    retry: float | None = None
    event_id: str | None = None
    kind = "message"
    data: list[str] = []
    async for line in lines:
        if line == "":
            if data and event_id is not None and event_id.isdigit():
                payload = json.loads("\n".join(data))
                created = payload.pop("created_at", None)
                payload.pop("type", None)
                yield (
                    Event(int(event_id), kind, payload, datetime.fromisoformat(created) if created else None),
                    retry,
                )
            else:
                yield None, retry
            event_id, kind, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event_id = value
        elif name == "event":
            kind = value
        elif name == "data":
            data.append(value)
        elif name == "retry" and value.isdigit():
            retry = int(value) / 1000
