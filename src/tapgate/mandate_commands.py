"""The operator's view of standing mandates: ``tapgate mandate list|show|revoke``. Each calls the same
Gateway use case as the HTTP API, as the operator of a tenant."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from tapgate.domain.mandates import Mandate
from tapgate.operator_commands import ConfigOption, TenantOption, UserOption, _operator, _with_gateway

__all__ = ["mandate_app"]

mandate_app = typer.Typer(
    help="Standing mandates: what a person signed once for an agent; list, show and revoke them.",
    no_args_is_help=True,
)


def _line(mandate: Mandate) -> str:
    now = datetime.now(UTC)
    daily = f", {mandate.used_on(now)}/{mandate.per_day} today" if mandate.per_day is not None else ""
    return (
        f"{mandate.mandate_id}\t{mandate.status_at(now).value}\t{mandate.agent_id or 'any agent'}\t"
        f"{', '.join(mandate.tools)}\tused {mandate.used}/{mandate.max_calls}{daily}\t"
        f"until {mandate.expires_at:%Y-%m-%d %H:%M} UTC"
    )


@mandate_app.command("list")
def mandate_list(user: UserOption, tenant: TenantOption = "default", config: ConfigOption = None) -> None:
    """A person's mandates, newest first: id, status, agent, tools, uses, end."""
    found = _with_gateway(config, lambda g: g.list_mandates(_operator(tenant), user))
    if not found:
        typer.echo(f"{user} has no mandates: an agent asks for one, and the person signs it on their phone.")
    for mandate in found:
        typer.echo(_line(mandate))


@mandate_app.command("show")
def mandate_show(
    mandate_id: Annotated[str, typer.Argument(help="The mandate's id (mnd_…).")],
    tenant: TenantOption = "default",
    config: ConfigOption = None,
) -> None:
    """One mandate: its bounds, uses and status."""
    mandate = _with_gateway(config, lambda g: g.mandate(_operator(tenant), mandate_id))
    typer.echo(_line(mandate))
    for param, constraint in mandate.constraints.items():
        typer.echo(f"  {param}: {dict(constraint)}")
    typer.echo(f"  purpose: {mandate.purpose}")


@mandate_app.command("revoke")
def mandate_revoke(
    mandate_id: Annotated[str, typer.Argument(help="The mandate's id (mnd_…).")],
    tenant: TenantOption = "default",
    config: ConfigOption = None,
) -> None:
    """Revoke a mandate: no call goes under it after this, on any gateway process."""
    _with_gateway(config, lambda g: g.revoke_mandate(_operator(tenant), mandate_id))
    typer.echo(f"Revoked {mandate_id}.")
