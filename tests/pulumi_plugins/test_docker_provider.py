"""The `docker` provider (pulumi_plugins/docker) against the real Docker engine: its gRPC service
driven directly, and a small pulumi-docker program under the real Pulumi CLI.

Every container and image made here is named with a unique `pdtest-` prefix and removed at the
end; nothing else on the machine is touched.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2
from google.rpc import status_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

import pulumi_plugins.docker as docker_plugin
from pulumi_plugins import rpc
from tests.pulumi_plugins.conftest import REPO, PulumiEnv
from tests.pulumi_plugins.fake_engine import FakeEngine
from tests.real_components import unavailable

BASE = "paddleocr-fleet/base:bookworm"
SOCKET = "unix:///var/run/docker.sock"
CONTAINER = "docker:index/container:Container"
IMAGE = "docker:index/image:Image"
REMOTE = "docker:index/remoteImage:RemoteImage"

pytestmark = pytest.mark.docker


def _docker(*args: str, check: bool = True) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def _engine_reason() -> str | None:
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired) as err:
        return f"no Docker engine: {err}"
    if info.returncode != 0:
        return f"no Docker engine: {info.stderr.strip()[:200]}"
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True).returncode:
        return f"no {BASE} image (.ci/build-images.sh builds it)"
    return None


@pytest.fixture(scope="module")
def engine() -> None:
    if (reason := _engine_reason()) is not None:
        unavailable("Docker", reason)


@pytest.fixture
def prefix(engine: None) -> Iterator[str]:
    """A unique name prefix; the containers and images so named are removed afterwards."""
    name = f"pdtest-{uuid.uuid4().hex[:8]}"
    yield name
    ids = _docker("ps", "-aq", "--filter", f"name=^{name}", check=False).split()
    if ids:
        _docker("rm", "-f", "-v", *ids, check=False)
    images = _docker("images", "--format", "{{.Repository}}:{{.Tag}}", check=False).split()
    ours = [i for i in images if i.startswith(name)]
    if ours:
        _docker("rmi", "-f", *ours, check=False)


def _inspect(name: str, kind: str = "container") -> dict[str, Any] | None:
    found = json.loads(_docker(kind, "inspect", name, check=False) or "[]")
    return found[0] if found else None


# ---------------------------------------------------------------------------------------------
# The gRPC service, in a child process as the engine runs it


class Provider:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.engine = FakeEngine()  # the plugin exits once its engine is gone
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulumi_plugins.docker", self.engine.address],
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        port = int(self.proc.stdout.readline())
        self.stub = provider_pb2_grpc.ResourceProviderStub(
            grpc.insecure_channel(f"127.0.0.1:{port}")
        )

    def configure(self, **config: Any) -> None:
        self.stub.Configure(provider_pb2.ConfigureRequest(args=rpc.to_struct(config)))

    def check(
        self, type_: str, news: dict[str, Any], olds: dict[str, Any] | None = None
    ) -> provider_pb2.CheckResponse:
        return self.stub.Check(
            provider_pb2.CheckRequest(
                urn=urn(type_),
                news=rpc.to_struct(news),
                olds=rpc.to_struct(olds or {}),
                randomSeed=b"seed",
            )
        )

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.engine.stop()


def urn(type_: str, name: str = "r") -> str:
    return f"urn:pulumi:dev::demo::{type_}::{name}"


@pytest.fixture(scope="module")
def provider(engine: None) -> Iterator[Provider]:
    served = Provider()
    served.configure(host=SOCKET)
    yield served
    served.close()


def test_plugin_reports_its_version(provider: Provider) -> None:
    assert provider.stub.GetPluginInfo(empty_pb2.Empty()).version == docker_plugin.VERSION


def test_container_lifecycle(provider: Provider, prefix: str) -> None:
    news = {
        "name": f"{prefix}-c",
        "image": BASE,
        "networkMode": "host",
        "restart": "unless-stopped",
        "entrypoints": ["bash", "-c", "trap 'exit 0' TERM; sleep infinity & wait"],
        "envs": ["A=1"],
        "labels": [{"label": f"{prefix}.role", "value": "test"}],
        "uploads": [{"file": "/etc/pdtest/hello.txt", "content": "hello\n"}],
    }
    checked = provider.check(CONTAINER, news)
    assert list(checked.failures) == []
    preview = provider.stub.Create(
        provider_pb2.CreateRequest(urn=urn(CONTAINER), properties=checked.inputs, preview=True)
    )
    assert rpc.to_python(preview.properties)["hostname"] == rpc.UNKNOWN
    assert _inspect(f"{prefix}-c") is None, "a preview must not create anything"

    created = provider.stub.Create(
        provider_pb2.CreateRequest(urn=urn(CONTAINER), properties=checked.inputs)
    )
    info = _inspect(f"{prefix}-c")
    assert info is not None and info["Id"] == created.id and info["State"]["Running"]
    assert info["Config"]["Entrypoint"] == news["entrypoints"]
    assert info["Config"]["Labels"][f"{prefix}.role"] == "test"
    assert info["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert _docker("exec", f"{prefix}-c", "cat", "/etc/pdtest/hello.txt") == "hello"
    state = rpc.to_python(created.properties)
    assert state["entrypoints"] == news["entrypoints"] and state["mustRun"] is True

    same = provider.stub.Diff(
        provider_pb2.DiffRequest(
            urn=urn(CONTAINER), id=created.id, olds=created.properties, news=checked.inputs
        )
    )
    assert same.changes == provider_pb2.DiffResponse.DIFF_NONE

    # A stopped container: refresh records mustRun=false, the diff is an update that starts it.
    _docker("stop", f"{prefix}-c")
    read = provider.stub.Read(
        provider_pb2.ReadRequest(
            urn=urn(CONTAINER), id=created.id, properties=created.properties, inputs=checked.inputs
        )
    )
    assert rpc.to_python(read.properties)["mustRun"] is False
    diff = provider.stub.Diff(
        provider_pb2.DiffRequest(
            urn=urn(CONTAINER), id=created.id, olds=read.properties, news=checked.inputs
        )
    )
    assert list(diff.replaces) == [] and list(diff.diffs) == ["mustRun"]
    provider.stub.Update(
        provider_pb2.UpdateRequest(
            urn=urn(CONTAINER), id=created.id, olds=read.properties, news=checked.inputs
        )
    )
    assert _inspect(f"{prefix}-c")["State"]["Running"]

    provider.stub.Delete(
        provider_pb2.DeleteRequest(urn=urn(CONTAINER), id=created.id, properties=created.properties)
    )
    assert _inspect(f"{prefix}-c") is None
    gone = provider.stub.Read(
        provider_pb2.ReadRequest(
            urn=urn(CONTAINER), id=created.id, properties=created.properties, inputs=checked.inputs
        )
    )
    assert gone.id == ""


def test_container_that_cannot_start_is_kept_as_partially_created(
    provider: Provider, prefix: str
) -> None:
    news = {"name": f"{prefix}-bad", "image": BASE, "entrypoints": ["/no/such/binary"]}
    checked = provider.check(CONTAINER, news)
    with pytest.raises(grpc.RpcError) as caught:
        provider.stub.Create(
            provider_pb2.CreateRequest(urn=urn(CONTAINER), properties=checked.inputs)
        )
    assert "Unable to start container" in caught.value.details()
    metadata = dict(caught.value.trailing_metadata())
    status = status_pb2.Status.FromString(metadata["grpc-status-details-bin"])
    partial = provider_pb2.ErrorResourceInitFailed()
    assert status.details[0].Unpack(partial), "the engine needs the partial state"
    info = _inspect(f"{prefix}-bad")
    assert info is not None, "the created container stays, as in Terraform"
    assert partial.id == info["Id"] and "Unable to start container" in partial.reasons[0]
    assert rpc.to_python(partial.properties)["entrypoints"] == ["/no/such/binary"]


def test_image_rebuilds_only_when_its_context_changes(
    provider: Provider, prefix: str, tmp_path: Path
) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY message.txt /message.txt\n")
    (app / "message.txt").write_text("one\n")
    (app / ".dockerignore").write_text("scratch/\n")
    news = {
        "imageName": f"{prefix}-img:latest",
        "skipPush": True,
        "build": {"context": str(app), "args": {"BASE": BASE}},
    }
    checked = provider.check(IMAGE, news)
    assert list(checked.failures) == []
    inputs = rpc.to_python(checked.inputs)
    assert inputs["build"]["dockerfile"] == str(app / "Dockerfile")
    assert inputs["build"]["platform"].startswith("linux/")
    built = provider.stub.Create(
        provider_pb2.CreateRequest(urn=urn(IMAGE), properties=checked.inputs)
    )
    assert built.id == f"{prefix}-img:latest"
    state = rpc.to_python(built.properties)
    assert state["repoDigest"] == _inspect(f"{prefix}-img:latest", "image")["Id"]
    assert state["dockerfile"] == "Dockerfile"

    def diff_after(change: Any) -> provider_pb2.DiffResponse:
        change()
        again = provider.check(IMAGE, news)
        return provider.stub.Diff(
            provider_pb2.DiffRequest(urn=urn(IMAGE), olds=built.properties, news=again.inputs)
        )

    (app / "scratch").mkdir()
    ignored = diff_after(lambda: (app / "scratch" / "notes.txt").write_text("x"))
    assert ignored.changes == provider_pb2.DiffResponse.DIFF_NONE
    changed = diff_after(lambda: (app / "message.txt").write_text("two\n"))
    assert changed.changes == provider_pb2.DiffResponse.DIFF_SOME
    assert list(changed.replaces) == [] and list(changed.diffs) == ["build"]


def test_remote_image_uses_the_local_image_and_removes_it_unless_kept(
    provider: Provider, prefix: str
) -> None:
    _docker("tag", BASE, f"{prefix}-remote:1")
    base_id = _inspect(BASE, "image")["Id"]
    for keep in (True, False):
        checked = provider.check(REMOTE, {"name": f"{prefix}-remote:1", "keepLocally": keep})
        created = provider.stub.Create(
            provider_pb2.CreateRequest(urn=urn(REMOTE), properties=checked.inputs)
        )
        state = rpc.to_python(created.properties)
        assert state["imageId"] == base_id and created.id == base_id + f"{prefix}-remote:1"
        provider.stub.Delete(
            provider_pb2.DeleteRequest(
                urn=urn(REMOTE), id=created.id, properties=created.properties
            )
        )
        assert (_inspect(f"{prefix}-remote:1", "image") is not None) is keep
    assert _inspect(BASE, "image") is not None, "removing a tag leaves the image's other names"


# ---------------------------------------------------------------------------------------------
# An ssh:// endpoint: a private sshd on loopback, logging in to this same machine


SSHD = Path("/usr/sbin/sshd")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ssh_endpoint(engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """`host` and `sshOpts` of a provider reaching this machine's engine over ssh."""
    if not SSHD.exists() or shutil.which("ssh") is None:
        pytest.skip("no OpenSSH server and client to make an ssh:// endpoint with")
    if os.geteuid() != 0:
        pytest.skip("the private sshd needs root here (its privilege separation directory)")
    root = tmp_path_factory.mktemp("sshd")
    for name in ("client", "host"):
        keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)]
        subprocess.run(keygen, check=True)
    port = _free_port()
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\n"
        f"AuthorizedKeysFile {root / 'client.pub'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {root / 'sshd.pid'}\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(root / "sshd_config")])
    opts = ["-i", str(root / "client"), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]  # fmt: skip
    yield {"host": f"ssh://{getpass.getuser()}@127.0.0.1:{port}", "sshOpts": opts}
    sshd.terminate()
    sshd.wait()


def test_an_ssh_endpoint_works_like_docker_exec(
    ssh_endpoint: dict, prefix: str, tmp_path: Path
) -> None:
    served = Provider()
    try:
        served.configure(**ssh_endpoint)
        checked = served.check(
            CONTAINER, {"name": f"{prefix}-ssh", "image": BASE, "entrypoints": ["sleep", "60"]}
        )
        created = served.stub.Create(
            provider_pb2.CreateRequest(urn=urn(CONTAINER), properties=checked.inputs)
        )
        assert _inspect(f"{prefix}-ssh")["Id"] == created.id
        (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo built-over-ssh\n")
        image = served.check(
            IMAGE,
            {
                "imageName": f"{prefix}-ssh-img:1",
                "skipPush": True,
                "build": {"context": str(tmp_path)},
            },
        )
        built = served.stub.Create(
            provider_pb2.CreateRequest(urn=urn(IMAGE), properties=image.inputs)
        )
        assert (
            rpc.to_python(built.properties)["repoDigest"]
            == _inspect(f"{prefix}-ssh-img:1", "image")["Id"]
        )
        served.stub.Delete(
            provider_pb2.DeleteRequest(
                urn=urn(CONTAINER), id=created.id, properties=created.properties
            )
        )
        assert _inspect(f"{prefix}-ssh") is None
    finally:
        served.close()


# ---------------------------------------------------------------------------------------------
# A pulumi-docker program under the real Pulumi CLI

PROGRAM = """\
import pulumi
import pulumi_docker as docker

config = pulumi.Config()
prefix = config.require("prefix")
local = docker.Provider("local", host="unix:///var/run/docker.sock")
on_local = pulumi.ResourceOptions(provider=local, delete_before_replace=True)

image = docker.Image(
    "app-image",
    image_name=f"{prefix}-app:latest",
    build=docker.DockerBuildArgs(context="app", args={"BASE": "%(base)s"}, network="host"),
    skip_push=True,
    opts=pulumi.ResourceOptions(provider=local),
)
base = docker.RemoteImage(
    "base", name="%(base)s", keep_locally=True, opts=pulumi.ResourceOptions(provider=local)
)
idle = docker.Container(
    "idle",
    name=f"{prefix}-idle",
    image=base.image_id,
    network_mode="host",
    restart="unless-stopped",
    entrypoints=["bash", "-c", "trap 'exit 0' TERM; sleep infinity & wait"],
    envs=[f"LEVEL={config.get('level') or '1'}"],
    labels=[docker.ContainerLabelArgs(label="pdtest.role", value="idle")],
    uploads=[docker.ContainerUploadArgs(file="/etc/pdtest/hello.txt", content="hello\\n")],
    opts=on_local,
)
app = docker.Container(
    "app",
    name=f"{prefix}-app",
    image=image.repo_digest,
    network_mode="host",
    entrypoints=["sleep", "infinity"],
    opts=on_local,
)
pulumi.export("idle_id", idle.id)
pulumi.export("app_id", app.id)
pulumi.export("digest", image.repo_digest)
"""


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _outputs(pulumi_env: PulumiEnv, project: Path) -> dict[str, Any]:
    return json.loads(_ok(pulumi_env.run(["stack", "output", "--json"], cwd=project)))


def install_provider(pulumi_env: PulumiEnv) -> Path:
    """Plugin `docker` (its pinned version) in the fixture's PULUMI_HOME, its wrapper kept off
    PATH (a plugin found on PATH would be used, with a warning, instead of the installed one)."""
    wrapper = pulumi_env.root / "providers" / "pulumi-resource-docker"
    wrapper.parent.mkdir(exist_ok=True)
    python = shlex.join([sys.executable, "-m", "pulumi_plugins.docker"])
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {python} "$@"\n')
    wrapper.chmod(0o755)
    version = docker_plugin.VERSION
    install = ["plugin", "install", "resource", "docker", version, "--file", str(wrapper)]
    _ok(pulumi_env.run(install))
    return wrapper


def test_pulumi_program_on_docker(pulumi_env: PulumiEnv, prefix: str) -> None:
    install_provider(pulumi_env)
    project = pulumi_env.project("dockerdemo", PROGRAM % {"base": BASE})
    app = project / "app"
    app.mkdir()
    (app / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\nCOPY message.txt /message.txt\n")
    (app / "message.txt").write_text("one\n")
    (app / ".dockerignore").write_text("notes.txt\n")
    _ok(pulumi_env.run(["stack", "init", "dev"], cwd=project))
    _ok(pulumi_env.run(["config", "set", "prefix", prefix], cwd=project))

    def up() -> dict[str, Any]:
        _ok(pulumi_env.run(["up", "--yes", "--skip-preview"], cwd=project))
        return _outputs(pulumi_env, project)

    def no_changes() -> None:
        _ok(pulumi_env.run(["preview", "--expect-no-changes"], cwd=project))

    _ok(pulumi_env.run(["preview"], cwd=project))
    assert _inspect(f"{prefix}-idle") is None, "a preview creates nothing"
    assert _inspect(f"{prefix}-app:latest", "image") is None, "nor builds (buildOnPreview)"
    first = up()
    idle = _inspect(f"{prefix}-idle")
    assert idle is not None and idle["Id"] == first["idle_id"] and idle["State"]["Running"]
    assert idle["Config"]["Labels"]["pdtest.role"] == "idle"
    assert _docker("exec", f"{prefix}-idle", "cat", "/etc/pdtest/hello.txt") == "hello"
    assert first["digest"] == _inspect(f"{prefix}-app:latest", "image")["Id"]
    assert _inspect(f"{prefix}-app")["Image"] == first["digest"]
    no_changes()

    (app / "notes.txt").write_text("ignored by .dockerignore\n")
    no_changes()

    _ok(pulumi_env.run(["config", "set", "level", "2"], cwd=project))
    second = up()
    assert second["idle_id"] != first["idle_id"], "an env change replaces the container"
    assert "LEVEL=2" in _inspect(f"{prefix}-idle")["Config"]["Env"]
    assert second["app_id"] == first["app_id"] and second["digest"] == first["digest"]
    no_changes()

    (app / "message.txt").write_text("two\n")
    third = up()
    assert third["digest"] != second["digest"], "a changed context file rebuilds"
    assert third["app_id"] != second["app_id"], "the container on the image's id is replaced"
    assert third["idle_id"] == second["idle_id"]
    assert _docker("exec", f"{prefix}-app", "cat", "/message.txt") == "two"
    no_changes()

    _docker("stop", f"{prefix}-idle")
    _ok(pulumi_env.run(["refresh", "--yes", "--skip-preview"], cwd=project))
    assert up()["idle_id"] == third["idle_id"], "a stopped container is started, not replaced"
    assert _inspect(f"{prefix}-idle")["State"]["Running"]

    _ok(pulumi_env.run(["destroy", "--yes", "--skip-preview"], cwd=project))
    assert _inspect(f"{prefix}-idle") is None and _inspect(f"{prefix}-app") is None
    assert _inspect(BASE, "image") is not None, "keepLocally leaves the pulled image"
    assert _inspect(f"{prefix}-app:latest", "image") is not None, "Image's delete is a no-op"
