"""Prometheus metrics, one registry per app instance (so several gateways can live in a process).

Names follow Prometheus conventions and Envoy's upstream stats:

- ``gateway_requests_total{route,code,token}`` (``token``: the bearer token's name, ``-`` for
  none), ``gateway_request_duration_seconds{route}``
- ``gateway_access_refused_total{token,reason}`` (401/403/429 of the access check),
  ``gateway_token_in_flight{token}``
- ``gateway_upstream_rq_total{upstream,outcome}``, ``gateway_upstream_rq_active{upstream}``,
  ``gateway_upstream_rq_duration_seconds{upstream}`` (histogram)
- ``gateway_upstream_info{upstream,host,card,vllm,container}`` (always 1: where an upstream
  runs, for joins in PromQL: ``... * on (upstream) group_left (host, card) gateway_upstream_info``)
- ``gateway_upstream_healthy{upstream}`` (1 healthy, 0 unhealthy, ejected or drained),
  ``gateway_upstream_ejected{upstream}``, ``gateway_upstream_ejections_total{upstream}``,
  ``gateway_upstream_drained{upstream}`` (1 drained or draining, :mod:`gateway.dispatch.drain`)
- ``gateway_health_checks_total{upstream,result}``
- ``gateway_queue_depth``, ``gateway_queue_wait_seconds``, ``gateway_queue_rejected_total{reason}``
- ``gateway_retries_total``, ``gateway_retry_overflow_total``, ``gateway_lb_panic``
- ``gateway_config_reloads_total{result}``
- ``gateway_queue_waiting{priority,token}`` (``retry``, ``interactive``, ``background``: job
  slices), ``gateway_jobs{state}``, ``gateway_job_pages_waiting``,
  ``gateway_job_oldest_waiting_seconds``, ``gateway_jobs_disk_free_bytes``,
  ``gateway_jobs_disk_total_bytes``, ``gateway_jobs_store_bytes`` (with a job store, read at
  scrape time from :meth:`gateway.jobs.store.JobStore.stats`)
- ``process_cpu_seconds_total``, ``process_resident_memory_bytes`` and the rest of
  prometheus_client's process collector: the gateway's own CPU and memory

Gauges that mirror pool state are refreshed at scrape time by :meth:`GatewayMetrics.render`.

Usage::

    metrics = GatewayMetrics()
    metrics.attempt_done(url, "success", 0.8)        # an upstream attempt; request_done: a request
    body, content_type = metrics.render(pool.gauge_snapshot)   # any () -> the pool's gauges
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

Gauges = Callable[[], dict[str, Any]]
"""What the scrape reads the pool's state from: ``{"upstreams": [(url, in_flight, state)],
"queue_depth": n, "queue_waiting": {(priority, token): n}, "panic": bool}``
(``UpstreamPool.gauge_snapshot``)."""

JobStats = Callable[[], dict[str, Any]]
"""The job store's numbers (:meth:`gateway.jobs.store.JobStore.stats`)."""

LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2,
    3,
    5,
    7.5,
    10,
    15,
    20,
    30,
    45,
    60,
    90,
    120,
    180,
    300,
    600,
)


class GatewayMetrics:
    """All gateway metrics in a private :class:`CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests_total = Counter(
            "gateway_requests_total",
            "Requests answered by the gateway",
            ["route", "code", "token"],
            registry=r,
        )
        self.access_refused = Counter(
            "gateway_access_refused_total",
            "Requests refused by the token check or a token's quota",
            ["token", "reason"],
            registry=r,
        )
        self.token_in_flight = Gauge(
            "gateway_token_in_flight",
            "Document requests in flight per token",
            ["token"],
            registry=r,
        )
        self.request_duration = Histogram(
            "gateway_request_duration_seconds",
            "Gateway request latency",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_rq_total = Counter(
            "gateway_upstream_rq_total",
            "Upstream attempts by outcome",
            ["upstream", "outcome"],
            registry=r,
        )
        self.upstream_rq_active = Gauge(
            "gateway_upstream_rq_active",
            "Attempts in flight per upstream",
            ["upstream"],
            registry=r,
        )
        self.upstream_rq_duration = Histogram(
            "gateway_upstream_rq_duration_seconds",
            "Upstream attempt latency",
            ["upstream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_healthy = Gauge(
            "gateway_upstream_healthy",
            "1 if the upstream is healthy, not ejected and not drained",
            ["upstream"],
            registry=r,
        )
        self.upstream_info = Gauge(
            "gateway_upstream_info",
            "Always 1: the host, card, vLLM and container of an upstream",
            ["upstream", "host", "card", "vllm", "container"],
            registry=r,
        )
        self.upstream_ejected = Gauge(
            "gateway_upstream_ejected",
            "1 if the upstream is currently ejected",
            ["upstream"],
            registry=r,
        )
        self.upstream_drained = Gauge(
            "gateway_upstream_drained",
            "1 if the upstream is drained (no new work), its attempts in flight finishing or not",
            ["upstream"],
            registry=r,
        )
        self.upstream_ejections = Counter(
            "gateway_upstream_ejections_total",
            "Passive ejections per upstream",
            ["upstream"],
            registry=r,
        )
        self.health_checks = Counter(
            "gateway_health_checks_total",
            "Active health probes",
            ["upstream", "result"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "gateway_queue_depth", "Requests waiting in the central queue", registry=r
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Time spent in the central queue",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_rejected = Counter(
            "gateway_queue_rejected_total",
            "Requests refused by the central queue",
            ["reason"],
            registry=r,
        )
        self.retries = Counter("gateway_retries_total", "Failover attempts started", registry=r)
        self.retry_overflow = Counter(
            "gateway_retry_overflow_total", "Retries refused by the retry budget", registry=r
        )
        self.panic = Gauge(
            "gateway_lb_panic",
            "1 while too few upstreams are healthy and health is ignored",
            registry=r,
        )
        self.upstreams_total = Gauge(
            "gateway_upstreams", "Configured upstreams by state", ["state"], registry=r
        )
        self.config_reloads = Counter(
            "gateway_config_reloads_total", "Config reloads by result", ["result"], registry=r
        )
        self.queue_waiting = Gauge(
            "gateway_queue_waiting",
            "Requests waiting in the central queue by priority class and token",
            ["priority", "token"],
            registry=r,
        )
        self.jobs = Gauge("gateway_jobs", "Jobs in the store by state", ["state"], registry=r)
        self.job_pages_waiting = Gauge(
            "gateway_job_pages_waiting",
            "Pages of active jobs not yet leased (in a pending slice or not cut yet)",
            registry=r,
        )
        self.job_oldest_waiting = Gauge(
            "gateway_job_oldest_waiting_seconds",
            "Age of the oldest job that still has pages waiting (0: none waits)",
            registry=r,
        )
        self.jobs_disk_free = Gauge(
            "gateway_jobs_disk_free_bytes", "Free bytes on the job store's file system", registry=r
        )
        self.jobs_disk_total = Gauge(
            "gateway_jobs_disk_total_bytes", "Size of the job store's file system", registry=r
        )
        self.jobs_store_bytes = Gauge(
            "gateway_jobs_store_bytes", "Bytes of inputs and results the store holds", registry=r
        )
        ProcessCollector(registry=r)
        self.job_stats: JobStats | None = None
        """Set by the runtime while a job store is open."""
        # the labelled series of every request, looked up once: prometheus_client's labels()
        # takes a lock and builds its key on each call (these series are never cleared)
        self._series: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (id(metric), *values)
        child = self._series.get(key)
        if child is None:
            child = self._series[key] = metric.labels(*values)
        return child

    def request_done(self, route: str, status: int, token: str, elapsed_s: float) -> None:
        """Count one answered request and its latency."""
        self._child(self.requests_total, route, str(status), token).inc()
        self._child(self.request_duration, route).observe(elapsed_s)

    def attempt_done(self, upstream: str, outcome: str, latency_s: float) -> None:
        """Count one upstream attempt by outcome, and its latency unless it was cancelled."""
        self._child(self.upstream_rq_total, upstream, outcome).inc()
        if outcome != "cancelled":
            self._child(self.upstream_rq_duration, upstream).observe(latency_s)

    def refresh(self, gauges: Gauges) -> None:
        """Copy pool state into the gauges (labels of removed upstreams disappear)."""
        snapshot = gauges()
        gauges_per_upstream = (
            self.upstream_rq_active,
            self.upstream_healthy,
            self.upstream_ejected,
            self.upstream_drained,
        )
        for gauge in (*gauges_per_upstream, self.upstream_info):
            gauge.clear()
        for url, host, card, vllm, container in snapshot.get("info", ()):
            labels = ("" if v is None else str(v) for v in (host, card, vllm, container))
            self.upstream_info.labels(url, *labels).set(1)
        counts = {"healthy": 0, "unhealthy": 0, "ejected": 0}
        for url, in_flight, state in snapshot["upstreams"]:
            self.upstream_rq_active.labels(upstream=url).set(in_flight)
            self.upstream_healthy.labels(upstream=url).set(1 if state == "healthy" else 0)
            self.upstream_ejected.labels(upstream=url).set(1 if state == "ejected" else 0)
            drained = state in ("draining", "drained")
            self.upstream_drained.labels(upstream=url).set(1 if drained else 0)
            counts[state] = counts.get(state, 0) + 1
        for state, count in counts.items():
            self.upstreams_total.labels(state=state).set(count)
        self.queue_depth.set(snapshot["queue_depth"])
        self.queue_waiting.clear()
        for (priority, token), count in snapshot.get("queue_waiting", {}).items():
            self.queue_waiting.labels(priority=priority, token=token or "-").set(count)
        self.panic.set(1 if snapshot["panic"] else 0)
        if self.job_stats is not None:
            self.refresh_jobs(self.job_stats())

    def refresh_jobs(self, stats: dict[str, Any]) -> None:
        """Copy the job store's numbers into their gauges."""
        for state, count in stats["jobs"].items():
            self.jobs.labels(state=state).set(count)
        self.job_pages_waiting.set(stats["pages_waiting"])
        self.job_oldest_waiting.set(stats["oldest_waiting_s"])
        self.jobs_disk_free.set(stats["disk_free_bytes"])
        self.jobs_disk_total.set(stats["disk_total_bytes"])
        self.jobs_store_bytes.set(stats["store_bytes"])

    def render(self, gauges: Gauges, in_flight: dict[str, int] | None = None) -> tuple[bytes, str]:
        """Prometheus text exposition of this registry, after a refresh (``in_flight``:
        requests in flight per token name)."""
        self.refresh(gauges)
        self.token_in_flight.clear()
        for token, count in (in_flight or {}).items():
            self.token_in_flight.labels(token=token).set(count)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
