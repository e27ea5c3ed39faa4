"""The port plan: the seed's matrix, bindings, names, collisions; and the plan CLI."""

import json
import subprocess
import sys

import pytest

from components.plan import build_plan, slot_ports
from components.plan.cli import main as plan_main
from components.settings import ConfigError, load_settings
from tests.pulumi_harness import REPO

SEED = {"portFirstCard": "2"}  # with the defaults: bases 9025/9120, stride 10, cards 0..7

# The seed article's tables (section 四): card -> (vLLM ports, PaddleX ports).
SEED_MATRIX = {
    0: ((9031, 9041), (9126, 9136, 9146, 9156, 9166, 9176)),
    1: ((9032, 9042), (9127, 9137, 9147, 9157, 9167, 9177)),
    2: ((9025, 9035), (9120, 9130, 9140, 9150, 9160, 9170)),
    3: ((9026, 9036), (9121, 9131, 9141, 9151, 9161, 9171)),
    4: ((9027, 9037), (9122, 9132, 9142, 9152, 9162, 9172)),
    5: ((9028, 9038), (9123, 9133, 9143, 9153, 9163, 9173)),
    6: ((9029, 9039), (9124, 9134, 9144, 9154, 9164, 9174)),
    7: ((9030, 9040), (9125, 9135, 9145, 9155, 9165, 9175)),
}


def test_documented_setting_reproduces_the_seed_matrix_exactly():
    plan = build_plan(load_settings(SEED))
    matrix = {
        card.card: (tuple(v.port for v in card.vllm), tuple(p.port for p in card.paddlex))
        for card in plan.cards
    }
    assert matrix == SEED_MATRIX


def test_first_three_paddlex_of_a_card_use_its_first_vllm_the_last_three_its_second():
    plan = build_plan(load_settings(SEED))
    for card in plan.cards:
        first, second = card.vllm
        assert [p.vllm for p in card.paddlex] == [first] * 3 + [second] * 3


def test_container_names_follow_the_seed_convention():
    card0 = build_plan(load_settings(SEED)).card("local", 0)
    assert [v.container_name for v in card0.vllm] == [
        "vllm-ascend-paddleocr-9031-npu-0",
        "vllm-ascend-paddleocr-9041-npu-0",
    ]
    assert card0.paddlex[0].container_name == "paddle-9126-npu-0"
    assert card0.paddlex[0].pipeline_config_path.endswith("pipeline_config_vllm-9126.yaml")


def test_names_follow_the_accelerator_kind():
    sim = build_plan(load_settings({"cards": "1", "accelerator": "sim"}))
    assert sim.vllm[0].container_name == "vllm-sim-paddleocr-9025-sim-0"
    gpu = build_plan(load_settings({"cards": "1", "accelerator": "nvidia"}))
    assert gpu.paddlex[0].container_name == "paddle-9120-gpu-0"


def test_default_order_gives_card_zero_the_base_ports():
    plan = build_plan(load_settings({"cards": "2"}))
    assert [v.port for v in plan.card("local", 0).vllm] == [9025, 9035]
    assert [v.port for v in plan.card("local", 1).vllm] == [9026, 9036]


def test_counts_scale_with_instances_per_card():
    plan = build_plan(load_settings({"cards": "2", "vllmPerCard": "3", "paddlexPerVllm": "2"}))
    card = plan.card("local", 1)
    assert len(card.vllm) == 3 and len(card.paddlex) == 6
    assert [p.vllm.index for p in card.paddlex] == [0, 0, 1, 1, 2, 2]


def test_only_owned_cards_are_planned():
    plan = build_plan(load_settings({"cardIds": "4,6"}))
    assert [c.card for c in plan.cards] == [4, 6]
    assert plan.upstreams() == [
        f"http://127.0.0.1:{9120 + s + 10 * j}" for s in (0, 1) for j in range(6)
    ]


def test_every_port_is_unique_per_host_in_the_default_plan():
    plan = build_plan(load_settings({}))
    ports = [v.port for v in plan.vllm] + [p.port for p in plan.paddlex] + [plan.gateway.port]
    assert len(ports) == len(set(ports)) == 16 + 48 + 1


def test_two_hosts_may_reuse_ports():
    settings = load_settings(
        {
            "hosts": '[{"name": "a", "endpoint": "unix:///a.sock", "cards": 1},'
            ' {"name": "b", "endpoint": "ssh://ops@b.example", "cards": 1}]'
        }
    )
    plan = build_plan(settings)
    assert [p.url for p in plan.paddlex][:1] == ["http://127.0.0.1:9120"]
    assert [p.url for p in plan.paddlex][6:7] == ["http://b.example:9120"]
    assert plan.hosts[1].docker_env == {"DOCKER_HOST": "ssh://ops@b.example"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"portStride": "1"}, "config key 'vllmBasePort/portStride': port 9026"),
        ({"gatewayPort": "9130"}, "config key 'gatewayPort/paddlexBasePort': port 9130"),
        ({"keeperPort": "9101"}, "config key 'gatewayPort/keeperPort': port 9101"),
        ({"keeperPort": "9140"}, "config key 'keeperPort/paddlexBasePort': port 9140"),
        ({"vllmBasePort": "9120"}, "config key 'paddlexBasePort/vllmBasePort/portStride'"),
        ({"paddlexBasePort": "65500"}, "config key 'paddlexBasePort': port 65540"),
        ({"cards": "11"}, "port 9035 on host 'local' is planned for both"),
    ],
)
def test_port_problems_are_config_errors_naming_the_keys(raw, message):
    with pytest.raises(ConfigError) as error:
        build_plan(load_settings(raw))
    assert message in str(error.value)


def test_plan_cli_prints_the_seed_matrix_and_routes(capsys):
    assert plan_main(["--set", "portFirstCard=2"]) == 0
    out = capsys.readouterr().out
    assert "     0 | 9126 9136 9146 9156 9166 9176  | 9031/9041" in out
    assert "9120/9130/9140 -> 9025   9150/9160/9170 -> 9035" in out
    assert "48 upstreams" in out


def test_plan_cli_reads_a_stack_file_and_prints_json(tmp_path, capsys):
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text("config:\n  paddleocr-fleet:cards: '2'\n  paddleocr-fleet:accelerator: sim\n")
    assert plan_main(["--config-file", str(stack), "--json"]) == 0
    topology = json.loads(capsys.readouterr().out)
    (host,) = topology["hosts"]
    assert host["accelerator"] == "sim" and len(host["cards"]) == 2


def test_plan_cli_names_the_bad_key_and_exits_2(capsys):
    assert plan_main(["--set", "cards=0"]) == 2
    assert "config key 'cards'" in capsys.readouterr().err


def test_plan_module_runs_as_documented():
    result = subprocess.run(
        [sys.executable, "-m", "components.plan", "--set", "cards=1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "9120/9130/9140 -> 9025" in result.stdout


def test_each_gateway_has_a_keeper_beside_it_unless_turned_off():
    plan = build_plan(load_settings({"cards": "1"}))
    keeper = plan.gateway.keeper
    assert keeper is not None and keeper.host == plan.gateway.host
    assert (keeper.port, keeper.container_name) == (9102, "paddleocr-fleet-gateway-keeper")
    assert slot_ports(plan)[("local", None, "keeper", 0)] == 9102
    assert build_plan(load_settings({"cards": "1", "keeper": "false"})).gateway.keeper is None
