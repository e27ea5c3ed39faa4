"""The Prometheus metrics real vLLM exports on ``/metrics``, as far as the simulator can tell.

Names, types, labels (``model_name``, ``engine``) and buckets follow vLLM's v1
``PrometheusStatLogger`` (vllm/v1/metrics/loggers.py), so the fleet's alert rules and
dashboards (``monitoring/``) work unchanged on real hardware. Both KV-cache gauges are exported:
``vllm:kv_cache_usage_perc`` (current) and ``vllm:gpu_cache_usage_perc`` (its name before
vLLM 0.10, still on older images). The simulator has no KV cache: its usage is the running
requests over ``--max-num-seqs`` (256, vLLM's default, when not given).

Usage::

    metrics = VllmMetrics("PaddleOCR-VL-1.5-0.9B", max_num_seqs=256)
    async with metrics.request(prompt_tokens=100) as done:
        ...                      # the request runs
        done(completion_tokens=20)
    metrics.fault("garble")      # the simulator's injected faults, by kind
    body, content_type = metrics.render()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

DEFAULT_MAX_NUM_SEQS = 256
# vLLM's request-latency buckets (e2e, queue, inference, prefill, decode)
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
LABELS = ("model_name", "engine")
FAULT_KINDS = ("garble", "empty", "fail", "slow")
"""What ``vllm_sim_injected_faults_total`` counts (sim/vllm/faults.py)."""


def token_buckets(max_model_len: int) -> list[int]:
    """vLLM's 1-2-5 buckets up to the model length (request token histograms)."""
    buckets: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return buckets
            buckets.append(mantissa * scale)
        scale *= 10


class VllmMetrics:
    """One engine's series (``engine="0"``) in a private registry."""

    def __init__(
        self, model_name: str, max_num_seqs: int | None = None, max_model_len: int = 16384
    ) -> None:
        self.registry = r = CollectorRegistry()
        self.max_num_seqs = max_num_seqs or DEFAULT_MAX_NUM_SEQS
        values = (model_name, "0")

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=r).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=r).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...] | list[int]) -> Histogram:
            return Histogram(name, doc, LABELS, buckets=buckets, registry=r).labels(*values)

        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.gpu_cache_usage = gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage. "
            "DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
            registry=r,
        )
        self.success = self._success.labels(*values, "stop")
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        buckets = token_buckets(max_model_len)
        self.prompt_hist = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", buckets
        )
        self.generation_hist = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", buckets
        )
        self._faults = Counter(
            "vllm_sim_injected_faults",
            "Simulator only (not a vLLM series): completions given an injected fault "
            "(VLLM_SIM_FAULTS), by kind: garble, empty, fail, slow.",
            [*LABELS, "kind"],
            registry=r,
        )
        self._fault_labels = values
        for kind in FAULT_KINDS:
            self._faults.labels(*values, kind)  # exported at 0 before the first one
        self._running = 0
        self._waiting = 0
        self._slots = asyncio.Semaphore(self.max_num_seqs)
        self._set_gauges()

    def _set_gauges(self) -> None:
        self.running.set(self._running)
        self.waiting.set(self._waiting)
        usage = min(1.0, self._running / self.max_num_seqs)
        self.kv_usage.set(usage)
        self.gpu_cache_usage.set(usage)

    @asynccontextmanager
    async def request(self, prompt_tokens: int) -> AsyncIterator[Callable[[int], None]]:
        """One request from its arrival: it waits (``num_requests_waiting``) while
        ``max_num_seqs`` run, then runs. Call the yielded function with its completion tokens
        once it succeeded; a request that fails is not counted as a success."""
        arrived = time.monotonic()
        self._waiting += 1
        self._set_gauges()
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        started = time.monotonic()
        self._running += 1
        self._set_gauges()
        self.queue_time.observe(started - arrived)

        def done(completion_tokens: int) -> None:
            end = time.monotonic()
            self.success.inc()
            self.prompt_tokens.inc(prompt_tokens)
            self.generation_tokens.inc(completion_tokens)
            self.prompt_hist.observe(prompt_tokens)
            self.generation_hist.observe(completion_tokens)
            self.e2e.observe(end - arrived)
            self.inference_time.observe(end - started)
            self.ttft.observe(end - arrived)

        try:
            yield done
        finally:
            self._running -= 1
            self._slots.release()
            self._set_gauges()

    def fault(self, kind: str) -> None:
        """Count one injected fault of ``kind`` (one of :data:`FAULT_KINDS`)."""
        self._faults.labels(*self._fault_labels, kind).inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
