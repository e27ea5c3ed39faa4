"""FastAPI application factory: the routers over one :class:`gateway.runtime.Runtime`.

Routes (:mod:`gateway.api`, every path in the route table :mod:`gateway.api.routes`): ``POST /ocr``,
``POST /ocr-file``, ``POST /layout-parsing``, ``POST /restructure-pages`` (a user or admin bearer
token when tokens are configured), ``GET /health``, ``GET /ready`` (open), ``GET /upstreams``, ``GET
/metrics``, ``POST /admin/drain``, ``POST /admin/undrain`` (an admin token,
:mod:`gateway.api.drain`), the status page under ``/status`` (an admin session,
:mod:`gateway.status`), and the official PaddleOCR API job routes under ``/api/v2/ocr/``
(:mod:`gateway.api.jobs`). Errors are ``{"error": {"code", "message", ...}, "request_id"}`` with a
4xx/5xx status (:mod:`gateway.api.errors`); ``/docs`` and ``/openapi.json`` describe every route's
request and response (:mod:`gateway.api.schemas`). The hot routes' ``POST`` is served by the hot
path (:mod:`gateway.server.hot_path`) with the handlers their routers declare
(:func:`hot_handlers`).

Usage::

    from gateway.server.app import create_app
    app = create_app("/etc/paddleocr-fleet/gateway.json")      # watches the file
    app = create_app(parse_settings({"upstreams": [...]}))      # no file, no reload
    uvicorn.run(app, host="0.0.0.0", port=9101, **uvicorn_options(app))
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute, APIRouter

from gateway.api import admin, drain, jobs, native, ocr
from gateway.api.errors import install_exception_handlers
from gateway.api.routes import COUNTED_PATHS, HOT_PATHS
from gateway.api.schemas import install_openapi
from gateway.config.settings import Settings, load_settings
from gateway.observability.logs import flush_access_log
from gateway.runtime import Runtime
from gateway.server.body_deadline import BodyDeadlineMiddleware
from gateway.server.hot_path import GatewayApp, Handler, HotServer
from gateway.server.middleware import RequestContextMiddleware
from gateway.shared.occupancy import Seat
from gateway.status import router as status_router
from gateway.wire.urlguard import Resolver
from gateway.wire.uvicorn_adapter import serving_plan

__all__ = ["ROUTERS", "create_app", "hot_handlers"]

ROUTERS = (ocr.router, native.router, admin.router, drain.router, jobs.router, status_router)
"""Every router of the app; the paths they declare are those of :mod:`gateway.api.routes`."""

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
    one of several worker processes (:mod:`gateway.server.supervisor`)."""
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
    app.add_middleware(RequestContextMiddleware, runtime=runtime, routes=COUNTED_PATHS)
    install_exception_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.state.hot = None
    if plan.fast:  # else the routers' declarations serve the hot routes (wire.uvicorn_adapter)
        for path, handler in hot_handlers(ROUTERS).items():
            app.serve_hot(path, handler)
        app.wrap_hot(
            lambda inner: BodyDeadlineMiddleware(
                inner, timeout=lambda: runtime.settings.server.body_timeout_s
            )
        )
        app.wrap_hot(
            lambda inner: RequestContextMiddleware(inner, runtime=runtime, routes=COUNTED_PATHS)
        )
        app.state.hot = HotServer(app, runtime)
    install_openapi(app)
    return app


def hot_handlers(routers: Iterable[APIRouter]) -> dict[str, Handler]:
    """The endpoint each hot route (:data:`gateway.api.routes.HOT_PATHS`) is declared with on
    its router: the very function the hot path calls for its ``POST``."""
    handlers: dict[str, Handler] = {}
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute) or route.path not in HOT_PATHS:
                continue
            if "POST" in (route.methods or ()):
                handlers[route.path] = route.endpoint
    missing = HOT_PATHS - handlers.keys()
    if missing:
        raise RuntimeError(f"hot routes that no router declares a POST for: {sorted(missing)}")
    return handlers
