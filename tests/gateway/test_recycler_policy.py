"""The recycler's decisions (gateway/recycler/policy.py, counters.py): plain functions, no I/O."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gateway.recycler.counters import ServedCounter, attempt_samples
from gateway.recycler.policy import MB, Limits, Observation, choose, due, memory_in_use

LIMITS = Limits(max_memory_mb=16000, max_documents=50000, min_uptime_s=300)


def inst(port: int, card: int = 0, **changes: object) -> Observation:
    base = Observation(
        url=f"http://10.0.0.2:{port}",
        container=f"paddle-{port}",
        card=card,
        state="healthy",
        running=True,
        uptime_s=3600.0,
        memory_bytes=2000 * MB,
        served=10,
    )
    return replace(base, **changes)


def states(*observations: Observation) -> dict[str, str]:
    return {o.url: o.state for o in observations}


def test_memory_in_use_subtracts_the_inactive_page_cache_as_docker_stats_does() -> None:
    v2 = {"usage": 5000, "stats": {"inactive_file": 1200}}
    v1 = {"usage": 5000, "stats": {"total_inactive_file": 800, "cache": 3000}}
    assert memory_in_use(v2) == 3800
    assert memory_in_use(v1) == 4200
    assert memory_in_use({"usage": 5000, "stats": {"inactive_file": 9000}}) == 5000
    assert memory_in_use({}) is None  # a stopped container's stats


def test_due_names_the_limit_passed() -> None:
    assert due(inst(1, memory_bytes=17000 * MB), LIMITS) == "memory 17000 MB > 16000 MB"
    assert due(inst(1, served=50000), LIMITS) == "documents 50000 >= 50000"
    assert due(inst(1), LIMITS) is None
    assert due(inst(1, served=50000), replace(LIMITS, max_documents=None)) is None


def test_a_fresh_or_stopped_instance_is_never_due() -> None:
    big = 20000 * MB
    assert due(inst(1, memory_bytes=big, uptime_s=60.0), LIMITS) is None
    assert due(inst(1, memory_bytes=big, running=False), LIMITS) is None
    assert due(inst(1, memory_bytes=big, uptime_s=None), LIMITS) is None


def test_memory_over_the_limit_goes_before_documents_and_the_largest_overrun_first() -> None:
    a = inst(1, served=90000)
    b = inst(2, memory_bytes=17000 * MB)
    c = inst(3, memory_bytes=30000 * MB)
    others = inst(4)
    decision = choose([a, b, c, others], LIMITS, states(a, b, c, others))
    assert decision.instance == c
    assert decision.reason.startswith("memory 30000 MB")
    assert choose([a, others], LIMITS, states(a, others)).instance == a


@pytest.mark.parametrize("state", ["drained", "draining", "unhealthy", "ejected", "unknown"])
def test_another_instance_of_the_host_out_of_service_holds_every_recycle(state: str) -> None:
    due_one = inst(1, served=60000)
    out = inst(2, state=state)
    decision = choose([due_one, out, inst(3)], LIMITS, states(due_one, out, inst(3)))
    assert decision.instance is None
    assert "waits" in decision.reason and "paddle-2" in decision.reason


def test_a_stopped_container_on_the_host_holds_every_recycle() -> None:
    due_one, stopped = inst(1, served=60000), inst(2, running=False)
    decision = choose([due_one, stopped], LIMITS, states(due_one, stopped))
    assert decision.instance is None and "paddle-2" in decision.reason


def test_never_the_gateways_last_healthy_upstream() -> None:
    alone = inst(1, served=60000)
    elsewhere = {"http://10.0.0.3:9120": "drained"}
    decision = choose([alone], LIMITS, {**states(alone), **elsewhere})
    assert decision.instance is None and "no other healthy upstream" in decision.reason
    elsewhere = {"http://10.0.0.3:9120": "healthy"}
    assert choose([alone], LIMITS, {**states(alone), **elsewhere}).instance == alone


def test_nothing_due_is_no_decision() -> None:
    a, b = inst(1), inst(2)
    decision = choose([a, b], LIMITS, states(a, b))
    assert decision.instance is None and decision.reason == ""


def metrics(values: dict[tuple[str, str, str], float]) -> str:
    lines = [
        "# HELP gateway_upstream_rq_total Upstream attempts",
        "# TYPE gateway_upstream_rq_total counter",
    ]
    for (worker, upstream, outcome), value in values.items():
        lines.append(
            f'gateway_upstream_rq_total{{worker="{worker}",upstream="{upstream}",'
            f'outcome="{outcome}"}} {value}'
        )
    return "\n".join(lines) + "\n"


A, B = "http://10.0.0.2:9120", "http://10.0.0.2:9121"


def test_served_counts_growth_over_workers_and_not_what_came_before_the_first_scrape() -> None:
    counter = ServedCounter()
    counter.observe(attempt_samples(metrics({("0", A, "success"): 100, ("1", A, "success"): 50})))
    assert counter.served(A) == 0
    counter.observe(
        attempt_samples(
            metrics(
                {
                    ("0", A, "success"): 103,
                    ("1", A, "success"): 52,
                    ("1", A, "server_error"): 1,  # new series: all of it since the last scrape
                    ("0", A, "connect_error"): 7,  # never reached the instance
                    ("0", B, "success"): 4,
                }
            )
        )
    )
    assert counter.served(A) == 6
    assert counter.served(B) == 4


def test_a_counter_reset_counts_the_new_value_and_reset_starts_again() -> None:
    counter = ServedCounter()
    counter.observe(attempt_samples(metrics({("0", A, "success"): 100})))
    counter.observe(attempt_samples(metrics({("0", A, "success"): 110})))
    counter.observe(attempt_samples(metrics({("0", A, "success"): 3})))  # a new gateway process
    assert counter.served(A) == 13
    counter.reset(A)
    counter.observe(attempt_samples(metrics({("0", A, "success"): 5})))
    assert counter.served(A) == 2


def test_a_gateway_with_one_worker_has_no_worker_label() -> None:
    text = 'gateway_upstream_rq_total{upstream="%s",outcome="success"} %d\n'
    counter = ServedCounter()
    counter.observe(attempt_samples(text % (A, 1)))
    counter.observe(attempt_samples(text % (A, 9)))
    assert counter.served(A) == 8
