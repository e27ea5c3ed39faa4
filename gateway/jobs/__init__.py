"""The official PaddleOCR API job protocol on the gateway (``/api/v2/ocr/jobs``).

- :mod:`gateway.jobs.backend`: the store's interface, and the choice of its backend:
  :mod:`gateway.jobs.store` (SQLite in WAL mode plus files under ``jobs.dir``, behind
  :mod:`gateway.jobs.sqlite_backend`) or :mod:`gateway.jobs.postgres` (``jobs.store_url``, one
  PostgreSQL shared by every gateway); :mod:`gateway.jobs.fairness`, the claim rule both apply.
- :mod:`gateway.jobs.protocol`: the wire format (envelope, pageRanges, options, signed URLs).
- :mod:`gateway.jobs.runner`: page slices dispatched through the central queue, then assembly.

The service the runtime starts and owns; its HTTP routes are an API module,
:mod:`gateway.api.jobs`.

Usage::

    store = await open_backend(settings.jobs)    # gateway.jobs.stores
"""
