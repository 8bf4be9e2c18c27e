"""Notices: an agent's content-free heads-up for each of the person's active devices,
written as one outbox row per device in the transaction that accepts it, so it survives a restart.

A device with a live link hears it as ``device:notice`` (``services/linking.py``), which marks the row
``linked``; a device with a push target and no live link gets it by push. A device with a live link and a
push target gets the link's ``live_ack_seconds`` first, as for a call, so it hears the notice once. A
device with no push target has its row ``held``: only its link carries it, the next time it links, while
the notice is younger than ``notice_life_seconds``."""

from __future__ import annotations

from datetime import timedelta

from tapgate.domain.audit import AuditRecord
from tapgate.domain.devices import DeviceStatus
from tapgate.domain.errors import InvalidInput, NotFound, RateLimited
from tapgate.domain.ids import new_id
from tapgate.domain.notices import check_notice
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.push import OutboxItem, OutboxStatus
from tapgate.services.context import Context, notices_key, outbox_key


async def send_notice(
    ctx: Context, caller: Principal, event: str, user_id: str | None, data: object, ui: object
) -> list[str]:
    """Queue the notice for each active device of the user; return their device ids.

    An agent (``notices`` scope) notifies its own user; an operator names ``user_id``. Raises Forbidden,
    NotFound (no such user, or not the agent's), InvalidInput, RateLimited (the agent is paused for this
    person, or the person had their pushes for the window).
    """
    caller.require(TokenKind.AGENT, TokenKind.OPERATOR, scope=Scope.NOTICES)
    if caller.kind is TokenKind.OPERATOR:
        if user_id is None:
            raise InvalidInput("user_id", "user_id is required: name the person to notify.")
        user = user_id
    else:
        assert caller.user_id is not None
        if user_id is not None and user_id != caller.user_id:
            raise NotFound(f"There is no user {user_id!r}.")
        user = caller.user_id
    if not ctx.device_channel:
        raise NotFound("Notices need the device channel, which is off on this gateway.")
    notice = check_notice(event, data, ui, ctx.limits.notice_text)
    notice_id = new_id("ntc")
    now = ctx.clock.now()
    limits = ctx.limits
    async with ctx.store.unit_of_work(caller.tenant_id) as uow:
        if await uow.users.get(user) is None:
            raise NotFound(f"There is no user {user!r}.")
        if caller.kind is TokenKind.AGENT:
            paused = await uow.pauses.paused_until(user, caller.agent_id or "")
            if paused is not None and paused > now:
                raise RateLimited(
                    "The person said a request from this agent wasn't them; its pushes to them are paused "
                    f"until {paused.strftime('%H:%M')} UTC.",
                    retry_after=max(1, int((paused - now).total_seconds())),
                )
        since = now - timedelta(seconds=limits.push_window_seconds)
        pushed = await uow.outbox.pushed_since(user, since)
        if pushed >= limits.push_cap:
            raise RateLimited(
                f"The person had {pushed} pushes in the last {limits.push_window_seconds // 60} minutes, "
                "the most allowed; try again later.",
                retry_after=limits.push_window_seconds,
            )
        targets = [d for d in await uow.devices.list(user) if d.status is DeviceStatus.ACTIVE]
        for device in targets:
            live = device.live(now)  # a live link gets the first moments, as for a call
            await uow.outbox.add(
                OutboxItem(
                    tenant_id=caller.tenant_id,
                    delivery_id=new_id("push"),
                    device_uid=device.device_uid,
                    user_id=user,
                    event=notice.event,
                    subject_id=notice_id,
                    status=OutboxStatus.QUEUED if device.push is not None else OutboxStatus.HELD,
                    not_before=now + timedelta(seconds=limits.live_ack_seconds if live else 0),
                    created_at=now,
                    data=notice.data,
                    title=notice.title,
                    body=notice.body,
                )
            )
        await uow.journal.append(
            AuditRecord(
                "notice.queued",
                caller.actor,
                subject=notice_id,
                data={
                    "event": notice.event,
                    "user_id": user,
                    "devices": " ".join(d.device_id for d in targets),
                    "data_keys": " ".join(sorted(notice.data)),
                    "own_words": bool(notice.title or notice.body),
                },
            ),
            now,
        )
        if any(d.push is not None for d in targets):
            uow.notify(outbox_key(caller.tenant_id))
        if targets:
            uow.notify(notices_key(caller.tenant_id, user))
    return [d.device_id for d in targets]
