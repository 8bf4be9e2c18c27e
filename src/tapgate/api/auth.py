"""Bearer authentication: every route but the open ones resolves its caller here."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tapgate.domain.errors import Unauthenticated
from tapgate.domain.principals import Principal
from tapgate.gateway import Gateway
from tapgate.services.devices import DeviceCaller

_bearer = HTTPBearer(auto_error=False, description="A tapgate token: operator, user, agent or device.")


def gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


async def _caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    if credentials is None:
        raise Unauthenticated("This needs a token: send 'Authorization: Bearer <token>'.")
    return await gateway(request).authenticate(credentials.credentials)


Caller = Annotated[Principal, Depends(_caller)]


async def _gateway(request: Request) -> Gateway:
    # async: FastAPI runs a plain def dependency in a worker thread, a hop that cost a tenth of the
    # server's CPU on the busiest routes (a profile of the throughput row)
    return gateway(request)


GatewayDep = Annotated[Gateway, Depends(_gateway)]


async def _device(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> DeviceCaller:
    if credentials is None:
        raise Unauthenticated("This needs the device's token: send 'Authorization: Bearer <token>'.")
    return await gateway(request).authenticate_device(credentials.credentials)


DeviceDep = Annotated[DeviceCaller, Depends(_device)]


async def _anyone(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    if credentials is None:
        raise Unauthenticated("This needs a token: send 'Authorization: Bearer <token>'.")
    return await gateway(request).authenticate_any(credentials.credentials)


AnyCaller = Annotated[Principal, Depends(_anyone)]
