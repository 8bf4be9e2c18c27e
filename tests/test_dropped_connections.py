"""A connection dropped before any answer: the clients send a request that is safe to repeat once more.

The gateway is real (`tapgate serve`, uvicorn) with ``keep_alive_seconds`` very short, so it closes every
idle connection almost at once. Which request meets a connection just as it closes is luck; a relay in
front of the gateway (``Cutter``) makes it certain: armed, it closes the connection a chosen request
arrives on before the gateway sees it, exactly what a client meets when the server closes an idle
keep-alive connection as the request goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import pytest

from tapgate.adapters.store.migrate import migrate
from tapgate.client import Client
from tapgate.device.cli import gateway_http
from tapgate.mcp_server.backends import RemoteBackend
from tests.agents import Home
from tests.conftest import blocking
from tests.live import Server, write_config
from tests.world import bearer

KEEP_ALIVE = 0.05  # seconds the gateway keeps an idle connection open


class Cutter:
    """A loopback TCP relay to the gateway. ``cut(prefix)`` arms it: the next request whose first line
    starts with ``prefix`` ends its connection (a close, or a reset) and never reaches the gateway.
    ``sent(prefix)`` counts the requests that started with ``prefix``, cut or relayed."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = upstream_port
        self._armed: tuple[bytes, bool] | None = None
        self._heads: list[bytes] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self, prefix: str, reset: bool = False) -> None:
        self._armed = (prefix.encode(), reset)

    def sent(self, prefix: str) -> int:
        return sum(head.startswith(prefix.encode()) for head in self._heads)

    async def __aenter__(self) -> Cutter:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), timeout=30)

    async def _relay(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        gateway_in, gateway_out = await asyncio.open_connection("127.0.0.1", self._upstream)

        async def answers() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await gateway_in.read(65536):
                    client_out.write(data)
                    await client_out.drain()
            client_out.close()

        back = asyncio.create_task(answers())
        try:
            with contextlib.suppress(ConnectionError):
                while data := await client_in.read(65536):
                    if data[:1].isalpha():  # a request's first line (a body never follows a cut)
                        self._heads.append(data[:200])
                        if self._armed is not None and data.startswith(self._armed[0]):
                            reset = self._armed[1]
                            self._armed = None
                            if reset:
                                client_out.transport.abort()
                            else:
                                client_out.close()
                            return
                    gateway_out.write(data)
                    await gateway_out.drain()
        finally:
            back.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await back
            gateway_out.close()
            client_out.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("dropped")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    started = Server(write_config(folder, url, keep_alive_seconds=KEEP_ALIVE)).start()
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
async def cutter(server: Server) -> AsyncIterator[Cutter]:
    async with Cutter(server.port) as relay:
        yield relay


def _sqlite(server: Server) -> str:
    return f"sqlite:///{server.config.parent / 'tapgate.db'}"


@pytest.fixture
async def ana(server: Server) -> AsyncIterator[Home]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        yield await Home(server.url, client).build(_sqlite(server))


def test_the_gateway_closes_an_idle_connection_after_keep_alive_seconds(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: tapgate\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += s.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        # Nothing more is sent: recv ends with b"" once the gateway closes the idle connection (the
        # socket's 30 s timeout bounds a gateway that never would, far above KEEP_ALIVE).
        while s.recv(65536):
            pass


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
async def test_a_get_whose_connection_drops_before_any_answer_is_sent_once_more(
    ana: Home, cutter: Cutter, reset: bool
) -> None:
    async with Client(cutter.url, ana.agent, timeout=30) as tapgate:
        cutter.cut("GET /v1/tools", reset=reset)
        tools = await tapgate.tools()
    assert any(t["function"]["name"] == "device__desk_lamp__set_light" for t in tools)
    assert cutter.sent("GET /v1/tools") == 2


async def test_a_call_whose_connection_drops_is_sent_again_with_the_same_id_and_made_once(
    ana: Home, cutter: Cutter
) -> None:
    async with Client(cutter.url, ana.agent, timeout=30) as tapgate:
        cutter.cut("POST /v1/invocations")
        call = await tapgate.invoke("device__desk_lamp__set_light", {"on": True})
        assert cutter.sent("POST /v1/invocations") == 2
        assert call.id.startswith("inv_")  # the client's own id: the replay named the same call
        assert (await tapgate.result(call.id)).status == "pending"
    async with httpx.AsyncClient(base_url=ana.url, timeout=30) as http:
        r = await http.get("/v1/device/invocations", headers=bearer(ana.devices["desk-lamp"]))
    assert [c["id"] for c in r.json()["invocations"]] == [call.id]  # one call, not two


async def test_a_post_that_is_not_safe_to_repeat_is_not_sent_again(ana: Home, cutter: Cutter) -> None:
    async with Client(cutter.url, ana.agent, timeout=30) as tapgate:
        await tapgate.put_session("s-1")
        cutter.cut("POST /v1/sessions/s-1/messages")
        with pytest.raises(httpx.RemoteProtocolError):
            await tapgate.record_message("s-1", "ana-phone", ["sms_send"])
    assert cutter.sent("POST /v1/sessions/s-1/messages") == 1


async def test_tapgate_mcp_sends_a_dropped_call_once_more(ana: Home, cutter: Cutter) -> None:
    async with Client(cutter.url, ana.agent, timeout=30) as client:
        backend = RemoteBackend(client)
        cutter.cut("POST /v1/invocations", reset=True)
        call = await backend.invoke("device__desk_lamp__set_light", {"on": False}, wait=0)
        cutter.cut("GET /v1/invocations/")
        again = await backend.result(call.id, wait=0)
    assert again.id == call.id and again.status == "pending"
    assert cutter.sent("POST /v1/invocations") == 2 and cutter.sent("GET /v1/invocations/") == 2


async def test_the_terminal_phone_sends_a_dropped_poll_once_more_and_not_a_heartbeat(
    ana: Home, cutter: Cutter
) -> None:
    phone = bearer(ana.devices["ana-phone"])
    async with gateway_http(cutter.url) as http:
        cutter.cut("GET /v1/inbox")
        r = await http.get("/v1/inbox", headers=phone)
        assert r.status_code == 200, r.text
        assert cutter.sent("GET /v1/inbox") == 2
        cutter.cut("POST /v1/device/heartbeat")
        with pytest.raises(httpx.RemoteProtocolError):
            await http.post("/v1/device/heartbeat", headers=phone)
    assert cutter.sent("POST /v1/device/heartbeat") == 1


async def test_a_gateway_that_closes_idle_connections_at_once_costs_the_client_nothing(
    ana: Home, server: Server
) -> None:
    """No relay: every pause of the client is around the gateway's keep-alive, so some requests go out
    on a connection as the gateway closes it; none fails."""
    async with Client(server.url, ana.agent, timeout=30) as tapgate:
        for i in range(60):
            call = await tapgate.invoke("device__desk_lamp__set_light", {"on": i % 2 == 0})
            await tapgate.result(call.id)
            await anyio.sleep(KEEP_ALIVE * (0.5 + (i % 11) / 10))  # a pause the test is about, not a wait
