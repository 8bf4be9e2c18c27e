"""The device's live link: a WebSocket carrying the device's frames both ways.

The device authenticates with its token in the upgrade's Authorization header or in a first
``device:auth`` frame. What the server sends comes from the gateway (``Gateway.device_link``: calls,
approvals, notices, ``device:revoked``), after ``device:moved`` when the gateway moved and the
device linked at its old address; each ``device:result`` is answered with the gateway's ``device:ack``.
Malformed frames are dropped and counted. An idle link does nothing: no timer revalidates it, and its
hold is renewed with every other link of the process in batches (``services/links.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.websockets import WebSocket, WebSocketDisconnect

from tapgate import tasks
from tapgate.api.errors import error_response
from tapgate.api.streams import RETRY_AFTER_SECONDS, StreamSlots
from tapgate.domain.errors import RateLimited, TapgateError
from tapgate.domain.frames import REVOKED_FRAME, DeviceAuth, DeviceEvent, DeviceResult, parse_frame
from tapgate.gateway import Gateway
from tapgate.services.devices import DeviceCaller

log = logging.getLogger(__name__)
AUTH_SECONDS = 10.0
UNAUTHORIZED = 4401
REVOKED = 4403
TOO_MANY = 4429
MOVED = "device:moved"


class LinkMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "tapgate_ws_frames_dropped", "Malformed or unexpected device frames dropped", registry=registry
        )
        self.links = Gauge("tapgate_ws_links", "Open device WebSocket links", registry=registry)


def _bearer(ws: WebSocket) -> str | None:
    """The token of the upgrade's ``Authorization: Bearer`` header, read from the scope itself: a
    ``ws.headers`` view would stay with the connection for the link's life."""
    for name, value in ws.scope["headers"]:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


PATH = "/v1/device/connect"


async def connect(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    metrics: LinkMetrics = ws.app.state.link_metrics
    slots: StreamSlots = ws.app.state.stream_slots
    token, claimed = _bearer(ws), None
    slot = StreamSlots.key(token) if token else None
    if slot is not None and not slots.take(slot):
        await _deny(ws, slots.refusal())
        return
    try:
        await _serve(ws, gateway, metrics, slots, token, claimed, slot)
    finally:
        if slot is not None:
            slots.give(slot)


async def _deny(ws: WebSocket, reason: str) -> None:
    """429 before the upgrade where the server can answer it, else a close that says why."""
    if "websocket.http.response" in ws.scope.get("extensions", {}):
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        await ws.send_denial_response(error_response(429, RateLimited.code, reason, headers))
        return
    await ws.accept()
    with contextlib.suppress(Exception):
        await ws.close(code=TOO_MANY, reason=reason[:120])


async def _serve(
    ws: WebSocket,
    gateway: Gateway,
    metrics: LinkMetrics,
    slots: StreamSlots,
    token: str | None,
    claimed: str | None,
    slot: str | None,
) -> None:
    await ws.accept()
    if token is None:
        try:
            raw = await asyncio.wait_for(_receive_text(ws), timeout=AUTH_SECONDS)
        except (TimeoutError, WebSocketDisconnect, RuntimeError):
            await _close(ws, UNAUTHORIZED)
            return
        frame = parse_frame(raw) if raw is not None else None
        if not isinstance(frame, DeviceAuth):
            metrics.dropped.inc()
            await _close(ws, UNAUTHORIZED)
            return
        token, claimed = frame.token, frame.device_id
    try:
        caller = await gateway.authenticate_device(token, present=False)  # the link's hold marks it
    except TapgateError:
        await _close(ws, UNAUTHORIZED)
        return
    if claimed is not None and claimed != caller.device.device_id:
        await _close(ws, UNAUTHORIZED)
        return
    moved = await gateway.moved_to(caller, _host(ws))
    ws.scope["headers"] = []  # nothing reads the upgrade's headers again, and a link lasts hours
    if moved is not None:  # the device follows and links again there; until then it is served here
        with contextlib.suppress(Exception):  # a link gone already ends in DeviceLink as any other
            await ws.send_text(json.dumps({"type": MOVED, "url": moved}))
    if slot is None:  # authenticated by its first frame: counted now
        slot = StreamSlots.key(token)
        if slot is None or not slots.take(slot):
            with contextlib.suppress(Exception):
                await ws.close(code=TOO_MANY, reason=slots.refusal()[:120])
            return
        try:
            await DeviceLink(gateway, ws, caller, metrics, token).run()
        finally:
            slots.give(slot)
        return
    await DeviceLink(gateway, ws, caller, metrics, token).run()


def _host(ws: WebSocket) -> str:
    """The address the device linked at (the upgrade's Host header)."""
    for name, value in ws.scope["headers"]:
        if name.lower() == b"host":
            return bytes(value).decode("latin-1")
    return ""


async def _receive_text(ws: WebSocket) -> str | None:
    """The next frame's text; None for a binary frame (the protocol is JSON text: it is dropped like any
    malformed frame, never fatal). Raises WebSocketDisconnect when the device went away."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000))
    text = message.get("text")
    return text if isinstance(text, str) else None


async def _close(ws: WebSocket, code: int) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code=code)


class DeviceLink:
    __slots__ = ("caller", "close_code", "gateway", "metrics", "token", "ws")  # one per link, for hours

    def __init__(
        self, gateway: Gateway, ws: WebSocket, caller: DeviceCaller, metrics: LinkMetrics, token: str
    ) -> None:
        self.gateway = gateway
        self.ws = ws
        self.caller = caller
        self.metrics = metrics
        self.token = token
        self.close_code = 1000

    async def run(self) -> None:
        # The frames end with device:revoked once the token is revoked (in any process: the tenant's
        # credentials wake the link) or expires, so the link needs no watcher of its own.
        # The frames go out from a task of their own; the device's frames are read in this one, which the
        # sender cancels when the frames end. One task a link rather than two and a wait on both: a link
        # lives for hours, and each would hold its own state for as long.
        here = asyncio.current_task()
        assert here is not None
        sending = asyncio.create_task(self._send())
        running = True

        def sent_all(_: asyncio.Task[None]) -> None:
            if running:  # the frames ended (device:revoked) or failed: stop reading
                here.cancel()

        sending.add_done_callback(sent_all)
        self.metrics.links.inc()
        try:
            await self._receive()
        except asyncio.CancelledError:
            # Cancelled by ``sent_all`` alone: the link ends here. Cancelled from outside too (the
            # server stopping): that cancellation goes on.
            if not sending.done() or here.uncancel() > 0:
                raise
        finally:
            running = False
            try:
                await tasks.stop(sending)
                await _close(self.ws, self.close_code)
            finally:
                self.metrics.links.dec()

    async def _send(self) -> None:
        frames = self.gateway.device_link(self.caller, self.token)
        try:
            async for frame in frames:
                if frame == REVOKED_FRAME:
                    self.close_code = REVOKED
                await self.ws.send_text(json.dumps(frame))
        finally:
            await frames.aclose()

    async def _receive(self) -> None:
        while True:
            try:
                raw = await _receive_text(self.ws)
            except (WebSocketDisconnect, RuntimeError):
                return
            frame = parse_frame(raw) if raw is not None else None
            if isinstance(frame, DeviceResult):
                ack = await self.gateway.link_result(self.caller, frame)
                await self.ws.send_text(json.dumps(ack))
            elif isinstance(frame, DeviceEvent):
                continue  # device events are accepted and not yet delivered anywhere
            else:
                self.metrics.dropped.inc()
