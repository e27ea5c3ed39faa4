"""The stack program under Pulumi mocks: what it registers, how it is wired, what it exports."""

import json
import platform
import re

import pulumi
import pytest
import yaml

from components import render
from components.paddlex import RECHECK_CONTAINER, RECHECK_VLLM
from components.plan import build_plan
from components.settings import ConfigError, load_settings
from tests.pulumi_harness import (
    COMMAND,
    CONTAINER,
    IMAGE,
    MOCK_STARTED,
    PROVIDER,
    REMOTE_IMAGE,
    RUN,
    Recording,
    growth,
    record_stack,
)

SECRET_SIG = "4dabf18193072939515e22adb298388d"  # pulumi.runtime.rpc's _special_sig_key
SECRET_VALUE_SIG = "1b47061264138c4ac30d75fd1eb44270"  # its _special_secret_sig


@pytest.fixture(scope="module")
def seed_stack() -> Recording:
    return record_stack({"portFirstCard": "2"})


def _containers(recording: Recording, role: str):
    return [
        r
        for r in recording.of_type(CONTAINER)
        if {"label": "paddleocr-fleet.role", "value": role} in r.inputs["labels"]
    ]


@pytest.mark.parametrize(("cards", "vllm", "paddlex"), [(1, 2, 6), (2, 4, 12), (8, 16, 48)])
def test_resource_counts(cards, vllm, paddlex):
    recording = record_stack({"cards": str(cards)})
    assert len(_containers(recording, "vllm")) == vllm
    assert len(_containers(recording, "paddlex")) == paddlex
    assert len(_containers(recording, "gateway")) == 1
    assert len(_containers(recording, "keeper")) == 1
    # vLLM: readiness; PaddleX: start + readiness; gateway: image cleanup, config, readiness;
    # its keeper: config, readiness; each card: its in-service step (drain, undrain).
    assert len(recording.of_type(COMMAND)) == vllm + 2 * paddlex + 5 + cards
    assert len(recording.of_type(IMAGE)) == 1
    assert len(recording.of_type(REMOTE_IMAGE)) == 2  # the vLLM and the PaddleX image
    assert len(recording.of_type(PROVIDER)) == 1
    components = {
        t: 0
        for t in ("HostImages", "NpuCard", "VllmServer", "PaddlexServer", "Gateway", "SliceKeeper")
    }
    for r in recording.resources:
        kind = r.type.rsplit(":", 1)[-1]
        if r.type.startswith("paddleocr-fleet:fleet:"):
            components[kind] += 1
    assert components == {
        "HostImages": 1,
        "NpuCard": cards,
        "VllmServer": vllm,
        "PaddlexServer": paddlex,
        "Gateway": 1,
        "SliceKeeper": 1,
    }


def test_container_names_are_the_plans(seed_stack):
    plan = build_plan(load_settings({"portFirstCard": "2"}))
    names = {r.inputs["name"] for r in seed_stack.of_type(CONTAINER)}
    expected = {v.container_name for v in plan.vllm} | {p.container_name for p in plan.paddlex}
    gateway, keeper = sorted(names - expected)  # each with its generation
    assert re.fullmatch(r"paddleocr-fleet-gateway-[0-9a-f]{12}", gateway)
    assert re.fullmatch(r"paddleocr-fleet-gateway-keeper-[0-9a-f]{12}", keeper)
    assert "vllm-ascend-paddleocr-9031-npu-0" in names and "paddle-9176-npu-0" in names


def test_vllm_container_inputs_match_the_seed_compose(seed_stack):
    (vllm,) = [
        r
        for r in seed_stack.of_type(CONTAINER)
        if r.inputs["name"] == "vllm-ascend-paddleocr-9041-npu-0"
    ]
    inputs = vllm.inputs
    image = seed_stack.named("local-vllm-image")
    assert image.inputs["name"] == "quay.io/ascend/vllm-ascend:v0.19.1rc1"
    assert inputs["image"] == "sha256:local-vllm-image"  # the pulled image's id
    assert inputs["networkMode"] == "host"
    assert inputs["privileged"] is True
    assert inputs["restart"] == "unless-stopped"
    assert inputs["shmSize"] == 100 * 1024
    assert [d["hostPath"] for d in inputs["devices"]] == [
        "/dev/davinci0",
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
    ]
    assert "ASCEND_RT_VISIBLE_DEVICES=0" in inputs["envs"]
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in inputs["envs"]
    volumes = {(v["hostPath"], v["containerPath"]) for v in inputs["volumes"]}
    assert ("/opt/its/model/PaddleOCR", "/data") in volumes
    assert ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi") in volumes
    assert inputs["entrypoints"] + inputs["command"] == render.vllm_argv(
        load_settings({"portFirstCard": "2"}),
        build_plan(load_settings({"portFirstCard": "2"})).card("local", 0).vllm[1],
    )
    assert vllm.delete_before_replace


def test_paddlex_container_idles_with_its_pipeline_config_uploaded(seed_stack):
    (paddlex,) = [
        r for r in seed_stack.of_type(CONTAINER) if r.inputs["name"] == "paddle-9156-npu-0"
    ]
    inputs = paddlex.inputs
    assert seed_stack.named("local-paddlex-image").inputs["name"] == "paddleocrvl:20260529"
    assert inputs["image"] == "sha256:local-paddlex-image"
    assert inputs["shmSize"] == 128 * 1024
    assert inputs["entrypoints"] == render.paddlex_idle_argv(
        build_plan(load_settings({"portFirstCard": "2"})).card("local", 0).paddlex[3]
    )
    assert inputs["privileged"] is True and inputs["networkMode"] == "host"
    (upload,) = inputs["uploads"]
    assert upload["file"] == "/etc/paddleocr-fleet/pipeline_config_vllm-9156.yaml"
    config = yaml.safe_load(upload["content"])
    assert config["SubModules"]["VLRecognition"]["genai_config"]["server_url"] == (
        "http://127.0.0.1:9041/v1"
    )
    assert ("/usr/local/Ascend/driver", "/usr/local/Ascend/driver") in {
        (v["hostPath"], v["containerPath"]) for v in inputs["volumes"]
    }
    assert paddlex.delete_before_replace


def test_children_are_parented_card_server_container(seed_stack):
    (container,) = [
        r for r in seed_stack.of_type(CONTAINER) if r.inputs["name"] == "paddle-9126-npu-0"
    ]
    server = seed_stack.by_urn(container.parent)
    assert server.type == "paddleocr-fleet:fleet:PaddlexServer"
    card = seed_stack.by_urn(server.parent)
    assert card.type == "paddleocr-fleet:fleet:NpuCard" and card.name == "local-card-0"
    for command in seed_stack.of_type(COMMAND):
        assert seed_stack.by_urn(command.parent).type.startswith("paddleocr-fleet:fleet:")


def test_every_start_command_waits_for_its_own_vllm_and_container(seed_stack):
    plan = build_plan(load_settings({"portFirstCard": "2"}))
    settings = load_settings({"portFirstCard": "2"})
    for paddlex in plan.paddlex:
        slot = f"local-card-{paddlex.card}-paddlex-{paddlex.index}"
        start = seed_stack.named(f"{slot}-start")
        vllm_ready = seed_stack.named(f"local-card-{paddlex.card}-vllm-{paddlex.vllm.index}-ready")
        container = seed_stack.named(slot)
        assert vllm_ready.urn in start.dependencies
        assert container.urn in start.dependencies
        create = render.paddlex_start_command(settings, paddlex)
        delete = render.paddlex_stop_command(paddlex)
        assert (start.inputs["create"], start.inputs["delete"]) == (create, delete)
        # Any other change re-runs the start, which leaves a running service alone.
        assert start.inputs["update"] == create
        # A changed start command replaces the command (stopping the old service first).
        vllm = seed_stack.named(f"local-card-{paddlex.card}-vllm-{paddlex.vllm.index}")
        assert start.inputs["triggers"] == [
            f"{container.name}-id",
            f"{vllm.name}-id",  # started again when its vLLM is replaced
            render.content_hash(create + delete),
        ]
        assert start.delete_before_replace
        # A start of its container or its vLLM waited for again re-run it (an update).
        assert start.inputs["environment"] == {
            "DOCKER_HOST": "unix:///var/run/docker.sock",
            RECHECK_CONTAINER: MOCK_STARTED,
            RECHECK_VLLM: f"{vllm_ready.name}-id",
        }
        ready = seed_stack.named(f"{slot}-ready")
        assert start.urn in ready.dependencies
        assert ready.inputs["triggers"] == [
            f"{container.name}-id",
            f"{start.name}-id",
            MOCK_STARTED,
            f"{vllm_ready.name}-id",
        ]


def test_vllm_readiness_follows_its_container_and_reruns_on_replacement(seed_stack):
    ready = seed_stack.named("local-card-0-vllm-0-ready")
    container = seed_stack.named("local-card-0-vllm-0")
    assert container.inputs["name"] == "vllm-ascend-paddleocr-9031-npu-0"
    assert container.urn in ready.dependencies
    # ... and on a start of the same container (its start time, read on every run).
    assert ready.inputs["triggers"] == ["local-card-0-vllm-0-id", MOCK_STARTED]
    # Probed on the host itself, inside the host-network container, through its endpoint.
    assert "docker exec vllm-ascend-paddleocr-9031-npu-0 python3" in ready.inputs["create"]
    assert "http://127.0.0.1:9031/v1/models" in ready.inputs["create"]


def test_every_vllm_and_paddlex_container_start_time_is_read_through_its_engine(seed_stack):
    plan = build_plan(load_settings({"portFirstCard": "2"}))
    runs = [args for token, args in seed_stack.calls if token == RUN]
    expected = {
        (slot, name)
        for slot, name in [
            *((f"local-card-{v.card}-vllm-{v.index}", v.container_name) for v in plan.vllm),
            *((f"local-card-{p.card}-paddlex-{p.index}", p.container_name) for p in plan.paddlex),
        ]
    }
    commands = {render.container_started_command(f"{slot}-id", name) for slot, name in expected}
    assert sorted(args["command"] for args in runs) == sorted(commands)
    for args in runs:
        assert args["environment"] == {"DOCKER_HOST": "unix:///var/run/docker.sock"}
        assert args["logging"] == "none"


def test_gateway_config_derives_from_the_ready_paddlex_servers(seed_stack):
    gateway = seed_stack.named("local-gateway")
    # created beside the old one, which it takes the port from (components/gateway.py)
    assert gateway.ignore_changes == ["uploads"] and not gateway.delete_before_replace
    name = gateway.inputs["name"]
    assert not seed_stack.named("local-gateway-keeper").delete_before_replace  # handed over too
    (upload,) = gateway.inputs["uploads"]
    config = json.loads(upload["content"])
    plan = build_plan(load_settings({"portFirstCard": "2"}))
    assert [u["url"] for u in config["upstreams"]] == plan.upstreams()
    assert config["upstreams"][0]["vllm"] == "http://127.0.0.1:9031"
    install = seed_stack.named("local-gateway-config")
    assert f"docker exec -i {name} " in install.inputs["create"]
    assert f"docker exec {name} python3" in seed_stack.named("local-gateway-ready").inputs["create"]
    assert install.inputs["stdin"] == upload["content"]
    assert install.inputs["triggers"][1] == render.content_hash(upload["content"])
    assert gateway.inputs["command"][-5:] == [
        "9101",
        "--handover",
        "/var/lib/paddleocr-fleet/jobs/handover/gateway-9101.sock",
        "--serving-file",
        render.SERVING_FILE,
    ]
    # The data dependency orders the gateway after every PaddleX readiness wait.
    ready_urns = {r.urn for r in seed_stack.of_type(COMMAND) if r.name.endswith("-ready")}
    assert len(ready_urns & set(gateway.dependencies)) == 48


def test_outputs_equal_the_plan(seed_stack):
    settings = load_settings({"portFirstCard": "2"})
    plan = build_plan(settings)
    outputs = seed_stack.outputs
    assert outputs["upstreams"] == plan.upstreams()
    assert outputs["vllm_endpoints"] == plan.vllm_endpoints()
    assert outputs["gateway_url"] == "http://127.0.0.1:9101"
    gateway = seed_stack.named("local-gateway").inputs["name"]
    keeper = seed_stack.named("local-gateway-keeper").inputs["name"]
    assert plan.gateway.keeper is not None
    names = {plan.gateway.container_name: gateway, plan.gateway.keeper.container_name: keeper}
    assert outputs["topology"] == render.topology(settings, plan, "test", names)
    assert outputs["topology"]["stack"] == "test"  # fleetctl names the repair of this stack
    assert outputs["topology"]["gateway"]["container"] == gateway
    assert outputs["topology"]["gateway"]["keeper"]["container"] == keeper
    card0 = outputs["topology"]["hosts"][0]["cards"][0]
    assert card0["vllm"][0]["container"] == "vllm-ascend-paddleocr-9031-npu-0"
    assert [p["port"] for p in card0["vllm"][1]["paddlex"]] == [9156, 9166, 9176]


def test_preview_registers_the_same_resources_with_unknown_urls():
    applied = record_stack({"cards": "2"})
    preview = record_stack({"cards": "2"}, preview=True)
    assert sorted(r.urn for r in preview.resources) == sorted(r.urn for r in applied.resources)
    assert preview.outputs["gateway_url"] is None or isinstance(
        preview.outputs["gateway_url"], type(pulumi.output.UNKNOWN)
    )
    assert preview.outputs["topology"] == applied.outputs["topology"]


def test_growing_six_to_eight_cards_changes_no_existing_vllm_or_paddlex_resource():
    grown = growth(record_stack({"cards": "6"}), record_stack({"cards": "8"}))
    # Only the config pushes of the gateway and its keeper change; their containers ignore
    # their uploads.
    assert grown.changed == [
        "local-gateway",
        "local-gateway-config",
        "local-gateway-keeper",
        "local-gateway-keeper-config",
    ]
    # Per card: the card, 2 vLLM and 6 PaddleX components, their 8 containers, 2 + 12 commands
    # and its in-service step.
    assert len(grown.added) == 2 * (1 + 2 + 6 + 8 + 2 + 12 + 1)


@pytest.mark.parametrize(
    ("config", "key"),
    [({"cards": "0"}, "cards"), ({"gatewayPort": "9120"}, "gatewayPort/paddlexBasePort")],
)
def test_an_invalid_config_registers_nothing(config, key):
    recording = Recording()
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        record_stack(config, recording=recording)
    assert recording.resources == []


def test_a_configured_gateway_image_skips_the_build():
    recording = record_stack({"cards": "1", "gatewayImage": "registry.example/gw:1"})
    assert recording.of_type(IMAGE) == []
    assert _containers(recording, "gateway")[0].inputs["image"] == "registry.example/gw:1"


def test_the_gateway_image_is_built_from_its_folder_for_its_hosts_platform():
    recording = record_stack({"cards": "1", "platform": "linux/arm64", "gatewayPort": "9300"})
    (image,) = recording.of_type(IMAGE)
    build = image.inputs["build"]
    assert build["context"] == "gateway" and build["dockerfile"] == "gateway/Dockerfile"
    assert build["platform"] == "linux/arm64"
    assert image.inputs["imageName"] == "paddleocr-fleet/gateway:test"  # the stack's own tag
    (gateway,) = _containers(recording, "gateway")
    # The container refers to the built image's id, so a rebuild replaces it.
    assert gateway.inputs["image"] == f"paddleocr-fleet/gateway:test@sha256:{'0' * 64}"
    assert "GATEWAY_PORT=9300" in gateway.inputs["envs"]  # what the image's healthcheck probes
    cleanup = recording.named("local-gateway-image-cleanup")
    assert cleanup.inputs["delete"] == render.image_cleanup_command(
        "paddleocr-fleet/gateway:test", f"paddleocr-fleet/gateway:test@sha256:{'0' * 64}"
    )
    assert cleanup.inputs["environment"] == {"DOCKER_HOST": "unix:///var/run/docker.sock"}
    assert cleanup.urn in gateway.dependencies  # the image goes only after its container


def test_renamed_host_keeps_its_resources_through_aliases():
    hosts = [{"name": "npu-b", "endpoint": "ssh://ops@npu-a", "cards": 1, "formerNames": ["npu-a"]}]
    recording = record_stack({"hosts": json.dumps(hosts)})
    card = next(r for r in recording.resources if r.name == "npu-b-card-0")
    # under the fleet, and at the stack's root where stacks before the component held it
    assert card.aliases == ["npu-a-card-0", "npu-a-card-0"]
    assert card.root_aliases == ["", "npu-a-card-0"]
    assert recording.named("docker-npu-b").root_aliases == ["", "docker-npu-a"]
    images = next(r for r in recording.resources if r.name == "npu-b-images")
    assert images.aliases == ["npu-a-images"] and not images.root_aliases  # new: never at the root
    assert recording.named("npu-b-vllm-image").root_aliases == ["", "npu-a-vllm-image"]


def test_the_fleet_component_holds_every_resource_and_its_children_were_at_the_root():
    """Each resource descends from the one `Fleet`; each of its children but `HostImages` (new
    with it) says it sat at the stack's root, where stacks deployed before held it (their
    children inherit that: tests/e2e/test_component_aliases.py runs it on the engine)."""
    secrets = {"adminTokens": json.dumps({"ops": "a" * 32})}
    recording = record_stack(
        {"recycle": json.dumps({"maxDocuments": 100}), "monitoring": "true", **TWO_HOSTS},
        secrets=secrets,
    )
    (fleet,) = recording.of_type("paddleocr-fleet:index:Fleet")
    assert fleet.parent.endswith("pulumi:pulumi:Stack::paddleocr-fleet-test")
    children = [r for r in recording.resources if r.parent == fleet.urn]
    assert {r.type for r in children} >= {
        PROVIDER,  # (the stack reference is a read, which the mocks do not record)
        COMMAND,  # the recyclers' token
        "paddleocr-fleet:fleet:HostImages",
        "paddleocr-fleet:fleet:NpuCard",
        "paddleocr-fleet:fleet:Gateway",
        "paddleocr-fleet:fleet:Recycler",
        "paddleocr-fleet:fleet:Monitoring",
    }
    for child in children:
        assert ("" in child.root_aliases) == (child.type != "paddleocr-fleet:fleet:HostImages")
    by_urn = {r.urn: r for r in recording.resources}
    for r in recording.resources:
        chain = r
        while chain.parent in by_urn:
            chain = by_urn[chain.parent]
        assert chain is fleet, f"{r.type} {r.name} is not under the fleet"
    for image in recording.of_type(REMOTE_IMAGE):
        assert by_urn[image.parent].type == "paddleocr-fleet:fleet:HostImages"
        assert "" in image.root_aliases


TWO_HOSTS = {
    "hosts": json.dumps(
        [
            {"name": "npu-a", "endpoint": "ssh://ops@npu-a.example", "cards": 1},
            {
                "name": "gpu-b",
                "endpoint": "tcp://gpu-b.example:2376",
                "cardIds": [0, 1],
                "accelerator": "nvidia",
            },
        ]
    ),
    "gatewayHost": "npu-a",
}


def test_two_hosts_of_different_kinds_each_on_its_own_provider():
    recording = record_stack(TWO_HOSTS)
    providers = {r.name: r for r in recording.of_type(PROVIDER)}
    assert {n: p.inputs.get("host") for n, p in providers.items()} == {
        "docker-npu-a": "ssh://ops@npu-a.example",
        "docker-gpu-b": "tcp://gpu-b.example:2376",
    }
    for container in recording.of_type(CONTAINER):
        host = next(
            lab["value"]
            for lab in container.inputs["labels"]
            if lab["label"] == "paddleocr-fleet.host"
        )
        assert container.provider.startswith(providers[f"docker-{host}"].urn)
        if container.inputs["name"].startswith("paddleocr-fleet-gateway"):
            continue  # the gateway and its keeper
        if host == "gpu-b":
            assert not container.inputs.get("devices")
            assert not container.inputs["privileged"]
        else:
            assert container.inputs["devices"][0]["hostPath"].startswith("/dev/davinci")
    gpu_vllm = recording.named("gpu-b-card-1-vllm-0")
    assert gpu_vllm.inputs["deviceRequests"] == [
        {"driver": "nvidia", "deviceIds": ["1"], "capabilities": ["gpu"]}
    ]
    assert recording.named("gpu-b-vllm-image").inputs["name"].startswith("vllm/vllm-openai:")
    assert gpu_vllm.inputs["image"] == "sha256:gpu-b-vllm-image"
    for command in recording.of_type(COMMAND):
        if command.name.endswith("-in-service"):
            # A card's drain talks to the gateway, on the gateway's host (npu-a).
            for script in (command.inputs["create"], command.inputs["delete"]):
                assert f"export DOCKER_HOST={TWO_HOSTS_ENDPOINTS['npu-a']};" in script
            continue
        host = "npu-a" if command.name.startswith("npu-a") else "gpu-b"
        expected = TWO_HOSTS_ENDPOINTS[host]
        assert command.inputs["environment"]["DOCKER_HOST"] == expected
    start = recording.named("gpu-b-card-0-paddlex-0-start")
    assert "--device gpu" in start.inputs["create"]
    paddlex = recording.named("gpu-b-card-0-paddlex-3")
    config = yaml.safe_load(paddlex.inputs["uploads"][0]["content"])
    # PaddleX reaches its vLLM on its own host; the gateway and the probes use the address.
    assert config["SubModules"]["VLRecognition"]["genai_config"]["server_url"] == (
        "http://127.0.0.1:9035/v1"
    )
    assert (
        "http://127.0.0.1:9025/v1/models"
        in (recording.named("gpu-b-card-0-vllm-0-ready").inputs["create"])
    )
    outputs = recording.outputs
    assert len(outputs["upstreams"]) == 18
    assert "http://gpu-b.example:9120" in outputs["upstreams"]
    assert "http://npu-a.example:9120" in outputs["upstreams"]
    assert [h["name"] for h in outputs["topology"]["hosts"]] == ["npu-a", "gpu-b"]
    assert outputs["gateway_url"] == "http://npu-a.example:9101"


TWO_HOSTS_ENDPOINTS = {"npu-a": "ssh://ops@npu-a.example", "gpu-b": "tcp://gpu-b.example:2376"}


def test_adding_or_removing_a_host_leaves_the_other_host_untouched():
    hosts = json.loads(TWO_HOSTS["hosts"])
    only_a = record_stack({"hosts": json.dumps(hosts[:1]), "gatewayHost": "npu-a"})
    assert growth(only_a, record_stack(TWO_HOSTS)).changed == [
        "npu-a-gateway",
        "npu-a-gateway-config",
        "npu-a-gateway-keeper",
        "npu-a-gateway-keeper-config",
    ]


def test_an_exported_docker_context_is_refused_before_anything_is_registered(monkeypatch):
    monkeypatch.setenv("DOCKER_CONTEXT", "remote-b")
    recording = Recording()
    with pytest.raises(ConfigError, match="environment DOCKER_CONTEXT='remote-b'"):
        record_stack({"cards": "1"}, recording=recording)
    assert recording.resources == []


def test_docker_context_default_is_refused_too(monkeypatch):
    """pulumi-docker fails on DOCKER_CONTEXT=default ("context 'default' not found") at the
    first container; the program says why before anything is registered."""
    monkeypatch.setenv("DOCKER_CONTEXT", "default")
    recording = Recording()
    with pytest.raises(ConfigError, match=r"DOCKER_CONTEXT='default'.*unset DOCKER_CONTEXT"):
        record_stack({"cards": "1"}, recording=recording)
    assert recording.resources == []
    monkeypatch.setenv("DOCKER_CONTEXT", "")
    assert record_stack({"cards": "1"}).resources


def _previous_topology(config: dict[str, str]) -> dict:
    settings = load_settings(config)
    return {"topology": render.topology(settings, build_plan(settings))}


def test_a_port_plan_moving_servers_onto_held_ports_is_refused_and_creates_nothing():
    previous = _previous_topology({"cards": "2"})
    recording = Recording()
    # Raised inside an apply, so the SDK reports it wrapped, as the CLI shows it.
    with pytest.raises(Exception, match="moves servers onto ports that other running") as error:
        record_stack(
            {"cards": "2", "portStride": "2"}, previous_outputs=previous, recording=recording
        )
    assert "local-card-0-paddlex-5 -> 9130 (held by local-card-0-paddlex-1)" in str(error.value)
    assert recording.of_type(CONTAINER) == [] and recording.of_type(IMAGE) == []


def test_a_port_plan_moving_servers_to_free_ports_is_applied():
    previous = _previous_topology({"cards": "2"})
    moved = {"cards": "2", "vllmBasePort": "10025", "paddlexBasePort": "10120"}
    recording = record_stack(moved, previous_outputs=previous)
    names = {r.inputs["name"] for r in recording.of_type(CONTAINER)}
    assert "vllm-ascend-paddleocr-10025-npu-0" in names and "paddle-10120-npu-0" in names
    # The same slots, so each container is replaced in place (deleted before its successor).
    assert recording.named("local-card-0-vllm-0").inputs["name"].endswith("10025-npu-0")


def test_the_gateways_job_store_lives_in_a_host_folder_that_outlives_the_container():
    recording = record_stack({"cards": "1", "servedModelName": "PaddleOCR-VL-1.5-0.9B"})
    gateway = recording.named("local-gateway")
    assert gateway.inputs["volumes"] == [
        {
            "hostPath": "/var/lib/paddleocr-fleet/test/jobs",
            "containerPath": "/var/lib/paddleocr-fleet/jobs",
        }
    ]
    jobs = json.loads(gateway.inputs["uploads"][0]["content"])["jobs"]
    assert jobs["dir"] == "/var/lib/paddleocr-fleet/jobs"
    assert jobs["model"] == "PaddleOCR-VL-1.5"  # the official clients' name for the model
    moved = record_stack({"cards": "1", "gatewayJobsDir": "/srv/ocr-jobs"})
    assert moved.named("local-gateway").inputs["volumes"][0]["hostPath"] == "/srv/ocr-jobs"
    with pytest.raises(ConfigError, match="config key 'gatewayJobsDir': must be an absolute"):
        record_stack({"cards": "1", "gatewayJobsDir": "jobs"})


def test_the_keeper_runs_the_gateways_image_and_learns_of_new_instances_first():
    recording = record_stack({"cards": "1"})
    gateway, keeper = recording.named("local-gateway"), recording.named("local-gateway-keeper")
    assert keeper.inputs["image"] == gateway.inputs["image"]
    assert keeper.inputs["networkMode"] == "host" and keeper.ignore_changes == ["uploads"]
    cleanup = recording.named("local-gateway-image-cleanup")
    assert cleanup.urn in keeper.dependencies  # gone before the image it runs is removed
    keeper_config = recording.named("local-gateway-keeper-config")
    assert keeper_config.urn in recording.named("local-gateway-config").dependencies
    assert (
        json.loads(keeper_config.inputs["stdin"])["upstreams"]
        == build_plan(load_settings({"cards": "1"})).upstreams()
    )
    gateway_config = json.loads(recording.named("local-gateway-config").inputs["stdin"])
    assert {u["keeper"] for u in gateway_config["upstreams"]} == {"http://127.0.0.1:9102"}
    off = record_stack({"cards": "1", "keeper": "false"})
    assert not [r for r in off.resources if "keeper" in r.name]
    config = json.loads(off.named("local-gateway-config").inputs["stdin"])
    assert "keeper" not in config["upstreams"][0]


def test_a_key_the_program_does_not_know_is_named_not_ignored():
    """The settings are read key by key through `pulumi.Config`; a key it was not asked for (a
    typo) still fails the stack, named, before any resource."""
    recording = Recording()
    with pytest.raises(ConfigError, match="config key 'card': unknown setting; did you mean"):
        record_stack({"card": "2"}, recording=recording)
    assert recording.resources == []


def test_settings_are_read_through_pulumi_config(monkeypatch):
    asked: list[str] = []
    original = pulumi.Config.get

    def get(self, key, default=None):
        asked.append(self.full_key(key))
        return original(self, key, default)

    monkeypatch.setattr(pulumi.Config, "get", get)
    recording = record_stack({"cards": "3"})
    assert "paddleocr-fleet:cards" in asked
    assert len([r for r in recording.resources if r.type == "paddleocr-fleet:fleet:NpuCard"]) == 3


def test_component_args_carry_what_each_needs_not_the_settings_or_a_provider():
    """Providers reach a component through its opts; the settings are rendered for it first.
    (Prometheus' Args name the providers of its exporters on other hosts: opts carry one Docker
    provider.)"""
    import dataclasses

    from components import balancer, card, gateway, keeper, monitoring, paddlex, recycler, vllm

    for args in (
        card.NpuCardArgs,
        vllm.VllmServerArgs,
        paddlex.PaddlexServerArgs,
        gateway.GatewayArgs,
        keeper.SliceKeeperArgs,
        balancer.BalancerArgs,
        recycler.RecyclerArgs,
        monitoring.MonitoringArgs,
    ):
        for field in dataclasses.fields(args):
            named = f"{args.__name__}.{field.name}: {field.type}"
            assert "FleetSettings" not in str(field.type), named  # annotations are strings
            assert "Provider" not in str(field.type) or args is monitoring.MonitoringArgs, named


def test_jobs_store_url_reaches_the_gateway_config_as_a_secret():
    url = "postgresql://fleet:s3cret-pass@127.0.0.1:5432/jobs"
    recording = record_stack({"portFirstCard": "2"}, secrets={"jobsStoreUrl": url})
    uploads = recording.named("local-gateway").inputs["uploads"]
    # Pulumi's wire form of a secret: the value under its signature (encrypted in the state)
    assert uploads[SECRET_SIG] == SECRET_VALUE_SIG
    (upload,) = uploads["value"]
    assert json.loads(upload["content"])["jobs"]["store_url"] == url
    install = recording.named("local-gateway-config")
    assert install.inputs["stdin"][SECRET_SIG] == SECRET_VALUE_SIG
    with pytest.raises(ConfigError, match="jobsStoreUrl"):
        load_settings({"jobsStoreUrl": url})  # not a secret: refused


def test_an_image_of_a_host_without_a_platform_is_built_for_the_machine_running_pulumi():
    recording = record_stack({"cards": "1", "gatewayPort": "9300"})
    (image,) = recording.of_type(IMAGE)
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    assert image.inputs["build"]["platform"] == f"linux/{machine}"
