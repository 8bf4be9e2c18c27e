"""The operator's commands for people and devices: ``tapgate user add|list``, ``tapgate device
list|revoke|grant``, ``tapgate pair`` and ``tapgate backup``. Each calls the same Gateway use case as the
HTTP API, as the operator of a tenant, on the database the settings name."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import sys
from collections.abc import Awaitable, Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar
from urllib.parse import urlsplit

import typer

from tapgate.device.cli import CaFileOption
from tapgate.device.reaching import unresolved
from tapgate.domain.devices import APPROVALS, Device
from tapgate.domain.errors import ComparisonMismatch, ConfigurationError, InvalidInput, TapgateError
from tapgate.domain.pairing import PairingStatus
from tapgate.domain.principals import Principal, TokenKind

if TYPE_CHECKING:
    from tapgate.gateway import Gateway

__all__ = ["register"]

T = TypeVar("T")
PAIR_POLL_SECONDS = 0.5

ConfigOption = Annotated[
    str | None, typer.Option("--config", help="Settings file (default: TAPGATE_CONFIG, else ./tapgate.toml).")
]
TenantOption = Annotated[str, typer.Option("--tenant", help="The tenant (tapgate init made 'default').")]
UserOption = Annotated[str, typer.Option("--user", help="The person, by user id.")]

user_app = typer.Typer(help="People: add them, list them.", no_args_is_help=True)


def register(app: typer.Typer, device_app: typer.Typer, *built_on: tuple[str, typer.Typer]) -> None:
    """Add these commands to ``tapgate`` and, beside the terminal phone's, to ``tapgate device``; with
    them the groups ``built_on`` this module's (``tapgate mandate``, ``proof``, ``issuer``: their modules
    import this one, so it cannot import them)."""
    app.add_typer(user_app, name="user")
    for name, group in built_on:
        app.add_typer(group, name=name)
    device_app.info.help = (
        "The terminal phone (keygen, enrol, pair, run, decide, login, vectors), and the operator's list, "
        "grant and revoke of a person's devices."
    )
    device_app.command("list")(device_list)
    device_app.command("revoke")(device_revoke)
    device_app.command("grant")(device_grant)
    app.command("pair")(pair)
    app.command("backup")(backup)


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(1)


def _operator(tenant_id: str) -> Principal:
    return Principal(tenant_id=tenant_id, credential_id="cli", kind=TokenKind.OPERATOR, scopes=frozenset())


def _with_gateway(config: str | None, work: Callable[[Gateway], Awaitable[T]], public_url: str = "") -> T:
    """Run ``work`` on the gateway the settings describe; a TapgateError becomes its sentence and exit 1."""
    from tapgate.bootstrap import build_gateway
    from tapgate.config import load_settings

    try:
        settings = load_settings(config)
    except ConfigurationError as e:
        raise _fail(e.message) from None
    if public_url:
        settings = settings.model_copy(update={"public_url": public_url})

    async def run() -> T:
        gateway = build_gateway(settings)
        try:
            return await work(gateway)
        finally:
            await gateway.close()

    try:
        return asyncio.run(run())
    except TapgateError as e:
        raise _fail(e.message) from None


# people


@user_app.command("add")
def user_add(
    user_id: Annotated[str, typer.Argument(help="Lower-case words joined by '-', like 'ana'.")],
    name: Annotated[str | None, typer.Option("--name", help="How to show them (default: the id).")] = None,
    tenant: TenantOption = "default",
    config: ConfigOption = None,
) -> None:
    """Add a person to the tenant."""
    user = _with_gateway(config, lambda g: g.create_user(_operator(tenant), user_id, name))
    typer.echo(f"Added {user.user_id} ({user.display_name}) to tenant {tenant}.")


@user_app.command("list")
def user_list(tenant: TenantOption = "default", config: ConfigOption = None) -> None:
    """List the tenant's people: id, name, when added."""
    users = _with_gateway(config, lambda g: g.list_users(_operator(tenant)))
    if not users:
        typer.echo(f"Tenant {tenant} has no users yet: add one with 'tapgate user add ID'.")
    for user in users:
        typer.echo(f"{user.user_id}\t{user.display_name}\tadded {user.created_at:%Y-%m-%d %H:%M} UTC")


# devices


def _describe(device: Device) -> str:
    granted = [d.capability.name for d in device.capabilities if d.granted]
    other = [d.capability.name for d in device.capabilities if not d.granted]
    seen = f"{device.last_seen_at:%Y-%m-%d %H:%M} UTC" if device.last_seen_at else "never"
    return (
        f"{device.device_id}\t{device.name} ({device.kind})\t{device.status.value}\t"
        f"granted: {', '.join(granted) or 'none'}\tnot granted: {', '.join(other) or 'none'}\tseen: {seen}"
    )


def device_list(user: UserOption, tenant: TenantOption = "default", config: ConfigOption = None) -> None:
    """Operator: list a person's devices, their grants and when each was last seen."""
    devices = _with_gateway(config, lambda g: g.list_devices(_operator(tenant), user))
    if not devices:
        typer.echo(f"{user} has no devices: pair one with 'tapgate pair --user {user}'.")
    for device in devices:
        typer.echo(_describe(device))


def device_revoke(
    device_id: Annotated[str, typer.Argument(help="The device's id.")],
    user: UserOption,
    tenant: TenantOption = "default",
    config: ConfigOption = None,
) -> None:
    """Operator: revoke a device; its token stops working and its tools vanish at once."""
    _with_gateway(config, lambda g: g.revoke_device(_operator(tenant), user, device_id))
    typer.echo(f"Revoked {device_id} of {user}.")


def device_grant(
    device_id: Annotated[str, typer.Argument(help="The device's id.")],
    capabilities: Annotated[
        list[str], typer.Argument(help="Capabilities to grant (or, with --off, withdraw).")
    ],
    user: UserOption,
    off: Annotated[bool, typer.Option("--off", help="Withdraw these grants instead.")] = False,
    tenant: TenantOption = "default",
    config: ConfigOption = None,
) -> None:
    """Operator: grant capabilities of a device (the agent may then call them), or withdraw them.

    Granting ``approvals`` makes the device an approver: it receives and signs the person's approvals.
    Only a device that declares ``approvals`` can be one."""
    grants = dict.fromkeys(capabilities, not off)
    device = _with_gateway(config, lambda g: g.set_grants(_operator(tenant), user, device_id, grants))
    typer.echo(_describe(device))


# pairing


def _listening(url: str) -> bool:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=3):
            return True
    except OSError:
        return False


def _resolves(url: str) -> bool:
    try:
        socket.getaddrinfo(urlsplit(url).hostname or "127.0.0.1", None)
    except socket.gaierror:
        return False
    return True


def _untrusted_https(url: str, ca_file: Path | None) -> str | None:
    """For an https address: the sentence when its certificate is not trusted with ``ca_file``."""
    import httpx

    from tapgate.trust import UnreadableCaFile, trust, untrusted_line

    if not url.startswith("https:"):
        return None
    try:
        verify = trust(ca_file)
    except UnreadableCaFile as e:
        return str(e)
    try:
        httpx.get(f"{url.rstrip('/')}/readyz", timeout=5, verify=verify)
    except httpx.TransportError as e:
        return untrusted_line(e)
    return None


def served_at(url: str | None, config: str | None, ca_file: Path | None = None) -> str:
    """The address a link printed for a person points at (``--url``, else ``public_url``, else the default
    serve address), once something answers there: a link to a port nothing listens on helps nobody. An
    https address must also present a certificate trusted here (the system's CAs, or ``ca_file``)."""
    from tapgate.config import load_settings
    from tapgate.listening import DEFAULT_PUBLIC_URL

    try:
        public_url = url or load_settings(config).public_url or DEFAULT_PUBLIC_URL
    except ConfigurationError as e:
        raise _fail(e.message) from None
    if not _resolves(public_url):
        raise _fail(unresolved(public_url))
    not_trusted = _untrusted_https(public_url, ca_file)
    if not_trusted is not None:
        raise _fail(not_trusted)
    if not _listening(public_url):
        raise _fail(
            f"Nothing answers at {public_url}: start 'tapgate serve', or pass --url with the address it "
            "listens on (its --host and --port)."
        )
    return public_url


def pair(
    user: UserOption,
    tenant: TenantOption = "default",
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar="TAPGATE_URL",
            help="The address phones reach the gateway at (default: public_url, else http://127.0.0.1:8080).",
        ),
    ] = None,
    grant: Annotated[
        list[str] | None,
        typer.Option("--grant", help="A capability to grant at once; repeat for more (default: ask)."),
    ] = None,
    config: ConfigOption = None,
    ca_file: CaFileOption = None,
) -> None:
    """Pair a device for a person: print the link and its QR code, wait for the device, ask for the
    comparison code it shows, and let it in as the operator."""
    import segno

    public_url = served_at(url, config, ca_file)
    operator = _operator(tenant)

    async def work(gateway: Gateway) -> str:
        pairing, link = await gateway.start_pairing(operator, user)
        typer.echo(f"Pairing a device for {user}. Open this link on the device, or scan the QR code:")
        typer.echo(link)
        segno.make(link, error="m").terminal(out=sys.stdout, compact=True)
        typer.echo(f"Waiting for the device (until {pairing.expires_at:%H:%M} UTC; Ctrl-C stops)…")
        while True:
            current, device = await gateway.pairing(operator, pairing.pairing_id)
            if current.status is PairingStatus.AWAITING_CONSENT and device is not None:
                break
            if current.status is not PairingStatus.OPEN:
                raise _fail(f"The pairing ended before a device claimed it ({current.status.value}).")
            await asyncio.sleep(PAIR_POLL_SECONDS)
        names = [d.capability.name for d in device.capabilities]
        shown = [f"{n} (can approve for you)" if n == APPROVALS else n for n in names]
        typer.echo(
            f"{device.name} ({device.kind}, id {device.device_id}) wants in; it can: {', '.join(shown)}."
        )
        grants = grant if grant is not None else _ask_grants(names)
        while True:
            code = typer.prompt("Type the 6-digit comparison code the device shows").strip()
            try:
                added = await gateway.consent_pairing(operator, pairing.pairing_id, code, True, grants)
            except (ComparisonMismatch, InvalidInput) as e:
                typer.echo(e.message, err=True)
                still, _ = await gateway.pairing(operator, pairing.pairing_id)
                if still.status is not PairingStatus.AWAITING_CONSENT:
                    raise _fail("The pairing is over; start again with 'tapgate pair'.") from None
                continue
            granted = [c.name for c in added.granted()]
            return f"Paired {added.device_id} for {user}; granted: {', '.join(granted) or 'none'}."

    typer.echo(_with_gateway(config, work, public_url))


def _ask_grants(names: list[str]) -> list[str]:
    if not names:
        return []
    answer = typer.prompt(
        f"Grant which? (comma-separated, 'none', or Enter for all: {', '.join(names)})",
        default="",
        show_default=False,
    )
    if answer.strip().lower() == "none":
        return []
    return [n.strip() for n in answer.split(",") if n.strip()] or names


# backups


def backup(
    file: Annotated[Path, typer.Argument(help="Where to write the copy (a new file).")],
    config: ConfigOption = None,
) -> None:
    """Copy the SQLite database while the gateway runs (SQLite's online backup); on PostgreSQL, say how."""
    from sqlalchemy.engine import make_url

    from tapgate.config import load_settings

    try:
        url = make_url(load_settings(config).database_url)
    except ConfigurationError as e:
        raise _fail(e.message) from None
    if url.get_backend_name() != "sqlite":
        raise _fail(
            "This gateway runs on PostgreSQL: back it up with pg_dump as the admin role, e.g. "
            f"pg_dump -Fc -d {url.database} -f {file} (see docs/deploy.md)."
        )
    source = Path(url.database or "")
    if not source.is_file():
        raise _fail(f"The database {source} does not exist; there is nothing to back up.")
    if file.exists():
        raise _fail(f"{file} exists already; pick a new file name.")
    try:
        with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(file)) as dest:
            src.backup(dest)  # page by page, consistent while the gateway writes
    except sqlite3.Error as e:
        file.unlink(missing_ok=True)
        raise _fail(f"The backup failed: {e}.") from None
    file.chmod(0o600)
    typer.echo(f"Copied {source} to {file}.")
