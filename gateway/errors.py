"""The gateway's exceptions, all in one place: what can go wrong, and what each becomes.

It sits below every other layer (it imports nothing of the gateway, nor any web framework), so
any module may raise or catch any of them. How they are answered (the JSON error body, the
envelopes of the PaddleX-native and the official API routes) is :mod:`gateway.api.errors`.

- :class:`GatewayError`: answered as it says (status, machine code, message, details,
  headers); :class:`AccessError` its 401/403/429 of the access check (:mod:`gateway.access`).
- :class:`InputError`: what the caller sent is wrong (a 4xx with a code and a message;
  :mod:`gateway.inputs`, the request body bounds of :mod:`gateway.server`).
- :class:`UpstreamFailure` / :class:`UpstreamClientError`: how one attempt at a PaddleX
  instance ended badly, another instance might do better / the document itself was refused
  (:mod:`gateway.upstream.attempts`).
- :class:`PoolError`: no upstream can be leased; :class:`NoUpstreamAvailable` (nothing left to
  try), :class:`QueueFull` and :class:`QueueTimeout` (the central queue refused or gave up;
  :mod:`gateway.dispatch`). The proxy turns them into 502 and 503 answers.
- :class:`ConfigError`: a config file that cannot be read or is invalid, the gateway's
  (:mod:`gateway.config.settings`, which the slice keeper and ``fleetctl`` read too) or the
  recycler's (:mod:`gateway.recycler.config`); the programs say it and exit.

Errors that never leave their module (a document worker killed, a URL the guard refuses)
stay beside the code that raises and catches them.

Usage::

    raise GatewayError(503, "draining", "shutting down", headers={"Retry-After": "5"})
    raise InputError(413, "too_large", "request body exceeds 104857600 bytes")
"""

from __future__ import annotations

from typing import Any


class GatewayError(Exception):
    """An error answered by the gateway itself, as ``{"error": {...}, "request_id"}``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


class AccessError(GatewayError):
    """401, 403 or 429: the caller is not (or not now) allowed."""


class InputError(Exception):
    """A problem with what the caller sent; carries the HTTP status to answer with."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class UpstreamFailure(Exception):
    """One attempt failed in a way another upstream might not (unless ``retryable`` is False)."""

    def __init__(
        self, outcome: str, reason: str, status: int | None = None, retryable: bool = True
    ) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason
        self.status = status
        self.retryable = retryable


class UpstreamClientError(Exception):
    """The upstream answered 4xx: the document or request is bad; not retried."""

    def __init__(self, status: int, message: str, body: bytes, content_type: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body
        self.content_type = content_type


class PoolError(Exception):
    """No upstream could be leased."""

    retry_after: int | None = None


class NoUpstreamAvailable(PoolError):
    """Nothing left to try (none configured, or all already tried by this request)."""


class QueueFull(PoolError):
    """The central queue holds as many waiters as it may: come back after ``retry_after``."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class QueueTimeout(PoolError):
    """A request waited ``load_balance.queue_timeout_s`` and no upstream came free."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConfigError(ValueError):
    """The configuration is unreadable or invalid; the message names the key (or the file)."""
