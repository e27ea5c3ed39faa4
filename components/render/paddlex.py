"""The PaddleX server's rendering (components/paddlex.py): its pipeline config, launch command,
environment, the start and stop commands of its service and its readiness wait."""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from components.plan import (
    PaddlexInstance,
)
from components.render.common import (
    CONFIG_TEMPLATES,
    SIM_LOAD_ENV,
    CardLaunch,
    card_ready_command,
)
from components.settings import FleetSettings
from gateway.wire import paddlex_routes

PIPELINE_TEMPLATE = CONFIG_TEMPLATES / "pipeline_config_vllm.yaml"


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
    template: dict[str, Any] = yaml.safe_load(PIPELINE_TEMPLATE.read_text(encoding="utf-8"))
    return template


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


def paddlex_ready_command(settings: FleetSettings, paddlex: PaddlexInstance) -> str:
    return card_ready_command(
        settings,
        paddlex,
        paddlex_routes.HEALTH,
        timeout_s=settings.paddlex_ready_timeout,
        log_hint=f"docker exec {paddlex.container_name} tail -n 100 {paddlex.log_path}"
        f" (on the host: {settings.model_dir}/{paddlex.log_path.removeprefix('/data/')})",
    )


@dataclass(frozen=True)
class PaddlexLaunch(CardLaunch[PaddlexInstance]):
    """What one PaddleX container and its service are started, stopped and waited on with
    (`PaddlexServer` takes this)."""

    pipeline_config: str
    """The pipeline config's YAML (naming its vLLM)."""
    start_command: str
    stop_command: str


def paddlex_launch(settings: FleetSettings, paddlex: PaddlexInstance) -> PaddlexLaunch:
    return PaddlexLaunch(
        paddlex,
        env=paddlex_env(settings, paddlex),
        pipeline_config=pipeline_config_yaml(settings, paddlex),
        start_command=paddlex_start_command(settings, paddlex),
        stop_command=paddlex_stop_command(paddlex),
        ready_command=paddlex_ready_command(settings, paddlex),
        model_dir=settings.model_dir,
    )
