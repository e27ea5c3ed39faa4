"""The route table: every path the gateway serves by name, and who serves it.

One list that everything which needs a path reads:

- the routers declare their routes with these paths (``@router.post(OCR.path, ...)``);
- the app (:func:`gateway.server.app.create_app`) gives the hot path the handlers of the
  routes marked ``hot``, taken from the routers' own declarations;
- the request middleware counts and logs a request under its path when the path is here, else
  as ``other`` (a path with an id in it would make one series per id);
- the error bodies (:mod:`gateway.api.errors`) carry PaddleX's envelope on the routes marked
  ``paddlex_envelope``.

A ``hot`` route is a ``POST`` that :mod:`gateway.server.hot_path` serves straight from the
connection, past FastAPI's routing and middleware: FastAPI never calls its endpoint for a
``POST``. It stays declared on its router so that ``/docs`` and ``/openapi.json`` describe it
and any other method gets FastAPI's answer (405).

The job routes (:mod:`gateway.api.jobs`) and the status page (:mod:`gateway.status`) declare
their own paths; the ones counted by name are listed here too, and
``tests/gateway/test_routes.py`` checks that this table and the app's routes agree.

Usage::

    @router.post(OCR.path, ...)
    HOT_PATHS        # {"/ocr", "/ocr-file", "/layout-parsing", "/restructure-pages"}
    COUNTED_PATHS    # every path of the table
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.wire import paddlex_routes


@dataclass(frozen=True)
class Route:
    """One path of the gateway's API."""

    path: str
    hot: bool = False
    """``POST`` served by the hot path, past FastAPI's routing (see module doc)."""
    paddlex_envelope: bool = False
    """Errors also carry PaddleX's ``logId``, ``errorCode``, ``errorMsg``."""


# documents (gateway.api.ocr, gateway.api.native)
OCR = Route("/ocr", hot=True)
OCR_FILE = Route("/ocr-file", hot=True)
LAYOUT_PARSING = Route(paddlex_routes.LAYOUT_PARSING, hot=True, paddlex_envelope=True)
RESTRUCTURE_PAGES = Route(paddlex_routes.RESTRUCTURE_PAGES, hot=True, paddlex_envelope=True)
# operations (gateway.api.admin, gateway.api.drain)
HEALTH = Route("/health")
READY = Route("/ready")
UPSTREAMS = Route("/upstreams")
METRICS = Route("/metrics")
DRAIN = Route("/admin/drain")
UNDRAIN = Route("/admin/undrain")
# declared by gateway.api.jobs and gateway.status.router
JOBS = Route("/api/v2/ocr/jobs")
STATUS = Route("/status")
STATUS_LOGIN = Route("/status/login")
STATUS_LOGOUT = Route("/status/logout")
STATUS_STATE = Route("/status/api/state")

TABLE = (
    OCR,
    OCR_FILE,
    LAYOUT_PARSING,
    RESTRUCTURE_PAGES,
    HEALTH,
    READY,
    UPSTREAMS,
    METRICS,
    DRAIN,
    UNDRAIN,
    JOBS,
    STATUS,
    STATUS_LOGIN,
    STATUS_LOGOUT,
    STATUS_STATE,
)

COUNTED_PATHS = frozenset(route.path for route in TABLE)
HOT_PATHS = frozenset(route.path for route in TABLE if route.hot)
PADDLEX_ENVELOPE_PATHS = frozenset(route.path for route in TABLE if route.paddlex_envelope)
