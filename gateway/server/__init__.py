"""Serving: the process, its sockets and connections, and the app assembled from the routes.

The layer under the gateway's programs: ``python -m gateway`` and the slice keeper (``python -m
gateway.keeper``) serve with it, no other layer imports it.
:mod:`~gateway.server.app` builds the FastAPI app from the routers of :mod:`gateway.api` and
:mod:`gateway.status` over one :class:`gateway.runtime.Runtime`;
:mod:`~gateway.server.connections` is the HTTP protocol (uvicorn's, with header and body
deadlines and connection caps) and :mod:`~gateway.server.hot_path` serves the document routes
straight from it; :mod:`~gateway.server.middleware` opens each request's context and writes its
access line; :mod:`~gateway.server.listeners` and :mod:`~gateway.server.serving` hand the
listening sockets over to a successor and drain keep-alive clients;
:mod:`~gateway.server.supervisor` forks the worker processes; :mod:`~gateway.server.memory`
tunes ``malloc`` for megabyte bodies.
"""
