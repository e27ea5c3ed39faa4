"""FastAPI application factory: the routers over one :class:`gateway.runtime.Runtime`.

Routes (:mod:`gateway.routers`): ``POST /ocr``, ``POST /ocr-file``, ``POST /layout-parsing``,
``POST /restructure-pages`` (a user or admin bearer token when tokens are configured),
``GET /health``, ``GET /ready`` (open), ``GET /upstreams``, ``GET /metrics``,
``POST /admin/drain``, ``POST /admin/undrain`` (an admin token, :mod:`gateway.routers.drain`),
the status page under ``/status`` (an admin session, :mod:`gateway.status`),
and the official PaddleOCR API job routes under ``/api/v2/ocr/`` (:mod:`gateway.jobs`).
Errors are ``{"error": {"code", "message", ...}, "request_id"}`` with a 4xx/5xx status
(:mod:`gateway.errors`); ``/docs`` and ``/openapi.json`` describe every route's request and
response (:mod:`gateway.schemas`).

Usage::

    from gateway.app import create_app
    app = create_app("/etc/paddleocr-fleet/gateway.json")      # watches the file
    app = create_app(parse_settings({"upstreams": [...]}))      # no file, no reload
    uvicorn.run(app, host="0.0.0.0", port=9101, **uvicorn_options(app))
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from gateway.connections import BodyDeadlineMiddleware
from gateway.errors import error_response, gateway_error_response, install_exception_handlers
from gateway.hot_path import GatewayApp, HotServer
from gateway.jobs import router as jobs_router
from gateway.logs import flush_access_log
from gateway.middleware import RequestContextMiddleware
from gateway.occupancy import Seat
from gateway.routers import admin, drain, native, ocr
from gateway.runtime import Runtime
from gateway.schemas import install_openapi
from gateway.settings import Settings, load_settings
from gateway.status import router as status_router
from gateway.urlguard import Resolver
from gateway.uvicorn_adapter import serving_plan

__all__ = ["ROUTES", "create_app", "error_response", "gateway_error_response"]

HOT_ROUTES = {
    "/ocr": ocr.ocr,
    "/ocr-file": ocr.ocr_file,
    "/layout-parsing": native.layout_parsing,
    "/restructure-pages": native.restructure_pages,
}
"""The document routes served past FastAPI's routing (:mod:`gateway.hot_path`)."""

ROUTES = frozenset(
    {
        "/ocr",
        "/ocr-file",
        "/layout-parsing",
        "/restructure-pages",
        "/health",
        "/ready",
        "/upstreams",
        "/metrics",
        "/admin/drain",
        "/admin/undrain",
        "/api/v2/ocr/jobs",
        "/status",
        "/status/login",
        "/status/logout",
        "/status/api/state",
    }
)

DESCRIPTION = """One front door for every PaddleX instance of the fleet: load-aware dispatch,
failover, health checks, limits and metrics. Document routes need `Authorization: Bearer
<token>` when the gateway's config lists tokens; `/upstreams` and `/metrics` need an admin
token. Every error is `{"error": {"code", "message"}, "request_id"}`."""


def create_app(
    settings_or_path: Settings | str | os.PathLike[str],
    *,
    watch: bool | None = None,
    resolver: Resolver | None = None,
    seat: Seat | None = None,
) -> GatewayApp:
    """Build a gateway app. A path is loaded now (ConfigError on a bad file) and watched.
    ``resolver`` replaces the system resolver of URL fetches (tests); ``seat``: this app is
    one of several worker processes (:mod:`gateway.supervisor`)."""
    if isinstance(settings_or_path, Settings):
        runtime = Runtime(settings_or_path, None, watch=False, resolver=resolver, seat=seat)
    else:
        settings = load_settings(settings_or_path)
        runtime = Runtime(settings, settings_or_path, watch=watch, resolver=resolver, seat=seat)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()
            flush_access_log()

    app = GatewayApp(
        title="paddleocr-fleet gateway",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.serving_plan = plan = serving_plan()
    # added last = outermost: the context exists before the body deadline can fire
    app.add_middleware(
        BodyDeadlineMiddleware, timeout=lambda: runtime.settings.server.body_timeout_s
    )
    app.add_middleware(RequestContextMiddleware, runtime=runtime, routes=ROUTES)
    app.state.hot = None
    if plan.fast:  # else the routers' declarations serve the hot routes (uvicorn_adapter)
        for path, handler in HOT_ROUTES.items():
            app.serve_hot(path, handler)
        app.wrap_hot(
            lambda inner: BodyDeadlineMiddleware(
                inner, timeout=lambda: runtime.settings.server.body_timeout_s
            )
        )
        app.wrap_hot(lambda inner: RequestContextMiddleware(inner, runtime=runtime, routes=ROUTES))
        app.state.hot = HotServer(app, runtime)
    install_exception_handlers(app)
    for module in (ocr, native, admin, drain, jobs_router):
        app.include_router(module.router)
    app.include_router(status_router)
    install_openapi(app)
    return app
