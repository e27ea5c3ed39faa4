"""The route table (gateway/api/routes.py) against the app it describes: the same paths, the hot
routes served by the hot path with the routers' own endpoints and never by FastAPI's routing,
and still described in /openapi.json."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.routing import APIRoute, APIRouter

from gateway.api import routes
from gateway.config.settings import parse_settings
from gateway.server.app import ROUTERS, create_app, hot_handlers
from tests.gateway.conftest import fast_path_only, gateway_config
from tests.gateway.samples import b64, png_bytes


def declared(method: str | None = None) -> dict[str, Any]:
    """The path and endpoint of each route the app's routers declare (of ``method``)."""
    return {
        r.path: r.endpoint
        for router in ROUTERS
        for r in router.routes
        if isinstance(r, APIRoute) and (method is None or method in r.methods)
    }


def test_the_table_lists_every_path_the_app_serves_by_name() -> None:
    assert {path for path in declared() if "{" not in path} == routes.COUNTED_PATHS
    assert routes.HOT_PATHS <= routes.COUNTED_PATHS
    assert {"/layout-parsing", "/restructure-pages"} == routes.PADDLEX_ENVELOPE_PATHS


@fast_path_only
def test_the_hot_path_calls_the_endpoints_the_routers_declare() -> None:
    app = create_app(parse_settings(gateway_config(["http://127.0.0.1:9"])))
    posts = declared("POST")
    assert app.hot == {path: posts[path] for path in routes.HOT_PATHS}
    assert set(app.hot) == {"/ocr", "/ocr-file", "/layout-parsing", "/restructure-pages"}


def test_a_hot_route_no_router_declares_is_refused() -> None:
    others = [router for router in ROUTERS if all(r.path != "/ocr-file" for r in router.routes)]
    assert len(others) == len(ROUTERS) - 1
    with pytest.raises(RuntimeError, match="/ocr-file"):
        hot_handlers(others)


@fast_path_only
def test_fastapi_routing_never_serves_a_hot_post(fleet, start_gateway, monkeypatch) -> None:
    gw = start_gateway(gateway_config(fleet.urls))
    routed: list[str] = []
    route_request = APIRouter.__call__

    async def spy(self: APIRouter, scope: Any, receive: Any, send: Any) -> None:
        if self is gw.app.router:  # not the PaddleX doubles' routers
            routed.append(f"{scope['method']} {scope['path']}")
        await route_request(self, scope, receive, send)

    monkeypatch.setattr(APIRouter, "__call__", spy)
    body = {"base64": b64(png_bytes())}
    assert gw.client.post("/ocr", json=body).status_code == 200  # the protocol's hot path
    forwarded = {"X-Forwarded-For": "10.1.2.3"}  # takes the ASGI way: GatewayApp's own dispatch
    assert gw.client.post("/ocr", json=body, headers=forwarded).status_code == 200
    assert routed == []
    assert gw.client.get("/ocr").status_code == 405  # any other method: FastAPI's routing
    assert routed == ["GET /ocr"]
    documented = gw.client.get("/openapi.json").json()["paths"]
    assert all("post" in documented[path] for path in routes.HOT_PATHS)
