"""The request context: the request id and the token's name that every log line, metric and
error body of one request carries.

The request middleware (:mod:`gateway.server.middleware`) opens it when a request arrives and
keeps it in ``scope["gateway.context"]``; the access check fills in the token's name; the error
bodies (:mod:`gateway.api.errors`) and the access log read it. The request id is the caller's
``X-Request-ID`` when it is short and printable, else a fresh one, unique per process.

Usage::

    context = request_context(request)      # request_id, token name (set by the middleware)
    rid = fresh_request_id()                # 32 hex digits
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request

ANONYMOUS = "-"


@dataclass
class RequestContext:
    """Per-request facts the middleware logs and counts; kept in ``scope["gateway.context"]``."""

    request_id: str
    token: str = ANONYMOUS
    started: float = field(default_factory=time.perf_counter)


def new_request_id(given: str | None) -> str:
    """The caller's ``X-Request-ID`` when it is short and printable, else a fresh one."""
    if given and len(given) <= 128 and given.isprintable() and given.isascii():
        return given
    return fresh_request_id()


def fresh_request_id() -> str:
    """32 hex digits, unique (not secret): this process's random prefix and a count."""
    return f"{_ids.prefix}{next(_ids.count) & 0xFFFFFFFFFFFF:012x}"


class _Ids:
    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.prefix = secrets.token_hex(10)
        self.count = itertools.count()


_ids = _Ids()
os.register_at_fork(after_in_child=_ids.renew)  # each worker its own prefix


def request_context(request: Request) -> RequestContext:
    """The request's context (created here if no middleware made one)."""
    context = request.scope.get("gateway.context")
    if context is None:
        context = RequestContext(new_request_id(request.headers.get("x-request-id")))
        request.scope["gateway.context"] = context
    return context
