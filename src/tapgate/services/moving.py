"""Where the gateway is served: the public_url each tenant's devices were paired under, a move to another,
and where a device that still links at the old address should go.

A device holds the address it paired at: the terminal phone in its state file, the browser app as the
origin its key lives on. So ``serve`` refuses a changed public_url while a tenant has live devices under
the old one, unless the operator moves them; then a terminal device linking at another address is told the
new one (``device:moved``), and the browser app's devices, whose keys cannot follow, must pair again.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import BROWSER_APP, Device
from tapgate.services.context import Context
from tapgate.services.devices import DeviceCaller

__all__ = ["Stranded", "moved_to", "must_pair_again", "serve_at"]


@dataclass(frozen=True, slots=True)
class Stranded:
    """A tenant whose live devices were paired under another address than the one to serve at."""

    tenant_id: str
    served_url: str
    devices: int


async def serve_at(ctx: Context, public_url: str, *, move: bool, guard: bool = True) -> list[Stranded]:
    """Record that the gateway is served at ``public_url``. With ``guard``, a tenant with live devices
    under another address is moved when ``move`` (and the move journalled), else left as it is and
    returned: the caller refuses to serve. A tenant without devices, or never served before, or any
    tenant without ``guard`` (a gateway that follows its own listening address), simply records it."""
    now = ctx.clock.now()
    stranded: list[Stranded] = []
    for tenant_id in await ctx.store.tenant_ids():
        async with ctx.store.unit_of_work(tenant_id) as uow:
            tenant = await uow.tenants.get()
            if tenant is None or tenant.served_url == public_url:
                continue
            live = 0
            if guard and tenant.served_url is not None:
                live = sum([await uow.devices.count_live(u.user_id) for u in await uow.users.list()])
            if live == 0:
                await uow.tenants.set_served(public_url, None)
                continue
            if not move:
                stranded.append(Stranded(tenant_id, tenant.served_url or "", live))
                continue
            await uow.tenants.set_served(public_url, now)
            await uow.journal.append(
                AuditRecord(
                    "gateway.moved",
                    "operator:cli",  # `tapgate serve --move`, as every operator command journals
                    subject=public_url,
                    data={"from": tenant.served_url or "", "devices": live},
                ),
                now,
            )
    return stranded


async def moved_to(
    ctx: Context, caller: DeviceCaller, host: str, public_url: str, moved: MutableMapping[str, bool]
) -> str | None:
    """The address a device that linked at ``host`` should use instead: ``public_url``, once the gateway
    moved there (``serve --move``) and the device is one that can follow (not the browser app); else None.
    A device linking at public_url's own host costs no read, nor does a tenant this process read before:
    ``moved`` remembers each tenant's answer (a move happens only as ``serve`` starts)."""
    if host.lower() == urlsplit(public_url).netloc.lower() or caller.device.app == BROWSER_APP:
        return None
    tenant_id = caller.principal.tenant_id
    if tenant_id not in moved:
        async with ctx.store.unit_of_work(tenant_id) as uow:
            tenant = await uow.tenants.get()
        moved[tenant_id] = tenant is not None and tenant.moved_at is not None
    return public_url if moved[tenant_id] else None


async def must_pair_again(ctx: Context, tenant_id: str, devices: list[Device]) -> set[str]:
    """The ids of ``devices`` (one person's) that the browser app paired before the gateway moved: their
    keys stay with the old address, so the person pairs them again at the new one."""
    if not any(d.app == BROWSER_APP for d in devices):
        return set()
    async with ctx.store.unit_of_work(tenant_id) as uow:
        tenant = await uow.tenants.get()
    moved_at = tenant.moved_at if tenant is not None else None
    if moved_at is None:
        return set()
    return {d.device_id for d in devices if d.app == BROWSER_APP and d.created_at < moved_at}
