"""Upstream health decisions of the pool: passive ejection, active probes, dead and stuck
upstreams.

:class:`PoolHealth` is the health half of :class:`gateway.dispatch.pool.UpstreamPool` (which
inherits it); it only changes upstream state and never does I/O. Three ways out of dispatch:

- **Ejection** (passive): ``outlier.consecutive_failures`` failed attempts in a row eject an
  upstream for ``base_ejection_s`` x its ejection level, capped at ``max_ejection_s``; at most
  ``max_ejection_percent`` of the upstreams at once.
- **Unhealthy** (active): ``health.unhealthy_threshold`` failed probes in a row; back after
  ``health.healthy_threshold`` passing probes.
- **Down** (:meth:`PoolHealth.mark_down`): the first ``connect_error`` marks the upstream
  unhealthy at once, because a refused or timed-out connect means the process is gone; the next
  passing probe brings it back (PaddleX opens its port only once its pipeline is built). With
  health checks off it is ejected instead, within the ejection cap.
- **Stuck** (:meth:`PoolHealth.record_probe`): PaddleX answers ``/health`` outside its one
  inference worker, so ``health.stuck_after_timeouts`` probe timeouts in a row while attempts
  are in flight mean the process hangs: the upstream turns unhealthy and its attempts are
  cancelled (:meth:`PoolHealth.rescue`) so that their requests go elsewhere.

In every case the panic threshold still applies: below ``panic_threshold_percent`` healthy
upstreams the pool ignores health (see :meth:`gateway.dispatch.pool.UpstreamPool.eligible`), except
for upstreams known to be unreachable (``Upstream.unreachable``: their port refused the last
connect, of an attempt or a probe): a refused connect is a fact, not a probe's opinion, and
sending requests there only turns them into errors. With none left, requests wait.

Usage::

    pool.record_probe(upstream, ok=False, error="timeout after 2.0s", timed_out=True)
    pool.mark_down(upstream, "connect error: connection refused")
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from gateway.config.settings import Settings
from gateway.dispatch.upstreams import Upstream
from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("gateway.pool")


class PoolHealth:
    """Health state transitions over ``self.upstreams`` (mixed into the pool)."""

    settings: Settings
    upstreams: list[Upstream]
    _by_url: dict[str, Upstream]
    metrics: GatewayMetrics | None
    _clock: Callable[[], float]

    _dispatch: Callable[..., None]  # provided by the pool

    # ----------------------------------------------------------------- passive health
    def max_ejected(self) -> int:
        """How many upstreams may be ejected at once (never all of them)."""
        n = len(self.upstreams)
        share = math.floor(n * self.settings.outlier.max_ejection_percent / 100)
        if self.settings.outlier.max_ejection_percent > 0:
            share = max(1, share)
        return max(0, min(n - 1, share))

    def _maybe_eject(self, u: Upstream, now: float) -> None:
        if u.consecutive_failures < self.settings.outlier.consecutive_failures:
            return
        self._eject(u, now)

    def _eject(self, u: Upstream, now: float) -> bool:
        """Eject ``u`` with back-off unless it is ejected already or the cap is reached."""
        cfg = self.settings.outlier
        if u.is_ejected(now) or self._by_url.get(u.url) is not u:
            return False
        ejected = sum(1 for other in self.upstreams if other.is_ejected(now))
        if ejected >= self.max_ejected():
            return False
        u.ejection_level += 1
        u.ejections += 1
        u.consecutive_failures = 0
        u.ejected_until = now + min(cfg.base_ejection_s * u.ejection_level, cfg.max_ejection_s)
        if self.metrics is not None:
            self.metrics.upstream_ejections.labels(upstream=u.url).inc()
        return True

    def mark_down(self, u: Upstream, reason: str) -> None:
        """Stop dispatching to ``u`` at once after a connect error (see module doc)."""
        if self._by_url.get(u.url) is not u:
            return
        u.last_error = reason
        if not self.settings.health.enabled:
            if self._eject(u, self._clock()):
                log.warning("upstream %s ejected after a connect error (%s)", u.url, reason)
            return
        u.recover_on_probe = True
        u.unreachable = True
        u.probe_successes = 0
        if u.probe_healthy:
            u.probe_healthy = False
            log.warning(
                "upstream %s is now unhealthy (%s); back when a health probe passes", u.url, reason
            )

    # ----------------------------------------------------------------- active health
    def record_probe(
        self,
        u: Upstream,
        ok: bool,
        error: str | None = None,
        *,
        timed_out: bool = False,
        reachable: bool | None = None,
    ) -> bool:
        """Apply one active probe result with the healthy/unhealthy thresholds.

        The first probe of an upstream decides its state at once, and so does the first passing
        probe after :meth:`mark_down`. Returns True when the upstream is suspect (a probe timed
        out while attempts are in flight, not yet enough timeouts to call it stuck): the caller
        should probe it again right away instead of waiting ``health.interval_s``.
        """
        cfg = self.settings.health
        first = not u.probe_checked
        u.probe_checked = True
        u.probe_timeouts = u.probe_timeouts + 1 if timed_out else 0
        if ok or reachable is not None:
            u.unreachable = not ok and reachable is False
        if ok:
            u.probe_failures = 0
            u.probe_successes += 1
            if not u.probe_healthy and (
                first or u.recover_on_probe or u.probe_successes >= cfg.healthy_threshold
            ):
                u.probe_healthy = True
                u.recover_on_probe = False
        else:
            u.probe_successes = 0
            u.probe_failures += 1
            u.last_error = f"health probe: {error or 'failed'}"
            if u.probe_healthy and (first or u.probe_failures >= cfg.unhealthy_threshold):
                u.probe_healthy = False
        if self.metrics is not None:
            self.metrics.health_checks.labels(
                upstream=u.url, result="success" if ok else "failure"
            ).inc()
        suspect = False
        if timed_out and u.in_flight > 0 and cfg.stuck_after_timeouts > 0:
            if u.probe_timeouts >= min(cfg.stuck_after_timeouts, cfg.unhealthy_threshold):
                self.rescue(
                    u,
                    f"{u.url} is stuck: {u.probe_timeouts} health probes in a row timed out "
                    f"({error or 'timeout'}) with {u.in_flight} attempts in flight",
                )
            else:
                suspect = True
        self._dispatch()
        return suspect

    def rescue(self, u: Upstream, reason: str) -> int:
        """Mark ``u`` unhealthy and cancel its attempts in flight; returns how many.

        Their requests fail over to other upstreams without charging the retry budget (the
        upstream is known dead, so this moves work, it does not add any).
        """
        u.probe_healthy = False
        u.recover_on_probe = False
        u.probe_successes = 0
        u.last_error = reason
        leases = [lease for lease in u.leases if not lease.released and lease.rescued is None]
        for lease in leases:
            lease.abort(reason)
        if leases:
            log.warning("%s; re-dispatching %d requests elsewhere", reason, len(leases))
        return len(leases)
