"""The per-host gateway layout: settings and their errors, the plan, and the stack under mocks
(a gateway per host over its own PaddleX, one balancer in front, the outputs, the diff from the
single layout)."""

import json

import pytest

from components import haproxy, render
from components.plan import build_plan
from components.plan.cli import main as plan_main
from components.settings import ConfigError, load_settings
from tests.pulumi_harness import COMMAND, CONTAINER, IMAGE, Recording, growth, record_stack

HOSTS = [
    {"name": "npu-a", "endpoint": "unix:///var/run/docker.sock", "cards": 1},
    {"name": "npu-b", "endpoint": "ssh://ops@10.0.0.2", "cardIds": [0, 1]},
]
SINGLE = {"hosts": json.dumps(HOSTS), "accelerator": "sim"}
PER_HOST = {**SINGLE, "gatewayLayout": "per-host"}
TOKENS = {"tokens": json.dumps({"team-a": "a" * 32}), "adminTokens": json.dumps({"ops": "o" * 32})}


@pytest.fixture(scope="module")
def per_host() -> Recording:
    return record_stack(PER_HOST, secrets=TOKENS)


def _role(recording: Recording, role: str):
    label = {"label": "paddleocr-fleet.role", "value": role}
    return [r for r in recording.of_type(CONTAINER) if label in r.inputs["labels"]]


def _uploaded(container) -> str:
    (upload,) = container.inputs["uploads"]
    return upload["content"]


# ------------------------------------------------------------------------- settings and plan


def test_the_single_layout_is_the_default_and_has_no_balancer():
    settings = load_settings({})
    assert settings.gateway_layout == "single" and settings.balancer is None
    plan = build_plan(settings)
    assert plan.layout == "single" and plan.balancer is None
    assert plan.paddlex_of(plan.gateway) == plan.paddlex
    assert plan.entry_url == plan.gateway.url


def test_per_host_plans_a_gateway_per_host_over_its_own_paddlex_and_one_balancer():
    plan = build_plan(load_settings(PER_HOST))
    assert [(g.host.name, g.owns, g.url) for g in plan.gateways] == [
        ("npu-a", "npu-a", "http://127.0.0.1:9101"),
        ("npu-b", "npu-b", "http://10.0.0.2:9101"),
    ]
    a, b = plan.gateways
    assert {p.host.name for p in plan.paddlex_of(a)} == {"npu-a"}
    assert len(plan.paddlex_of(a)) == 6 and len(plan.paddlex_of(b)) == 12
    balancer = plan.balancer
    assert balancer is not None and balancer.host.name == "npu-a"  # the first host by default
    assert balancer.port == 9180 and balancer.kind == "haproxy"
    assert plan.entry_url == "http://127.0.0.1:9180"
    assert balancer.jobs_backend == a  # the gateway on the balancer's host
    with pytest.raises(ValueError, match="2 gateways in this plan"):
        _ = plan.gateway


def test_balancer_settings_arrive_as_one_object_or_by_path():
    config = {**PER_HOST, "balancer": '{"host": "npu-b", "port": 8443, "checkIntervalS": 0.5}'}
    plan = build_plan(load_settings(config))
    assert plan.balancer is not None
    assert (plan.balancer.host.name, plan.balancer.port) == ("npu-b", 8443)
    assert plan.balancer.check_interval_s == 0.5
    assert plan.balancer.jobs_backend.host.name == "npu-b"
    assert plan.entry_url == "http://10.0.0.2:8443"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"gatewayLayout": "both"},
            "config key 'gatewayLayout': Input should be 'single' or 'per-host', got 'both'",
        ),
        (
            {"balancer": '{"port": 9180}'},
            "config key 'balancer': used only with gatewayLayout per-host",
        ),
        (
            {"gatewayLayout": "per-host", "balancer": '{"kind": "nginx"}'},
            "config key 'balancer.kind': 'nginx' is not offered: use 'haproxy'",
        ),
        (
            {"gatewayLayout": "per-host", "balancer": '{"host": "gpu-z"}'},
            "config key 'balancer.host': no host named 'gpu-z' (hosts: ['local'])",
        ),
        (
            {"gatewayLayout": "per-host", "balancer": '{"port": 0}'},
            "config key 'balancer.port': Input should be greater than or equal to 1, got 0",
        ),
        (
            {"gatewayLayout": "per-host", "balancer": '{"prot": 9180}'},
            "config key 'balancer.prot': Extra inputs are not permitted",
        ),
        (
            {"gatewayLayout": "per-host", "balancer": "9180"},
            "config key 'balancer': Input should be a valid dictionary",
        ),
        (
            {"gatewayLayout": "per-host", "gatewayHost": "local"},
            "config key 'gatewayHost': with gatewayLayout per-host every host runs its own",
        ),
        ({"gatewayLayot": "per-host"}, "config key 'gatewayLayot': unknown setting; did you mean"),
    ],
)
def test_layout_errors_name_the_key(config, message):
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"balancer": '{"port": 9101}'},
            "config key 'balancer.port/gatewayPort': port 9101 on host 'local' is planned for "
            "both the gateway and the balancer",
        ),
        (
            {"balancer": '{"port": 9130}'},
            "config key 'balancer.port/paddlexBasePort': port 9130 on host 'local'",
        ),
    ],
)
def test_a_balancer_port_another_server_holds_is_refused(config, message):
    with pytest.raises(ConfigError) as error:
        build_plan(load_settings({"cards": "1", "gatewayLayout": "per-host", **config}))
    assert message in str(error.value)


def test_the_plan_cli_prints_every_gateway_and_the_balancer(capsys):
    assert plan_main(["--set", f"hosts={SINGLE['hosts']}", "--set", "gatewayLayout=per-host"]) == 0
    out = capsys.readouterr().out
    assert (
        "gateway paddleocr-fleet-gateway on host npu-b: http://10.0.0.2:9101 -> 12 upstreams" in out
    )
    assert "balancer paddleocr-fleet-balancer (haproxy) on host npu-a: http://127.0.0.1:9180" in out


def test_the_balancer_may_share_its_port_with_a_server_of_another_host():
    config = {**PER_HOST, "balancer": '{"host": "npu-a", "port": 9121}'}  # npu-b's PaddleX port
    plan = build_plan(load_settings(config))
    assert plan.balancer is not None and plan.balancer.port == 9121


# ------------------------------------------------------------------------- the stack


def test_each_gateway_dispatches_only_to_its_own_hosts_paddlex(per_host):
    gateways = {g.name: json.loads(_uploaded(g)) for g in _role(per_host, "gateway")}
    assert set(gateways) == {"npu-a-gateway", "npu-b-gateway"}
    plan = build_plan(load_settings(PER_HOST))
    for gateway in plan.gateways:
        config = gateways[f"{gateway.host.name}-gateway"]
        assert [u["url"] for u in config["upstreams"]] == [p.url for p in plan.paddlex_of(gateway)]
        assert {u["host"] for u in config["upstreams"]} == {gateway.host.name}


def test_every_gateway_has_the_same_tokens_and_settings(per_host):
    configs = [json.loads(_uploaded(g)) for g in _role(per_host, "gateway")]
    for config in configs:
        config.pop("upstreams")
    assert configs[0] == configs[1]
    tokens = json.dumps(configs[0]["auth"])
    assert "a" * 32 not in tokens and "o" * 32 not in tokens  # only their SHA-256
    assert [t["name"] for t in configs[0]["auth"]["tokens"]] == ["team-a"]


def test_the_balancer_applies_the_per_client_bound_its_gateways_cannot(per_host):
    # Behind the balancer a gateway has one client: its per-client bound is its total one...
    for gateway in _role(per_host, "gateway"):
        server = json.loads(_uploaded(gateway))["server"]
        assert server["max_connections_per_client"] == 1000
    # ... and the balancer applies the operator's, 100 by default, to each client address.
    assert "if { sc0_conn_cur gt 100 }" in _uploaded(per_host.named("npu-a-balancer"))
    config = {**PER_HOST, "gateway": '{"server": {"max_connections_per_client": 20}}'}
    settings = load_settings(config)
    assert "if { sc0_conn_cur gt 20 }" in haproxy.balancer_config(settings, build_plan(settings))
    single = record_stack(SINGLE)
    assert "server" not in json.loads(_uploaded(single.named("npu-a-gateway")))


def test_each_gateway_runs_on_its_own_host_with_its_own_image(per_host):
    providers = {r.name: r.urn for r in per_host.resources if r.type == "pulumi:providers:docker"}
    for host in ("npu-a", "npu-b"):
        gateway = per_host.named(f"{host}-gateway")
        assert gateway.provider.startswith(providers[f"docker-{host}"])
        image = per_host.named(f"{host}-gateway-image")
        assert image.provider.startswith(providers[f"docker-{host}"])
        assert per_host.named(f"{host}-gateway-config").inputs["environment"] == {
            "DOCKER_HOST": HOSTS[0 if host == "npu-a" else 1]["endpoint"]
        }


def test_the_balancer_container_runs_haproxy_with_the_config_rendered_from_the_plan(per_host):
    (balancer,) = _role(per_host, "balancer")
    assert balancer.name == "npu-a-balancer"
    settings = load_settings(PER_HOST)
    plan = build_plan(settings)
    assert plan.balancer is not None
    inputs = balancer.inputs
    assert inputs["name"] == "paddleocr-fleet-balancer" and inputs["networkMode"] == "host"
    assert inputs["entrypoints"] + inputs["command"] == haproxy.balancer_argv(plan.balancer)
    assert inputs["restart"] == "unless-stopped" and "BALANCER_PORT=9180" in inputs["envs"]
    assert inputs["uploads"][0]["file"] == "/etc/paddleocr-fleet/haproxy.cfg"
    config = _uploaded(balancer)
    assert config == haproxy.balancer_config(settings, plan)
    assert "    server npu-a 127.0.0.1:9101 weight 6\n" in config
    assert "    server npu-b 10.0.0.2:9101 weight 12\n" in config
    assert "balance leastconn" in config and "http-check send meth GET uri /ready" in config
    # The gateways' whole-request deadline (900 s by default) is never cut by the balancer.
    assert "timeout server 930s" in config
    assert balancer.ignore_changes == ["uploads"] and balancer.delete_before_replace


def test_the_balancer_starts_once_every_gateway_is_ready_and_is_waited_for(per_host):
    balancer = per_host.named("npu-a-balancer")
    for host in ("npu-a", "npu-b"):
        assert per_host.named(f"{host}-gateway-ready").urn in balancer.dependencies
    install = per_host.named("npu-a-balancer-config")
    plan = build_plan(load_settings(PER_HOST))
    assert plan.balancer is not None
    assert install.inputs["create"] == haproxy.balancer_config_install_command(plan.balancer)
    assert install.inputs["stdin"] == _uploaded(balancer)
    assert install.inputs["triggers"] == [
        "npu-a-balancer-id",
        render.content_hash(_uploaded(balancer)),
    ]
    ready = per_host.named("npu-a-balancer-ready")
    assert install.urn in ready.dependencies
    create = ready.inputs["create"]
    assert "curl -fsS" in create and "127.0.0.1:9180/ready" in create
    assert ready.inputs["environment"] == {"DOCKER_HOST": "unix:///var/run/docker.sock"}


def test_the_balancer_image_builds_on_its_host_and_a_prebuilt_one_skips_it(per_host):
    image = per_host.named("npu-a-balancer-image")
    assert image.inputs["build"]["context"] == "config/balancer"
    assert image.inputs["imageName"] == "paddleocr-fleet/balancer:test"
    cleanup = per_host.named("npu-a-balancer-image-cleanup")
    assert cleanup.urn in per_host.named("npu-a-balancer").dependencies
    config = {**PER_HOST, "balancer": '{"image": "local/haproxy:2.6"}', "gatewayImage": "gw:1"}
    prebuilt = record_stack(config)
    assert prebuilt.of_type(IMAGE) == []
    assert prebuilt.named("npu-a-balancer").inputs["image"] == "local/haproxy:2.6"


def test_outputs_send_traffic_to_the_balancer_and_list_the_gateways(per_host):
    outputs = per_host.outputs
    assert outputs["gateway_url"] == "http://127.0.0.1:9180"
    assert outputs["gateways"] == ["http://127.0.0.1:9101", "http://10.0.0.2:9101"]
    topology = outputs["topology"]
    assert topology["layout"] == "per-host" and "gateway" not in topology
    assert topology["balancer"]["url"] == "http://127.0.0.1:9180"
    assert topology["balancer"]["jobs_gateway"] == "http://127.0.0.1:9101"
    assert [len(g["upstreams"]) for g in topology["gateways"]] == [6, 12]
    assert outputs["upstreams"] == build_plan(load_settings(PER_HOST)).upstreams()


def test_one_host_per_host_is_one_gateway_and_a_balancer():
    recording = record_stack({"cards": "1", "accelerator": "sim", "gatewayLayout": "per-host"})
    assert [r.name for r in _role(recording, "gateway")] == ["local-gateway"]
    assert [r.name for r in _role(recording, "balancer")] == ["local-balancer"]
    assert recording.outputs["gateway_url"] == "http://127.0.0.1:9180"
    assert recording.outputs["gateways"] == ["http://127.0.0.1:9101"]


def test_single_to_per_host_keeps_every_resource_and_reloads_the_first_gateway_in_place():
    grown = growth(record_stack(SINGLE), record_stack(PER_HOST))
    # The gateway and its keeper keep their containers (their uploads are ignored): their new
    # configs (host b's instances left out) are installed. Host b's cards now drain at host b's
    # own gateway: their groups' in-service steps are updated in place (an undrain), not replaced.
    assert grown.changed == [
        "npu-a-gateway",
        "npu-a-gateway-config",
        "npu-a-gateway-keeper",
        "npu-a-gateway-keeper-config",
        "npu-b-card-0-vllm-0-in-service",
        "npu-b-card-0-vllm-1-in-service",
        "npu-b-card-1-vllm-0-in-service",
        "npu-b-card-1-vllm-1-in-service",
    ]
    added = {r.name for r in grown.added if r.custom}
    assert added == {
        "npu-b-gateway",
        "npu-b-gateway-image",
        "npu-b-gateway-image-cleanup",
        "npu-b-gateway-config",
        "npu-b-gateway-ready",
        "npu-b-gateway-keeper",
        "npu-b-gateway-keeper-config",
        "npu-b-gateway-keeper-ready",
        "npu-a-balancer",
        "npu-a-balancer-image",
        "npu-a-balancer-image-cleanup",
        "npu-a-balancer-config",
        "npu-a-balancer-ready",
    }
    outputs = record_stack(SINGLE).outputs
    assert outputs["gateway_url"] == "http://127.0.0.1:9101" and "gateways" not in outputs


def test_a_port_guard_knows_the_balancer_and_every_gateway_of_the_last_update():
    settings = load_settings(PER_HOST)
    previous = {"topology": render.topology(settings, build_plan(settings))}
    recording = Recording()
    held = r"npu-a-card-0-paddlex-0 -> 9180 \(held by npu-a-balancer\)"
    with pytest.raises(Exception, match=held):
        record_stack(
            {**PER_HOST, "paddlexBasePort": "9180", "balancer": '{"port": 9300}'},
            previous_outputs=previous,
            recording=recording,
        )
    assert recording.of_type(CONTAINER) == []
    # Back to the single layout: the balancer and the second gateway go, nothing else changes.
    back = {r.urn: r for r in record_stack(SINGLE, previous_outputs=previous).resources}
    assert not {r.name for r in back.values()} & {"npu-a-balancer", "npu-b-gateway"}
    assert {r.name for r in back.values() if r.type == COMMAND and "balancer" in r.name} == set()
