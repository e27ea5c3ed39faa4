"""What the gateway and the slice keeper say to each other, beside PaddleX's own body.

The gateway sends a job slice to a keeper (:mod:`gateway.keeper.server`) with an idempotency
key and the instance it chose in two headers; a keeper that does not serve that instance answers
:data:`MISDIRECTED`, and the gateway then sends the slice directly
(:mod:`gateway.upstream.keeper_client`). Both ends import these names from here.

Usage::

    headers = {KEY_HEADER: "job-1:0:16", UPSTREAM_HEADER: "http://127.0.0.1:8101"}
"""

from __future__ import annotations

from typing import Final

KEY_HEADER: Final = "idempotency-key"
UPSTREAM_HEADER: Final = "x-keeper-upstream"
MISDIRECTED: Final = 421  # not an instance of this keeper's: the gateway sends the slice directly
