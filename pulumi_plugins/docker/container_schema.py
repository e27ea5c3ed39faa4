"""`docker.Container`'s schema (the implemented subset of terraform-provider-docker's
`docker_container`, with Pulumi names, ForceNew/Computed/Default as there) and the inputs'
translation to the `POST /containers/create` body, field for field as the provider builds it.

    body = create_body(inputs)  # {"Image": ..., "Cmd": [...], "HostConfig": {...}, ...}
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

from pulumi_plugins.docker import godur
from pulumi_plugins.docker.props import Prop

TYPE = "docker:index/container:Container"


def _matches(pattern: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if isinstance(value, str) and re.search(pattern, value):
            return None
        return f"'{value}' doesn't match the pattern '{pattern}'"

    return check


def _at_least(threshold: int) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if int(value) >= threshold else f"'{value}' cannot be lower than {threshold}"

    return check


def _absolute(value: Any) -> str | None:
    ok = re.match(r"^[a-zA-Z]:[\\/]|^/", str(value))
    return None if ok else f"'{value}' must be an absolute path"


def _base64(value: Any) -> str | None:
    try:
        base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return f"'{value}' is not base64 decodeable"
    return None


def _duration(value: Any) -> str | None:
    try:
        if godur.parse(str(value)) < 0:
            return f"'{value}' duration must not be negative"
    except ValueError:
        return f"'{value}' is not a valid duration"
    return None


FN = {"force_new": True}
_STR_FN = Prop("str", **FN)

LABEL = Prop("objset", **FN, computed=True, fields={"label": _STR_FN, "value": _STR_FN})
UPLOAD = Prop(
    "objset",
    **FN,
    fields={
        "file": Prop("str", **FN, required=True),
        "content": _STR_FN,
        "contentBase64": Prop("str", **FN, validate=_base64),
        "source": _STR_FN,
        "sourceHash": _STR_FN,
        "executable": Prop("bool", **FN, default=False),
        "permissions": Prop("str", **FN, validate=_matches(r"^0[0-7]{3}$")),
    },
)
VOLUME = Prop(
    "objset",
    **FN,
    fields={
        "containerPath": _STR_FN,
        "hostPath": Prop("str", **FN, validate=_absolute),
        "volumeName": _STR_FN,
        "fromContainer": _STR_FN,
        "readOnly": Prop("bool", **FN),
        "selinuxRelabel": Prop("str", **FN, validate=_matches(r"^(z|Z)$")),
    },
)
DEVICE = Prop(
    "objset",
    **FN,
    fields={
        "hostPath": Prop("str", **FN, required=True),
        "containerPath": _STR_FN,
        "permissions": Prop("str", **FN, default="rwm"),
    },
)
DEVICE_REQUEST = Prop(
    "objset",
    **FN,
    fields={
        "driver": Prop("str", **FN, default="cdi"),
        "count": Prop("int", **FN, default=0),
        "deviceIds": Prop("set", **FN),
        "capabilities": Prop("set", **FN),
        "options": Prop("map", **FN),
    },
)
HEALTHCHECK = Prop(
    "obj",
    computed=True,
    fields={
        "tests": Prop("list"),
        "interval": Prop("str", default="0s", validate=_duration),
        "timeout": Prop("str", default="0s", validate=_duration),
        "startPeriod": Prop("str", default="0s", validate=_duration),
        "startInterval": Prop("str", default="0s", validate=_duration),
        "retries": Prop("int", default=0, validate=_at_least(0)),
    },
)

SCHEMA: dict[str, Prop] = {
    "name": Prop("str", **FN, required=True),
    "image": Prop("str", **FN, required=True),
    "command": Prop("list", **FN, computed=True),
    "entrypoints": Prop("list", **FN, computed=True),
    "envs": Prop("set", **FN, computed=True),
    "labels": LABEL,
    "uploads": UPLOAD,
    "volumes": VOLUME,
    "devices": DEVICE,
    "deviceRequests": DEVICE_REQUEST,
    "healthcheck": HEALTHCHECK,
    "networkMode": Prop("str", **FN, default="bridge"),
    "restart": Prop(
        "str", default="no", validate=_matches(r"^(no|on-failure|always|unless-stopped)$")
    ),
    "maxRetryCount": Prop("int"),
    "privileged": Prop("bool", **FN),
    "shmSize": Prop("int", **FN, computed=True, validate=_at_least(0)),
    "memory": Prop("int", validate=_at_least(0)),
    "memorySwap": Prop("int", validate=_at_least(-1)),
    "memoryReservation": Prop("int", default=0, validate=_at_least(0)),
    "cpuShares": Prop("int", validate=_at_least(0)),
    "cpuSet": Prop("str", validate=_matches(r"^\d+([,-]\d+)*$")),
    "hostname": Prop("str", **FN, computed=True),
    "domainname": Prop("str", **FN),
    "user": Prop("str", **FN, suppress_unset=True),
    "workingDir": Prop("str", **FN, suppress_unset=True),
    "readOnly": Prop("bool", **FN, default=False),
    "tty": Prop("bool", **FN, default=False),
    "stdinOpen": Prop("bool", **FN, default=False),
    "init": Prop("bool", computed=True),
    "ipcMode": Prop("str", **FN, computed=True),
    "pidMode": Prop("str", **FN),
    "logDriver": Prop("str", **FN, computed=True),
    "logOpts": Prop("map", **FN),
    "stopSignal": Prop("str", **FN, computed=True),
    "stopTimeout": Prop("int", **FN, computed=True),
    "platform": Prop("str", **FN, computed=True),
    "runtime": Prop("str", **FN, computed=True),
    "securityOpts": Prop("set", **FN, computed=True),
    "rm": Prop("bool", default=False),
    "start": Prop("bool", default=True),
    "mustRun": Prop("bool", default=True),
    "attach": Prop("bool", default=False),
    "logs": Prop("bool", default=False),
    "wait": Prop("bool", default=False),
    "waitTimeout": Prop("int", default=60),
    "destroyGraceSeconds": Prop("int"),
    "removeVolumes": Prop("bool", default=True),
    "containerReadRefreshTimeoutMilliseconds": Prop("int", default=15000),
}
OUTPUTS = ["bridge", "containerLogs", "exitCode", "networkDatas"]
UPDATABLE = [
    "restart",
    "maxRetryCount",
    "cpuShares",
    "memory",
    "memoryReservation",
    "cpuSet",
    "memorySwap",
]
MIB = 1024 * 1024


def create_body(inputs: dict[str, Any]) -> dict[str, Any]:
    """The Engine API's container config, field for field as the Terraform provider builds it."""
    get = inputs.get
    config: dict[str, Any] = {
        "Image": get("image"),
        "Hostname": get("hostname") or "",
        "Domainname": get("domainname") or "",
        "Tty": bool(get("tty")),
        "OpenStdin": bool(get("stdinOpen")),
        "StopSignal": get("stopSignal") or "",
    }
    if get("stopTimeout"):
        config["StopTimeout"] = get("stopTimeout")
    if get("envs"):
        config["Env"] = list(get("envs"))
    if get("command"):
        if any(arg == "" for arg in get("command")):
            raise ValueError("values for command may not be empty")
        config["Cmd"] = list(get("command"))
    if get("entrypoints"):
        config["Entrypoint"] = list(get("entrypoints"))
    for key, field in (("user", "User"), ("workingDir", "WorkingDir")):
        if get(key):
            config[field] = get(key)
    volumes, binds, volumes_from = _volumes(get("volumes") or [])
    if volumes:
        config["Volumes"] = volumes
    if get("labels"):
        config["Labels"] = {item["label"]: item["value"] for item in get("labels")}
    if get("healthcheck"):
        config["Healthcheck"] = _healthcheck(get("healthcheck"))

    host: dict[str, Any] = {
        "Privileged": bool(get("privileged")),
        "PublishAllPorts": False,
        "RestartPolicy": {
            "Name": get("restart") or "",
            "MaximumRetryCount": get("maxRetryCount") or 0,
        },
        "Runtime": get("runtime") or "",
        "Mounts": [],
        "AutoRemove": bool(get("rm")),
        "ReadonlyRootfs": bool(get("readOnly")),
        "LogConfig": {"Type": get("logDriver") or "", "Config": get("logOpts") or None},
        "Init": bool(get("init")),
    }
    if binds:
        host["Binds"] = binds
    if volumes_from:
        host["VolumesFrom"] = volumes_from
    if get("devices"):
        host["Devices"] = [
            {
                "PathOnHost": d["hostPath"],
                "PathInContainer": d.get("containerPath") or d["hostPath"],
                "CgroupPermissions": d.get("permissions", ""),
            }
            for d in get("devices")
        ]
    if get("deviceRequests"):
        host["DeviceRequests"] = [_device_request(r) for r in get("deviceRequests")]
    if get("securityOpts"):
        host["SecurityOpt"] = list(get("securityOpts"))
    for key, field, scale in (
        ("memory", "Memory", MIB),
        ("memoryReservation", "MemoryReservation", MIB),
        ("shmSize", "ShmSize", MIB),
        ("cpuShares", "CpuShares", 1),
    ):
        if get(key):
            host[field] = get(key) * scale
    if get("memorySwap"):
        swap = get("memorySwap")
        host["MemorySwap"] = swap * MIB if swap > 0 else swap
    if get("cpuSet"):
        host["CpusetCpus"] = get("cpuSet")
    for key, field in (
        ("networkMode", "NetworkMode"),
        ("ipcMode", "IpcMode"),
        ("pidMode", "PidMode"),
    ):
        if get(key):
            host[field] = get(key)
    config["HostConfig"] = host
    config["NetworkingConfig"] = {}
    return config


def _volumes(entries: list[dict[str, Any]]) -> tuple[dict[str, dict], list[str], list[str]]:
    volumes: dict[str, dict] = {}
    binds: list[str] = []
    volumes_from: list[str] = []
    for entry in entries:
        source = entry.get("hostPath") or entry.get("volumeName") or ""
        target = entry.get("containerPath") or ""
        from_container = entry.get("fromContainer") or ""
        if not from_container and not target:
            raise ValueError("volume entry without container path or source container")
        if from_container and target:
            raise ValueError("both a container and a path specified in a volume entry")
        if from_container:
            volumes_from.append(from_container)
            continue
        volumes[target] = {}
        if source:
            mode = "ro" if entry.get("readOnly") else "rw"
            if entry.get("selinuxRelabel"):
                mode += "," + entry["selinuxRelabel"]
            binds.append(f"{source}:{target}:{mode}")
    return volumes, binds, volumes_from


def _device_request(request: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"Driver": request.get("driver", ""), "Count": request.get("count", 0)}
    if request.get("deviceIds"):
        body["DeviceIDs"] = list(request["deviceIds"])
    if request.get("capabilities"):
        body["Capabilities"] = [list(request["capabilities"])]
    if request.get("options"):
        body["Options"] = dict(request["options"])
    return body


def _healthcheck(check: dict[str, Any]) -> dict[str, Any]:
    return {
        "Test": list(check.get("tests") or []),
        "Interval": godur.parse(check.get("interval", "0s")),
        "Timeout": godur.parse(check.get("timeout", "0s")),
        "StartPeriod": godur.parse(check.get("startPeriod", "0s")),
        "StartInterval": godur.parse(check.get("startInterval", "0s")),
        "Retries": check.get("retries", 0),
    }
