"""The fleet under the real Pulumi engine on a real Docker engine, in sim mode.

One stack, driven with the `pulumi` CLI through its life in file order: preview, up (1 card),
a no-op up, growth to 2 cards under traffic, a changed vLLM setting, a changed gateway source,
day-two operations with fleetctl on the stack's own outputs, shrinking back, destroy.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from PIL import Image

from components.plan import FleetPlan, build_plan
from components.settings import load_settings
from tests.e2e.gateway_view import wait_for_every_worker
from tests.e2e.job_api import finished_job
from tests.e2e.pulumi_stack import REPO, PulumiStack, Step, changed
from tests.sim.helpers import wait_http_ok

pytestmark = pytest.mark.docker

VLLM_BASE, PADDLEX_BASE, GATEWAY_PORT, KEEPER_PORT = 19025, 19120, 19101, 19102
STACK = "e2e-" + os.urandom(3).hex()
GATEWAY_NAME = "paddleocr-fleet-gateway-e2e"
STACK_LABEL = f"paddleocr-fleet.stack=paddleocr-fleet/{STACK}"
USER_TOKEN = "e2e-user-token-" + os.urandom(12).hex()
ADMIN_TOKEN = "e2e-admin-token-" + os.urandom(12).hex()
USER = {"Authorization": f"Bearer {USER_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
SECRETS = {
    "tokens": json.dumps({"e2e": USER_TOKEN}),
    "adminTokens": json.dumps({"ops": ADMIN_TOKEN}),
}


def temp_model_dir() -> str:
    """A host folder for `/data` (logs land in it); readable by the containers."""
    path = tempfile.mkdtemp(prefix="paddleocr-fleet-model-")
    os.chmod(path, 0o777)
    return path


def fleet_config(model_dir: str) -> dict[str, str]:
    return {
        "accelerator": "sim",
        "cards": "1",
        "modelDir": model_dir,
        "vllmBasePort": str(VLLM_BASE),
        "paddlexBasePort": str(PADDLEX_BASE),
        "gatewayPort": str(GATEWAY_PORT),
        "gatewayContainerName": GATEWAY_NAME,
        "keeperPort": str(KEEPER_PORT),
        "gatewayJobsDir": tempfile.mkdtemp(prefix="paddleocr-fleet-jobs-"),
        # No image registry here: the gateway image builds on the local base image.
        "buildArgs": json.dumps({"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}),
        "vllmReadyTimeout": "180",
        "paddlexReadyTimeout": "180",
        "readyPollInterval": "1",
    }


class Fleet:
    """The stack and the plan its current config describes."""

    def __init__(self, stack: PulumiStack, config: dict[str, str]):
        self.stack, self.config = stack, dict(config)
        self.seconds: dict[str, float] = {}

    @property
    def plan(self) -> FleetPlan:
        return build_plan(load_settings(self.config))

    @property
    def gateway(self) -> str:
        return self.plan.gateway.url

    def set(self, **values: str) -> None:
        self.config.update(values)
        self.stack.set_config(values)

    def up(self, label: str) -> list[Step]:
        started = time.monotonic()
        steps = self.stack.up()
        self.seconds[label] = time.monotonic() - started
        return steps


def built_images(fleet: Fleet) -> list[str]:
    """The ids of the images the stack built (pulumi-docker's `repoDigest` without a push)."""
    state = fleet.stack.state()
    return [r["outputs"]["repoDigest"] for r in state if r["type"] == "docker:index/image:Image"]


def removed_unless_named_elsewhere(image_id: str) -> bool:
    """Gone, or kept only because another tag (not this stack's) names the same image: the
    prebuilt `paddleocr-fleet/gateway:latest` of .ci/build-images.sh has the same content."""
    tags = docker("image", "inspect", "-f", "{{json .RepoTags}}", image_id)
    if tags.returncode != 0:
        return True
    names = json.loads(tags.stdout)
    return bool(names) and f"paddleocr-fleet/gateway:{STACK}" not in names


def wait_until_all_healthy(fleet: Fleet, timeout_s: float = 180) -> None:
    wait_for_every_worker(
        fleet.gateway,
        ADMIN,
        lambda states: (
            len(states) == len(fleet.plan.paddlex) and set(states.values()) == {"healthy"}
        ),
        timeout_s,
    )


def gateway_upstreams(fleet: Fleet) -> list[dict]:
    answer = httpx.get(f"{fleet.gateway}/upstreams", headers=ADMIN, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["upstreams"]


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def labelled_containers(label: str) -> dict[str, str]:
    """Name -> id of every container marked with ``label``."""
    listed = docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}} {{.ID}}")
    return dict(line.split() for line in listed.stdout.splitlines())


def container_ids() -> dict[str, str]:
    """Name -> id of every container of this module's stack."""
    return labelled_containers(STACK_LABEL)


def keeper_container(names: Iterable[str]) -> str:
    """The name of the stack's keeper container among `names` (with its generation)."""
    pattern = re.escape(GATEWAY_NAME) + r"-keeper-[0-9a-f]{12}"
    (name,) = [n for n in names if re.fullmatch(pattern, n)]
    return name


def gateway_container() -> str:
    """The name of the stack's gateway container (`<gatewayContainerName>-<generation>`)."""
    (name,) = [
        n for n in container_ids() if re.fullmatch(re.escape(GATEWAY_NAME) + r"-[0-9a-f]{12}", n)
    ]
    return name


def _ports_holders() -> list[str]:
    """Containers of earlier runs of this module (their names carry its ports)."""
    names = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    return [n for n in names if n.startswith(GATEWAY_NAME) or re.search(r"-19[0-9]{3}-sim-", n)]


class ContainerEvents:
    """The engine's create/destroy events of containers while the block runs, streamed live
    (the engine keeps only its last few hundred events for later queries)::

        with ContainerEvents() as events:
            fleet.up(...)
        events.seen  # {(container id, "create" | "destroy"): time in ns}
    """

    def __enter__(self) -> ContainerEvents:
        self.process = subprocess.Popen(
            ["docker", "events", "--format", "{{json .}}", "--filter", "type=container",
             "--filter", "event=create", "--filter", "event=destroy"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(1)  # events of the last moment are still on their way
        self.process.terminate()
        out, _ = self.process.communicate(timeout=30)
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        self.seen = {(e["id"], e["Action"]): e["timeNano"] for e in events}


def full_ids(names: list[str]) -> dict[str, str]:
    found = docker("inspect", "-f", "{{.Name}} {{.Id}}", *names).stdout.split("\n")
    return {n.lstrip("/"): i for n, i in (line.split() for line in found if line)}


@pytest.fixture(scope="module")
def fleet(docker_engine, tmp_path_factory):
    for name in _ports_holders():  # leftovers of an interrupted run
        docker("rm", "-f", name)
    config = fleet_config(temp_model_dir())
    root = Path(tempfile.mkdtemp(prefix="paddleocr-fleet-e2e-"))
    stack = PulumiStack.create(root, STACK, config, SECRETS)
    fleet = Fleet(stack, config)
    try:
        yield fleet
    finally:
        if container_ids():
            stack.run(["destroy", "--stack", STACK, "--yes", "--non-interactive"], check=False)
        shutil.rmtree(root, ignore_errors=True)


def png_bytes(text: str = "hello") -> bytes:
    image = Image.new("RGB", (160, 60), "white")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def pdf_bytes(pages: int) -> bytes:
    images = [Image.new("RGB", (120, 160), (255, 255, 255 - i)) for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:])
    return buffer.getvalue()


def vllm_port_named_in(text: str) -> int:
    ports = {int(p) for p in re.findall(r"sim-vllm:(\d+)", text)}
    assert len(ports) == 1, f"expected one answering vLLM in {text[:300]!r}"
    return ports.pop()


def binding(fleet: Fleet) -> dict[str, int]:
    return {p.url: p.vllm.port for p in fleet.plan.paddlex}


def test_preview_of_a_new_stack_shows_the_creates_and_creates_nothing(fleet):
    steps = fleet.stack.preview()
    ops = {s.op for s in steps if s.type.startswith(("docker:", "command:"))}
    assert ops == {"create"}
    plan = fleet.plan
    containers = [s for s in steps if s.type == "docker:index/container:Container"]
    assert len(containers) == len(plan.vllm) + len(plan.paddlex) + 2  # the gateway, its keeper
    assert container_ids() == {}


def test_up_serves_ocr_after_starting_in_order(fleet):
    steps = fleet.up("up, 1 card")
    by_name = {s.name: s for s in steps}
    for paddlex in fleet.plan.paddlex:
        prefix = f"local-card-{paddlex.card}"
        vllm_ready = by_name[f"{prefix}-vllm-{paddlex.vllm.index}-ready"]
        start = by_name[f"{prefix}-paddlex-{paddlex.index}-start"]
        ready = by_name[f"{prefix}-paddlex-{paddlex.index}-ready"]
        assert vllm_ready.ended is not None and start.ended is not None
        # The engine runs steps in parallel: the event sequence shows what waited for what.
        assert start.started > vllm_ready.ended, f"{paddlex.container_name} started too early"
        assert ready.started > start.ended
    # The gateway's image builds meanwhile; its container waits for every PaddleX.
    gateway = {"local-gateway", "local-gateway-config", "local-gateway-ready"}
    gateway_steps = [s for s in steps if s.name in gateway and not s.type.startswith("paddleocr")]
    last_paddlex_ready = max(
        s.ended or 0 for s in steps if "-paddlex-" in s.name and s.name.endswith("ready")
    )
    assert min(s.started for s in gateway_steps) > last_paddlex_ready
    outputs = fleet.stack.outputs()
    assert outputs["upstreams"] == fleet.plan.upstreams()
    assert outputs["gateway_url"] == fleet.gateway
    test_ocr_a_png_through_the_gateway(fleet)


def test_the_gateway_wants_a_token_and_no_token_reached_the_state_or_the_container(fleet):
    body = {"base64": base64.b64encode(png_bytes()).decode()}
    refused = httpx.post(f"{fleet.gateway}/ocr", json=body, timeout=60)
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer")
    user_on_admin = httpx.get(f"{fleet.gateway}/upstreams", headers=USER, timeout=10)
    assert user_on_admin.status_code == 403
    state = json.dumps(fleet.stack.state())
    gateway = fleet.plan.gateway
    config = docker("exec", gateway_container(), "cat", gateway.config_path)
    for token in (USER_TOKEN, ADMIN_TOKEN):
        assert token not in state and token not in config.stdout
        assert hashlib.sha256(token.encode()).hexdigest() in config.stdout


def test_a_second_up_changes_nothing_and_runs_no_command(fleet):
    before = container_ids()
    fleet.stack.preview("--expect-no-changes")
    steps = fleet.up("no-op up")
    assert changed(steps) == {}
    assert container_ids() == before


def test_each_pipeline_config_names_its_bound_vllm_inside_the_container(fleet):
    for paddlex in fleet.plan.paddlex:
        config = subprocess.run(
            ["docker", "exec", paddlex.container_name, "cat", paddlex.pipeline_config_path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"server_url: {paddlex.vllm.local_url}/v1" in config
        assert "max_num_input_imgs: null" in config


def test_ocr_a_png_through_the_gateway(fleet: Fleet) -> None:
    response = httpx.post(
        f"{fleet.gateway}/ocr-file",
        headers=USER,
        files={"file": ("doc.png", png_bytes(), "image/png")},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["upstream"] in binding(fleet)
    assert vllm_port_named_in(body["text"]) == binding(fleet)[body["upstream"]]


def test_ocr_a_multipage_pdf_is_one_document_with_every_page(fleet):
    document = pdf_bytes(12)  # over PaddleX's default 10-page limit
    response = httpx.post(
        f"{fleet.gateway}/ocr",
        headers=USER,
        json={"base64": base64.b64encode(document).decode()},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["pages"] == 12
    # parsed in page slices on several instances at once (gateway.upstream.fanout): every page
    # answered by a vLLM of the fleet, one per page
    assert body["slices"] > 1
    ports = re.findall(r"sim-vllm:(\d+)", body["text"])
    assert len(ports) == 12 and {int(p) for p in ports} <= set(binding(fleet).values())


def test_a_jobs_slices_go_through_the_keeper_beside_the_gateway(fleet):
    keeper = fleet.plan.gateway.keeper
    assert keeper is not None
    before = httpx.get(f"{keeper.local_url}/health", timeout=10).json()
    document = ("doc.pdf", pdf_bytes(12), "application/pdf")
    pages = finished_job(fleet.gateway, USER, document).pages
    assert len(pages) == 12
    after = httpx.get(f"{keeper.local_url}/health", timeout=10).json()
    # more than one slice, each sent through the keeper to the instance the gateway chose
    assert after["calls_fresh"] - before["calls_fresh"] > 1
    assert after["kept"] > before["kept"]


def _ocr(client: httpx.Client, gateway: str) -> httpx.Response:
    return client.post(
        f"{gateway}/ocr",
        headers=USER,
        json={"base64": base64.b64encode(png_bytes()).decode()},
        timeout=120,
    )


def test_every_paddlex_serves_and_answers_from_the_vllm_its_config_names(fleet: Fleet) -> None:
    seen: dict[str, set[int]] = {}
    with httpx.Client() as client, ThreadPoolExecutor(max_workers=24) as pool:
        for _ in range(8):
            for response in pool.map(lambda _: _ocr(client, fleet.gateway), range(48)):
                assert response.status_code == 200, response.text
                body = response.json()
                seen.setdefault(body["upstream"], set()).add(vllm_port_named_in(body["text"]))
            if len(seen) == len(fleet.plan.paddlex):
                break
    assert set(seen) == set(binding(fleet)), "some PaddleX instance never served"
    assert all(len(ports) == 1 for ports in seen.values()), seen
    assert {url: next(iter(ports)) for url, ports in seen.items()} == binding(fleet)


def _traffic(fleet: Fleet, stop: threading.Event, statuses: list[object]) -> None:
    body = {"base64": base64.b64encode(png_bytes()).decode()}
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            try:
                answer = client.post(f"{fleet.gateway}/ocr", json=body, headers=USER)
                outcome: object = answer.status_code
            except Exception as exc:  # a failed request is an answer the client lost
                outcome = repr(exc)
            statuses.append(outcome)


def test_growing_to_two_cards_creates_only_the_new_card_while_clients_are_served(fleet):
    old_plan = fleet.plan
    before = full_ids(list(container_ids()))
    statuses: list[object] = []
    stop = threading.Event()
    clients = [threading.Thread(target=_traffic, args=(fleet, stop, statuses)) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        fleet.set(cards="2")
        steps = fleet.up("grow to 2 cards")
        deadline = time.monotonic() + 60
        upstreams: list[dict] = []
        while time.monotonic() < deadline:  # the new config is reloaded in place
            upstreams = gateway_upstreams(fleet)
            if len(upstreams) == len(fleet.plan.paddlex):
                break
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=180)
    assert {u["url"] for u in upstreams} == set(fleet.plan.upstreams())
    assert len(statuses) > 0 and statuses == [200] * len(statuses), statuses[:5]
    created = {n for n, ops in changed(steps).items() if ops & {"create"}}
    assert created and all(n.startswith("local-card-1") for n in created), created
    updated = {n for n, ops in changed(steps).items() if not n.startswith("local-card-1")}
    # the config installs run again: the keeper's and the gateway's
    assert updated <= {"local-gateway-config", "local-gateway-keeper-config"}, updated
    assert full_ids(list(before)) == before  # every existing container, the gateway's too
    assert len(old_plan.paddlex) * 2 == len(fleet.plan.paddlex)


def test_a_changed_vllm_setting_replaces_exactly_the_vllm_containers_first_deleting(fleet):
    before = full_ids(list(container_ids()))
    fleet.set(maxNumBatchedTokens="8192")
    with ContainerEvents() as events:
        steps = fleet.up("changed vLLM setting")
    plan = fleet.plan
    vllm_names = {v.container_name for v in plan.vllm}
    after = full_ids(list(container_ids()))
    for name, old_id in before.items():
        if name in vllm_names:
            assert after[name] != old_id, f"{name} was not replaced"
        else:
            assert after[name] == old_id, f"{name} should not have been replaced"
    seen = events.seen
    for name in vllm_names:  # the engine removed each old container before creating its new one
        destroyed, created = seen.get((before[name], "destroy")), seen.get((after[name], "create"))
        assert destroyed and created, (name, before[name], after[name], sorted(seen))
        assert destroyed < created, name
    for vllm in plan.vllm:
        args = docker("inspect", "-f", "{{json .Args}}", vllm.container_name).stdout
        assert "8192" in args
    # The PaddleX services bound to the new vLLM were started again and serve: once the
    # gateway's own probes see them back (they were down while restarting), every one answers.
    wait_until_all_healthy(fleet)
    restarted = {
        s.name for s in steps if s.name.endswith("-start") and s.op == "create-replacement"
    }
    assert len(restarted) == len(plan.paddlex)
    test_every_paddlex_serves_and_answers_from_the_vllm_its_config_names(fleet)


def test_a_changed_gateway_source_rebuilds_and_replaces_only_the_gateway_and_its_keeper(fleet):
    before = full_ids(list(container_ids()))
    old_gateway = gateway_container()
    old_image = built_images(fleet)
    source = fleet.stack.project / "gateway" / "api" / "postprocess.py"
    source.write_text(source.read_text() + "\n# a change of the gateway's sources\n")
    steps = fleet.up("changed gateway source")
    touched = changed(steps)
    assert set(touched) <= {
        "local-gateway-image",
        "local-gateway-image-cleanup",
        "local-gateway",
        "local-gateway-config",
        "local-gateway-ready",
        "local-gateway-keeper",
        "local-gateway-keeper-config",
        "local-gateway-keeper-ready",
    }, touched
    assert "local-gateway-image" in touched and "local-gateway" in touched
    new_image = built_images(fleet)
    assert new_image != old_image
    for image in old_image:  # the image it replaced is removed, not left to pile up
        assert removed_unless_named_elsewhere(image), f"{image} is left"
    after = full_ids(list(container_ids()))
    new_gateway = gateway_container()
    assert new_gateway != old_gateway and old_gateway not in after  # a new generation
    # the keeper runs the gateway's image: a new generation of it too
    old_keeper, new_keeper = keeper_container(before), keeper_container(after)
    assert new_keeper != old_keeper and old_keeper not in after
    replaced = {old_gateway, new_gateway, old_keeper, new_keeper}
    assert {n: i for n, i in after.items() if n not in replaced} == {
        n: i for n, i in before.items() if n not in replaced
    }
    test_ocr_a_png_through_the_gateway(fleet)


def fleetctl(fleet: Fleet, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(fleet.stack.outputs()))
    return subprocess.run(
        [sys.executable, "-m", "fleetctl", *args[:1], "--outputs", str(outputs), *args[1:]],
        cwd=REPO,
        env={
            **os.environ,
            "PADDLEOCR_FLEET_TOKEN": USER_TOKEN,
            "PADDLEOCR_FLEET_ADMIN_TOKEN": ADMIN_TOKEN,
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_fleetctl_status_and_verify_pass_on_the_stacks_outputs(fleet, tmp_path):
    status = fleetctl(fleet, tmp_path, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    rows = json.loads(status.stdout)
    rows = rows["instances"] if isinstance(rows, dict) else rows
    containers = {row["container"] for row in rows}
    assert {p.container_name for p in fleet.plan.paddlex} <= containers
    assert {v.container_name for v in fleet.plan.vllm} <= containers
    verify = fleetctl(fleet, tmp_path, "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_fleetctl_restarts_a_paddlex_and_batch_ocrs_a_folder(fleet, tmp_path):
    paddlex = fleet.plan.paddlex[7]
    restart = fleetctl(fleet, tmp_path, "restart", "paddlex", str(paddlex.port), "--wait", "120")
    assert restart.returncode == 0, restart.stdout + restart.stderr
    assert httpx.get(f"{paddlex.url}/health", timeout=5).status_code == 200
    inbox = tmp_path / "inbox" / "2026"
    inbox.mkdir(parents=True)
    for i in range(3):
        (inbox / f"scan-{i}.png").write_bytes(png_bytes())
    (inbox / "contract.pdf").write_bytes(pdf_bytes(3))
    out = tmp_path / "markdown"
    batch = fleetctl(
        fleet, tmp_path, "ocr", str(tmp_path / "inbox"), "--out", str(out), "--no-progress",
        "--gateway", fleet.gateway,
    )  # fmt: skip
    assert batch.returncode == 0, batch.stdout + batch.stderr
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.md"))
    assert written == ["2026/contract.md", "2026/scan-0.md", "2026/scan-1.md", "2026/scan-2.md"]
    assert "sim-vllm:" in (out / "2026" / "contract.md").read_text()


def test_killing_a_paddlex_container_mid_traffic_costs_the_clients_nothing(fleet):
    victim = fleet.plan.paddlex[3]
    after_kill = 60  # responses that must still come back once `docker kill` has returned
    statuses: list[object] = []  # status codes, or the exception a request raised
    lock = threading.Lock()
    killed = threading.Event()
    answered_at_kill = 0
    give_up = time.monotonic() + 600

    def worker(client: httpx.Client) -> None:
        # Open-ended traffic: keep asking until the kill is done and enough answers came after.
        while time.monotonic() < give_up:
            with lock:
                if killed.is_set() and len(statuses) >= answered_at_kill + after_kill:
                    return
            try:
                outcome: object = _ocr(client, fleet.gateway).status_code
            except Exception as exc:  # any failure of a request is an answer the client lost
                outcome = repr(exc)
            with lock:
                statuses.append(outcome)

    with httpx.Client() as client:
        workers = [threading.Thread(target=worker, args=(client,)) for _ in range(6)]
        for thread in workers:
            thread.start()
        try:
            while len(statuses) < 20 and time.monotonic() < give_up:
                time.sleep(0.01)
            assert len(statuses) >= 20, "no traffic before the kill"
            subprocess.run(
                ["docker", "kill", victim.container_name], capture_output=True, check=True
            )
        finally:
            with lock:
                answered_at_kill = len(statuses)
                killed.set()
            for thread in workers:
                thread.join(timeout=max(1.0, give_up - time.monotonic() + 130))
    assert not any(thread.is_alive() for thread in workers), "traffic did not finish"
    assert len(statuses) >= answered_at_kill + after_kill, "too few answers after the kill"
    assert statuses == [200] * len(statuses), [s for s in statuses if s != 200][:5]
    deadline = time.monotonic() + 40  # active probes: 3 failures at the configured interval
    state = "healthy"
    while state == "healthy" and time.monotonic() < deadline:
        upstreams = gateway_upstreams(fleet)
        state = next(u["state"] for u in upstreams if u["url"] == victim.url)
        time.sleep(0.5)
    assert state in ("unhealthy", "ejected")


def test_a_restarted_paddlex_container_serves_again_without_a_new_start_command(fleet):
    paddlex = fleet.plan.paddlex[5]
    subprocess.run(["docker", "restart", paddlex.container_name], capture_output=True, check=True)
    wait_http_ok(f"{paddlex.url}/health", 90)  # nothing but the container itself restarts it
    response = httpx.post(
        f"{paddlex.url}/layout-parsing",
        json={"file": base64.b64encode(png_bytes()).decode(), "fileType": 1, "visualize": False},
        timeout=60,
    )
    assert response.status_code == 200
    markdown = response.json()["result"]["layoutParsingResults"][0]["markdown"]["text"]
    assert vllm_port_named_in(markdown) == paddlex.vllm.port


def test_back_to_one_card_removes_only_the_second_cards_containers(fleet):
    keep = {n: i for n, i in full_ids(list(container_ids())).items() if "-sim-1" not in n}
    fleet.set(cards="1")
    steps = fleet.up("shrink to 1 card")
    deleted = {n for n, ops in changed(steps).items() if ops & {"delete"}}
    assert deleted and all(n.startswith("local-card-1") for n in deleted), deleted
    assert full_ids(list(container_ids())) == keep
    test_ocr_a_png_through_the_gateway(fleet)


def test_destroy_leaves_no_container_and_no_image_it_built(fleet, capsys):
    state = fleet.stack.state()
    built = [r["outputs"]["imageName"] for r in state if r["type"] == "docker:index/image:Image"]
    assert built
    fleet.stack.destroy()
    assert container_ids() == {}
    assert docker("image", "inspect", f"paddleocr-fleet/gateway:{STACK}").returncode != 0
    for image in built:
        assert removed_unless_named_elsewhere(image), f"{image} is left"
    # The accelerator images are the operator's (kept locally), not built by the stack.
    assert docker("image", "inspect", "paddleocr-fleet/vllm-sim:latest").returncode == 0
    with capsys.disabled():
        times = ", ".join(f"{k} {v:.1f} s" for k, v in fleet.seconds.items())
        print(f"\n[e2e] real Pulumi engine: {times}")
