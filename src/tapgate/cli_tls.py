"""``tapgate tls init``: a local certificate authority and a server certificate for this machine's names,
written into the settings, so a phone on the same network reaches the gateway over https by a name."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tapgate.local_ca import LocalCaError, default_names, issue, split_names

tls_app = typer.Typer(
    help="https for phones on this network: a local certificate authority.", no_args_is_help=True
)

DEFAULT_PORT = 8443
_TABLE = re.compile(r"^\s*\[")


@tls_app.command("init")
def tls_init(
    name: Annotated[
        list[str] | None,
        typer.Option(
            "--name",
            help="A name (or address) phones reach this machine at; repeat for more. The first name is "
            "public_url's (default: <host>.local, the host name and the LAN addresses).",
        ),
    ] = None,
    port: Annotated[int, typer.Option(min=1, max=65535, help="The https port in public_url.")] = DEFAULT_PORT,
    folder: Annotated[
        Path | None,
        typer.Option("--dir", help="Where the CA and certificate go (default: tls/ beside the settings)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Make a new CA too (every device must then install it again).")
    ] = False,
    config: Annotated[
        str | None,
        typer.Option("--config", help="Settings file (default: TAPGATE_CONFIG, else ./tapgate.toml)."),
    ] = None,
) -> None:
    """Make a local CA (kept when there is one) and a server certificate signed by it; write tls_cert,
    tls_key and public_url = https://NAME:PORT into the settings."""
    from tapgate.config import config_path, load_settings
    from tapgate.domain.errors import ConfigurationError

    try:
        settings_file = config_path(config)
    except ConfigurationError as e:
        _fail(e.message)
    if settings_file is None:
        _fail("There is no tapgate.toml here: run 'tapgate init' first, or pass --config.")
    names = name or default_names()
    dns, _ = split_names(names)
    if not dns:
        _fail(
            "Give at least one name, not only addresses: browsers make passkeys only for a name "
            "(--name gateway.local, or a name your router gives this machine)."
        )
    where = folder or settings_file.parent / "tls"
    try:
        issued = issue(where, names, force, dt.datetime.now(dt.UTC))
    except LocalCaError as e:
        _fail(str(e))
    public_url = f"https://{dns[0]}:{port}"
    base = settings_file.parent.resolve()
    _set_top_level(
        settings_file,
        {
            "tls_cert": _relative(issued.certificate, base),
            "tls_key": _relative(issued.key, base),
            "public_url": public_url,
        },
    )
    made = "Made a new certificate authority" if issued.new_ca else "Kept the certificate authority"
    typer.echo(f"{made}: {issued.ca} (its key {issued.folder / 'ca-key.pem'} is readable by you only).")
    listed = ", ".join([*issued.names, *issued.addresses])
    typer.echo(f"Issued {issued.certificate} for {listed}, valid until {issued.not_after:%Y-%m-%d}.")
    typer.echo(f"Wrote tls_cert, tls_key and public_url = {public_url} into {settings_file}.")
    try:
        http_port = load_settings(str(settings_file)).http_port
    except ConfigurationError as e:
        _fail(e.message)
    page = f"http://{dns[0]}:{http_port}/tls" if http_port else f"{public_url}/tls"
    typer.echo(
        f"Next: tapgate serve --config {settings_file} --host 0.0.0.0 --port {port}; then open {page} on "
        "the phone to install the CA."
    )


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _relative(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:
        return str(path.resolve())


def _set_top_level(path: Path, values: dict[str, str]) -> None:
    """Set top-level keys of a TOML file: a key already above the first table is replaced in place; a new
    one goes just above the first table (below it, it would belong to that table)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first_table = next((i for i, line in enumerate(lines) if _TABLE.match(line)), len(lines))
    pending = dict(values)
    for i in range(first_table):
        key = lines[i].split("=", 1)[0].strip()
        if "=" in lines[i] and key in pending:
            lines[i] = f"{key} = {_quoted(pending.pop(key))}\n"
    added = [f"{key} = {_quoted(value)}\n" for key, value in pending.items()]
    if added and first_table < len(lines):
        added.append("\n")
    if first_table > 0 and first_table == len(lines) and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    lines[first_table:first_table] = added
    path.write_text("".join(lines), encoding="utf-8")


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
