"""Liveness, readiness and metrics for operators and orchestrators."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tapgate.api.auth import GatewayDep
from tapgate.api.errors import error_response
from tapgate.api.schemas import Health
from tapgate.domain.errors import StorageError

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    summary="The process can reach its database",
    responses={503: {"description": "The database cannot be reached"}},
)
async def readyz(gw: GatewayDep) -> Health | Response:
    try:
        await gw.ready()
    except StorageError as e:
        return error_response(503, e.code, e.message)
    return Health(status="ready")


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
