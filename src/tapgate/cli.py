"""The ``tapgate`` command. Exit 0 on success, 1 on a failure it explains, 2 on misuse."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tapgate import __version__
from tapgate.cli_console import console_app
from tapgate.cli_tls import tls_app
from tapgate.device.cli import CaFileOption, device_app
from tapgate.domain.accounts import ListedToken
from tapgate.domain.console import CONSOLE_SESSION
from tapgate.domain.errors import BrokenChain, ConfigurationError, TapgateError
from tapgate.domain.invocations import MAX_WAIT_SECONDS
from tapgate.domain.principals import Principal, TokenKind
from tapgate.mandate_commands import mandate_app
from tapgate.operator_commands import register as register_operator_commands
from tapgate.proof_commands import issuer_app, proof_app

if TYPE_CHECKING:
    from tapgate.config import Settings
    from tapgate.services.moving import Stranded

T = TypeVar("T")
SHUTDOWN_GRACE_SECONDS = 5

app = typer.Typer(
    help="tapgate: let an AI agent act on a person's devices while the person stays in charge.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
tenant_app = typer.Typer(help="Tenants: one deployment's customers.", no_args_is_help=True)
token_app = typer.Typer(help="Tokens for operators, users and agents.", no_args_is_help=True)
audit_app = typer.Typer(help="The audit journal.", no_args_is_help=True)
policy_app = typer.Typer(help="The policies file: check it, explain a verdict.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(token_app, name="token")
app.add_typer(audit_app, name="audit")
app.add_typer(policy_app, name="policy")
app.add_typer(device_app, name="device")
app.add_typer(console_app, name="console")
app.add_typer(tls_app, name="tls")


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"tapgate {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and stop."),
    ] = False,
) -> None:
    """tapgate: let an AI agent act on a person's devices while the person stays in charge."""


ConfigOption = Annotated[
    str | None, typer.Option("--config", help="Settings file (default: TAPGATE_CONFIG, else ./tapgate.toml).")
]


# How `tapgate serve` runs uvicorn; the bench serves its floor with the same options, so keep them here.
# WebSockets on the sans-I/O protocol: no tasks of its own per connection, so an idle device link costs
# less memory and connects faster than on the older protocol; tapgate's subclass of it holds less again
# (api/fast/light_ws.py).
UVICORN_OPTIONS: dict[str, Any] = {
    "access_log": False,
    "log_config": None,
    "ws": "tapgate.api.fast.light_ws:LightWebSockets",
    "ws_per_message_deflate": False,
}


class TokenKindChoice(StrEnum):
    USER = "user"
    AGENT = "agent"
    OPERATOR = "operator"


def fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(1)


def _run(work: Callable[[], Awaitable[T]]) -> T:
    try:
        return asyncio.run(work())  # type: ignore[arg-type]
    except BrokenChain as e:
        raise fail(f"The audit journal is broken: {e}.") from None
    except TapgateError as e:
        raise fail(e.message) from None


def _settings(config: str | None):  # type: ignore[no-untyped-def]
    from tapgate.config import load_settings

    try:
        return load_settings(config)
    except ConfigurationError as e:
        raise fail(e.message) from None


def _operator(tenant_id: str) -> Principal:
    return Principal(tenant_id=tenant_id, credential_id="cli", kind=TokenKind.OPERATOR, scopes=frozenset())


def _vapid_private_key() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return base64.urlsafe_b64encode(der).rstrip(b"=").decode()


def settings_file_text(database_path: Path) -> str:
    """The tapgate.toml that ``tapgate init`` writes: both device flags on, fresh secrets."""
    return f'''# tapgate settings; every key can also be set as TAPGATE_<KEY> (the environment wins).
# Add top-level keys here, above the first [table] line: in TOML a key below one belongs to that table.
database_url = "sqlite:///{database_path}"
device_channel_enabled = true
device_sms_enabled = true
# public_url = "https://tapgate.example"      # what pairing links and QR codes point at (default: the
                                               # address `tapgate serve` listens on, e.g. http://127.0.0.1:8080)
                                               # Choose it before pairing phones: serve refuses another
                                               # while devices are paired (`serve --move` moves them).
# http_port = 8080                             # with tls_cert (`tapgate tls init`), serve also answers plain
                                               # HTTP here: the /tls page, and a redirect to https (0: off)
# policies_file = "policies.yaml"
invocation_timeout_seconds = 300
device_call_timeout_seconds = 10
ingest_daily_cap = 500
approval_sign_ttl_seconds = 3600
max_devices_per_user = 10
max_open_confirmations = 5
require_device_signature = true              # a user token alone neither approves nor pairs a device
notice_text = false
console_agent_token_days = 90                # the longest life of an agent token made in the console
console_sign_ins_per_address = 20            # console sign-ins one address may start in 10 minutes
relay_secret = "{secrets.token_urlsafe(32)}"

[push_relays]                                  # push kind -> your relay's URL, e.g.
# fcm = "https://relay.example/push"

[webpush]
vapid_private_key = "{_vapid_private_key()}"
subject = "mailto:admin@example.com"
'''


@app.command()
def init(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where to write tapgate.toml and the database.")
    ] = Path(),
    force: Annotated[bool, typer.Option(help="Overwrite an existing tapgate.toml.")] = False,
) -> None:
    """Write tapgate.toml, create the SQLite database and the tenant 'default', print its operator token."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tapgate.toml"
    if path.exists() and not force:
        raise fail(f"{path} exists; pass --force to overwrite it, or use another --dir.")
    if (directory / "tapgate.db").exists():
        raise fail(
            f"{directory / 'tapgate.db'} exists already: init makes a new deployment. Keep it and its "
            "tapgate.toml, or move both away first."
        )
    # Written beside, and moved into place only when the database and the tenant exist.
    staged = directory / ".tapgate.toml.new"
    staged.write_text(settings_file_text(Path("tapgate.db")))
    staged.chmod(0o600)
    settings = _settings(str(staged))

    async def work() -> str:
        from tapgate.adapters.store.migrate import migrate
        from tapgate.bootstrap import build_gateway

        await migrate(settings.database_url)
        gateway = build_gateway(settings)
        try:
            return (await gateway.create_tenant("default")).token
        finally:
            await gateway.close()

    try:
        token = _run(work)
    finally:
        if not (directory / "tapgate.db").exists():
            staged.unlink(missing_ok=True)
    staged.replace(path)
    typer.echo(f"Wrote {path}; the database is {settings.database_url}.")
    typer.echo("Start the gateway with: tapgate serve --config " + str(path))
    typer.echo("The operator token of tenant 'default' (shown once):")
    typer.echo(token)


@app.command()
def migrate(
    config: ConfigOption = None,
    admin_url: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL: a role that may create roles and tables (or TAPGATE_ADMIN_DATABASE_URL)."
        ),
    ] = None,
) -> None:
    """Bring the database to the latest schema (on PostgreSQL, set up the app's role and RLS too)."""
    from tapgate.adapters.store.migrate import migrate as run_migrate

    settings = _settings(config)
    typer.echo(
        _run(lambda: run_migrate(settings.database_url, admin_url or settings.admin_database_url or None))
    )


def warn_unsafe_defaults(settings: Settings) -> None:
    """One warning line at start for each setting that leaves the person's authority to a token alone."""
    import logging

    from tapgate.logs import configure_logging

    configure_logging(settings.log_level)
    if not settings.require_device_signature:
        logging.getLogger("tapgate.serve").warning(
            "require_device_signature is off: a user token alone can approve requests and pair a person's "
            "first device; set require_device_signature = true in tapgate.toml"
        )


@app.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default: 8443 with https, else 8080).")
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, help="Worker processes (PostgreSQL only for more than 1).")
    ] = 1,
    tls_cert: Annotated[
        str | None, typer.Option(help="A PEM certificate (with its chain): speak https and wss (tls_cert).")
    ] = None,
    tls_key: Annotated[str | None, typer.Option(help="The certificate's PEM private key (tls_key).")] = None,
    move: Annotated[
        bool,
        typer.Option(
            "--move",
            help="public_url changed while devices are paired: move them (terminal phones follow, "
            "browser-app phones pair again).",
        ),
    ] = False,
) -> None:
    """Run the gateway; refuses to start, with the reason, on a bad configuration."""
    from tapgate.adapters.store.schema_version import pending_migrations
    from tapgate.adapters.store.urls import is_postgres
    from tapgate.bootstrap import check_push_settings, check_wake_settings, load_policies, web_push_key
    from tapgate.listening import names_an_ip, needs_https_warning, port_in_use, serve_url
    from tapgate.logs import configure_logging

    _require_settings_file(config)
    settings = _settings(config)
    cert, key = _tls_files(tls_cert or settings.tls_cert, tls_key or settings.tls_key)
    if port is None:
        port = 8443 if cert else 8080
    http_port = settings.http_port if cert else 0
    try:
        load_policies(settings)
        web_push_key(settings)
        if settings.devices_enabled:
            check_push_settings(settings)
        check_wake_settings(settings)
    except ConfigurationError as e:
        raise fail(str(e)) from None
    if workers > 1 and not is_postgres(settings.database_url):
        raise fail("More than one worker needs PostgreSQL; SQLite serves one process. Use --workers 1.")
    _require_database(settings.database_url)
    if workers > 1 and settings.wake_kind == "local":
        raise fail('wake = "local" reaches one process; with --workers, set wake to "postgres" or "nats".')
    try:
        behind = asyncio.run(pending_migrations(settings.database_url))
    except ConfigurationError as e:
        raise fail(e.message) from None
    except Exception:
        raise fail(
            "The database in database_url cannot be reached; check it, then run 'tapgate migrate'."
        ) from None
    if behind:
        raise fail("The database is not at the latest schema; run 'tapgate migrate' first.")
    try:
        busy = port_in_use(host, port)
    except OSError as e:
        raise fail(f"tapgate cannot listen on {host}:{port}: {e.strerror}; check --host.") from None
    if busy:
        raise fail(f"Port {port} on {host} is in use by another program; pass another --port.")
    if http_port == port:
        raise fail(
            f"http_port {http_port} is also the https port: set http_port to another port (0 turns the "
            "plain-HTTP /tls page off), or pass another --port."
        )
    if http_port and port_in_use(host, http_port):
        raise fail(
            f"Port {http_port} on {host} (http_port, the plain-HTTP /tls page) is in use by another "
            "program; set http_port to another port, or to 0 to turn it off."
        )
    if config:
        os.environ["TAPGATE_CONFIG"] = str(Path(config).resolve())
    public_url = settings.public_url
    if not public_url:  # the workers read it from the environment, as every setting
        public_url = serve_url(host, port, tls=cert is not None)
        os.environ["TAPGATE_PUBLIC_URL"] = public_url
    _serve_at(settings, public_url, move, guard=bool(settings.public_url))
    configure_logging(settings.log_level)
    if needs_https_warning(public_url):
        logging.getLogger("tapgate.serve").warning(
            "public_url is neither https nor loopback: a phone's browser refuses WebCrypto and Web Push "
            "there; see docs/deploy.md",
            extra={"public_url": public_url},
        )
    warn_unsafe_defaults(settings)
    if settings.require_user_verification and names_an_ip(public_url):
        logging.getLogger("tapgate.serve").warning(
            "passkeys need a name: public_url is an IP address, where browsers refuse to make a passkey, "
            "and require_user_verification asks every approver for one; give the gateway a name "
            "(tapgate tls init --name NAME)",
            extra={"public_url": public_url},
        )

    with _plain_http(public_url, host, http_port, cert):
        _serve_gateway(settings, host, port, workers, cert, key)


def _plain_http(public_url: str, host: str, http_port: int, cert: str | None) -> AbstractContextManager[None]:
    """With https on and http_port set: the /tls page and redirects on plain HTTP, beside the gateway."""
    if not http_port or cert is None:
        return nullcontext()
    from tapgate.api.tls_page import plain_http_app, serving_beside
    from tapgate.local_ca import ca_in_chain

    app = plain_http_app(public_url, http_port, ca_in_chain(Path(cert).read_bytes()))
    logging.getLogger("tapgate.serve").info(
        "plain HTTP serves /tls (the CA to install) and redirects the rest to https",
        extra={"http_port": http_port},
    )
    return serving_beside(app, host, http_port)


def _serve_gateway(
    settings: Settings, host: str, port: int, workers: int, cert: str | None, key: str | None
) -> None:
    from tapgate.api.bounded_http import BoundedHttp
    from tapgate.api.fast.light_http import LightHttp
    from tapgate.bootstrap import bypasses_off
    from tapgate.supervisor import serve_workers

    off = bypasses_off()
    serve_workers(
        "tapgate.bootstrap:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        **UVICORN_OPTIONS | ({"ws": "websockets-sansio"} if "light_ws" in off else {}),
        # Bounded resources: each process sets BoundedHttp's limits from its settings.
        http=BoundedHttp if "light_http" in off else LightHttp,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        ws_max_size=settings.ws_max_frame_bytes,
        # Long-polls and device links would hold a shutdown for up to a minute; devices reconnect.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        timeout_keep_alive=settings.keep_alive_seconds,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )


def _serve_at(settings: Settings, public_url: str, move: bool, *, guard: bool) -> None:
    """Refuse a public_url other than the one the devices were paired under, unless ``--move``. Without
    public_url set (``guard`` off) the gateway follows its listening address: it records it, and
    several processes on one database may each listen elsewhere."""

    async def work() -> list[Stranded]:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            return await gateway.serve_at(public_url, move=move, guard=guard)
        finally:
            await gateway.close()

    stranded = _run(work)
    if stranded:
        devices = sum(s.devices for s in stranded)
        raise fail(
            f"public_url is now {public_url}, but {devices} device{'s are' if devices != 1 else ' is'} "
            f"paired under {stranded[0].served_url}: set public_url back, or pass --move to move them "
            "(terminal phones follow when they next link; browser-app phones must pair again)."
        )


def _tls_files(cert: str, key: str) -> tuple[str | None, str | None]:
    """The certificate and key ``serve`` speaks https with, checked now so a bad pair stops the start."""
    import ssl

    if not cert and not key:
        return None, None
    if not (cert and key):
        raise fail("https needs both a certificate and its key: pass --tls-cert and --tls-key together.")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except ssl.SSLError:  # before OSError, whose subclass it is
        raise fail(
            f"{cert} and {key} are not a PEM certificate and its private key; check both files."
        ) from None
    except OSError as e:
        raise fail(f"The TLS certificate or key cannot be read: {e.strerror or e}.") from None
    return cert, key


def _require_settings_file(config: str | None) -> None:
    """``serve`` without a settings file would run a gateway nobody set up: say how to get one."""
    from tapgate.config import config_path

    try:
        found = config_path(config)
    except ConfigurationError as e:
        raise fail(e.message) from None
    if found is None and "TAPGATE_DATABASE_URL" not in os.environ:
        raise fail("There is no tapgate.toml here: run 'tapgate init' to make one, or pass --config FILE.")


def _require_database(database_url: str) -> None:
    """Refuse, creating nothing, when the SQLite file named is not there (a typo would start afresh)."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    if not Path(url.database).exists():
        raise fail(
            f"The database {url.database} does not exist: run 'tapgate init' for a new deployment, or "
            "'tapgate migrate' to create it."
        )


@tenant_app.command("create")
def tenant_create(name: str, config: ConfigOption = None) -> None:
    """Create a tenant and print its operator token on the last line."""
    settings = _settings(config)

    async def work() -> str:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            return (await gateway.create_tenant(name)).token
        finally:
            await gateway.close()

    token = _run(work)
    typer.echo(f"Tenant {name!r} created. Its operator token (shown once):")
    typer.echo(token)


@token_app.command("create")
def token_create(
    tenant: Annotated[str, typer.Option(help="The tenant.")],
    kind_choice: Annotated[
        TokenKindChoice,
        typer.Option("--kind", help="What the token is for."),
    ],
    user: Annotated[str | None, typer.Option(help="The user the token acts for (user and agent).")] = None,
    scope: Annotated[list[str] | None, typer.Option(help="A scope; repeat for more (default: all).")] = None,
    agent_id: Annotated[str | None, typer.Option(help="The agent's id (agent tokens).")] = None,
    agent_name: Annotated[
        str | None,
        typer.Option(help='Who asks, on approval cards (agent tokens; default "your assistant").'),
    ] = None,
    expires_in: Annotated[
        int | None, typer.Option("--expires-in", help="Seconds until it stops working (default: never).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Mint a token and print it on the last line."""
    kind = kind_choice.value
    if kind != "operator" and not user:
        typer.echo(
            f"{'An' if kind[0] in 'aeiou' else 'A'} {kind} token acts for a user: pass --user.", err=True
        )
        raise typer.Exit(2)
    settings = _settings(config)

    async def work() -> str:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            if kind == "operator":
                return (await gateway.create_operator_token(tenant, expires_in)).token
            assert user is not None
            new = await gateway.create_token(
                _operator(tenant),
                user,
                TokenKind(kind),
                scope,
                agent_id,
                expires_in_seconds=expires_in,
                agent_name=agent_name,
            )
            return new.token
        finally:
            await gateway.close()

    typer.echo(_run(work))


@token_app.command("list")
def token_list(
    tenant: Annotated[str, typer.Option(help="The tenant.")],
    user: Annotated[str | None, typer.Option(help="Only this user's tokens (default: every token).")] = None,
    config: ConfigOption = None,
) -> None:
    """List live tokens and console sessions, one a line: id, kind, user/agent, scopes, created, expires,
    last used, and what made it (a console session: the device that signed it in; an agent token made in
    the console: that session). No secrets."""
    settings = _settings(config)

    async def work() -> list[str]:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            caller = _operator(tenant)
            found = await (
                gateway.list_user_tokens(caller, user) if user else gateway.list_tokens(caller, None)
            )
        finally:
            await gateway.close()
        return [
            "\t".join(
                (
                    c.token_id,
                    c.kind,
                    f"{c.user_id or '-'}/{c.agent_id or '-'}",
                    ",".join(sorted(c.scopes)) or "-",
                    c.created_at.isoformat(),
                    c.expires_at.isoformat() if c.expires_at else "never",
                    c.last_used_at.isoformat() if c.last_used_at else "never",
                    _made_by(c),
                )
            )
            for c in found
        ]

    lines = _run(work)
    typer.echo("token_id\tkind\tuser/agent\tscopes\tcreated_at\texpires_at\tlast_used_at\tmade_by")
    for line in lines:
        typer.echo(line)


def _made_by(listed: ListedToken) -> str:
    if listed.signed_in_by:
        return f"device:{listed.signed_in_by}"
    if listed.console_session_id:
        return f"console_session:{listed.console_session_id}"
    return "operator link" if listed.kind == CONSOLE_SESSION else "-"


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id, as 'tapgate token list' shows it.")],
    tenant: Annotated[str, typer.Option(help="The tenant.")],
    config: ConfigOption = None,
) -> None:
    """Revoke a token or console session now; every process refuses it within a second."""
    settings = _settings(config)

    async def work() -> None:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            await gateway.revoke_token(_operator(tenant), token_id)
        finally:
            await gateway.close()

    _run(work)
    typer.echo(f"Token {token_id} revoked.")


@app.command()
def prune(config: ConfigOption = None) -> None:
    """Erase message bodies older than retention_days now (SMS bodies, sms_send and phone_actions
    arguments, result texts); rows, digests and the audit journal stay."""
    settings = _settings(config)

    async def work() -> tuple[int, int, int]:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            pruned = await gateway.prune()
        finally:
            await gateway.close()
        return pruned.invocations, pruned.events, pruned.notices

    invocations, events, notices = _run(work)
    typer.echo(
        f"Erased the bodies of {invocations} invocations and {events} forwarded messages "
        f"older than {settings.retention_days} days; let go of {notices} notices no link carried "
        f"within {settings.notice_life_seconds} s."
    )


@audit_app.command("verify")
def audit_verify(
    config: ConfigOption = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: every tenant).")] = None,
) -> None:
    """Check the audit journal's hash chain; exit 1 at the first entry that does not verify."""
    settings = _settings(config)

    async def work() -> dict[str, int]:
        from tapgate.bootstrap import build_gateway

        gateway = build_gateway(settings)
        try:
            return await gateway.verify_audit(tenant)
        finally:
            await gateway.close()

    counts = _run(work)
    for tenant_id, count in counts.items():
        typer.echo(f"tenant {tenant_id}: {count} {'entry' if count == 1 else 'entries'}, chain intact")
    tenants = "1 tenant" if len(counts) == 1 else f"{len(counts)} tenants"
    typer.echo(f"The audit journal verifies: {sum(counts.values())} entries in {tenants}.")


@app.command("mcp")
def mcp_stdio(
    url: Annotated[
        str,
        typer.Option("--url", envvar="TAPGATE_URL", help="The running gateway, e.g. http://127.0.0.1:8080."),
    ],
    token: Annotated[
        str,
        typer.Option(
            "--token", envvar="TAPGATE_AGENT_TOKEN", help="An agent token (or TAPGATE_AGENT_TOKEN)."
        ),
    ],
    session: Annotated[
        str | None,
        typer.Option("--session", help="A session id: its phone_action tool, and its origin for policy."),
    ] = None,
    wait: Annotated[
        float,
        typer.Option(min=0, max=MAX_WAIT_SECONDS, help="Seconds a tool call waits for the device's answer."),
    ] = 60.0,
    ca_file: CaFileOption = None,
) -> None:
    """An MCP server on stdio that speaks to a running gateway (for desktop assistants and IDE agents)."""
    from tapgate.mcp_server.stdio import serve_stdio
    from tapgate.trust import UnreadableCaFile, trust

    try:
        trust(ca_file)
    except UnreadableCaFile as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(2) from None
    _run(lambda: serve_stdio(url, token, session, wait, str(ca_file) if ca_file else None))


@app.command()
def demo(
    keep: Annotated[bool, typer.Option(help="Keep the temporary folder and print where it is.")] = False,
) -> None:
    """The whole story on a fresh temporary SQLite; exits 0 when every step did what it says."""
    from tapgate.demo import run_demo

    raise typer.Exit(run_demo(keep=keep))


@app.command(
    hidden=True,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def bench() -> None:
    """The benchmark is not part of the installed tapgate: run make bench in a source checkout."""
    raise fail("The benchmark runs from a source checkout of tapgate: make bench (BENCH_ARGS='--quick ...').")


register_operator_commands(
    app, device_app, ("mandate", mandate_app), ("proof", proof_app), ("issuer", issuer_app)
)


@policy_app.command("check")
def policy_check(
    file: Annotated[
        Path | None, typer.Argument(help="The policies file (default: policies_file of the settings).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Print each problem of a policies file as FILE:LINE: reason; exit 1 if there is any."""
    from tapgate.domain.policy import parse_policies_reporting
    from tapgate.domain.policy_check import check_policies

    if file is None:
        configured = _settings(config).policies_file
        if not configured:
            typer.echo("No file given and the settings name no policies_file: pass the file.", err=True)
            raise typer.Exit(2)
        file = Path(configured)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise fail(f"{file} cannot be read: {getattr(e, 'strerror', None) or 'not UTF-8 text'}.") from None
    problems = check_policies(text, source=str(file))
    for problem in problems:
        typer.echo(problem.render(str(file)))
    if problems:
        errors = sum(not p.warning for p in problems)
        warnings = len(problems) - errors
        typer.echo(f"{file}: {_count(errors, 'error')}, {_count(warnings, 'warning')}.", err=True)
        raise typer.Exit(1)
    rules = len(parse_policies_reporting(text, str(file))[0].rules)
    typer.echo(f"{file}: {_count(rules, 'rule')}, no problems.")


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@policy_app.command("explain")
def policy_explain(
    tenant: Annotated[str, typer.Option(help="The tenant.")],
    user: Annotated[str, typer.Option(help="The user the agent acts for.")],
    tool: Annotated[str, typer.Option(help="The tool, like device__desk_lamp__set_light or phone_action.")],
    origin: Annotated[str, typer.Option(help="owner or untrusted.")] = "owner",
    session_kind: Annotated[
        str, typer.Option(help="chat, schedule, subagent or triage (default: no session).")
    ] = "",
    agent: Annotated[str, typer.Option(help="The agent's id.")] = "",
    config: ConfigOption = None,
) -> None:
    """Show the verdict the rules in force give a call, the rule that decides and every rule considered,
    read from the live database; creates nothing."""
    settings = _settings(config)

    async def work() -> list[str]:
        from tapgate.bootstrap import build_gateway

        try:
            gateway = build_gateway(settings)
        except ConfigurationError as e:
            raise fail(str(e)) from None
        try:
            explained = await gateway.explain_policy(tenant, user, tool, origin, session_kind, agent)
        finally:
            await gateway.close()
        return _explained_lines(explained)

    for line in _run(work):
        typer.echo(line)


def _explained_lines(explained: Any) -> list[str]:
    if explained.explanation is None:
        return [f"verdict: refused before policy: {explained.refused}"]
    request, decision = explained.request, explained.explanation.decision
    by = f"{decision.rule} (line {decision.line})" if decision.line else decision.rule
    lines = [
        f"verdict: {decision.verdict.value} \u2014 {decision.reason}",
        f"decided by: {by}",
        f"call: tool={request.tool} deviceId={request.device_id} capability={request.capability} "
        f"capabilityKind={request.capability_kind} agentId={request.agent_id!r} "
        f"sessionKind={request.session_kind!r} origin={request.origin}",
        "rules considered:",
    ]
    if not explained.explanation.considered:
        lines.append("  (none: the file has no rule for this action and the profile no entry for this call)")
    for c in explained.explanation.considered:
        where = f"line {c.line}" if c.line else "profile"
        lines.append(
            f"  {where:<9} {c.rule:<24} {c.decision:<16} {'matched' if c.matched else 'no match'}: {c.why}"
        )
    return lines


def _flags_show_no_type() -> None:
    """A flag takes no value, so its help line shows none (typer would write ``<bool>`` beside it)."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    setattr(TyperOption, "display_type_rich", display_type_rich)  # noqa: B010 (mypy: no method assignment)


def main() -> None:
    _flags_show_no_type()
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
