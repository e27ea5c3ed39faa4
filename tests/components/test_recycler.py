"""The `recycle` config key and the recycler's rendered config (components/recycler.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from components import recycler
from components.plan import build_plan
from components.settings import ConfigError, load_settings
from gateway.recycler.config import RecyclerConfig
from pulumi_plugins.docker import godur
from tests.pulumi_harness import record_stack

REPO = Path(__file__).resolve().parents[2]

TOKENS = {"tokens": json.dumps({"team-a": "0123456789abcdef0123"})}


def settings(recycle: object, **extra: str):
    raw = {"cards": "2", "accelerator": "sim", "recycle": json.dumps(recycle), **TOKENS, **extra}
    return load_settings(raw, secret_keys={"tokens", "adminTokens"})


def test_off_by_default_and_validated() -> None:
    assert load_settings({"cards": "1", **TOKENS}, secret_keys={"tokens"}).recycle is None
    on = settings({"maxMemoryMb": 16000, "maxDocuments": "50000"})
    assert (on.recycle.max_memory_mb, on.recycle.max_documents) == (16000, 50000)
    assert (on.recycle.check_interval_s, on.recycle.min_uptime_s) == (30, 300)


@pytest.mark.parametrize(
    ("recycle", "message"),
    [
        ({}, "config key 'recycle': give maxMemoryMb, maxDocuments or both"),
        ({"maxDocuments": 0}, "config key 'recycle.maxDocuments': Input should be greater than 0"),
        ({"maxMemoryMb": 1, "checkIntervalS": 0.5}, "config key 'recycle.checkIntervalS'"),
        ({"maxMemoryMB": 1}, "config key 'recycle.maxMemoryMB': Extra inputs"),
    ],
)
def test_bad_recycle_config_names_the_key(recycle: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        settings(recycle)


def test_the_recycler_token_name_is_reserved_while_recycling() -> None:
    admin = json.dumps({"recycler": "0123456789abcdef0123456789"})
    with pytest.raises(ConfigError, match="'recycler' is the recyclers' own admin token"):
        settings({"maxDocuments": 5}, adminTokens=admin)


def test_rendered_config_lists_the_hosts_instances_and_is_what_the_recycler_reads() -> None:
    s = settings({"maxDocuments": 5, "minUptimeS": 0}, drainTimeout="60")
    plan = build_plan(s)
    host = plan.hosts[0]
    config = recycler.render_config(s, plan, host, with_token=True)
    parsed = RecyclerConfig.model_validate(config)  # the recycler's own model accepts it
    assert [i.container for i in parsed.instances] == [p.container_name for p in plan.paddlex]
    assert parsed.instances[0].health_url == f"{plan.paddlex[0].local_url}/health"
    assert parsed.gateway.url == plan.gateway.local_url  # the gateway on the same host
    assert parsed.gateway.token_file == recycler.TOKEN_PATH
    assert (parsed.max_documents, parsed.min_uptime_s, parsed.drain_timeout_s) == (5, 0, 60)
    assert recycler.needs_token(s)
    open_stack = load_settings(
        {"cards": "1", "allowOpenAccess": "true", "recycle": '{"maxDocuments": 5}'}
    )
    assert not recycler.needs_token(open_stack)


def image_healthcheck(dockerfile: Path) -> dict[str, str]:
    """The `--flag=value` options of a Dockerfile's HEALTHCHECK, by the state's field name."""
    (line,) = [x for x in dockerfile.read_text().splitlines() if x.startswith("HEALTHCHECK ")]
    options = dict(re.findall(r"--([a-z-]+)=(\S+)", line.split(" CMD ", 1)[0]))
    return {re.sub(r"-(\w)", lambda m: m[1].upper(), k): v for k, v in options.items()}


def test_the_disabled_healthcheck_reads_back_as_given_on_the_gateways_image() -> None:
    """Docker fills each zero timing of a container's healthcheck from its image's, and the
    provider reads the container's back on refresh (Pulumi.yaml `refresh: always`): a timing
    left at its default ("0s", 0) came back as the image's, an update on every preview (on the
    engine: tests/e2e/test_recycling.py, tests/e2e/test_component_aliases.py)."""
    recording = record_stack(
        {"recycle": json.dumps({"maxDocuments": 100})}, secrets={"tokens": TOKENS["tokens"]}
    )
    container = recording.named("local-recycler")
    given = container.inputs["healthcheck"]
    assert given["tests"] == ["NONE"]
    image = image_healthcheck(REPO / "gateway" / "Dockerfile")
    assert image, "the gateway image's HEALTHCHECK sets no timing: check this test's parser"
    defaults = {"interval": "0s", "timeout": "0s", "startPeriod": "0s", "startInterval": "0s"}
    for key, default in defaults.items():
        sent = godur.parse(given.get(key, default))
        on_engine = sent or godur.parse(image.get(key, "0s"))  # the daemon's merge
        assert godur.format(on_engine) == given.get(key, default), key
    on_engine_retries = given.get("retries", 0) or int(image.get("retries", "0"))
    assert on_engine_retries == given.get("retries", 0)
    # the provider's update would write a new healthcheck to the state only: a recycler made
    # with the zero timings (or any other) is replaced to hold the one given
    assert container.replace_on_changes == ["healthcheck"]
