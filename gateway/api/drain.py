"""``POST /admin/drain`` and ``POST /admin/undrain`` (an admin token when tokens are
configured): take PaddleX instances out of dispatch for a rollout, and back in.

A drain stops new work (requests and job slices) at once, then waits up to ``wait_s`` for the
attempts already on those instances, over every worker, to finish, and answers with what is
still in flight: ``drained`` true means nothing is. It holds for ``ttl_s`` at most (a rollout
killed between drain and undrain does not leave an instance out for good), through config
reloads, in every worker (:mod:`gateway.dispatch.drain`). Both calls are idempotent; draining again
sets a new deadline.

Usage::

    POST /admin/drain    {"upstreams": ["http://127.0.0.1:9120"], "wait_s": 600, "ttl_s": 3600}
    POST /admin/drain    {"host": "node-1", "card": 0}      # every instance of that card
    POST /admin/undrain  {"upstreams": ["http://127.0.0.1:9120"]}
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.access.control import admin_principal
from gateway.api.common import RuntimeDep
from gateway.api.routes import DRAIN, UNDRAIN
from gateway.api.schemas import error_responses
from gateway.dispatch.drain import DrainSelector, SelectionError, select_upstreams
from gateway.dispatch.upstreams import Upstream
from gateway.errors import GatewayError
from gateway.runtime import Runtime

router = APIRouter(tags=["operations"], dependencies=[Depends(admin_principal)])

POLL_S = 0.05  # how often a drain looks at the attempts still in flight
MAX_WAIT_S = 3600.0
MAX_TTL_S = 7 * 86400.0


class Selection(BaseModel):
    """Which upstreams: ``upstreams`` (URLs as configured) and/or every upstream of ``card``
    (with ``host`` when several hosts have that card) or of ``vllm``."""

    model_config = ConfigDict(extra="forbid")

    upstreams: list[str] = Field(default_factory=list, description="upstream URLs")
    card: int | str | None = Field(None, description="every upstream of this card")
    host: str | None = Field(None, description="the card's host (or every upstream of a host)")
    vllm: str | None = Field(None, description="every upstream bound to this vLLM URL")

    @model_validator(mode="after")
    def _something(self) -> Selection:
        if self.selector.empty:
            raise ValueError("name the upstreams: upstreams, card (and host), host or vllm")
        return self

    @property
    def selector(self) -> DrainSelector:
        return DrainSelector(tuple(self.upstreams), self.card, self.host, self.vllm)


class DrainRequest(Selection):
    wait_s: float = Field(
        60.0, ge=0, le=MAX_WAIT_S, description="wait this long for the attempts in flight"
    )
    ttl_s: float = Field(
        3600.0, gt=0, le=MAX_TTL_S, description="the drain ends by itself after this long"
    )

    @model_validator(mode="after")
    def _ttl_covers_wait(self) -> DrainRequest:
        if self.ttl_s < self.wait_s:
            raise ValueError(f"ttl_s ({self.ttl_s:g}) must be at least wait_s ({self.wait_s:g})")
        return self


class DrainedUpstream(BaseModel):
    url: str
    state: str = Field(description="draining, drained, or (undrain) its health state")
    in_flight: int
    drained_for_s: float | None = Field(description="seconds left of the drain")


class DrainResponse(BaseModel):
    drained: bool = Field(description="true when nothing is in flight on them any more")
    in_flight: int
    waited_s: float
    upstreams: list[DrainedUpstream]


class UndrainResponse(BaseModel):
    upstreams: list[DrainedUpstream]


def _chosen(runtime: Runtime, selection: Selection) -> list[Upstream]:
    try:
        return select_upstreams(runtime.pool.upstreams, selection.selector)
    except SelectionError as exc:
        raise GatewayError(
            404, "unknown_upstream", str(exc), details={"unknown": exc.unknown}
        ) from None


def _describe(runtime: Runtime, upstreams: list[Upstream]) -> list[dict[str, Any]]:
    pool = runtime.pool
    out = []
    for u in upstreams:
        left = pool.drained_for(u)
        out.append(
            {
                "url": u.url,
                "state": pool.state(u),
                "in_flight": pool.in_flight(u),
                "drained_for_s": None if left is None else round(left, 1),
            }
        )
    return out


@router.post(
    DRAIN.path,
    summary="stop giving upstreams new work; wait for their attempts in flight",
    response_model=DrainResponse,
    responses=error_responses(400, 401, 403, 404),
)
async def drain(body: DrainRequest, runtime: RuntimeDep) -> JSONResponse:
    upstreams = _chosen(runtime, body)
    runtime.pool.drain(upstreams, body.ttl_s)
    started = time.monotonic()
    deadline = started + body.wait_s
    while True:
        # the pool of the answering worker may have been reloaded meanwhile: count the
        # current objects of those URLs (in-flight counts over every worker)
        current = [runtime.pool.get(u.url) or u for u in upstreams]
        in_flight = sum(runtime.pool.in_flight(u) for u in current)
        if not in_flight or time.monotonic() >= deadline:
            break
        await asyncio.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
    return JSONResponse(
        {
            "drained": in_flight == 0,
            "in_flight": in_flight,
            "waited_s": round(time.monotonic() - started, 3),
            "upstreams": _describe(runtime, current),
        }
    )


@router.post(
    UNDRAIN.path,
    summary="take drained upstreams back in",
    response_model=UndrainResponse,
    responses=error_responses(400, 401, 403, 404),
)
async def undrain(body: Selection, runtime: RuntimeDep) -> JSONResponse:
    upstreams = _chosen(runtime, body)
    runtime.pool.undrain(upstreams)
    if runtime.pool.settings.health.enabled:
        await asyncio.gather(*(runtime.health.recover(u) for u in upstreams))
    return JSONResponse({"upstreams": _describe(runtime, upstreams)})
