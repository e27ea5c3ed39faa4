"""The API: the route table, the route handlers and what every route shares.

The routes a client calls, as FastAPI routers over :class:`gateway.runtime.Runtime`; the
status page (:mod:`gateway.status`) sits one layer above and builds on the same pieces.
:mod:`~gateway.api.routes` is the one route table (paths, which the hot path serves);
:mod:`~gateway.api.ocr` (``POST /ocr``, ``/ocr-file``), :mod:`~gateway.api.native` (``POST
/layout-parsing``, ``/restructure-pages``, PaddleX-native), :mod:`~gateway.api.jobs` (the
official PaddleOCR API job routes under ``/api/v2/ocr/``, over the job service
:mod:`gateway.jobs`), :mod:`~gateway.api.admin` (``/health``, ``/ready``, ``/upstreams``,
``/metrics``) and :mod:`~gateway.api.drain` (``/admin/drain``, ``/admin/undrain``) are the
handlers; :mod:`~gateway.api.common` reads bounded bodies and writes raw answers,
:mod:`~gateway.api.errors` answers errors as JSON bodies, :mod:`~gateway.api.schemas` (and
:mod:`~gateway.api.jobs_schemas`, the job routes' envelopes) describes requests and answers for
``/openapi.json``, :mod:`~gateway.api.postprocess` cleans the OCR markdown (``fleetctl`` uses it
too).

Usage::

    from gateway.api import admin, native, ocr
    app.include_router(ocr.router)
"""
