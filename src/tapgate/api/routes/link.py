"""The device's live link: a WebSocket carrying the frames of DESIGN §3.4 and §18.

The device authenticates with its token in the upgrade's Authorization header or in a first
``device:auth`` frame. What the server sends comes from the gateway (``Gateway.device_link``: calls,
approvals, ``device:revoked``); each ``device:result`` is answered with the gateway's ``device:ack``.
Malformed frames are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from prometheus_client import CollectorRegistry, Counter, Gauge

from tapgate.domain.errors import TapgateError
from tapgate.domain.frames import REVOKED_FRAME, DeviceAuth, DeviceEvent, DeviceResult, parse_frame
from tapgate.gateway import Gateway
from tapgate.services.devices import DeviceCaller

router = APIRouter()
log = logging.getLogger(__name__)
AUTH_SECONDS = 10.0
UNAUTHORIZED = 4401
REVOKED = 4403


class LinkMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "tapgate_ws_frames_dropped", "Malformed or unexpected device frames dropped", registry=registry
        )
        self.links = Gauge("tapgate_ws_links", "Open device WebSocket links", registry=registry)


def _bearer(ws: WebSocket) -> str | None:
    header = ws.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@router.websocket("/v1/device/connect")
async def connect(ws: WebSocket) -> None:
    gateway: Gateway = ws.app.state.gateway
    metrics: LinkMetrics = ws.app.state.link_metrics
    await ws.accept()
    token, claimed = _bearer(ws), None
    if token is None:
        try:
            raw = await asyncio.wait_for(ws.receive_text(), timeout=AUTH_SECONDS)
        except (TimeoutError, WebSocketDisconnect):
            await _close(ws, UNAUTHORIZED)
            return
        frame = parse_frame(raw)
        if not isinstance(frame, DeviceAuth):
            metrics.dropped.inc()
            await _close(ws, UNAUTHORIZED)
            return
        token, claimed = frame.token, frame.device_id
    try:
        caller = await gateway.authenticate_device(token)
    except TapgateError:
        await _close(ws, UNAUTHORIZED)
        return
    if claimed is not None and claimed != caller.device.device_id:
        await _close(ws, UNAUTHORIZED)
        return
    metrics.links.inc()
    try:
        await DeviceLink(gateway, ws, caller, metrics, token).run()
    finally:
        metrics.links.dec()


async def _close(ws: WebSocket, code: int) -> None:
    with contextlib.suppress(Exception):
        await ws.close(code=code)


class DeviceLink:
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
        sending = asyncio.create_task(self._send())
        receiving = asyncio.create_task(self._receive())
        try:
            await asyncio.wait({sending, receiving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, receiving):
                task.cancel()
            for task in (sending, receiving):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await _close(self.ws, self.close_code)

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
                raw = await self.ws.receive_text()
            except (WebSocketDisconnect, RuntimeError):
                return
            frame = parse_frame(raw)
            if isinstance(frame, DeviceResult):
                ack = await self.gateway.link_result(self.caller, frame)
                await self.ws.send_text(json.dumps(ack))
            elif isinstance(frame, DeviceEvent):
                continue  # device events are accepted and not yet delivered anywhere
            else:
                self.metrics.dropped.inc()
