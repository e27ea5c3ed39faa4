"""Health and operations: ``/health`` and ``/ready`` (open), ``/upstreams`` and ``/metrics``
(an admin token when tokens are configured).

Usage::

    app.include_router(router)
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response

from gateway.access.control import admin_principal
from gateway.api.common import RuntimeDep
from gateway.api.routes import HEALTH, METRICS, READY, UPSTREAMS
from gateway.api.schemas import HealthResponse, ReadyResponse, UpstreamsResponse, error_responses

router = APIRouter(tags=["operations"])


@router.get(HEALTH.path, summary="the gateway process lives", response_model=HealthResponse)
async def health() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get(
    READY.path,
    summary="200 when at least one upstream can serve, else 503",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "no upstream can serve"}},
)
async def ready(runtime: RuntimeDep) -> JSONResponse:
    snapshot = runtime.pool.gauge_snapshot()
    healthy = sum(1 for _, _, state in snapshot["upstreams"] if state == "healthy")
    total = len(snapshot["upstreams"])
    body = {"ready": healthy > 0, "healthy": healthy, "total": total}
    return JSONResponse(body, status_code=200 if healthy else 503)


@router.get(
    UPSTREAMS.path,
    summary="each upstream's state and counters",
    response_model=UpstreamsResponse,
    responses=error_responses(401, 403),
    dependencies=[Depends(admin_principal)],
)
async def upstreams(runtime: RuntimeDep) -> JSONResponse:
    return JSONResponse(runtime.pool.snapshot())


@router.get(
    METRICS.path,
    summary="Prometheus text format",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        **error_responses(401, 403),
    },
    dependencies=[Depends(admin_principal)],
)
async def metrics(runtime: RuntimeDep) -> Response:
    body, content_type = runtime.metrics.render(
        runtime.pool.gauge_snapshot, runtime.access.in_flight()
    )
    return Response(body, media_type=content_type)
