"""Our plugins on what the official ones (pulumi-docker 5.1.0, pulumi-command 1.2.1) write, and
the other way round: a stack switched from one plugin set to the other changes nothing.

The fixtures are the shapes the official plugins wrote on a real 1-card sim stack (cut down to
the properties that matter): the bridge's Check puts `__defaults` into the inputs and into each
nested block, its Create/Read put `__meta` (timeouts, Terraform schema version) and
`__pulumi_raw_state_delta` into the state, with every schema property, null when unset.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime.proto import provider_pb2

from pulumi_plugins import command, rpc
from pulumi_plugins.docker import container, image, props, remote_image
from pulumi_plugins.docker.container_schema import SCHEMA
from pulumi_plugins.docker.container_state import state_from_inspect
from pulumi_plugins.docker.ops import Op
from pulumi_plugins.rpc import SECRET_SIG, SIG_KEY

META = (
    '{"e2bfb730-ecaa-11e6-8f88-34363bc7c4c0":{"create":1200000000000,"delete":1200000000000,'
    '"update":1200000000000},"schema_version":"2"}'
)
REMOTE_META = (
    '{"e2bfb730-ecaa-11e6-8f88-34363bc7c4c0":{"create":1200000000000,"delete":1200000000000,'
    '"update":1200000000000}}'
)
KEEPER_CONFIG = '{\n  "upstreams": [\n    "http://127.0.0.1:31120"\n  ]\n}\n'
CID = "4f" * 32
IMAGE_ID = "sha256:" + "f1" * 32

# What the keeper's container (components/keeper.py) gets from the program.
PROGRAM: dict[str, Any] = {
    "name": "paddleocr-fleet-gateway-plugcompat-keeper-35940cd822b0",
    "image": "paddleocr-fleet/gateway:latest",
    "networkMode": "host",
    "restart": "unless-stopped",
    "entrypoints": ["python"],
    "command": ["-m", "gateway.keeper", "--port", "31102"],
    "envs": ["GATEWAY_PORT=31102"],
    "labels": [{"label": "paddleocr-fleet.role", "value": "keeper"}],
    "uploads": [{"file": "/etc/paddleocr-fleet/keeper.json", "content": KEEPER_CONFIG}],
    "volumes": [
        {
            "containerPath": "/run/paddleocr-fleet/handover",
            "hostPath": "/run/paddleocr-fleet/pc1/keeper-31102",
        }
    ],
    "destroyGraceSeconds": 30,
}

# The inputs the official provider's Check made of them.
OFFICIAL_INPUTS: dict[str, Any] = {
    **copy.deepcopy(PROGRAM),
    "__defaults": [
        "containerReadRefreshTimeoutMilliseconds",
        "mustRun",
        "removeVolumes",
        "start",
        "waitTimeout",
    ],
    "containerReadRefreshTimeoutMilliseconds": 15000,
    "mustRun": True,
    "removeVolumes": True,
    "start": True,
    "waitTimeout": 60,
    "labels": [{"__defaults": [], "label": "paddleocr-fleet.role", "value": "keeper"}],
    "uploads": [
        {
            "__defaults": [],
            "content": KEEPER_CONFIG,
            "file": "/etc/paddleocr-fleet/keeper.json",
        }
    ],
    "volumes": [{"__defaults": [], **PROGRAM["volumes"][0]}],
}

# ... and the state its Create wrote (the properties this provider implements, and a few of
# the others it writes as null).
OFFICIAL_STATE: dict[str, Any] = {
    **{k: v for k, v in OFFICIAL_INPUTS.items() if k != "__defaults"},
    "__meta": META,
    "__pulumi_raw_state_delta": {
        "obj": {
            "ps": {"uploads": {"arr": {"el": {"0": {"obj": {}}}}}},
            "renamed": {"entrypoints": "entrypoint", "envs": "env", "uploads": "upload"},
        }
    },
    "id": CID,
    "attach": False,
    "bridge": "",
    "capabilities": None,
    "cgroupParent": None,
    "containerLogs": None,
    "cpuSet": "",
    "cpuShares": 0,
    "deviceRequests": [],
    "devices": [],
    "dns": None,
    "domainname": "",
    "exitCode": None,
    "gpus": None,
    "healthcheck": None,
    "hostname": "vm",
    "init": False,
    "ipcMode": "private",
    "labels": [{"label": "paddleocr-fleet.role", "value": "keeper"}],
    "logDriver": "json-file",
    "logOpts": None,
    "logs": False,
    "maxRetryCount": 0,
    "memory": 0,
    "memoryReservation": 0,
    "memorySwap": 0,
    "mounts": [],
    "networkDatas": [{"gateway": "", "ipAddress": "", "networkName": "host"}],
    "platform": "linux",
    "ports": [],
    "privileged": False,
    "publishAllPorts": False,
    "readOnly": False,
    "rm": False,
    "runtime": "runc",
    "securityOpts": [],
    "shmSize": 64,
    "stdinOpen": False,
    "stopSignal": "",
    "stopTimeout": 0,
    "tty": False,
    "uploads": [
        {
            "content": KEEPER_CONFIG,
            "contentBase64": "",
            "executable": False,
            "file": "/etc/paddleocr-fleet/keeper.json",
            "permissions": "",
            "source": "",
            "sourceHash": "",
        }
    ],
    "user": "",
    "volumes": [
        {
            **PROGRAM["volumes"][0],
            "fromContainer": "",
            "readOnly": False,
            "selinuxRelabel": "",
            "volumeName": "",
        }
    ],
    "wait": False,
    "workingDir": "",
}

INSPECT: dict[str, Any] = {
    "Id": CID,
    "Name": "/" + PROGRAM["name"],
    "Image": IMAGE_ID,
    "Platform": "linux",
    "State": {"Running": True},
    "Config": {
        "Image": PROGRAM["image"],
        "Hostname": "vm",
        "Cmd": PROGRAM["command"],
        "Entrypoint": PROGRAM["entrypoints"],
    },
    "HostConfig": {
        "NetworkMode": "host",
        "RestartPolicy": {"Name": "unless-stopped"},
        "ShmSize": 64 * 1024 * 1024,
        "IpcMode": "private",
        "Runtime": "runc",
        "LogConfig": {"Type": "json-file", "Config": {}},
    },
    "NetworkSettings": {"Networks": {"host": {}}},
}


def ignore_uploads(news: dict[str, Any], old_inputs: dict[str, Any]) -> dict[str, Any]:
    """The program's inputs after the engine applied `ignore_changes=["uploads"]`
    (components/configured.py): the old inputs' uploads, as they are, bridge keys included."""
    return {**news, "uploads": copy.deepcopy(old_inputs["uploads"])}


def check(news: dict[str, Any], olds: dict[str, Any] | None) -> dict[str, Any]:
    inputs, failures = container.check(news, olds, "local-gateway-keeper", b"seed", None)
    assert failures == []
    return inputs


def has_reserved(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k.startswith("__") or has_reserved(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_reserved(v) for v in value)
    return False


# ---------------------------------------------------------------------------------------------
# docker.Container


def test_check_takes_the_bridges_defaults_inside_blocks() -> None:
    """The refresh of each container with ignored uploads failed on the old code: "property
    uploads[0].__defaults ... is not implemented by this provider"."""
    news = ignore_uploads(PROGRAM, OFFICIAL_INPUTS)
    inputs, failures = container.check(news, OFFICIAL_INPUTS, "k", b"seed", None)
    assert failures == []
    assert inputs["uploads"] == OFFICIAL_INPUTS["uploads"]


def test_check_writes_the_inputs_the_bridge_writes() -> None:
    assert check(PROGRAM, None) == OFFICIAL_INPUTS
    with_healthcheck = check({**PROGRAM, "healthcheck": {"tests": ["CMD", "true"]}}, None)
    assert with_healthcheck["healthcheck"] == {
        "__defaults": ["interval", "startInterval", "startPeriod", "timeout"],
        "interval": "0s",
        "startInterval": "0s",
        "startPeriod": "0s",
        "tests": ["CMD", "true"],
        "timeout": "0s",
    }


def test_the_official_state_diffs_as_no_change() -> None:
    inputs = check(ignore_uploads(PROGRAM, OFFICIAL_INPUTS), OFFICIAL_INPUTS)
    assert not container.diff(OFFICIAL_STATE, inputs, ["uploads"]).changed
    refreshed = state_from_inspect(INSPECT, OFFICIAL_STATE)
    assert not container.diff(refreshed, inputs, ["uploads"]).changed
    assert not container.diff(refreshed, check(PROGRAM, OFFICIAL_INPUTS), []).changed


def test_read_keeps_the_bridges_meta_and_drops_its_raw_state_delta() -> None:
    refreshed = state_from_inspect(INSPECT, OFFICIAL_STATE)
    assert refreshed["__meta"] == META, "no schema upgrade when the official one reads it back"
    assert "__pulumi_raw_state_delta" not in refreshed, "it described the old state only"
    assert not has_reserved({k: v for k, v in refreshed.items() if k != "__meta"})
    assert refreshed["uploads"] == OFFICIAL_STATE["uploads"], "uploads are not read back"


def test_our_state_has_the_bridges_meta_and_no_block_defaults() -> None:
    assert props.bridge_meta(container.SCHEMA_VERSION, 1200) == META
    assert props.bridge_meta(None, 1200) == REMOTE_META
    assert json.loads(props.bridge_meta("2", 90))["e2bfb730-ecaa-11e6-8f88-34363bc7c4c0"] == {
        "create": 90 * 10**9,
        "delete": 1200 * 10**9,
        "update": 1200 * 10**9,
    }
    state = state_from_inspect(INSPECT, check(PROGRAM, None))
    assert not has_reserved(state), "a state holds properties only"
    preview = props.unknowns_for(SCHEMA, check(PROGRAM, None), [])
    assert not has_reserved(preview)


def test_an_update_keeps_the_meta() -> None:
    op = Op(engine=None, urn="urn", preview=True, timeout=1200, log=lambda *_: None)  # type: ignore[arg-type]
    news = check({**PROGRAM, "memory": 512}, OFFICIAL_INPUTS)
    state = container.update(op, CID, OFFICIAL_STATE, news)
    assert state["__meta"] == META and state["memory"] == 512
    assert "__pulumi_raw_state_delta" not in state and not has_reserved(state["uploads"])


# ---------------------------------------------------------------------------------------------
# docker.RemoteImage and docker.Image

OFFICIAL_REMOTE_STATE: dict[str, Any] = {
    "__meta": REMOTE_META,
    "__pulumi_raw_state_delta": {"obj": {"ps": {"build": {"plu": {"i": {}}}}}},
    "build": None,
    "forceRemove": None,
    "id": IMAGE_ID + "paddleocr-fleet/paddlex-sim:latest",
    "imageId": IMAGE_ID,
    "keepLocally": True,
    "name": "paddleocr-fleet/paddlex-sim:latest",
    "platform": None,
    "pullTriggers": None,
    "repoDigest": "",
    "triggers": None,
}


class _Images:
    def inspect_image(self, name: str) -> dict[str, Any]:
        return {"Id": IMAGE_ID, "RepoTags": [name], "RepoDigests": []}


def test_remote_image_read_keeps_the_meta_and_diffs_as_no_change() -> None:
    op = Op(engine=_Images(), urn="urn", preview=False, timeout=1200, log=lambda *_: None)  # type: ignore[arg-type]
    found = remote_image.read(op, copy.deepcopy(OFFICIAL_REMOTE_STATE))
    assert found is not None
    rid, state = found
    assert rid == OFFICIAL_REMOTE_STATE["id"] and state["__meta"] == REMOTE_META
    assert "__pulumi_raw_state_delta" not in state
    inputs, failures = remote_image.check(
        {"name": "paddleocr-fleet/paddlex-sim:latest", "keepLocally": True},
        {"__defaults": [], "keepLocally": True, "name": "paddleocr-fleet/paddlex-sim:latest"},
    )
    assert failures == [] and not remote_image.diff(state, inputs, []).changed


@pytest.mark.parametrize("platform", ["linux/amd64", "linux/arm64", None])
def test_image_platform_round_trips_with_the_official_saved_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str | None
) -> None:
    """The program sets build.platform (components/images.py); the official Check fills
    linux/<GOARCH> when it is unset. Either way the saved inputs diff as no change."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "Dockerfile").write_text("FROM scratch\n")
    build = {"context": "app", "dockerfile": "app/Dockerfile", "network": "host"}
    news = {
        "imageName": "paddleocr-fleet/gateway:pc1",
        "skipPush": True,
        "build": {**build, **({"platform": platform} if platform else {})},
    }
    inputs, failures = image.check(news, None)
    assert failures == []
    assert inputs["build"]["platform"] == (platform or image.host_platform_name())
    official_saved: dict[str, Any] = {  # what the official Check and Create put under `__inputs`
        "build": {
            **build,
            "contextDigest": inputs["build"]["contextDigest"],
            "platform": platform or image.host_platform_name(),
        },
        "buildOnPreview": False,
        "imageName": "paddleocr-fleet/gateway:pc1",
        "skipPush": True,
    }
    state = {
        image.INPUTS_KEY: {SIG_KEY: SECRET_SIG, "value": official_saved},
        "platform": official_saved["build"]["platform"],
        "repoDigest": IMAGE_ID,
    }
    assert image.diff(state, inputs) == {}


# ---------------------------------------------------------------------------------------------
# command


def test_command_config_keeps_the_official_providers_marker() -> None:
    marker = "__pulumi-go-provider-version"
    olds = rpc.to_struct({"version": "1.2.1", marker: "1.2.0"})
    news = rpc.to_struct({"version": "1.2.1"})
    provider = command.CommandProvider()
    checked = provider.CheckConfig(
        provider_pb2.CheckRequest(olds=olds, news=news),
        None,
    )
    assert rpc.to_python(checked.inputs) == {"version": "1.2.1", marker: "1.2.0"}
    fresh = provider.CheckConfig(
        provider_pb2.CheckRequest(olds=struct_pb2.Struct(), news=news),
        None,
    )
    assert rpc.to_python(fresh.inputs) == {"version": "1.2.1"}


def test_a_refreshed_state_keeps_the_official_nulls() -> None:
    """Every unset property is null in the official state; the Read answer keeps them (the
    engine would otherwise drop them from the state on the first refresh by ours)."""
    refreshed = rpc.to_python(rpc.to_struct(state_from_inspect(INSPECT, OFFICIAL_STATE), True))
    assert {k for k, v in OFFICIAL_STATE.items() if v is None} <= {
        k for k, v in refreshed.items() if v is None
    }
    assert "capabilities" not in rpc.to_python(rpc.to_struct({"capabilities": None}))


def test_our_state_holds_the_falsy_defaults_the_official_state_holds() -> None:
    """A state of ours without attach/logs/wait made the official provider list each as a
    change (null -> false) beside any real one."""
    state = state_from_inspect(INSPECT, check(PROGRAM, None))
    assert {k: state[k] for k in ("attach", "logs", "wait")} == {
        k: OFFICIAL_STATE[k] for k in ("attach", "logs", "wait")
    }
    assert not container.diff(state, check(PROGRAM, None), []).changed
