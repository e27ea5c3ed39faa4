"""The vLLM simulator's ``/metrics``: vLLM's own series names, and values that follow the load."""

from __future__ import annotations

import sys
import threading
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .helpers import MODEL, VLLM_FLAGS, free_port, wait_http_ok

# what monitoring/ reads; the names are vLLM's (vllm/v1/metrics/loggers.py)
VLLM_SERIES = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:request_queue_time_seconds_bucket",
    "vllm:time_to_first_token_seconds_bucket",
}


def scrape(url: str) -> dict[str, float]:
    """``name{labels}`` -> value, with ``model_name`` and ``engine`` checked and left out."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            labels = dict(sample.labels)
            assert labels.pop("model_name") == MODEL and labels.pop("engine") == "0"
            extra = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
            samples[f"{sample.name}{{{extra}}}" if extra else sample.name] = sample.value
    return samples


def test_metrics_follow_running_and_waiting_requests(procs) -> None:
    port = free_port()
    argv = [sys.executable, "-m", "sim.vllm", "serve", f"/data/{MODEL}", *VLLM_FLAGS]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--max-num-seqs", "1"]
    proc = procs.start(argv, {"VLLM_SIM_LOAD_SECONDS": "0", "VLLM_SIM_LATENCY_SECONDS": "1.5"})
    url = f"http://127.0.0.1:{port}"
    wait_http_ok(f"{url}/health", timeout=20, proc=proc)
    idle = scrape(url)
    missing = {name for name in VLLM_SERIES if not any(k.split("{")[0] == name for k in idle)}
    assert not missing, f"series real vLLM exports are missing: {sorted(missing)}"
    assert idle["vllm:num_requests_running"] == 0 and idle["vllm:kv_cache_usage_perc"] == 0

    body = {"model": MODEL, "messages": [{"role": "user", "content": "OCR:"}]}
    answers: list[int] = []

    def complete() -> None:
        answers.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code)

    threads = [threading.Thread(target=complete) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.7)
    busy = scrape(url)
    assert busy["vllm:num_requests_running"] == 1
    assert busy["vllm:num_requests_waiting"] == 2
    assert busy["vllm:kv_cache_usage_perc"] == 1.0 == busy["vllm:gpu_cache_usage_perc"]
    for thread in threads:
        thread.join()
    assert answers == [200, 200, 200]

    done = scrape(url)
    assert done["vllm:num_requests_running"] == 0 == done["vllm:num_requests_waiting"]
    assert done["vllm:request_success_total{finished_reason=stop}"] == 3
    assert done["vllm:e2e_request_latency_seconds_count"] == 3
    assert done["vllm:generation_tokens_total"] > 0
    # the last one waited for the two before it
    assert done["vllm:request_queue_time_seconds_bucket{le=2.5}"] >= 2
    assert done["vllm:request_queue_time_seconds_bucket{le=2.0}"] < 3
