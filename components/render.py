"""Rendered artefacts of the plan: launch commands, pipeline configs, start-up shell commands.

Pure functions of (settings, plan instance); the components pass their results to Pulumi
resources unchanged, and the tests run the shell strings for real.

    >>> from components.settings import load_settings
    >>> from components.plan import build_plan
    >>> settings = load_settings({"cards": "1"})
    >>> paddlex = build_plan(settings).paddlex[0]
    >>> paddlex_argv(settings, paddlex)[:4]
    ['paddlex', '--serve', '--device', 'npu']
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from components.access import gateway_auth
from components.plan import (
    BalancerPlan,
    FleetPlan,
    GatewayPlan,
    KeeperPlan,
    MonitoringPlan,
    PaddlexInstance,
    VllmInstance,
)
from components.settings import FleetSettings
from gateway.config.settings import Settings as GatewaySettings
from gateway.config.settings import parse_settings

CONFIG_TEMPLATES = Path(__file__).resolve().parent.parent / "config"
PIPELINE_TEMPLATE = CONFIG_TEMPLATES / "pipeline_config_vllm.yaml"
GATEWAY_DEFAULTS = CONFIG_TEMPLATES / "gateway_defaults.json"
MODEL_DIR_IN_CONTAINER = "/data"
JOBS_DIR_IN_CONTAINER = "/var/lib/paddleocr-fleet/jobs"
LOCAL_TOKEN_FILE = f"{JOBS_DIR_IN_CONTAINER}/admin.token"
"""The gateway's local admin token (gateway/access/local_token.py): the stack's drains use it."""


def official_model_name(served_model_name: str) -> str:
    """The model name the official PaddleOCR API clients ask for: the served model without its
    size suffix (`PaddleOCR-VL-1.5-0.9B` -> `PaddleOCR-VL-1.5`)."""
    return re.sub(r"-[0-9.]+B$", "", served_model_name)


def vllm_argv(settings: FleetSettings, vllm: VllmInstance) -> list[str]:
    """`vllm serve ...` with the seed's flags, the kind's flags and the operator's extras."""
    return [
        "vllm",
        "serve",
        settings.container_model_path,
        "--served-model-name",
        settings.served_model_name,
        "--port",
        str(vllm.port),
        "--max-num-batched-tokens",
        str(settings.max_num_batched_tokens),
        "--trust-remote-code",
        "--no-enable-prefix-caching",
        "--mm-processor-cache-gb",
        "0",
        "--gpu-memory-utilization",
        f"{settings.memory_fraction:g}",
        *vllm.host.kind.vllm_flags,
        *settings.vllm_extra_args,
    ]


SIM_LOAD_ENV = {"vllm": "VLLM_SIM_LOAD_SECONDS", "paddlex": "PADDLEX_SIM_LOAD_SECONDS"}
"""What the sim images read as their load time (sim/vllm/server.py, sim/paddlex/cli.py)."""


def vllm_env(settings: FleetSettings, vllm: VllmInstance) -> dict[str, str]:
    kind = vllm.host.kind
    env = dict(kind.vllm_env + kind.card_env(vllm.card))
    if kind.name == "sim" and settings.sim_vllm_load_seconds is not None:
        env[SIM_LOAD_ENV["vllm"]] = f"{settings.sim_vllm_load_seconds:g}"
    return env


def paddlex_env(settings: FleetSettings, paddlex: PaddlexInstance) -> dict[str, str]:
    kind = paddlex.host.kind
    env = dict(kind.card_env(paddlex.card))
    if kind.name == "sim" and settings.sim_paddlex_load_seconds is not None:
        env[SIM_LOAD_ENV["paddlex"]] = f"{settings.sim_paddlex_load_seconds:g}"
    return env


def pipeline_config(settings: FleetSettings, paddlex: PaddlexInstance) -> dict[str, Any]:
    """The pipeline config of one PaddleX instance, bound to its vLLM."""
    config = copy.deepcopy(_pipeline_template())
    config["batch_size"] = settings.pipeline_batch_size
    modules = config["SubModules"]
    modules["LayoutDetection"]["batch_size"] = settings.layout_batch_size
    recognition = modules["VLRecognition"]
    recognition["model_name"] = settings.served_model_name
    recognition["batch_size"] = settings.vl_batch_size
    recognition["genai_config"]["server_url"] = f"{paddlex.vllm.local_url}/v1"
    config["SubPipelines"]["DocPreprocessor"]["batch_size"] = settings.doc_preprocessor_batch_size
    config["Serving"] = {"visualize": False, "extra": {"max_num_input_imgs": None}}
    return config


def pipeline_config_yaml(settings: FleetSettings, paddlex: PaddlexInstance) -> str:
    header = (
        f"# Rendered by paddleocr-fleet for {paddlex.container_name}: "
        f"bound to {paddlex.vllm.container_name} ({paddlex.vllm.local_url}).\n"
    )
    body = yaml.safe_dump(pipeline_config(settings, paddlex), sort_keys=False)
    return header + body


@cache
def _pipeline_template() -> dict[str, Any]:
    return yaml.safe_load(PIPELINE_TEMPLATE.read_text(encoding="utf-8"))


def paddlex_argv(settings: FleetSettings, paddlex: PaddlexInstance) -> list[str]:
    return [
        "paddlex",
        "--serve",
        "--device",
        paddlex.host.kind.paddlex_device,
        "--port",
        str(paddlex.port),
        "--pipeline",
        paddlex.pipeline_config_path,
    ]


STOP_WAIT_S = 30
"""How long a stop waits for the PaddleX service to exit before it kills it."""
START_LOCK_WAIT_S = 60
"""How long a starter waits for another one of the same instance to have recorded its pid."""


def pid_file(paddlex: PaddlexInstance) -> str:
    return f"/tmp/paddlex-{paddlex.port}.pid"


def lock_file(paddlex: PaddlexInstance) -> str:
    return f"/tmp/paddlex-{paddlex.port}.lock"


def paddlex_idle_argv(paddlex: PaddlexInstance) -> list[str]:
    """The PaddleX container's own command: idle until `docker exec` starts the service (as in
    the seed); after a restart (host reboot, `restart: unless-stopped`) run the service again if it
    had been started. bash traps TERM so that `docker stop` ends it at once even as PID 1."""
    script = paddlex.service_script_path
    return [
        "bash",
        "-c",
        f"trap 'exit 0' TERM; if [ -f {script} ]; then bash {script} & fi; "
        "tail -f /dev/null & wait",
    ]


def _is_service(paddlex: PaddlexInstance, pid: str) -> str:
    """A shell test: process `pid` lives and is this instance's service (its starter script, or
    the server it became), not the caller itself. Pids restart at 1 in a restarted container,
    so a stale pid file may name any process, the caller included."""
    markers = (paddlex.service_script_path, paddlex.pipeline_config_path)
    grep = shlex.join(["grep", "-qF", *(arg for m in markers for arg in ("-e", m))])
    return (
        f'[ -n "{pid}" ] && [ "{pid}" != "$$" ] && kill -0 "{pid}" 2>/dev/null && '
        f"tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null | {grep}"
    )


def paddlex_service_script(settings: FleetSettings, paddlex: PaddlexInstance) -> str:
    """What runs inside the PaddleX container: set up, then exec the server, logging to /data.

    At most one service per container, however often and from wherever it is started (the
    start command, an update of it, the container's restart, `fleetctl restart`): under a lock,
    a starter that finds the service of the pid file alive leaves it alone; otherwise it
    records its own pid and becomes the service. A second server would fail on the held port,
    but only after overwriting the pid file, and the stop command could then not end the
    running one.
    """
    log_dir = paddlex.log_path.rsplit("/", 1)[0]
    pid, log = pid_file(paddlex), paddlex.log_path
    # flock: util-linux, in every Debian/Ubuntu/openEuler image; without it, no serialisation.
    lock = (
        f"exec 9>>{lock_file(paddlex)} || exit 1\n"
        f"if command -v flock >/dev/null 2>&1; then flock -w {START_LOCK_WAIT_S} 9 || exit 1; fi"
    )
    running = (
        f"p=$(cat {pid} 2>/dev/null); if {_is_service(paddlex, '$p')}; then "
        f'echo "$(date -u +%FT%TZ) paddleocr-fleet: the service already runs as pid $p" >> {log}; '
        "exit 0; fi"
    )
    steps = [
        paddlex.host.kind.paddlex_shell_setup,
        f"exec {shlex.join(paddlex_argv(settings, paddlex))} >> {log} 2>&1",
    ]
    return "\n".join(
        [
            f"mkdir -p {log_dir} || exit 1",
            lock,
            running,
            f"echo $$ > {pid}",
            "exec 9>&-",  # the lock is for starters only: the service must not hold it
            " && ".join(step for step in steps if step),
        ]
    )


def paddlex_start_command(settings: FleetSettings, paddlex: PaddlexInstance) -> str:
    """Keeps the service script in the container (written as root, so a non-root image cannot
    make it fail silently) and starts it with `docker exec -d` as the image's user. Running it
    again while the service runs changes nothing (`paddlex_service_script`), so it is the start
    command's `update` too: any input change that is not a trigger re-runs it."""
    script, path = paddlex_service_script(settings, paddlex), paddlex.service_script_path
    directory = path.rsplit("/", 1)[0]
    keep = f"mkdir -p {directory} && printf '%s\\n' {shlex.quote(script)} > {path}"
    name = paddlex.container_name
    write = shlex.join(["docker", "exec", "-u", "0", name, "sh", "-c", keep])
    return f"{write} && " + shlex.join(["docker", "exec", "-d", name, "bash", path])


def paddlex_stop_command(paddlex: PaddlexInstance) -> str:
    """Stops the service that `paddlex_start_command` started and waits (bounded) until it has
    exited, so that a service started next finds its port free; harmless if it is gone, and a
    stale pid file naming another process (after a container restart) kills nothing."""
    pid, path = pid_file(paddlex), paddlex.service_script_path
    script = (
        f"rm -f {path}; p=$(cat {pid} 2>/dev/null) || exit 0; "
        f"if {_is_service(paddlex, '$p')}; then kill $p 2>/dev/null; "
        f"i=0; while kill -0 $p 2>/dev/null && [ $i -lt {STOP_WAIT_S * 10} ]; do "
        "sleep 0.1; i=$((i+1)); done; "
        f"kill -9 $p 2>/dev/null; fi; rm -f {pid}"
    )
    return shlex.join(["docker", "exec", paddlex.container_name, "bash", "-c", script]) + (
        " >/dev/null 2>&1 || true"
    )


PROBE = (
    "import sys, urllib.request\n"
    "try:\n"
    "    body = urllib.request.urlopen(sys.argv[1], timeout=5).read()\n"
    "except Exception:\n"
    "    sys.exit(1)\n"
    "sys.exit(0 if sys.argv[2].encode() in body else 1)\n"
)
"""Run inside a host-network container: GET a URL, succeed on 2xx whose body holds argv[2]."""
PYTHON_PROBE = ("python3", "-c", PROBE)
CURL_PROBE = (
    "sh",
    "-c",
    'body=$(curl -fsS --max-time 5 "$1") || exit 1; case "$body" in *"$2"*) exit 0 ;; esac; exit 1',
    "probe",
)
"""The same probe for images without Python (the balancer's): curl and sh."""


def wait_for_http(
    *,
    url: str,
    what: str,
    container: str,
    timeout_s: int,
    interval_s: int,
    log_hint: str,
    expect: str = "",
    probe: tuple[str, ...] = PYTHON_PROBE,
) -> str:
    """A bounded readiness loop in POSIX sh: poll `url` until it answers 2xx (containing `expect`).

    The probe runs on the host itself, inside the host-network container (`docker exec` through
    the host's endpoint, with the container's own python3, or `probe`), so it reaches the
    service's loopback port wherever `pulumi` runs. Fails fast when the container stops running,
    and on timeout; either way the message names the instance and where its log is.
    """
    quoted = shlex.quote(container)
    check = shlex.join(["docker", "exec", container, *probe, url, expect])
    running = f"docker inspect -f '{{{{.State.Running}}}}' {quoted} 2>/dev/null"
    failure = shlex.quote(f"{what} ({container})")
    hint = shlex.quote(log_hint)
    return "\n".join(
        [
            f"deadline=$(( $(date +%s) + {timeout_s} ))",
            f"until {check} >/dev/null 2>&1; do",
            f'  if [ "$({running})" != "true" ]; then',
            f'    echo {failure}" is not running (stopped outside Pulumi? `pulumi up --refresh`'
            f' starts it); its log: "{hint} >&2; exit 1',
            "  fi",
            '  if [ "$(date +%s)" -ge "$deadline" ]; then',
            f'    echo {failure}" not ready at "{shlex.quote(url)}" after {timeout_s} s; '
            f'its log: "{hint} >&2; exit 1',
            "  fi",
            f"  sleep {interval_s}",
            "done",
            f"echo {shlex.quote(f'{what} ready at {url}')}",
        ]
    )


def container_started_command(container_id: str, container: str) -> str:
    """Prints when the container last started and whether it runs (`2026-...Z running=true`).

    Run on every preview and update (the `command:local:run` invoke): a readiness wait that
    holds this among its triggers waits again after a start that Pulumi cannot see otherwise
    (a stopped container started again by `pulumi up --refresh`, or by Docker itself). Fails,
    naming the repair, when the container of the stack's state is gone from its engine.
    """
    fmt = "{{.State.StartedAt}} running={{.State.Running}}"
    inspect = shlex.join(["docker", "inspect", "--type", "container", "-f", fmt, container_id])
    missing = shlex.quote(
        f"container {container} ({container_id[:12]}) is in the stack's state but not on its "
        "engine (removed outside Pulumi): `pulumi up --refresh` creates it again"
    )
    return (
        f'out=$({inspect} 2>&1) && {{ echo "$out"; exit 0; }}\n'
        f'case "$out" in *"No such"*) echo {missing} >&2 ;; *) echo "$out" >&2 ;; esac\n'
        "exit 1"
    )


def vllm_ready_command(settings: FleetSettings, vllm: VllmInstance) -> str:
    return wait_for_http(
        url=f"{vllm.local_url}/v1/models",
        what=vllm.label,
        container=vllm.container_name,
        timeout_s=settings.vllm_ready_timeout,
        interval_s=settings.ready_poll_interval,
        log_hint=f"docker logs {vllm.container_name}",
        expect=f'"{settings.served_model_name}"',
    )


def paddlex_ready_command(settings: FleetSettings, paddlex: PaddlexInstance) -> str:
    return wait_for_http(
        url=f"{paddlex.local_url}/health",
        what=paddlex.label,
        container=paddlex.container_name,
        timeout_s=settings.paddlex_ready_timeout,
        interval_s=settings.ready_poll_interval,
        log_hint=f"docker exec {paddlex.container_name} tail -n 100 {paddlex.log_path}"
        f" (on the host: {settings.model_dir}/{paddlex.log_path.removeprefix('/data/')})",
    )


def service_ready_command(
    service: GatewayPlan | KeeperPlan | BalancerPlan | MonitoringPlan,
    what: str,
    path: str,
    probe: tuple[str, ...] = PYTHON_PROBE,
    container: str | None = None,
) -> str:
    """Ready once `path` of a service the stack runs from its own image answers (within
    2 minutes; its log: `docker logs`). `container`: its name when it is not the plan's (a
    gateway's carries its generation: `gateway_container_name`)."""
    name = container or service.container_name
    return wait_for_http(
        url=f"{service.local_url}{path}",
        what=what,
        container=name,
        timeout_s=120,
        interval_s=1,
        log_hint=f"docker logs {name}",
        probe=probe,
    )


def gateway_ready_command(gateway: GatewayPlan, container: str) -> str:
    """Ready once the gateway in `container` answers `/ready` (on the host's port: during a
    handover the old and the new gateway serve it together)."""
    return service_ready_command(gateway, "the gateway", "/ready", container=container)


def gateway_container_name(gateway: GatewayPlan, generation: Mapping[str, Any]) -> str:
    """`<gatewayContainerName>-<hash>`: the gateway container's name carries a hash of what
    forces its replacement (`generation`: its image, command, environment, mounts, labels), so
    the new container can start beside the old one (Docker holds each name once) and take over
    its listening sockets before the old one stops."""
    digest = content_hash(json.dumps(generation, sort_keys=True, default=str))[:12]
    return f"{gateway.container_name}-{digest}"


def keeper_ready_command(keeper: KeeperPlan) -> str:
    return service_ready_command(keeper, "the slice keeper", "/health")


def gateway_upstream(paddlex: PaddlexInstance) -> dict[str, Any]:
    """One upstream entry of the gateway config, carrying its topology."""
    return {
        "url": paddlex.url,
        "host": paddlex.host.name,
        "card": paddlex.card,
        "vllm": paddlex.vllm.url,
        "container": paddlex.container_name,
    }


def gateway_config(
    settings: FleetSettings,
    upstreams: list[dict[str, Any]],
    keeper: KeeperPlan | None = None,
    admin_tokens: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The gateway's config.json: defaults, the operator's `gateway` settings, the upstreams
    (each naming the gateway's `keeper`, on the same host, as the way for job slices), and
    the stack's own `admin_tokens` (name and SHA-256: the recyclers', components/recycler.py).

    Behind the balancer (`gatewayLayout: per-host`) a gateway has one client, the balancer,
    which applies the per-client connection bound with the clients' own addresses instead
    (components/haproxy.py): the gateway's is raised to its total bound.
    """
    config = _operator_gateway_config(settings)
    if settings.gateway_layout == "per-host":
        limits = gateway_settings(settings).server
        config.setdefault("server", {})["max_connections_per_client"] = limits.max_connections
    if keeper is not None:
        upstreams = [{**entry, "keeper": keeper.local_url} for entry in upstreams]
    config["upstreams"] = upstreams
    if admin_tokens:
        auth = config.setdefault("auth", {})
        auth["admin_tokens"] = [*auth.get("admin_tokens", []), *admin_tokens]
    return config


def gateway_settings(settings: FleetSettings) -> GatewaySettings:
    """The gateways' settings as the operator configured them (for what the balancer derives
    from them: timeouts, connection bounds)."""
    return parse_settings({**_operator_gateway_config(settings), "upstreams": []})


def _operator_gateway_config(settings: FleetSettings) -> dict[str, Any]:
    config = json.loads(GATEWAY_DEFAULTS.read_text(encoding="utf-8"))
    _merge(config, settings.gateway)
    auth = gateway_auth(settings)
    if auth is not None:
        _merge(config.setdefault("auth", {}), auth)
    jobs = config.setdefault("jobs", {})
    jobs.setdefault("dir", JOBS_DIR_IN_CONTAINER)
    # In the folder every gateway container of the host mounts: a gateway and the one it hands
    # its port to (components/gateway.py) accept the same local token.
    config.setdefault("auth", {}).setdefault("local_token_file", LOCAL_TOKEN_FILE)
    jobs.setdefault("model", official_model_name(settings.served_model_name))
    return config


def gateway_config_json(
    settings: FleetSettings,
    upstreams: list[dict[str, Any]],
    keeper: KeeperPlan | None = None,
    admin_tokens: list[dict[str, str]] | None = None,
) -> str:
    config = gateway_config(settings, upstreams, keeper, admin_tokens)
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def keeper_config_json(upstreams: list[dict[str, Any]]) -> str:
    """The keeper's config: the instances it may call (it reads the file again on change)."""
    return json.dumps({"upstreams": [entry["url"] for entry in upstreams]}, indent=2) + "\n"


def config_install_command(container: str, path: str) -> str:
    """Reads a config on stdin and swaps it in atomically inside `container` (the gateway and
    the keeper read it again when it changes)."""
    script = f"cat > {path}.tmp && mv {path}.tmp {path}"
    return shlex.join(["docker", "exec", "-i", container, "sh", "-c", script])


def gateway_config_install_command(gateway: GatewayPlan, container: str) -> str:
    return config_install_command(container, gateway.config_path)


def keeper_argv(keeper: KeeperPlan) -> list[str]:
    """On its host's loopback only: its one client is the gateway beside it, and what it keeps
    is other callers' results."""
    return [
        "python", "-m", "gateway.keeper", "--config", keeper.config_path,
        "--host", "127.0.0.1", "--port", str(keeper.port),
    ]  # fmt: skip


def image_cleanup_command(tag: str, image_id: str) -> str:
    """Removes an image the stack built, never one that anything else still names: the stack's
    tag if it still points there (on destroy), then the image if no tag is left (a rebuild's
    predecessor). An image a container still uses stays."""
    tag_q, id_q = shlex.quote(tag), shlex.quote(image_id)
    return (
        f"if [ \"$(docker image inspect -f '{{{{.Id}}}}' {tag_q} 2>/dev/null)\" = {id_q} ]; then "
        f"docker image rm {tag_q}; fi; "
        f"if [ \"$(docker image inspect -f '{{{{len .RepoTags}}}}' {id_q} 2>/dev/null)\" = 0 ]; "
        f"then docker image rm {id_q}; fi; true"
    )


def gateway_handover_path(gateway: GatewayPlan) -> str:
    """The unix socket where a gateway hands its listening sockets to the one that replaces it
    (gateway/server/listeners.py): in the jobs folder, a host folder every gateway container of the
    stack on that host mounts."""
    return f"{JOBS_DIR_IN_CONTAINER}/handover/gateway-{gateway.port}.sock"


def gateway_argv(gateway: GatewayPlan) -> list[str]:
    return [
        "python",
        "-m",
        "gateway",
        "--config",
        gateway.config_path,
        "--host",
        "0.0.0.0",
        "--port",
        str(gateway.port),
        "--handover",
        gateway_handover_path(gateway),
    ]


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _merge(base: dict[str, Any], override: dict[str, Any]) -> None:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def topology(
    settings: FleetSettings,
    plan: FleetPlan,
    stack: str | None = None,
    containers: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The `topology` stack output (shape in docs/architecture.md). `stack` names the Pulumi
    stack, so that `fleetctl` can name the command that repairs it; `containers`: the names the
    containers got where they differ from the plan's (the gateways': plan name -> name)."""
    return {
        **({"stack": stack} if stack else {}),
        "served_model_name": settings.served_model_name,
        "hosts": [
            {
                "name": host.name,
                "address": host.address,
                "docker_host": host.endpoint,
                "accelerator": host.kind.name,
                "cards": [
                    {
                        "card": card.card,
                        "vllm": [
                            {
                                "port": v.port,
                                "url": v.url,
                                "container": v.container_name,
                                "log": f"docker logs {v.container_name}",
                                "paddlex": [
                                    {
                                        "port": p.port,
                                        "url": p.url,
                                        "container": p.container_name,
                                        "pipeline_config": p.pipeline_config_path,
                                        "log": p.log_path,
                                        "start_command": paddlex_start_command(settings, p),
                                    }
                                    for p in card.bound_to(v)
                                ],
                            }
                            for v in card.vllm
                        ],
                    }
                    for card in plan.cards_of(host.name)
                ],
            }
            for host in plan.hosts
        ],
        "layout": plan.layout,
        **_entry_points(plan, containers or {}),
    }


def _entry_points(plan: FleetPlan, containers: Mapping[str, str]) -> dict[str, Any]:
    """`gateway` (single layout), or `gateways` and the `balancer` in front of them."""

    def gateway(g: GatewayPlan) -> dict[str, Any]:
        entry = {
            "host": g.host.name,
            "port": g.port,
            "url": g.url,
            "container": containers.get(g.container_name, g.container_name),
            "config_path": g.config_path,
        }
        if g.owns is not None:
            entry["upstreams"] = [p.url for p in plan.paddlex_of(g)]
        if g.keeper is not None:
            entry["keeper"] = {
                "port": g.keeper.port,
                "url": g.keeper.local_url,  # on the gateway host's loopback only
                "container": g.keeper.container_name,
                "config_path": g.keeper.config_path,
            }
        return entry

    balancer = plan.balancer
    if balancer is None:
        return {"gateway": gateway(plan.gateway)}
    return {
        "gateways": [gateway(g) for g in plan.gateways],
        "balancer": {
            "kind": balancer.kind,
            "host": balancer.host.name,
            "port": balancer.port,
            "url": balancer.url,
            "container": balancer.container_name,
            "config_path": balancer.config_path,
            "jobs_gateway": balancer.jobs_backend.url,
        },
    }
