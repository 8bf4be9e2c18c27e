"""`tapgate console`: what an operator does for a person's console."""

from __future__ import annotations

from typing import Annotated

import typer

from tapgate.device.cli import CaFileOption

console_app = typer.Typer(help="The person's console at /console.", no_args_is_help=True)


@console_app.command("link")
def link(
    user: Annotated[str, typer.Option(help="The person the link signs in.")],
    tenant: Annotated[str, typer.Option(help="The tenant (tapgate init made 'default').")] = "default",
    url: Annotated[
        str | None,
        typer.Option(
            "--url",
            envvar="TAPGATE_URL",
            help="The address the person's browser reaches the gateway at (default: public_url, else "
            "http://127.0.0.1:8080); something must answer there.",
        ),
    ] = None,
    config: Annotated[str | None, typer.Option(help="The settings file (default: tapgate.toml).")] = None,
    ca_file: CaFileOption = None,
) -> None:
    """Print a one-time link that signs USER into the console (15 minutes; for a person with no phone yet)."""
    from tapgate.operator_commands import _operator, _with_gateway, served_at

    address = served_at(url, config, ca_file)
    typer.echo(_with_gateway(config, lambda gateway: gateway.console_link(_operator(tenant), user, address)))
