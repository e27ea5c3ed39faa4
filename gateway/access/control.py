"""Who may call the gateway: bearer tokens, per-token quotas, and the FastAPI dependencies.

The config lists tokens by name and SHA-256 (``auth.tokens``, ``auth.admin_tokens``), never the
token itself. A request presents ``Authorization: Bearer <token>``; its SHA-256 is compared
with every configured digest in constant time (no early exit, :func:`hmac.compare_digest`).
Document routes take a user or an admin token; ``/upstreams`` and ``/metrics`` take an admin
token (a user token gets 403). Missing or wrong token: 401 with ``WWW-Authenticate: Bearer``.
With no token configured the gateway is open (every caller is :data:`ANONYMOUS`).

Quotas per token (optional): ``max_in_flight`` requests at once and ``rate_per_s`` (a token
bucket holding one second's worth, at least 1); over either, 429 with ``Retry-After``. Each
token has its own counters, so one token's flood slows no other token. The counts live in a
:class:`~gateway.shared.counters.Counters`: this process's, or with a ``seat`` (one of several
worker processes, :mod:`gateway.shared.occupancy`) those of every worker, so the quotas count the
token's requests in every worker (its in-flight count is a sum over the workers' rows, its bucket
is shared). The code path is the same.

Usage::

    access = Access(settings.auth)
    principal = access.authenticate(request.headers.get("authorization"), admin=False)
    access.admit(principal)          # raises AccessError(429) over a quota
    try:
        ...
    finally:
        access.release(principal)

    @router.post("/ocr")
    async def ocr(principal: Principal = Depends(user_principal)) -> ...: ...
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from fastapi import Request, Security
from fastapi.security import HTTPBearer

from gateway.access.local_token import LOCAL_PRINCIPAL, local_token_digest
from gateway.config.settings import AuthSettings, TokenSpec
from gateway.errors import AccessError
from gateway.observability.context import ANONYMOUS, request_context
from gateway.shared.counters import Counters, LocalCounters, SharedCounters

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics
    from gateway.shared.occupancy import Seat

log = logging.getLogger("gateway.tokens")  # not "gateway.access": that is the access log

_INVALID_CHALLENGE = 'Bearer realm="paddleocr-fleet", error="invalid_token"'

bearer_scheme = HTTPBearer(
    auto_error=False,
    description="`Authorization: Bearer <token>`; the gateway's config lists each accepted "
    "token's SHA-256 (`auth.tokens`, `auth.admin_tokens`). Not needed when none is configured.",
)


@dataclass(frozen=True)
class Principal:
    """The authenticated caller: the token's name, whether it is an admin token, its spec."""

    name: str
    admin: bool
    spec: TokenSpec | None = None

    @property
    def tenant(self) -> str | None:
        """The key the central queue shares capacity by (None: the open gateway's one)."""
        return None if self.spec is None else self.name


@dataclass
class _Quota:
    in_flight: int = 0  # this process's requests of the token
    counted: int = 0  # of in_flight, those counted in the counters (admitted under a quota)


def _take(bucket: float, stamp: float, rate: float, now: float) -> tuple[float, int]:
    """Refill a rate bucket (-1: unused, starts full) and take one token: (the bucket after,
    0), or (the bucket refilled, seconds to wait) when it holds less than one."""
    capacity = max(1.0, rate)
    bucket = capacity if bucket < 0 else min(capacity, bucket + (now - stamp) * rate)
    if bucket < 1.0:
        return bucket, max(1, math.ceil((1.0 - bucket) / rate))
    return bucket - 1.0, 0


def token_digest(token: str) -> bytes:
    """SHA-256 of a token, as configured (hex) in ``auth.tokens[].sha256``."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class Access:
    """The configured tokens and each token's quota state (kept across reloads by name)."""

    def __init__(
        self,
        auth: AuthSettings,
        metrics: GatewayMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        seat: Seat | None = None,
        counters: Counters | None = None,
    ) -> None:
        """``counters``: where the quotas are counted (default: this process's, or the
        workers' of ``seat``)."""
        self.metrics = metrics
        self._clock = clock
        if counters is None:
            counters = LocalCounters() if seat is None else SharedCounters(seat)
        self._counters = counters
        self._quotas: dict[str, _Quota] = {}
        self._entries: tuple[tuple[bytes, Principal], ...] = ()
        self.enabled = False
        self.reconfigure(auth)

    def reconfigure(self, auth: AuthSettings) -> None:
        """Swap in a new token list; in-flight counts and buckets stay with their names."""
        entries = [(bytes.fromhex(s.sha256), Principal(s.name, False, s)) for s in auth.tokens]
        entries += [
            (bytes.fromhex(s.sha256), Principal(s.name, True, s)) for s in auth.admin_tokens
        ]
        if auth.enabled and auth.local_token_file:
            digest = local_token_digest(Path(auth.local_token_file))
            entries.append((digest, Principal(LOCAL_PRINCIPAL, True)))
        self._entries = tuple(entries)
        self.enabled = auth.enabled
        names = {principal.name for _, principal in entries}
        for name in [n for n, q in self._quotas.items() if n not in names and not q.in_flight]:
            del self._quotas[name]

    def authenticate(self, authorization: str | None, *, admin: bool) -> Principal:
        """The caller of a request with this ``Authorization`` header, or AccessError
        (401 missing or unknown token, 403 a user token where an admin token is needed)."""
        if not self.enabled:
            return Principal(ANONYMOUS, True)
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            self._count_refusal(ANONYMOUS, "missing_token")
            raise AccessError(
                401,
                "unauthorized",
                "this gateway needs 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": 'Bearer realm="paddleocr-fleet"'},
            )
        presented = token_digest(token)
        found: Principal | None = None
        for digest, principal in self._entries:  # all of them: the time says nothing
            if hmac.compare_digest(digest, presented) and found is None:
                found = principal
        if found is None:
            self._count_refusal(ANONYMOUS, "invalid_token")
            raise AccessError(
                401,
                "invalid_token",
                "the bearer token is not one this gateway accepts",
                headers={"WWW-Authenticate": _INVALID_CHALLENGE},
            )
        if admin and not found.admin:
            self._count_refusal(found.name, "forbidden")
            raise AccessError(
                403,
                "forbidden",
                f"token {found.name!r} is not an admin token (auth.admin_tokens)",
            )
        return found

    def admit(self, principal: Principal) -> None:
        """Count a request against its token's quotas; AccessError(429) when over one.
        Pair with :meth:`release`."""
        spec = principal.spec
        quota = self._quotas.setdefault(principal.name, _Quota())
        if spec is None or (spec.max_in_flight is None and spec.rate_per_s is None):
            quota.in_flight += 1
            return
        name, counters = principal.name, self._counters
        with counters.lock():
            self._check_in_flight(name, spec, counters.token_in_flight(name))
            if spec.rate_per_s is not None:
                now = self._clock()
                bucket, wait = _take(*counters.bucket(name), spec.rate_per_s, now)
                counters.set_bucket(name, bucket, now)
                self._check_rate(name, spec, wait)
            counters.token_add(name, 1)
        quota.in_flight += 1
        quota.counted += 1

    def _check_in_flight(self, name: str, spec: TokenSpec, in_flight: int) -> None:
        limit = spec.max_in_flight
        if limit is not None and in_flight >= limit:
            self._count_refusal(name, "max_in_flight")
            raise AccessError(
                429,
                "too_many_in_flight",
                f"token {name!r} has {in_flight} requests in flight, its "
                f"limit is {limit} (max_in_flight)",
                headers={"Retry-After": "1"},
            )

    def _check_rate(self, name: str, spec: TokenSpec, wait: int) -> None:
        if wait:
            self._count_refusal(name, "rate_per_s")
            raise AccessError(
                429,
                "rate_limited",
                f"token {name!r} is over its rate of {spec.rate_per_s:g} requests/s (rate_per_s)",
                headers={"Retry-After": str(wait)},
            )

    def release(self, principal: Principal) -> None:
        quota = self._quotas.get(principal.name)
        if quota is not None and quota.in_flight > 0:
            quota.in_flight -= 1
            if quota.counted > 0:
                quota.counted -= 1
                self._counters.token_add(principal.name, -1)

    def in_flight(self) -> dict[str, int]:
        """Requests in flight per token name (for the metrics)."""
        return {name: q.in_flight for name, q in self._quotas.items()}

    def _count_refusal(self, token: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.access_refused.labels(token=token, reason=reason).inc()


def _access(request: Request) -> Access:
    access: Access = request.app.state.runtime.access
    return access


def _note(request: Request, principal: Principal) -> None:
    request_context(request).token = principal.name


def admitted(request: Request) -> _Admission:
    """``async with admitted(request) as principal``: the caller of a document route (user or
    admin token), admitted to its quota and released at the end; raises
    :class:`AccessError`. The hot routes use this directly rather than as a FastAPI
    dependency, whose resolution costs more CPU than the rest of a pass-through (their OpenAPI
    security is declared with :data:`BEARER_SECURITY`)."""
    return _Admission(request)


class _Admission:
    """:func:`admitted`'s context (a class: no generator per request, as
    ``contextlib.asynccontextmanager`` makes)."""

    __slots__ = ("_access", "_principal", "_request")

    def __init__(self, request: Request) -> None:
        self._request = request

    async def __aenter__(self) -> Principal:
        request = self._request
        self._access = access = _access(request)
        principal = access.authenticate(request.headers.get("authorization"), admin=False)
        _note(request, principal)
        access.admit(principal)
        self._principal = principal
        return principal

    async def __aexit__(self, *exc: object) -> None:
        self._access.release(self._principal)


BEARER_SECURITY: dict[str, list[dict[str, list[str]]]] = {"security": [{"HTTPBearer": []}]}
"""``openapi_extra`` of a route that takes :func:`admitted`'s bearer token."""


async def user_principal(
    request: Request, _credentials: Annotated[object, Security(bearer_scheme)]
) -> AsyncIterator[Principal]:
    """FastAPI dependency form of :func:`admitted`."""
    async with admitted(request) as principal:
        yield principal


async def admin_principal(
    request: Request, _credentials: Annotated[object, Security(bearer_scheme)]
) -> Principal:
    """FastAPI dependency of ``/upstreams`` and ``/metrics``: an admin token."""
    principal = _access(request).authenticate(request.headers.get("authorization"), admin=True)
    _note(request, principal)
    return principal
