"""Our plugins end when their engine is gone, as the official ones do (pulumi_plugins.rpc).

A `pulumi` killed with SIGKILL cannot send its plugins the SIGINT that normally ends them; the
plugins notice through the engine's health check and exit, ending what they run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from google.protobuf import empty_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

import pulumi_plugins.docker as docker_plugin
from pulumi_plugins import command, rpc
from tests.pulumi_plugins.conftest import REPO, PulumiEnv
from tests.pulumi_plugins.fake_engine import FakeEngine
from tests.real_components import unavailable

PLUGINS = {
    "docker": ["-m", "pulumi_plugins.docker"],
    "command": ["-m", "pulumi_plugins.command"],
    "langhost": ["-m", "pulumi_plugins.langhost"],
}
GONE_WITHIN = 5.0


def wait_for(predicate: Callable[[], object], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())


def gone(pid: int) -> bool:
    """Exited (a zombie not yet reaped by whoever inherited it counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def start(plugin: str, engine: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [sys.executable, *PLUGINS[plugin], engine],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_a_plugin_outlives_no_engine(plugin: str, processes: list) -> None:
    engine = FakeEngine()
    process, _ = start(plugin, engine.address)
    processes.append(process)
    time.sleep(3 * rpc.ENGINE_CHECK_SECONDS)
    assert process.poll() is None, "a live engine (health service UNIMPLEMENTED) is not gone"
    engine.stop()
    process.wait(timeout=GONE_WITHIN)
    assert process.returncode == 0
    assert process.stderr is not None
    assert f"the engine at {engine.address} is gone" in process.stderr.read()


def test_the_command_provider_ends_its_running_command_with_it(tmp_path, processes) -> None:
    engine = FakeEngine()
    process, port = start("command", engine.address)
    processes.append(process)
    pid_file = tmp_path / "sleep.pid"
    stub = provider_pb2_grpc.ResourceProviderStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    assert stub.GetPluginInfo(empty_pb2.Empty(), timeout=10).version
    create = stub.Create.future(
        provider_pb2.CreateRequest(
            urn="urn:pulumi:dev::demo::command:local:Command::slow",
            type="command:local:Command",
            properties=rpc.to_struct({"create": f"sleep 120 & echo $! > {pid_file}; wait"}),
        )
    )
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
    sleeper = int(pid_file.read_text())
    engine.stop()
    process.wait(timeout=GONE_WITHIN + 5)
    assert wait_for(lambda: gone(sleeper), timeout=5)
    with pytest.raises(grpc.RpcError):
        create.result(timeout=10)


def test_kill_9_of_pulumi_leaves_no_plugin_behind(pulumi_env: PulumiEnv, tmp_path) -> None:
    """`pulumi up` with the language host, the docker and command providers and a running
    command; SIGKILL to the CLI; within seconds every process it had started is gone."""
    if not Path("/var/run/docker.sock").exists():
        unavailable("Docker", "no Docker engine at /var/run/docker.sock")
    pulumi_env.install_plugin("docker", docker_plugin.VERSION)
    pulumi_env.install_plugin("command", command.PLUGIN_VERSION)
    pid_file = tmp_path / "sleep.pid"
    project = pulumi_env.project(
        "killed",
        "import pulumi_docker as docker\n"
        "from pulumi_command import local\n"
        'host = docker.Provider("host", host="unix:///var/run/docker.sock")\n'
        'local.Command("slow", create="sleep 120 & echo $! > '
        f'{pid_file}; wait", opts=__import__("pulumi").ResourceOptions(depends_on=[host]))\n',
    )
    assert pulumi_env.run(["stack", "init", "dev"], cwd=project).returncode == 0
    cli = pulumi_env.start(
        ["up", "--yes", "--skip-preview"],
        project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    started: list[psutil.Process] = []
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=120)
        started = psutil.Process(cli.pid).children(recursive=True)
        lines = {" ".join(p.cmdline()) for p in started}
        for module in ("langhost", "docker", "command"):
            assert any(f"pulumi_plugins.{module}" in line for line in lines), (module, lines)
        assert int(pid_file.read_text()) in {p.pid for p in started}
        cli.kill()
        cli.wait()
        killed_at = time.monotonic()
        assert wait_for(lambda: all(gone(p.pid) for p in started), timeout=GONE_WITHIN)
        print(f"all {len(started)} processes gone {time.monotonic() - killed_at:.1f} s after")
    finally:
        if cli.poll() is None:
            cli.kill()
        for process in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
