"""Bearer authentication: every route but the open ones resolves its caller here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from tapgate.domain.errors import Unauthenticated
from tapgate.domain.principals import Principal
from tapgate.gateway import Gateway
from tapgate.services.devices import DeviceCaller

_bearer = HTTPBearer(auto_error=False, description="A tapgate token: operator, user, agent or device.")


def bearer_token(request: Request) -> str | None:
    """The bearer token of ``request``, read as ``_bearer`` reads it (None: none, or another scheme)."""
    authorization = request.headers.get("Authorization")
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not (authorization and scheme and credentials) or scheme.lower() != "bearer":
        return None
    return credentials


def gateway(request: Request) -> Gateway:
    gw: Gateway = request.app.state.gateway
    return gw


class ByToken:
    """A caller dependency: the request's bearer token, authenticated by one gateway method (a planned
    route, fast/plan.py, calls that method itself)."""

    def __init__(self, authenticate: Callable[[Gateway, str], Awaitable[Any]], missing: str) -> None:
        self.authenticate = authenticate
        self.missing = missing

    async def __call__(
        self, request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Any:
        if credentials is None:
            raise Unauthenticated(self.missing)
        return await self.authenticate(gateway(request), credentials.credentials)


_caller = ByToken(Gateway.authenticate, "This needs a token: send 'Authorization: Bearer <token>'.")
Caller = Annotated[Principal, Depends(_caller)]


async def _gateway(request: Request) -> Gateway:
    # async: FastAPI runs a plain def dependency in a worker thread, a hop that cost a tenth of the
    # server's CPU on the busiest routes (a profile of the throughput row)
    return gateway(request)


GATEWAY_DEPENDENCY = _gateway  # what a planned route (fast/plan.py) passes the gateway for
GatewayDep = Annotated[Gateway, Depends(_gateway)]

_device = ByToken(
    Gateway.authenticate_device, "This needs the device's token: send 'Authorization: Bearer <token>'."
)
DeviceDep = Annotated[DeviceCaller, Depends(_device)]

_anyone = ByToken(Gateway.authenticate_any, "This needs a token: send 'Authorization: Bearer <token>'.")
AnyCaller = Annotated[Principal, Depends(_anyone)]
