"""The balancer's HAProxy config: least connections over the gateways, active `/ready` checks.

Pure text rendering. `balancer_config(settings, plan)` gives the config the stack installs;
`render_haproxy(spec)` renders any `HaproxySpec` (the hierarchy benchmark runs the same text).

    >>> spec = HaproxySpec(port=9180, backends=(Backend("a", "127.0.0.1", 9101, weight=6),))
    >>> "balance leastconn" in render_haproxy(spec)
    True

Interactive routes go to the gateway with the fewest requests in progress relative to its weight
(its number of PaddleX instances). The job API (`/api/v2/ocr/...`) goes to one gateway, whose
job store holds the jobs it created, with the others as backups for new jobs while it is down;
with `jobsStoreUrl` (one job store shared by every gateway) it is balanced like documents.
A gateway whose `/ready` fails (no instance of its host can serve) gets no documents.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass

from components.plan import BalancerPlan, FleetPlan
from components.render.common import CURL_PROBE, service_ready_command
from components.render.gateway import gateway_settings
from components.settings import FleetSettings

JOBS_PREFIX = "/api/v2/ocr/"
"""The official PaddleOCR API's job routes: jobs, batches and their result URLs."""
HEALTH_URI = "/balancer/health"
"""Answered by the balancer itself: 200 while at least one gateway is up, else 503."""
CHECK_PATH = "/ready"
CHECK_TIMEOUT_MS = 2000
"""How long a check's answer may take (at least the interval between checks)."""
MAX_WEIGHT = 256
STOP_AFTER_S = 25
"""A stopped balancer finishes its requests for this long (below the containers' stop grace)."""


@dataclass(frozen=True)
class Backend:
    """One gateway behind the balancer."""

    name: str
    address: str
    port: int
    weight: int = 1


@dataclass(frozen=True)
class HaproxySpec:
    port: int
    backends: tuple[Backend, ...]
    jobs_backend: str | None = None
    """The backend that takes the job API; None: the first."""
    shared_jobs: bool = False
    """Every gateway keeps its jobs in one shared store (`jobsStoreUrl`): the job API is
    balanced like documents, no gateway is its home."""
    bind_address: str = "*"
    check_interval_s: float = 2.0
    request_timeout_s: float = 930.0
    """Client and server inactivity limit: the gateways' whole-request deadline and a margin."""
    header_timeout_s: float = 10.0
    max_conn_per_backend: int = 1000
    """What one gateway accepts at once; more wait in the balancer's queue."""
    max_conn_per_client: int | None = 100
    """Connections one client address may hold open (the gateways' own per-client bound, which
    they cannot apply behind the balancer); beyond: 429 `too_many_connections`."""
    log: bool = True


def render_haproxy(spec: HaproxySpec) -> str:
    if not spec.backends:
        raise ValueError("the balancer needs at least one gateway")
    names = [b.name for b in spec.backends]
    jobs = spec.jobs_backend or names[0]
    if jobs not in names:
        raise ValueError(f"jobs backend {jobs!r} is not one of {names}")
    inter_ms = max(1, round(spec.check_interval_s * 1000))
    inter = f"{inter_ms}ms"
    timeout = f"{math.ceil(spec.request_timeout_s)}s"
    logging = ["    log stdout format raw local0 info"] if spec.log else []
    checks = [
        "    option httpchk",
        f"    http-check send meth GET uri {CHECK_PATH}",
        "    http-check expect status 200",
        f"    default-server check inter {inter} fall 3 rise 2 maxconn {spec.max_conn_per_backend}",
    ]

    def server(b: Backend, extra: str = "") -> str:
        weight = max(1, min(MAX_WEIGHT, b.weight))
        return f"    server {b.name} {b.address}:{b.port} weight {weight}{extra}"

    lines = [
        "# Rendered by paddleocr-fleet (components/haproxy.py): the balancer in front of the",
        "# gateways. A new file is checked (haproxy -c) before it replaces this one.",
        "global",
        *logging,
        f"    hard-stop-after {STOP_AFTER_S}s",
        "",
        "defaults",
        "    mode http",
        *(["    log global", "    option httplog", "    option dontlognull"] if spec.log else []),
        "    option forwardfor",
        "    timeout connect 5s",
        f"    timeout client {timeout}",
        f"    timeout server {timeout}",
        f"    timeout queue {timeout}",
        f"    timeout http-request {math.ceil(spec.header_timeout_s)}s",
        # without it HAProxy waits `inter` for a check's answer: a busy gateway checked often
        # would be taken out
        f"    timeout check {max(CHECK_TIMEOUT_MS, inter_ms)}ms",
        "    timeout http-keep-alive 75s",
        "    retries 2",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response",
        # Any idle connection serves the next request: the connections to a gateway stay
        # within its bound (maxconn), none of them left idle beside a new one.
        "    http-reuse always",
        "",
        "frontend documents",
        f"    bind {spec.bind_address}:{spec.port}",
        *_client_tracking(spec.max_conn_per_client),
        f"    monitor-uri {HEALTH_URI}",
        "    monitor fail if { nbsrv(gateways) lt 1 }",
        *_client_bound(spec.max_conn_per_client),
        *([] if spec.shared_jobs else [f"    use_backend jobs if {{ path_beg {JOBS_PREFIX} }}"]),
        "    default_backend gateways",
        "",
        "backend gateways",
        "    balance leastconn",
        *checks,
        *(server(b) for b in spec.backends),
    ]
    if not spec.shared_jobs:
        lines += [
            "",
            "backend jobs",
            *checks,
            *(server(b, "" if b.name == jobs else " backup") for b in spec.backends),
        ]
    return "\n".join(lines) + "\n"


def _client_tracking(limit: int | None) -> list[str]:
    """Counts each client address's open connections (HAProxy runs these rules first)."""
    if limit is None:
        return []
    return [
        "    stick-table type ipv6 size 100k expire 10m store conn_cur",
        "    tcp-request connection track-sc0 src",
    ]


def _client_bound(limit: int | None) -> list[str]:
    """The gateways' answer to a client over its connection bound, given by the balancer."""
    if limit is None:
        return []
    body = json.dumps(
        {
            "error": {
                "code": "too_many_connections",
                "message": f"this client has more than {limit} connections open "
                "(server.max_connections_per_client)",
            }
        }
    )
    return [
        f"    http-request return status 429 content-type application/json hdr retry-after 1 "
        f"string '{body}' if {{ sc0_conn_cur gt {limit} }}",
    ]


def haproxy_spec(settings: FleetSettings, plan: FleetPlan) -> HaproxySpec:
    """The stack's balancer: every gateway weighted by its PaddleX count, timeouts from the
    gateways' own settings (the balancer never cuts a request the gateway still works on)."""
    balancer = balancer_of(plan)
    gateway = gateway_settings(settings)
    backends = tuple(
        Backend(g.host.name, g.host.address, g.port, weight=len(plan.paddlex_of(g)))
        for g in balancer.backends
    )
    return HaproxySpec(
        port=balancer.port,
        backends=backends,
        jobs_backend=balancer.jobs_backend.host.name,
        shared_jobs=settings.shares_jobs,
        check_interval_s=balancer.check_interval_s,
        request_timeout_s=gateway.http.request_deadline_s + 30,
        header_timeout_s=gateway.server.header_timeout_s,
        max_conn_per_backend=gateway.server.max_connections,
        max_conn_per_client=gateway.server.max_connections_per_client,
    )


def balancer_config(settings: FleetSettings, plan: FleetPlan) -> str:
    return render_haproxy(haproxy_spec(settings, plan))


def balancer_of(plan: FleetPlan) -> BalancerPlan:
    if plan.balancer is None:
        raise ValueError("the plan has no balancer (gatewayLayout single)")
    return plan.balancer


def balancer_argv(balancer: BalancerPlan) -> list[str]:
    """Master-worker mode in the foreground: SIGUSR2 reloads the file without dropping a
    connection (the old worker finishes its requests), SIGUSR1 stops softly."""
    return ["haproxy", "-W", "-db", "-f", balancer.config_path]


def balancer_config_install_command(balancer: BalancerPlan) -> str:
    """Reads a config on stdin, checks it with HAProxy itself, swaps it in and reloads; a config
    HAProxy refuses fails the command with HAProxy's message, and the running one stays."""
    path = balancer.config_path
    script = (
        f"cat > {path}.new && haproxy -c -f {path}.new >/dev/null && mv {path}.new {path} && "
        "kill -USR2 1"
    )
    return shlex.join(["docker", "exec", "-i", balancer.container_name, "sh", "-c", script])


def balancer_ready_command(balancer: BalancerPlan) -> str:
    """Ready once a document route reaches a gateway through it: `/ready` is passed on."""
    return service_ready_command(balancer, "the balancer", CHECK_PATH, CURL_PROBE)
