"""The gateway's rendering (components/gateway.py): its config (defaults, the operator's
settings, the upstreams, the stack's admin tokens), launch command, container name and
readiness wait."""

from __future__ import annotations

import copy
import json
from typing import Any

from components.access import gateway_auth
from components.plan import (
    GatewayPlan,
    KeeperPlan,
    PaddlexInstance,
)
from components.render.common import (
    CONFIG_TEMPLATES,
    SERVING_FILE,
    config_install_command,
    service_ready_command,
    serving_probe,
)
from components.render.vllm import official_model_name
from components.settings import FleetSettings
from gateway.config.settings import Settings as GatewaySettings
from gateway.config.settings import parse_settings

GATEWAY_DEFAULTS = CONFIG_TEMPLATES / "gateway_defaults.json"


JOBS_DIR_IN_CONTAINER = "/var/lib/paddleocr-fleet/jobs"


LOCAL_TOKEN_FILE = f"{JOBS_DIR_IN_CONTAINER}/admin.token"
"""The gateway's local admin token (gateway/access/local_token.py): the stack's drains use it."""


def gateway_ready_command(gateway: GatewayPlan, container: str) -> str:
    """Ready once the gateway process in `container` serves (its serving file) and `/ready`
    answers on the host's port (during a handover the old and the new gateway serve it
    together)."""
    return service_ready_command(
        gateway, "the gateway", "/ready", serving_probe(SERVING_FILE), container
    )


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
    return config_with_upstreams(gateway_base_config(settings), upstreams, keeper, admin_tokens)


def gateway_base_config(settings: FleetSettings) -> dict[str, Any]:
    """What every gateway's config holds before its upstreams: defaults and the operator's
    `gateway` settings (`Gateway` takes this, not the settings)."""
    config = _operator_gateway_config(settings)
    if settings.gateway_layout == "per-host":
        limits = gateway_settings(settings).server
        config.setdefault("server", {})["max_connections_per_client"] = limits.max_connections
    return config


def config_with_upstreams(
    base: dict[str, Any],
    upstreams: list[dict[str, Any]],
    keeper: KeeperPlan | None = None,
    admin_tokens: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """`base` (`gateway_base_config`) with the upstreams, the keeper and the stack's admin
    tokens (see `gateway_config`); `base` is left as it was."""
    config = copy.deepcopy(base)
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
    config: dict[str, Any] = json.loads(GATEWAY_DEFAULTS.read_text(encoding="utf-8"))
    _merge(config, settings.gateway)
    auth = gateway_auth(settings)
    if auth is not None:
        _merge(config.setdefault("auth", {}), auth)
    jobs = config.setdefault("jobs", {})
    jobs.setdefault("dir", JOBS_DIR_IN_CONTAINER)
    if settings.jobs_store_url is not None:
        # every gateway on one PostgreSQL (gateway/jobs/postgres.py); the config is then a
        # Pulumi secret (components/gateway.py)
        jobs["store_url"] = settings.jobs_store_url.get_secret_value()
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
    return config_json(gateway_config(settings, upstreams, keeper, admin_tokens))


def config_json(config: dict[str, Any]) -> str:
    """A gateway config as the file the gateway reads."""
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def gateway_config_install_command(gateway: GatewayPlan, container: str) -> str:
    return config_install_command(container, gateway.config_path)


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
        "--serving-file",
        SERVING_FILE,
    ]


def _merge(base: dict[str, Any], override: dict[str, Any]) -> None:
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
