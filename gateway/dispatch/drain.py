"""Drained upstreams: taken out of dispatch on purpose, for a bounded time.

A rollout drains a card's PaddleX instances before their containers are replaced
(``POST /admin/drain``, :mod:`gateway.api.drain`): a drained upstream gets no new request
and no new job slice, while the attempts already on it finish. Every drain has a deadline
(``ttl_s``), so a rollout killed between drain and undrain never leaves an instance out of
service for good.

The deadlines live outside the pool's :class:`~gateway.dispatch.upstreams.Upstream` objects, in
its :class:`~gateway.shared.counters.Counters` keyed by the upstream's slot (chosen by URL), so a
config reload keeps them, and with several worker processes every worker sees a drain made
through any of them (:meth:`UpstreamPool.drain <gateway.dispatch.pool.UpstreamPool.drain>`).

Usage::

    pool.drain(upstreams, ttl_s=3600.0)
    chosen = select_upstreams(pool.upstreams, DrainSelector(card=0, host="node-1"))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.dispatch.upstreams import Upstream


class SelectionError(ValueError):
    """A drain selector names no configured upstream (``unknown``: what it named)."""

    def __init__(self, message: str, unknown: list[str]) -> None:
        super().__init__(message)
        self.unknown = unknown


@dataclass(frozen=True)
class DrainSelector:
    """Which upstreams a drain or undrain is about: URLs, and/or every upstream of a card (on
    ``host``, needed when several hosts have that card) or of a vLLM."""

    urls: tuple[str, ...] = ()
    card: int | str | None = None
    host: str | None = None
    vllm: str | None = None

    @property
    def empty(self) -> bool:
        return not self.urls and self.card is None and self.vllm is None and self.host is None


def select_upstreams(upstreams: Sequence[Upstream], selector: DrainSelector) -> list[Upstream]:
    """The configured upstreams ``selector`` names, in config order; SelectionError naming
    every URL that is not configured, or a card, host or vLLM that matches nothing."""
    by_url = {u.url: u for u in upstreams}
    wanted = [url.strip().rstrip("/") for url in selector.urls]
    unknown = [url for url in wanted if url not in by_url]
    if unknown:
        raise SelectionError(
            f"unknown upstream {', '.join(unknown)} (configured: {', '.join(by_url) or 'none'})",
            unknown,
        )
    chosen = {url: by_url[url] for url in wanted}
    if selector.card is not None or selector.host is not None or selector.vllm is not None:
        matches = [u for u in upstreams if _matches(u, selector)]
        if not matches:
            named = _describe(selector)
            raise SelectionError(f"no configured upstream on {named}", [named])
        if selector.card is not None and selector.host is None:
            hosts = sorted({str(u.spec.host) for u in matches})
            if len(hosts) > 1:
                raise SelectionError(
                    f"card {selector.card} exists on several hosts ({', '.join(hosts)}); "
                    "name one with host",
                    [f"card {selector.card}"],
                )
        for u in matches:
            chosen.setdefault(u.url, u)
    order = {u.url: i for i, u in enumerate(upstreams)}
    return sorted(chosen.values(), key=lambda u: order[u.url])


def _matches(u: Upstream, selector: DrainSelector) -> bool:
    spec = u.spec
    if selector.card is not None and (spec.card is None or str(spec.card) != str(selector.card)):
        return False
    if selector.host is not None and spec.host != selector.host:
        return False
    return selector.vllm is None or (spec.vllm or "").rstrip("/") == selector.vllm.rstrip("/")


def _describe(selector: DrainSelector) -> str:
    parts = []
    if selector.host is not None:
        parts.append(f"host {selector.host}")
    if selector.card is not None:
        parts.append(f"card {selector.card}")
    if selector.vllm is not None:
        parts.append(f"vLLM {selector.vllm}")
    return ", ".join(parts)
