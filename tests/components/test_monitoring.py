"""The monitoring plan and its rendered parts (components/monitoring.py), without Pulumi."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components.monitoring import (
    exporter_argv,
    host_socket,
    prometheus_argv,
    scrape_targets,
    scrape_token,
)
from components.plan import build_plan
from components.settings import ConfigError, FleetSettings, load_settings

REPO = Path(__file__).resolve().parents[2]
TOKEN = "x" * 32


def settings(**extra: str) -> FleetSettings:
    return load_settings({"accelerator": "sim", "cards": "2", "monitoring": "true", **extra})


def test_targets_name_every_vllm_with_its_card_and_the_local_keeper() -> None:
    plan = build_plan(settings(vllmPerCard="1"))
    targets = scrape_targets(plan)
    assert [t["targets"] for t in targets["vllm"]] == [["127.0.0.1:9025"], ["127.0.0.1:9026"]]
    assert [t["labels"]["card"] for t in targets["vllm"]] == ["0", "1"]
    assert targets["gateway"] == [
        {"targets": ["127.0.0.1:9101"], "labels": {"role": "gateway", "host": "local"}}
    ]
    assert targets["keeper"][0]["targets"] == ["127.0.0.1:9102"]
    assert targets["host"] == [
        {"targets": ["127.0.0.1:9104"], "labels": {"role": "host", "host": "local"}}
    ]
    assert plan.monitoring is not None and plan.monitoring.url == "http://127.0.0.1:9090"


def test_retention_and_port_reach_the_command_line() -> None:
    s = settings(prometheusPort="19090", prometheusRetention="30d", prometheusRetentionSize="5GB")
    plan = build_plan(s)
    assert plan.monitoring is not None
    argv = prometheus_argv(s, plan.monitoring)
    assert "--storage.tsdb.retention.time=30d" in argv
    assert "--storage.tsdb.retention.size=5GB" in argv
    assert "--web.listen-address=:19090" in argv


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ({"prometheusRetention": "a month"}, "prometheusRetention"),
        ({"prometheusRetentionSize": "2 gigs"}, "prometheusRetentionSize"),
        ({"prometheusDataDir": "data"}, "absolute path"),
        ({"prometheusPort": "9101"}, "prometheusPort"),
        ({"exporterPort": "9025"}, "exporterPort"),
    ],
)
def test_bad_monitoring_settings_name_the_key(extra: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        build_plan(settings(**extra))


def test_the_scrape_token_is_an_admin_token() -> None:
    assert scrape_token(settings()) == ""
    admins = {"adminTokens": f'{{"ops": "{TOKEN}", "prometheus": "{"p" * 32}"}}'}
    secret = ("tokens", "adminTokens")
    assert scrape_token(load_settings({"monitoring": "true", **admins}, secret)) == "p" * 32
    with pytest.raises(ConfigError, match=r"config key 'monitoring': Prometheus"):
        load_settings({"monitoring": "true", "tokens": f'{{"team": "{TOKEN}"}}'}, secret)


def test_the_exporter_reads_its_hosts_socket() -> None:
    plan = build_plan(settings(dockerHost="unix:///run/other/docker.sock"))
    assert plan.monitoring is not None
    host = plan.monitoring.exporter_hosts[0]
    assert host_socket(host) == "/run/other/docker.sock"
    argv = exporter_argv(plan.monitoring, "paddleocr-fleet/prod")
    assert argv[-4:] == ["--port", "9104", "--stack", "paddleocr-fleet/prod"]


def test_only_the_keeper_of_prometheus_own_host_is_scraped_and_the_docs_say_so() -> None:
    """A keeper listens on its host's loopback: with a gateway and a keeper per host,
    Prometheus (on the first host) scrapes every gateway but only its own host's keeper, and
    the docs must not promise every keeper."""
    hosts = [
        {"name": "npu-a", "endpoint": "unix:///var/run/docker.sock", "cards": 1},
        {"name": "npu-b", "endpoint": "ssh://ops@10.0.0.2", "cards": 1},
    ]
    config = {"hosts": json.dumps(hosts), "gatewayLayout": "per-host", "monitoring": "true"}
    plan = build_plan(load_settings(config))
    assert plan.monitoring is not None and len(plan.gateways) == 2
    assert all(gateway.keeper is not None for gateway in plan.gateways)
    targets = scrape_targets(plan)
    assert {t["labels"]["host"] for t in targets["gateway"]} == {"npu-a", "npu-b"}
    assert targets["keeper"] == [
        {"targets": ["127.0.0.1:9102"], "labels": {"role": "keeper", "host": "npu-a"}}
    ]
    for path in ("README.md", "docs/monitoring.md", "monitoring/prometheus.yml"):
        text = " ".join((REPO / path).read_text().split())
        assert not re.search(r"every gateway,? keeper", text), f"{path} promises every keeper"
    assert "own host's keeper" in str(FleetSettings.model_fields["monitoring"].description)
