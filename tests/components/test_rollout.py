"""Rolling replacement: the waves (plain Python) and how the stack wires them (Pulumi mocks)."""

import json
import shlex

import pytest

from components import render, rollout
from components.containers import stack_label
from components.plan import build_plan
from components.settings import ConfigError, load_settings
from tests.pulumi_harness import CONTAINER, record_stack

SIM4 = {"cards": "4", "accelerator": "sim", "allowOpenAccess": "true"}


def _plan(config):
    settings = load_settings(config)
    return settings, build_plan(settings)


@pytest.mark.parametrize(
    ("value", "cards", "width"),
    [(1, 8, 1), (2, 8, 2), (0.25, 8, 2), (0.25, 3, 1), (0.5, 1, 1), (8, 4, 8)],
)
def test_wave_width_is_a_count_or_a_fraction_of_the_hosts_cards(value, cards, width):
    assert rollout.wave_width(value, cards) == width


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two"])
def test_max_unavailable_cards_is_validated(value):
    with pytest.raises(ConfigError, match="config key 'maxUnavailableCards'"):
        load_settings({**SIM4, "maxUnavailableCards": value})


def test_cards_that_ran_before_wait_for_the_wave_before_and_new_cards_for_nothing():
    _, plan = _plan(SIM4)
    ran = {("local", 0), ("local", 1), ("local", 2)}
    assert rollout.card_waits(plan, ran, 1) == {
        ("local", 0): [],
        ("local", 1): [("local", 0)],
        ("local", 2): [("local", 1)],
        ("local", 3): [],
    }
    two = rollout.card_waits(plan, ran | {("local", 3)}, 2)
    assert two[("local", 2)] == two[("local", 3)] == [("local", 0), ("local", 1)]
    assert rollout.card_waits(plan, set(), 1) == {(c.host.name, c.card): [] for c in plan.cards}
    assert rollout.waves(plan, ran, 1) == [
        "host local wave 1: cards [0]",
        "host local wave 2: cards [1]",
        "host local wave 3: cards [2]",
        "host local new cards, in parallel: [3]",
    ]


def test_waves_are_per_host():
    hosts = json.dumps(
        [
            {"name": "a", "endpoint": "unix:///var/run/docker.sock", "cardIds": [0, 1]},
            {"name": "b", "endpoint": "ssh://ops@10.0.0.2", "cardIds": [0, 1]},
        ]
    )
    _, plan = _plan({"hosts": hosts, "accelerator": "sim", "allowOpenAccess": "true"})
    everything = {(h, c) for h in "ab" for c in (0, 1)}
    waits = rollout.card_waits(plan, everything, 1)
    assert waits[("a", 1)] == [("a", 0)] and waits[("b", 1)] == [("b", 0)]
    assert waits[("a", 0)] == waits[("b", 0)] == []


def test_the_previous_topology_names_the_cards_that_ran():
    settings, plan = _plan(SIM4)
    topology = json.loads(json.dumps(render.topology(settings, plan)))
    assert rollout.cards_in_topology(topology) == {("local", c) for c in range(4)}
    assert rollout.cards_in_topology(None) == set()


def test_drain_asks_every_gateway_of_the_card_with_the_timeout_and_a_ttl():
    settings, plan = _plan({**SIM4, "drainTimeout": "120"})
    card = plan.card("local", 1)
    token_file = render.gateway_settings(settings).auth.local_token_file
    assert token_file == render.LOCAL_TOKEN_FILE == "/var/lib/paddleocr-fleet/jobs/admin.token"
    command = rollout.drain_command(plan, card, settings.drain_timeout, token_file)
    listing = shlex.split(command.split("found=$(", 1)[1].split(")", 1)[0])
    assert listing[:3] == ["docker", "ps", "-q"]
    # every running gateway container of the stack on that host and port (during a handover,
    # the old and the new one)
    assert [w for w in listing if w.startswith("label=")] == [
        "label=paddleocr-fleet.role=gateway",
        f"label=paddleocr-fleet.stack={stack_label()}",
        "label=paddleocr-fleet.host=local",
        "label=paddleocr-fleet.port=9101",
    ]
    words = shlex.split(command.split("do ", 1)[1].rsplit("; done", 1)[0])
    assert words[:3] == ["docker", "exec", "$id"]
    action, port, body, token = words[-4:]
    assert (action, port, token) == ("drain", "9101", token_file)
    assert json.loads(body) == {
        "upstreams": [p.url for p in card.paddlex],
        "wait_s": 120,
        "ttl_s": 240,
    }
    assert "DOCKER_HOST=unix:///var/run/docker.sock" in command
    assert "undrain" in rollout.undrain_command(plan, card, token_file)


def test_the_stack_chains_the_cards_that_ran_and_drains_each_before_deleting_it():
    settings, plan = _plan(SIM4)
    previous = render.topology(settings, build_plan(load_settings({**SIM4, "cards": "3"})))
    recording = record_stack(SIM4, previous_outputs={"topology": previous})
    in_service = {c: recording.named(f"local-card-{c}-in-service") for c in range(4)}
    for card in range(4):
        containers = [
            r
            for r in recording.of_type(CONTAINER)
            if r.name.startswith(f"local-card-{card}-") and r.custom
        ]
        assert len(containers) == 8
        for container in containers:
            waits = {c for c, step in in_service.items() if step.urn in container.dependencies}
            assert waits == ({card - 1} if card in (1, 2) else set()), container.name
    step = in_service[2]
    assert step.delete_before_replace
    token_file = render.gateway_settings(settings).auth.local_token_file
    card = plan.card("local", 2)
    assert step.inputs["delete"] == rollout.drain_command(
        plan, card, settings.drain_timeout, token_file
    )
    assert step.inputs["create"] == rollout.undrain_command(plan, card, token_file)
    assert sorted(step.inputs["triggers"]) == sorted(
        f"{r.name}-id" for r in recording.of_type(CONTAINER) if r.name.startswith("local-card-2-")
    )


def test_a_new_stack_starts_every_card_at_once():
    recording = record_stack(SIM4)
    steps = {recording.named(f"local-card-{c}-in-service").urn for c in range(4)}
    assert not any(steps & set(r.dependencies) for r in recording.of_type(CONTAINER))


def test_sim_load_times_reach_the_sim_containers():
    config = {**SIM4, "cards": "1", "simVllmLoadSeconds": "60", "simPaddlexLoadSeconds": "1.5"}
    recording = record_stack(config)
    envs = {r.name: r.inputs["envs"] for r in recording.of_type(CONTAINER)}
    assert "VLLM_SIM_LOAD_SECONDS=60" in envs["local-card-0-vllm-0"]
    assert "PADDLEX_SIM_LOAD_SECONDS=1.5" in envs["local-card-0-paddlex-0"]
    with pytest.raises(ConfigError, match="'simVllmLoadSeconds': applies only to hosts"):
        load_settings({"cards": "1", "simVllmLoadSeconds": "60"})


def test_sim_vllm_faults_change_the_vllm_containers_env_and_leave_paddlex_alone():
    def containers(config):
        recording = record_stack({**SIM4, "cards": "1", **config})
        return {r.name: r.inputs for r in recording.of_type(CONTAINER)}

    before = containers({})
    after = containers({"simVllmFaults": '{"garble": 0.3, "seed": 2}'})
    expected = 'VLLM_SIM_FAULTS={"garble":0.3,"empty":0.0,"fail":0.0,"slowShare":0.0,'
    expected += '"slowSeconds":0.0,"seed":2}'
    for name in ("local-card-0-vllm-0", "local-card-0-vllm-1"):
        assert expected in after[name]["envs"]
        assert not any(e.startswith("VLLM_SIM_FAULTS=") for e in before[name]["envs"])
    paddlex = sorted(n for n in after if "-paddlex-" in n)
    assert paddlex and all(after[n]["envs"] == before[n]["envs"] for n in paddlex)
