"""The agent's stream learns of a device's life: paired, revoked, online, offline, capabilities changed.

Each event carries the device id and nothing the device or the person wrote, so it is safe for any agent
of the person to read.
"""

from __future__ import annotations

from datetime import datetime

from tapgate.domain.devices import Device
from tapgate.domain.events import EventValue
from tapgate.ports import UnitOfWork
from tapgate.services.context import events_key


async def announce_device(
    uow: UnitOfWork, device: Device, event_type: str, now: datetime, **data: EventValue
) -> None:
    """Append ``event_type`` for ``device`` to its person's event stream, in this transaction."""
    await uow.events.append(device.user_id, event_type, {"device_id": device.device_id, **data}, now)
    uow.notify(events_key(device.tenant_id, device.user_id))
