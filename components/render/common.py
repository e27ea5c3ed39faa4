"""What every component's rendering shares: the config templates' folder, the bounded
readiness loop and its probes, the config swap by `docker exec`, the started-at probe, the
cleanup of built images, content hashes."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from components.plan import (
    BalancerPlan,
    GatewayPlan,
    KeeperPlan,
    MonitoringPlan,
    PaddlexInstance,
    VllmInstance,
)
from components.settings import FleetSettings

CONFIG_TEMPLATES = Path(__file__).resolve().parents[2] / "config"


MODEL_DIR_IN_CONTAINER = "/data"


SIM_LOAD_ENV = {"vllm": "VLLM_SIM_LOAD_SECONDS", "paddlex": "PADDLEX_SIM_LOAD_SECONDS"}
"""What the sim images read as their load time (sim/vllm/server.py, sim/paddlex/cli.py)."""
SIM_FAULTS_ENV = "VLLM_SIM_FAULTS"
"""What the sim vLLM image reads its injected faults from (sim/vllm/faults.py)."""


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
SERVING_FILE = "/run/paddleocr-fleet/serving"
"""In a gateway's or keeper's container: written once its own process serves
(`--serving-file`, gateway/server/listeners.ServingFile), removed when it stops serving."""


def serving_probe(serving_file: str) -> tuple[str, ...]:
    """`PYTHON_PROBE`, passing only once `serving_file` in the container says `"state":
    "serving"`: during a handover the old process answers on the same port, so the port alone
    proves nothing about the new one, and a new process still `"waiting"` for a port the old
    one holds (and hands nothing over) does not serve yet."""
    check = (
        "import json, sys\n"
        "try:\n"
        f"    with open({serving_file!r}) as file:\n"
        "        serving = json.load(file).get('state') == 'serving'\n"
        "except Exception:\n"
        "    serving = False\n"
        "if not serving:\n"
        "    sys.exit(1)\n"
    )
    return ("python3", "-c", check + PROBE)


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


Server = TypeVar("Server", VllmInstance, PaddlexInstance)


@dataclass(frozen=True)
class CardLaunch(Generic[Server]):
    """What one container of a card is started and waited on with, rendered from the settings
    (the server components take this, not the settings)."""

    instance: Server
    env: dict[str, str]
    ready_command: str
    model_dir: str
    """The host folder mounted as the models' folder."""


def card_ready_command(
    settings: FleetSettings,
    instance: VllmInstance | PaddlexInstance,
    path: str,
    timeout_s: int,
    log_hint: str,
    expect: str = "",
) -> str:
    """Ready once `path` of a card's server (a vLLM, a PaddleX) answers on its host, polled
    every `readyPollInterval` for at most `timeout_s`."""
    return wait_for_http(
        url=f"{instance.local_url}{path}",
        what=instance.label,
        container=instance.container_name,
        timeout_s=timeout_s,
        interval_s=settings.ready_poll_interval,
        log_hint=log_hint,
        expect=expect,
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
    gateway's carries its generation: `containers.generation_named`)."""
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


def config_install_command(container: str, path: str) -> str:
    """Reads a config on stdin and swaps it in atomically inside `container` (the gateway and
    the keeper read it again when it changes)."""
    script = f"cat > {path}.tmp && mv {path}.tmp {path}"
    return shlex.join(["docker", "exec", "-i", container, "sh", "-c", script])


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


def generation_name(base: str, generation: Mapping[str, Any]) -> str:
    """`<base>-<hash>`: a container replaced by handover (the gateway, its keeper) carries a
    hash of what forces its replacement (`generation`: its image, command, environment, mounts,
    labels), so the new container can start beside the old one (Docker holds each name once)
    and take over its listening sockets before the old one stops."""
    digest = content_hash(json.dumps(generation, sort_keys=True, default=str))[:12]
    return f"{base}-{digest}"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
