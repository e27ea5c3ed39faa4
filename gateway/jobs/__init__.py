"""The official PaddleOCR API job protocol on the gateway (``/api/v2/ocr/jobs``).

- :mod:`gateway.jobs.store`: the durable store (SQLite in WAL mode plus files under ``jobs.dir``).
- :mod:`gateway.jobs.protocol`: the wire format (envelope, pageRanges, options, signed URLs).
- :mod:`gateway.jobs.runner`: page slices dispatched through the central queue, then assembly.
- :mod:`gateway.jobs.router`: the HTTP routes.

Usage::

    from gateway.jobs.router import router
    app.include_router(router)
"""
