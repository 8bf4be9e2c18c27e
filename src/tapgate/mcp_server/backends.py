"""Where an MCP session's tools come from: the gateway in this process (``/mcp``), or a running gateway
over HTTP through the Python client (``tapgate mcp``). Both give the same four things."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Protocol

import anyio
import httpx
from anyio.abc import TaskStatus

from tapgate.client import Client, Invocation
from tapgate.device.reaching import unreachable
from tapgate.domain.errors import GatewayUnreachable, TapgateError
from tapgate.domain.events import TOOLS_CHANGED
from tapgate.domain.mandates import Mandate
from tapgate.domain.principals import Principal
from tapgate.domain.tools import ToolFormat
from tapgate.gateway import Gateway
from tapgate.services.invoking import Call

log = logging.getLogger(__name__)

OnChange = Callable[[], Awaitable[None]]

# The console's page of what waits for the person: where a client that can open a page sends them.
APPROVALS_PAGE = "/console/approvals"


class Backend(Protocol):
    @property
    def approvals_page(self) -> str:
        """The console's approvals page, as the person at the desk opens it."""

    async def tools(self) -> list[dict[str, Any]]:
        """The caller's tools in MCP format. Raises TapgateError."""

    async def invoke(self, tool: str, arguments: Mapping[str, Any], wait: float) -> Invocation:
        """One call through the check chain, held up to ``wait`` seconds. Raises TapgateError."""

    async def result(self, invocation_id: str, wait: float) -> Invocation:
        """An earlier call's view, waiting up to ``wait`` seconds for its answer. Raises NotFound."""

    async def request_mandate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Ask the person for a standing mandate; ``{mandate_id, status, approval_id}``. Raises
        TapgateError."""

    async def mandate(self, mandate_id: str) -> dict[str, Any]:
        """A mandate the caller asked for, as ``request_mandate`` answers it. Raises NotFound."""

    async def watch_tools(
        self, on_change: OnChange, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Await ``on_change()`` each time the tool list differs from the last one, until cancelled;
        ``task_status`` is started once the list to compare against has been read."""


class LocalBackend:
    """The gateway in this process, acting for the caller the HTTP request authenticated."""

    def __init__(self, gateway: Gateway, caller: Principal, session_id: str | None = None) -> None:
        self._gateway = gateway
        self._caller = caller
        self._session_id = session_id

    @property
    def approvals_page(self) -> str:
        return self._gateway.public_url.rstrip("/") + APPROVALS_PAGE

    async def tools(self) -> list[dict[str, Any]]:
        return await self._gateway.tools(self._caller, self._session_id, ToolFormat.MCP)

    async def invoke(self, tool: str, arguments: Mapping[str, Any], wait: float) -> Invocation:
        call = Call(tool=tool, arguments=arguments, session_id=self._session_id)
        return Invocation.from_json((await self._gateway.invoke(self._caller, call, wait)).as_dict())

    async def result(self, invocation_id: str, wait: float) -> Invocation:
        return Invocation.from_json(
            (await self._gateway.invocation(self._caller, invocation_id, wait)).as_dict()
        )

    async def request_mandate(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._answer(await self._gateway.request_mandate(self._caller, body))

    async def mandate(self, mandate_id: str) -> dict[str, Any]:
        return self._answer(await self._gateway.mandate(self._caller, mandate_id))

    def _answer(self, mandate: Mandate) -> dict[str, Any]:
        status = mandate.status_at(self._gateway.clock.now()).value
        return {"mandate_id": mandate.mandate_id, "status": status, "approval_id": mandate.approval_id}

    async def watch_tools(
        self, on_change: OnChange, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        lists = self._gateway.tool_changes(self._caller, self._session_id, ToolFormat.MCP)
        started = False
        async for _ in lists:  # the first is the list now, each later one a change
            if started:
                await on_change()
            else:
                started = True
                task_status.started()


@contextlib.contextmanager
def _reaching(url: str) -> Iterator[None]:
    try:
        yield
    except httpx.HTTPError as e:
        raise GatewayUnreachable(unreachable(url, e)) from e


def _mandate_answer(view: Mapping[str, Any]) -> dict[str, Any]:
    return {key: view.get(key) for key in ("mandate_id", "status", "approval_id")}


class RemoteBackend:
    """A running gateway over HTTP, with the agent token the Python client carries. A gateway that
    does not answer is GatewayUnreachable, a TapgateError like every other failure."""

    def __init__(self, client: Client, session_id: str | None = None) -> None:
        self._client = client
        self._session_id = session_id

    @property
    def approvals_page(self) -> str:
        """Under the URL ``tapgate mcp`` was given: the desk it runs on reaches the gateway there."""
        return self._client.url + APPROVALS_PAGE

    async def tools(self) -> list[dict[str, Any]]:
        with _reaching(self._client.url):
            return await self._client.tools(self._session_id, format="mcp")

    async def invoke(self, tool: str, arguments: Mapping[str, Any], wait: float) -> Invocation:
        with _reaching(self._client.url):
            return await self._client.invoke(tool, arguments, session_id=self._session_id, wait=wait)

    async def result(self, invocation_id: str, wait: float) -> Invocation:
        with _reaching(self._client.url):
            return await self._client.result(invocation_id, wait)

    async def request_mandate(self, body: dict[str, Any]) -> dict[str, Any]:
        with _reaching(self._client.url):
            answer = await self._client.request_mandate(
                body["tools"],
                max_calls=body["max_calls"],
                expires_in_seconds=body["expires_in_seconds"],
                purpose=body["purpose"],
                constraints=body.get("constraints"),
                per_day=body.get("per_day"),
                any_agent="agent_id" in body,
            )
        return _mandate_answer(answer)

    async def mandate(self, mandate_id: str) -> dict[str, Any]:
        with _reaching(self._client.url):
            return _mandate_answer(await self._client.mandate(mandate_id))

    async def watch_tools(
        self, on_change: OnChange, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow the gateway's event stream; a ``tools.changed`` event makes it list again (a burst of
        them, as when the stream replays its history, is one listing)."""
        changed_send, changed = anyio.create_memory_object_stream[None](1)

        async def follow() -> None:
            try:
                async for event in self._client.events():
                    if event.type == TOOLS_CHANGED:
                        with contextlib.suppress(anyio.WouldBlock):
                            changed_send.send_nowait(None)
            except TapgateError as e:
                log.warning("the tool list will not be watched", extra={"reason": e.code})

        last = await self.tools()
        async with changed_send, changed, anyio.create_task_group() as tg:
            tg.start_soon(follow)
            task_status.started()
            async for _ in changed:
                try:
                    current = await self.tools()
                except TapgateError as e:
                    log.warning("the tool list could not be read", extra={"error": type(e).__name__})
                    continue
                if current != last:
                    last = current
                    await on_change()
