"""Wakes over NATS against the real server: published after commit on per-tenant subjects, received by
another gateway's waiters, a lost wake recovered by the sweep, a lost connection failing safe (every link
re-checks its credential on the sweep), the server's credentials used and a wrong one refused, and a
broker that is not there at start refused in one line naming nats_url."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import nkeys
import pytest
import websockets
from nats.aio.client import Client
from websockets.asyncio.client import ClientConnection

from tapgate.adapters.store.sql import open_sql_store
from tapgate.adapters.wake.nats_wake import NatsCredentials, NatsWake, check_reachable
from tapgate.adapters.wake.postgres import CHANNEL
from tapgate.config import load_settings
from tapgate.domain.errors import ConfigurationError
from tests.conftest import PostgresDatabase, tenant_name
from tests.live import Server, free_port, new_tenant, tapgate, write_config
from tests.natsserver import PrivateNats, reachable_nats_url
from tests.test_tls import self_signed
from tests.world import LAMP, bearer, device_body

BOUND = 10.0  # seconds: generous, the machine is shared


@pytest.fixture(scope="session")
def nats_url() -> str:
    return reachable_nats_url()


@contextlib.asynccontextmanager
async def started(
    url: str, poll_seconds: float = 30.0, credentials: NatsCredentials | None = None
) -> AsyncIterator[NatsWake]:
    wake = NatsWake(url, poll_seconds, credentials)
    await wake.start()
    try:
        yield wake
    finally:
        await wake.close()


async def test_a_wake_published_after_commit_wakes_a_waiter_of_another_gateway(
    nats_url: str, sqlite_url: str
) -> None:
    tenant = tenant_name()
    key = f"{tenant}:invocation:inv_1"
    async with started(nats_url) as here, started(nats_url) as there:
        store = open_sql_store(sqlite_url, wake=here, database_notify=False)
        try:
            with there.subscribe(key) as woken:
                async with store.unit_of_work(tenant) as uow:
                    uow.notify(key)
                    await asyncio.sleep(0)  # the transaction is still open: nothing is sent yet
                    assert here.published == 0
                    assert not woken.is_set()
                await asyncio.wait_for(woken.wait(), timeout=BOUND)
        finally:
            await store.close()
    assert here.published == 1


async def test_a_wake_goes_out_on_its_tenants_subject_with_the_key_as_payload(nats_url: str) -> None:
    tenant = tenant_name()
    watcher = Client()
    await watcher.connect(nats_url)
    try:
        subscription = await watcher.subscribe(f"tapgate.wake.{tenant}.>")
        await watcher.flush()
        async with started(nats_url) as wake:
            wake.notify(f"{tenant}:inbox:ana")
            message = await subscription.next_msg(timeout=BOUND)
        assert message.subject == f"tapgate.wake.{tenant}.inbox"
        assert message.data == f"{tenant}:inbox:ana".encode()
    finally:
        await watcher.close()


async def test_a_lost_wake_is_recovered_by_the_sweep_within_the_poll_interval(nats_url: str) -> None:
    tenant = tenant_name()
    async with started(nats_url, poll_seconds=0.2) as wake:
        with wake.subscribe(f"{tenant}:invocation:inv_1") as woken:
            # Nobody publishes (the writer died between its commit and its publish): the sweep wakes the
            # waiter, which re-reads the row.
            await asyncio.wait_for(woken.wait(), timeout=BOUND)


async def test_a_device_link_is_not_woken_by_the_sweep(nats_url: str) -> None:
    tenant = tenant_name()
    async with started(nats_url, poll_seconds=0.05) as wake:
        with (
            wake.subscribe(f"{tenant}:device:lamp") as long_poll,
            # A live link also waits on its person's inbox and notices, unswept.
            wake.subscribe(f"{tenant}:device:lamp", swept=False) as link,
            wake.subscribe(f"{tenant}:inbox:ana", swept=False) as link_inbox,
            wake.subscribe(f"{tenant}:inbox:ana") as inbox_long_poll,
            wake.subscribe(f"{tenant}:events:ana") as events,
        ):
            for _ in range(3):  # three sweeps
                events.clear()
                await asyncio.wait_for(events.wait(), timeout=BOUND)
            assert inbox_long_poll.is_set()  # an inbox long-poll is swept like any other waiter
            assert not long_poll.is_set() and not link.is_set() and not link_inbox.is_set()
            wake.notify(f"{tenant}:inbox:ana")  # a real notification still wakes the link
            assert link_inbox.is_set()


async def test_keys_notified_before_start_are_sent_when_a_command_closes(nats_url: str) -> None:
    """`tapgate device revoke` and friends build a gateway they never start: their wakes still go out."""
    tenant = tenant_name()
    key = f"{tenant}:auth"
    async with started(nats_url) as server:
        with server.subscribe(key) as woken:
            command = NatsWake(nats_url, 30.0)
            command.notify(key)
            await command.close()
            await asyncio.wait_for(woken.wait(), timeout=BOUND)


@pytest.mark.postgres
async def test_no_notify_is_issued_in_postgresql_with_the_nats_wake(
    nats_url: str, postgres: PostgresDatabase
) -> None:
    tenant = tenant_name()
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(postgres.admin_url)
    await listener.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
    async with started(nats_url) as wake:
        over_nats = open_sql_store(postgres.app_url, wake=wake, database_notify=False)
        over_postgres = open_sql_store(postgres.app_url)
        try:
            async with over_nats.unit_of_work(tenant) as uow:
                uow.notify(f"{tenant}:events:ana")
            async with over_postgres.unit_of_work(tenant) as uow:
                uow.notify(f"{tenant}:marker")
            # NOTIFY is delivered in commit order: the first thing heard is the later transaction's.
            payload = await asyncio.wait_for(heard.get(), timeout=BOUND)
            assert payload == f"{over_postgres.origin} {tenant}:marker"
        finally:
            await over_nats.close()
            await over_postgres.close()
            await listener.close()


async def test_a_nats_server_that_does_not_answer_at_start_is_a_configuration_error() -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigurationError) as refused:
        await check_reachable(url)
    assert f"nats_url {url}" in refused.value.message
    with pytest.raises(ConfigurationError):
        await NatsWake(url, 1.0).start()


def test_serve_refuses_an_unreachable_nats_in_one_line_naming_nats_url(
    sqlite_url: str, tmp_path: Path
) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    config = write_config(tmp_path, sqlite_url, wake="nats", nats_url=url)
    done = tapgate("serve", "--config", str(config), "--port", str(free_port()))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"nats_url {url}" in line


def test_the_nats_url_is_named_without_its_password(sqlite_url: str, tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, sqlite_url, wake="nats", nats_url=f"nats://app:s3cret@127.0.0.1:{port}")
    done = tapgate("serve", "--config", str(config), "--port", str(free_port()))
    assert done.returncode == 1
    assert "s3cret" not in done.stderr
    assert f"nats://127.0.0.1:{port}" in done.stderr


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"wake": "redis"}, "wake is one of local, postgres, nats (got 'redis')"),
        ({"wake": "postgres"}, 'wake = "postgres" needs a PostgreSQL database_url'),
        ({"wake": "nats", "nats_url": "http://127.0.0.1:4222"}, "nats_url is a nats:// (or tls://) URL"),
        ({"nats_user": "tapgate"}, "nats_user and nats_password go together"),
        ({"nats_token": "t", "nats_nkey_seed_file": "a.nk"}, "NATS takes one way in"),
        ({"nats_tls_cert_file": "client.pem"}, "nats_tls_cert_file and nats_tls_key_file go together"),
    ],
)
def test_a_wake_setting_that_cannot_work_is_refused_naming_it(
    tmp_path: Path, settings: dict[str, str], reason: str
) -> None:
    config = write_config(tmp_path, f"sqlite:///{tmp_path / 'tapgate.db'}", **settings)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(str(config))
    assert reason in refused.value.message


def test_the_wake_defaults_to_local_on_sqlite_and_postgres_on_postgresql(tmp_path: Path) -> None:
    on_sqlite = load_settings(str(write_config(tmp_path, f"sqlite:///{tmp_path / 'tapgate.db'}")))
    assert on_sqlite.wake_kind == "local"
    on_postgres = load_settings(str(write_config(tmp_path, "postgresql://tapgate@127.0.0.1/tapgate")))
    assert on_postgres.wake_kind == "postgres"


async def test_a_lost_nats_connection_degrades_the_wake_logs_once_and_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = PrivateNats(tmp_path).start()
    try:
        async with started(server.url) as wake, started(server.url) as other:
            tenant = tenant_name()
            with wake.subscribe(f"{tenant}:events:ana") as woken:
                server.kill()
                await _until(lambda: wake.degraded, "the wake never noticed NATS was gone")
                assert wake.degraded  # waiters re-read on the poll interval, the token cache is bypassed
                server.start()  # the same port: nats-py reconnects by itself
                await _until(lambda: not wake.degraded and not other.degraded, "no reconnection")
                assert woken.is_set()  # whatever happened meanwhile: every waiter re-reads once
                woken.clear()
                other.notify(f"{tenant}:events:ana")  # and wakes flow again
                await asyncio.wait_for(woken.wait(), timeout=BOUND)
    finally:
        server.kill()
    lost = [r for r in caplog.records if r.getMessage().startswith("nats connection lost")]
    back = [r for r in caplog.records if r.getMessage() == "nats connection back"]
    assert len(lost) == 2 and len(back) == 2  # once per wake, however many attempts it took


async def _until(condition: Callable[[], bool], why: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not condition():
        assert loop.time() < deadline, why
        await asyncio.sleep(0.05)


POLL = 1.0  # the gateways' invocation_poll_seconds in the lost-bus test


@pytest.mark.postgres
async def test_with_nats_lost_a_device_removed_on_one_gateway_is_unlinked_on_another_within_the_poll(
    tmp_path: Path, postgres: PostgresDatabase
) -> None:
    nats = PrivateNats(tmp_path).start()
    config = write_config(
        tmp_path, postgres.app_url, wake="nats", nats_url=nats.url, invocation_poll_seconds=POLL
    )
    a, b = Server(config), Server(config)
    try:
        a.start()
        b.start()
        operator = await new_tenant(postgres.app_url)
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=30) as on_a,
            httpx.AsyncClient(base_url=b.url, timeout=30) as on_b,
        ):
            assert (
                await on_a.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))
            ).is_success
            body = device_body("desk-lamp", [LAMP], grants=["set_light"])
            enrolled = (await on_a.post("/v1/users/ana/devices", json=body, headers=bearer(operator))).json()
            lamp = enrolled["device_token"]
            assert (
                await on_b.get("/v1/device/invocations", headers=bearer(lamp))
            ).status_code == 200  # cached
            link = await websockets.connect(
                b.url.replace("http", "ws") + "/v1/device/connect",
                additional_headers=bearer(lamp),
                compression=None,
            )
            try:
                agent = await on_a.post(
                    "/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(operator)
                )
                call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
                assert (
                    await on_a.post("/v1/invocations", json=call, headers=bearer(agent.json()["token"]))
                ).is_success
                frame = json.loads(await asyncio.wait_for(link.recv(), timeout=BOUND))
                assert frame["type"] == "device:invoke"  # the link has read what it had to: it is idle now
                nats.kill()
                await _until(
                    lambda: all("serving on the sweep" in s.logs() for s in (a, b)), "NATS never lost"
                )
                loop = asyncio.get_running_loop()
                removed = loop.time()
                r = await on_a.delete(
                    f"/v1/users/ana/devices/{enrolled['device']['device_id']}", headers=bearer(operator)
                )
                assert r.status_code == 204, r.text
                # The token cache of b does not trust what it holds while wakes may be missed.
                assert (await on_b.get("/v1/device/invocations", headers=bearer(lamp))).status_code == 401
                frames = await asyncio.wait_for(_until_closed(link), timeout=POLL + BOUND)
                closed = loop.time() - removed
            finally:
                await link.close()
        assert frames[-1]["type"] == "device:revoked", frames
        assert closed < POLL + BOUND
        print(f"\nlost bus: link on the other gateway closed {closed:.3f} s after the removal")  # noqa: T201
    finally:
        a.stop()
        b.stop()
        nats.kill()


async def _idle_link(
    client: httpx.AsyncClient, gateway: Server, operator: str
) -> tuple[str, str, ClientConnection]:
    """ana's lamp linked to ``gateway`` and idle there (it has read its one call): its id, its token and
    its link."""
    assert (await client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator))).is_success
    body = device_body("desk-lamp", [LAMP], grants=["set_light"])
    enrolled = (await client.post("/v1/users/ana/devices", json=body, headers=bearer(operator))).json()
    lamp = enrolled["device_token"]
    link = await websockets.connect(
        gateway.url.replace("http", "ws") + "/v1/device/connect",
        additional_headers=bearer(lamp),
        compression=None,
    )
    agent = await client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(operator))
    call = {"tool": "device__desk_lamp__set_light", "arguments": {"on": True}}
    assert (await client.post("/v1/invocations", json=call, headers=bearer(agent.json()["token"]))).is_success
    frame = json.loads(await asyncio.wait_for(link.recv(), timeout=BOUND))
    assert frame["type"] == "device:invoke"  # the link has read what it had to: it is idle now
    return enrolled["device"]["device_id"], lamp, link


@pytest.mark.postgres
async def test_with_nats_lost_and_the_database_away_a_link_is_kept_and_never_told_it_was_removed(
    tmp_path: Path, postgres: PostgresDatabase
) -> None:
    nats = PrivateNats(tmp_path).start()
    config = write_config(
        tmp_path, postgres.app_url, wake="nats", nats_url=nats.url, invocation_poll_seconds=POLL
    )
    gateway = Server(config)
    try:
        gateway.start()
        operator = await new_tenant(postgres.app_url)
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
            device_id, _, link = await _idle_link(client, gateway, operator)
            try:
                nats.kill()
                await _until(lambda: "serving on the sweep" in gateway.logs(), "NATS never lost")
                admin = await asyncpg.connect(postgres.admin_url)
                try:
                    await admin.execute(f"ALTER ROLE {postgres.role} NOLOGIN")
                    await admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
                        postgres.role,
                    )
                    # Three sweeps wake the link while its device cannot be read: it hears nothing.
                    with pytest.raises(TimeoutError):
                        await asyncio.wait_for(link.recv(), timeout=POLL * 3)
                finally:
                    await admin.execute(f"ALTER ROLE {postgres.role} LOGIN")
                    await admin.close()
                r = await client.delete(f"/v1/users/ana/devices/{device_id}", headers=bearer(operator))
                assert r.status_code == 204, r.text
                frames = await asyncio.wait_for(_until_closed(link), timeout=POLL + BOUND)
            finally:
                await link.close()
        assert [f["type"] for f in frames] == ["device:revoked"]  # the link lived on, and ends at the removal
    finally:
        gateway.stop()
        nats.kill()


async def _until_closed(link: websockets.ClientConnection) -> list[dict[str, str]]:
    """The frames the gateway sends until it closes the link."""
    frames = []
    with contextlib.suppress(websockets.ConnectionClosed):
        while True:
            frames.append(json.loads(await link.recv()))
    return frames


TOKEN = "tk-" + secrets.token_hex(8)
PASSWORD = "pw-" + secrets.token_hex(8)


async def _crosses(here: NatsWake, there: NatsWake, key: str) -> None:
    """A wake notified by ``here`` reaches ``there``'s waiter (sent again each half second: core NATS
    delivers at most once, and a lost wake is the sweep's business, not this test's)."""
    with there.subscribe(key) as woken:
        async with asyncio.timeout(BOUND):
            while not woken.is_set():
                here.notify(key)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), timeout=0.5)


def _nkey_seed(folder: Path, name: str) -> tuple[Path, str]:
    """A new user NKey: its seed file and its public key."""
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    path = folder / f"{name}.nk"
    path.write_bytes(seed)
    return path, nkeys.from_seed(bytearray(seed)).public_key.decode()


def _asking(tmp_path: Path, way: str) -> tuple[PrivateNats, NatsCredentials, NatsCredentials]:
    """A NATS server that asks for credentials the ``way`` named; the right ones and wrong ones."""
    if way == "token":
        right, wrong = NatsCredentials(token=TOKEN), NatsCredentials(token=TOKEN + "x")
        return PrivateNats(tmp_path, "--auth", TOKEN), right, wrong
    if way == "user-and-password":
        right = NatsCredentials(user="tapgate", password=PASSWORD)
        wrong = NatsCredentials(user="tapgate", password=PASSWORD + "x")
        return PrivateNats(tmp_path, "--user", "tapgate", "--pass", PASSWORD), right, wrong
    seed, public = _nkey_seed(tmp_path, "tapgate")
    other, _ = _nkey_seed(tmp_path, "other")
    conf = tmp_path / "nats.conf"
    conf.write_text(f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    right, wrong = NatsCredentials(nkey_seed_file=str(seed)), NatsCredentials(nkey_seed_file=str(other))
    return PrivateNats(tmp_path, "-c", str(conf)), right, wrong


@pytest.mark.parametrize("way", ["token", "user-and-password", "nkey"])
async def test_a_nats_server_that_asks_for_credentials_takes_the_right_ones_and_refuses_others_in_one_line(
    tmp_path: Path, way: str
) -> None:
    server, right, wrong = _asking(tmp_path, way)
    server.start()
    try:
        await check_reachable(server.url, right)
        tenant = tenant_name()
        async with (
            started(server.url, credentials=right) as here,
            started(server.url, credentials=right) as there,
        ):
            await _crosses(here, there, f"{tenant}:auth")
        for credentials in (wrong, NatsCredentials()):
            with pytest.raises(ConfigurationError) as refused:
                await check_reachable(server.url, credentials)
            message = refused.value.message
            assert "refused tapgate's credentials" in message and f"nats_url {server.url}" in message
            assert TOKEN not in message and PASSWORD not in message and "\n" not in message
            assert TOKEN not in repr(credentials) and PASSWORD not in repr(credentials)
    finally:
        server.kill()


async def test_credential_files_that_cannot_be_read_are_named_before_any_connection(tmp_path: Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"  # nobody there: the files are checked first
    missing = str(tmp_path / "missing.pem")
    for credentials, key in [
        (NatsCredentials(nkey_seed_file=str(tmp_path / "missing.nk")), "nats_nkey_seed_file"),
        (NatsCredentials(tls_ca_file=missing), "nats_tls_ca_file"),
    ]:
        with pytest.raises(ConfigurationError) as refused:
            await check_reachable(url, credentials)
        assert key in refused.value.message and "cannot be" in refused.value.message


async def test_a_nats_server_behind_tls_is_reached_with_its_ca_and_a_client_certificate(
    tmp_path: Path,
) -> None:
    (tmp_path / "server").mkdir()
    (tmp_path / "client").mkdir()
    cert, key = self_signed(tmp_path / "server")
    client_cert, client_key = self_signed(tmp_path / "client")
    server = PrivateNats(
        tmp_path, "--tlsverify", "--tlscert", str(cert), "--tlskey", str(key), "--tlscacert", str(client_cert)
    ).start()
    url = f"tls://127.0.0.1:{server.port}"
    right = NatsCredentials(
        tls_ca_file=str(cert), tls_cert_file=str(client_cert), tls_key_file=str(client_key)
    )
    try:
        tenant = tenant_name()
        async with started(url, credentials=right) as here, started(url, credentials=right) as there:
            await _crosses(here, there, f"{tenant}:auth")
        unknown_ca = NatsCredentials(tls_cert_file=str(client_cert), tls_key_file=str(client_key))
        for wrong in (
            unknown_ca,
            NatsCredentials(tls_ca_file=str(cert)),
        ):  # a server it cannot check; no client certificate
            with pytest.raises(ConfigurationError) as refused:
                await check_reachable(url, wrong)
            assert "TLS" in refused.value.message, refused.value.message
    finally:
        server.kill()


def test_serve_with_a_wrong_nats_token_stops_in_one_line_that_does_not_show_it(
    sqlite_url: str, tmp_path: Path
) -> None:
    server = PrivateNats(tmp_path, "--auth", TOKEN).start()
    try:
        config = write_config(tmp_path, sqlite_url, wake="nats", nats_url=server.url)
        wrong = TOKEN + "x"
        done = tapgate(
            "serve",
            "--config",
            str(config),
            "--port",
            str(free_port()),
            env=os.environ | {"TAPGATE_NATS_TOKEN": wrong},
        )
    finally:
        server.kill()
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert "refused tapgate's credentials" in line and "nats_token" in line
    assert wrong not in done.stderr and TOKEN not in done.stderr


class SilentCut:
    """A TCP relay to a NATS server that can stop relaying without closing anything, as a cut cable or a
    dropped route does: neither end hears of it."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.cut = False
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"nats://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> SilentCut:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.upstream.hostname is not None and self.upstream.port is not None
        up_reader, up_writer = await asyncio.open_connection(self.upstream.hostname, self.upstream.port)
        self._writers += [writer, up_writer]
        await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if not self.cut:  # once cut, what is sent is lost and nothing says so
                    writer.write(data)
                    await writer.drain()
        writer.close()


async def test_a_nats_connection_that_dies_silently_is_noticed_by_its_pings(nats_url: str) -> None:
    async with SilentCut(nats_url) as cut, started(cut.url, poll_seconds=0.5) as wake:
        assert not wake.degraded
        cut.cut = True
        loop = asyncio.get_running_loop()
        started_at = loop.time()
        await _until(lambda: wake.degraded, "a silent cut was never noticed")
        noticed = loop.time() - started_at
    assert noticed < 10  # pings each second, two unanswered: seconds, not nats-py's default minutes
    print(f"\nsilent cut: noticed after {noticed:.3f} s")  # noqa: T201
