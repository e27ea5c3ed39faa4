"""`docker.Container`'s state from `GET /containers/{id}/json`, as terraform-provider-docker's
Read sets it (what it does not read - envs, labels, volumes, uploads - stays as given).

    state = state_from_inspect(inspect, prior)  # prior: the inputs, or the old state
"""

from __future__ import annotations

from typing import Any

from pulumi_plugins.docker import godur, props
from pulumi_plugins.docker.container_schema import MIB, SCHEMA


def state_from_inspect(info: dict[str, Any], prior: dict[str, Any]) -> dict[str, Any]:
    """The state after the Terraform provider's Read: `prior` (inputs or old state) with what
    Read takes from the container. Envs, labels, volumes, uploads are not read back."""
    config, host = info.get("Config") or {}, info.get("HostConfig") or {}
    state = {**props.without_reserved(prior), **props.kept_meta(prior)}
    running = bool((info.get("State") or {}).get("Running"))
    if not running:
        state["exitCode"] = (info.get("State") or {}).get("ExitCode", 0)
        if state.get("mustRun", True):
            state["mustRun"] = False
    image = str(prior.get("image") or "")
    restart = host.get("RestartPolicy") or {}
    log_config = host.get("LogConfig") or {}
    state.update(
        id=info["Id"],
        name=info.get("Name", "").lstrip("/"),
        rm=bool(host.get("AutoRemove")),
        readOnly=bool(host.get("ReadonlyRootfs")),
        image=info.get("Image") if image.startswith("sha256:") else config.get("Image"),
        hostname=config.get("Hostname", ""),
        domainname=config.get("Domainname", ""),
        command=list(config.get("Cmd") or []),
        entrypoints=list(config.get("Entrypoint") or []),
        user=config.get("User", ""),
        securityOpts=list(host.get("SecurityOpt") or []),
        restart=restart.get("Name", ""),
        maxRetryCount=restart.get("MaximumRetryCount", 0),
        init=bool(host.get("Init")),
        workingDir=config.get("WorkingDir", ""),
        runtime=host.get("Runtime", ""),
        platform=info.get("Platform", ""),
        privileged=bool(host.get("Privileged")),
        memory=(host.get("Memory") or 0) // MIB,
        memoryReservation=_mib_or_raw(host.get("MemoryReservation") or 0),
        memorySwap=_mib_or_raw(host.get("MemorySwap") or 0),
        shmSize=(host.get("ShmSize") or 0) // MIB,
        cpuShares=host.get("CpuShares") or 0,
        cpuSet=host.get("CpusetCpus", ""),
        logDriver=log_config.get("Type", ""),
        networkMode=host.get("NetworkMode", ""),
        ipcMode=host.get("IpcMode", ""),
        tty=bool(config.get("Tty")),
        stdinOpen=bool(config.get("OpenStdin")),
        stopSignal=config.get("StopSignal", ""),
        stopTimeout=config.get("StopTimeout") or 0,
        bridge=(info.get("NetworkSettings") or {}).get("Bridge", ""),
        networkDatas=_networks(info.get("NetworkSettings") or {}),
    )
    if prior.get("logOpts"):
        state["logOpts"] = log_config.get("Config") or {}
    if prior.get("pidMode"):
        state["pidMode"] = host.get("PidMode", "")
    if prior.get("devices"):
        state["devices"] = _devices(host.get("Devices") or [], prior["devices"])
    if prior.get("deviceRequests"):
        state["deviceRequests"] = [_flat_request(r) for r in host.get("DeviceRequests") or []]
    if config.get("Healthcheck"):
        state["healthcheck"] = _flat_healthcheck(config["Healthcheck"])
    for name, prop in SCHEMA.items():
        # What the Terraform state holds for an unset argument with a default (attach, logs,
        # wait: false): the official provider shows a change of each one it finds missing.
        if prop.has_default and state.get(name) is None:
            state[name] = prop.default
    state.setdefault("envs", [])
    state.setdefault("labels", [])
    state.setdefault("containerLogs", "")
    return state


def _mib_or_raw(value: int) -> int:
    return value // MIB if value > 0 else value


def _networks(settings: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "networkName": name,
            "ipAddress": data.get("IPAddress", ""),
            "ipPrefixLength": data.get("IPPrefixLen", 0),
            "gateway": data.get("Gateway", ""),
            "globalIpv6Address": data.get("GlobalIPv6Address", ""),
            "globalIpv6PrefixLength": data.get("GlobalIPv6PrefixLen", 0),
            "ipv6Gateway": data.get("IPv6Gateway", ""),
            "macAddress": data.get("MacAddress", ""),
        }
        for name, data in sorted((settings.get("Networks") or {}).items())
    ]


def _devices(mapped: list[dict[str, Any]], configured: list[dict[str, Any]]) -> list[dict]:
    with_path = {d["hostPath"] for d in configured if d.get("hostPath") and d.get("containerPath")}
    devices = []
    for device in mapped:
        entry = {"hostPath": device["PathOnHost"], "permissions": device["CgroupPermissions"]}
        if device["PathOnHost"] in with_path:
            entry["containerPath"] = device["PathInContainer"]
        devices.append(entry)
    return devices


def _flat_request(request: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {"driver": request.get("Driver", ""), "count": request.get("Count", 0)}
    if request.get("DeviceIDs"):
        flat["deviceIds"] = list(request["DeviceIDs"])
    capabilities = request.get("Capabilities") or []
    if capabilities and capabilities[0]:
        flat["capabilities"] = list(capabilities[0])
    if request.get("Options"):
        flat["options"] = dict(request["Options"])
    return flat


def _flat_healthcheck(check: dict[str, Any]) -> dict[str, Any]:
    return {
        "tests": list(check.get("Test") or []),
        "interval": godur.format(check.get("Interval", 0)),
        "timeout": godur.format(check.get("Timeout", 0)),
        "startPeriod": godur.format(check.get("StartPeriod", 0)),
        "startInterval": godur.format(check.get("StartInterval", 0)),
        "retries": check.get("Retries", 0),
    }
