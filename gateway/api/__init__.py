"""The gateway's routes as FastAPI routers over :class:`gateway.runtime.Runtime`.

- :mod:`gateway.routers.ocr`: ``POST /ocr``, ``POST /ocr-file`` (user or admin token)
- :mod:`gateway.routers.native`: ``POST /layout-parsing``, ``POST /restructure-pages``
  (PaddleX-native, user or admin token)
- :mod:`gateway.routers.admin`: ``GET /health``, ``GET /ready`` (open), ``GET /upstreams``,
  ``GET /metrics`` (admin token)

Usage::

    from gateway.api import admin, native, ocr
    app.include_router(ocr.router)
"""
