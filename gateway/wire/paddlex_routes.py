"""PaddleX's routes, named once: the paths a PaddleX serving app answers on.

PaddleX's basic serving app (``paddlex --serve``, PaddleOCR-VL pipelines) serves
:data:`LAYOUT_PARSING` (one document parsed, page by page), :data:`RESTRUCTURE_PAGES` (pages
parsed before, merged and concatenated) and :data:`HEALTH` (docs/paddlex-protocol.md). Whatever
calls PaddleX or stands in for it names them from here: the gateway's calls upstream
(:mod:`gateway.upstream`), its PaddleX-native routes and the slice keeper (the same paths, in
front of PaddleX), the health checks' default path, the Pulumi program's and ``fleetctl``'s
probes, and the PaddleX doubles of the tests and the benchmarks. A module of its own at the
bottom of the gateway, importing nothing, so that any of them may import it.

Usage::

    from gateway.wire import paddlex_routes
    reply = await client.post(upstream.url + paddlex_routes.LAYOUT_PARSING, json=body)
"""

from __future__ import annotations

from typing import Final

LAYOUT_PARSING: Final = "/layout-parsing"
RESTRUCTURE_PAGES: Final = "/restructure-pages"
HEALTH: Final = "/health"
