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


@pytest.mark.parametrize("key", ["maxUnavailableCards", "maxUnavailableGroups"])
@pytest.mark.parametrize("value", ["0", "-1", "1.5", "two"])
def test_max_unavailable_is_validated(key, value):
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        load_settings({**SIM4, key: value})


def test_groups_and_cards_are_not_both_limits():
    with pytest.raises(ConfigError, match="config key 'maxUnavailableGroups': set it or"):
        load_settings({**SIM4, "maxUnavailableCards": "1", "maxUnavailableGroups": "2"})


def _groups(*cards):
    return [("local", card, vllm) for card in cards for vllm in (0, 1)]


def test_by_default_groups_roll_two_at_a_time_and_new_cards_wait_for_nothing():
    _, plan = _plan(SIM4)
    ran = {("local", 0), ("local", 1), ("local", 2)}
    waits = rollout.group_waits(plan, ran, rollout.WaveLimit())
    assert [waits[g] for g in _groups(0)] == [[], []]
    assert [waits[g] for g in _groups(1)] == [_groups(0), _groups(0)]
    assert [waits[g] for g in _groups(2)] == [_groups(1), _groups(1)]
    assert [waits[g] for g in _groups(3)] == [[], []]  # a new card
    assert rollout.group_waits(plan, set(), rollout.WaveLimit()) == {
        g: [] for g in _groups(0, 1, 2, 3)
    }
    assert rollout.waves(plan, ran, rollout.WaveLimit()) == [
        "host local wave 1: card 0 vLLM 0, card 0 vLLM 1",
        "host local wave 2: card 1 vLLM 0, card 1 vLLM 1",
        "host local wave 3: card 2 vLLM 0, card 2 vLLM 1",
        "host local new cards, in parallel: [3]",
    ]


def test_a_host_with_one_card_keeps_one_of_its_two_groups_serving():
    _, plan = _plan({**SIM4, "cards": "1"})
    waits = rollout.group_waits(plan, {("local", 0)}, rollout.WaveLimit())
    assert waits == {("local", 0, 0): [], ("local", 0, 1): [("local", 0, 0)]}
    # even where the limit asks for more: no wave takes more than it says, at least one group
    wide = rollout.group_waits(plan, {("local", 0)}, rollout.WaveLimit(groups=0.5))
    assert wide == waits


@pytest.mark.parametrize(
    ("limit", "widths"),
    [
        (rollout.WaveLimit(groups=1), [1] * 8),
        (rollout.WaveLimit(groups=3), [3, 3, 2]),
        (rollout.WaveLimit(groups=0.25), [2, 2, 2, 2]),
        (rollout.WaveLimit(cards=1), [2, 2, 2, 2]),
        (rollout.WaveLimit(cards=0.5), [4, 4]),
    ],
)
def test_the_limit_is_groups_or_whole_cards(limit, widths):
    _, plan = _plan(SIM4)
    ran = {("local", c) for c in range(4)}
    waves = rollout.host_waves(plan, ran, limit)["local"]
    assert [len(w) for w in waves] == widths
    assert [g for w in waves for g in w] == _groups(0, 1, 2, 3)  # plan order
    if limit.cards is not None:  # whole cards: both groups of a card in one wave
        assert all(len({card for _, card, _ in w}) * 2 == len(w) for w in waves)


def test_settings_choose_the_limit_and_the_plan_shows_the_waves(capsys):
    settings = load_settings({**SIM4, "maxUnavailableCards": "2"})
    assert (settings.max_unavailable_groups, settings.max_unavailable_cards) == (None, 2)
    assert load_settings(SIM4).max_unavailable_groups is None
    from components.plan.cli import main as plan_main

    assert plan_main(["--set", "cards=1", "--set", "accelerator=sim"]) == 0
    shown = capsys.readouterr().out
    assert "host local wave 1: card 0 vLLM 0\n" in shown
    assert "host local wave 2: card 0 vLLM 1\n" in shown


def test_waves_are_per_host():
    hosts = json.dumps(
        [
            {"name": "a", "endpoint": "unix:///var/run/docker.sock", "cardIds": [0, 1]},
            {"name": "b", "endpoint": "ssh://ops@10.0.0.2", "cardIds": [0, 1]},
        ]
    )
    _, plan = _plan({"hosts": hosts, "accelerator": "sim", "allowOpenAccess": "true"})
    everything = {(h, c) for h in "ab" for c in (0, 1)}
    waits = rollout.group_waits(plan, everything, rollout.WaveLimit(cards=1))
    assert waits[("a", 1, 0)] == [("a", 0, 0), ("a", 0, 1)]
    assert waits[("b", 1, 1)] == [("b", 0, 0), ("b", 0, 1)]
    assert waits[("a", 0, 0)] == waits[("b", 0, 1)] == []


def test_the_previous_topology_names_the_cards_that_ran():
    settings, plan = _plan(SIM4)
    topology = json.loads(json.dumps(render.topology(settings, plan)))
    assert rollout.cards_in_topology(topology) == {("local", c) for c in range(4)}
    assert rollout.cards_in_topology(None) == set()


def test_drain_asks_every_gateway_of_the_group_with_the_timeout_and_a_ttl():
    settings, plan = _plan({**SIM4, "drainTimeout": "120"})
    card = plan.card("local", 1)
    token_file = render.gateway_settings(settings).auth.local_token_file
    assert token_file == render.LOCAL_TOKEN_FILE == "/var/lib/paddleocr-fleet/jobs/admin.token"
    command, undrain = rollout.group_commands(
        plan, card, card.vllm[1], settings.drain_timeout, token_file
    )
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
    group = [p.url for p in card.bound_to(card.vllm[1])]
    assert len(group) == 3 and set(group) < {p.url for p in card.paddlex}
    assert json.loads(body) == {"upstreams": group, "wait_s": 120, "ttl_s": 240}
    assert "DOCKER_HOST=unix:///var/run/docker.sock" in command
    words = shlex.split(undrain.split("do ", 1)[1].rsplit("; done", 1)[0])
    assert words[-4] == "undrain" and json.loads(words[-2]) == {"upstreams": group}


def test_the_stack_chains_the_groups_that_ran_and_drains_each_before_deleting_it():
    settings, plan = _plan(SIM4)
    previous = render.topology(settings, build_plan(load_settings({**SIM4, "cards": "3"})))
    recording = record_stack(SIM4, previous_outputs={"topology": previous})
    in_service = {
        (c, v): recording.named(f"local-card-{c}-vllm-{v}-in-service")
        for c in range(4)
        for v in range(2)
    }
    for card in range(4):
        containers = [
            r
            for r in recording.of_type(CONTAINER)
            if r.name.startswith(f"local-card-{card}-") and r.custom
        ]
        assert len(containers) == 8
        for container in containers:
            waits = {g for g, step in in_service.items() if step.urn in container.dependencies}
            expected = {(card - 1, 0), (card - 1, 1)} if card in (1, 2) else set()
            assert waits == expected, container.name
    step = in_service[(2, 1)]
    assert step.delete_before_replace
    token_file = render.gateway_settings(settings).auth.local_token_file
    card = plan.card("local", 2)
    drain, undrain = rollout.group_commands(
        plan, card, card.vllm[1], settings.drain_timeout, token_file
    )
    assert (step.inputs["delete"], step.inputs["create"]) == (drain, undrain)
    group = [card.vllm[1].container_name, *(p.container_name for p in card.bound_to(card.vllm[1]))]
    names = {r.inputs["name"]: r.name for r in recording.of_type(CONTAINER)}
    assert sorted(step.inputs["triggers"]) == sorted(f"{names[n]}-id" for n in group)


def test_the_card_by_card_step_is_retired_as_a_no_op_with_its_triggers_as_before():
    recording = record_stack(SIM4)
    retired = recording.named("local-card-2-in-service")
    assert (retired.inputs["create"], retired.inputs["delete"]) == ("true", "true")
    assert sorted(retired.inputs["triggers"]) == sorted(
        f"{r.name}-id" for r in recording.of_type(CONTAINER) if r.name.startswith("local-card-2-")
    )


def test_a_new_stack_starts_every_group_at_once():
    recording = record_stack(SIM4)
    steps = {
        recording.named(f"local-card-{c}-vllm-{v}-in-service").urn
        for c in range(4)
        for v in range(2)
    }
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
