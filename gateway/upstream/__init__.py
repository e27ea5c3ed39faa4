"""Talking to PaddleX: the protocol, the attempt loop with failover, and the PDF fan-out.

:mod:`~gateway.upstream.paddlex_api` builds the ``/layout-parsing`` and ``/restructure-pages``
bodies and checks the answers; :mod:`~gateway.upstream.attempts` classifies how one attempt
ended; :mod:`~gateway.upstream.proxy` leases an upstream from the pool (:mod:`gateway.dispatch`),
runs an attempt and fails over to the next one; :mod:`~gateway.upstream.fanout` parses a long
PDF in page slices on several upstreams at once (through their slice keepers,
:mod:`gateway.keeper`, which :mod:`~gateway.upstream.keeper_client` calls and asks after a
crash). The bytes go over :mod:`gateway.wire.upstream_http`.
"""
