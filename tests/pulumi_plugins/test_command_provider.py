"""The `command` provider (pulumi_plugins/command.py): its diff and run logic as plain functions,
its gRPC service in-process, and `pulumi_command.local.Command` under the real CLI."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from pulumi_plugins import command, rpc
from tests.pulumi_plugins.conftest import REPO, PulumiEnv
from tests.pulumi_plugins.fake_engine import FakeEngine

URN = "urn:pulumi:dev::demo::command:local:Command::hello"
UPDATE = provider_pb2.PropertyDiff.UPDATE
UPDATE_REPLACE = provider_pb2.PropertyDiff.UPDATE_REPLACE
ADD, DELETE = provider_pb2.PropertyDiff.ADD, provider_pb2.PropertyDiff.DELETE


def secret(value: Any) -> dict[str, Any]:
    return {rpc.SIG_KEY: rpc.SECRET_SIG, "value": value}


def is_secret(value: struct_pb2.Value) -> bool:
    fields = value.struct_value.fields
    return fields[rpc.SIG_KEY].string_value == rpc.SECRET_SIG if rpc.SIG_KEY in fields else False


# ---------------------------------------------------------------------------------------------
# Check


def test_well_shaped_inputs_pass_check() -> None:
    inputs = {
        "create": "echo hi",
        "triggers": [1, "a", {"b": True}],
        "environment": {"A": "1"},
        "interpreter": ["/bin/bash", "-c"],
        "logging": "none",
        "addPreviousOutputInEnv": False,
        "assetPaths": [],
    }
    assert command.check_inputs(inputs, command.COMMAND_FIELDS) == []


def test_unknown_values_pass_check() -> None:
    inputs = {"environment": rpc.UNKNOWN, "triggers": rpc.UNKNOWN, "create": rpc.UNKNOWN}
    assert command.check_inputs(inputs, command.COMMAND_FIELDS) == []


def test_check_names_each_ill_shaped_input() -> None:
    inputs = {"create": 3, "environment": {"A": 1}, "logging": "loud", "colour": "red"}
    failures = dict(command.check_inputs(inputs, command.COMMAND_FIELDS))
    assert set(failures) == {"create", "environment", "logging", "colour"}
    assert failures["colour"] == "unrecognized property 'colour'"
    assert "stdoutAndStderr" in failures["logging"]


@pytest.mark.parametrize("name", ["assetPaths", "archivePaths"])
def test_check_refuses_asset_globs(name: str) -> None:
    failures = command.check_inputs({name: ["dist/**"]}, command.COMMAND_FIELDS)
    assert failures == [(name, f"{name} is not supported by this command provider")]


# ---------------------------------------------------------------------------------------------
# Property paths and Diff


def test_paths_parse_and_format() -> None:
    assert command.parse_path('environment["a.b"].c[0][*]') == ["environment", "a.b", "c", 0, "*"]
    assert command.format_path(["environment", "a.b", "PATH", "x", 2]) == (
        'environment["a.b"].PATH.x[2]'
    )
    with pytest.raises(ValueError, match="invalid property path"):
        command.parse_path("a[b")


def test_ignore_changes_keeps_old_values_and_drops_new_ones() -> None:
    news = {"create": "new", "environment": {"A": "new", "B": "b"}, "triggers": [9, 9]}
    olds = {"create": "old", "environment": {"A": "old"}, "triggers": [1, 2]}
    ignored = ["create", "environment.A", "environment.B", "triggers[*]"]
    assert command.apply_ignore_changes(news, olds, ignored) == {
        "create": "old",
        "environment": {"A": "old"},
        "triggers": [1, 2],
    }


def test_same_inputs_mean_no_diff() -> None:
    inputs = {"create": "echo", "triggers": [1, {"x": [True]}], "environment": {"A": "1"}}
    result = command.diff_inputs(inputs, json.loads(json.dumps(inputs)))
    assert not result.changed and result.detailed == {}


def test_a_null_input_is_an_absent_one() -> None:
    assert not command.diff_inputs({"create": "x"}, {"create": "x", "update": None}).changed


def test_changed_commands_update_in_place() -> None:
    result = command.diff_inputs(
        {"create": "a", "environment": {"A": "1", "B": "2"}},
        {"create": "b", "environment": {"A": "1", "C": "3"}, "dir": "/tmp"},
    )
    assert result.detailed == {
        "create": UPDATE,
        "environment.B": DELETE,
        "environment.C": ADD,
        "dir": ADD,
    }
    assert result.replaces == [] and result.diffs == ["create", "dir", "environment"]


def test_changed_triggers_replace() -> None:
    result = command.diff_inputs({"triggers": ["a", "b"]}, {"triggers": ["a", "c", "d"]})
    assert result.detailed == {"triggers[1]": UPDATE_REPLACE, "triggers[2]": 1}
    assert result.replaces == ["triggers"]


def test_added_triggers_replace() -> None:
    result = command.diff_inputs({"create": "x"}, {"create": "x", "triggers": [1]})
    assert result.detailed == {"triggers": provider_pb2.PropertyDiff.ADD_REPLACE}
    assert result.replaces == ["triggers"]


def test_an_unknown_trigger_replaces() -> None:
    result = command.diff_inputs({"triggers": ["id-1"]}, {"triggers": [rpc.UNKNOWN]})
    assert result.replaces == ["triggers"]


def test_a_type_change_is_a_change() -> None:
    assert command.diff_inputs({"triggers": [1]}, {"triggers": [True]}).changed


def test_ignored_changes_are_no_diff() -> None:
    result = command.diff_inputs(
        {"create": "a", "triggers": [1]}, {"create": "b", "triggers": [2]}, ["create", "triggers"]
    )
    assert not result.changed


# ---------------------------------------------------------------------------------------------
# Running commands


def test_run_spec_defaults() -> None:
    spec = command.run_spec("echo hi", {})
    assert spec.argv == ["/bin/sh", "-c", "echo hi"]
    assert (spec.dir, spec.stdin, spec.timeout, dict(spec.environment)) == (None, None, None, {})
    assert spec.log_stdout and spec.log_stderr


def test_run_spec_passes_the_previous_output_unless_told_not_to() -> None:
    state = {"environment": {"A": "1"}, "stdout": "out", "stderr": ""}
    assert command.run_spec("x", state).environment == {"A": "1", "PULUMI_COMMAND_STDOUT": "out"}
    state["addPreviousOutputInEnv"] = False
    assert command.run_spec("x", state).environment == {"A": "1"}


@pytest.mark.parametrize(
    ("logging", "stdout", "stderr"),
    [("stdout", True, False), ("stderr", False, True), ("none", False, False)],
)
def test_run_spec_logging(logging: str, stdout: bool, stderr: bool) -> None:
    spec = command.run_spec("x", {"logging": logging})
    assert (spec.log_stdout, spec.log_stderr) == (stdout, stderr)


def test_trailing_newline_is_trimmed_once() -> None:
    assert command.trim_newline("a\n\n") == "a\n"
    assert command.trim_newline("a") == "a"


def test_exit_reasons_read_like_the_originals() -> None:
    assert command.exit_reason(2) == "exit status 2"
    assert command.exit_reason(-signal.SIGKILL) == "signal: killed"


def test_a_command_gets_stdin_environment_and_dir(tmp_path: Path) -> None:
    runner = command.Runner()
    spec = command.run_spec(
        'cat; echo "$GREETING"; pwd; echo warn >&2',
        {"stdin": "in\n", "environment": {"GREETING": "hi"}, "dir": str(tmp_path)},
    )
    logged: list[str] = []
    result = runner.run(spec, logged.append)
    assert result == command.RunResult(stdout=f"in\nhi\n{tmp_path}", stderr="warn")
    assert sorted(logged) == sorted(["in", "hi", str(tmp_path), "warn"])


def test_logging_none_logs_nothing() -> None:
    logged: list[str] = []
    command.Runner().run(command.run_spec("echo a; echo b >&2", {"logging": "none"}), logged.append)
    assert logged == []


def test_a_custom_interpreter_runs_the_command() -> None:
    spec = command.run_spec("print(6 * 7)", {"interpreter": [sys.executable, "-c"]})
    assert command.Runner().run(spec).stdout == "42"


def test_a_failure_carries_all_the_output() -> None:
    script = "echo one; echo two >&2; echo three; exit 3"
    with pytest.raises(command.CommandFailed) as failure:
        command.Runner().run(command.run_spec(script, {}))
    head, _, output = str(failure.value).partition(":\n")
    assert head == f'exit status 3: running "{script}"'
    lines = output.splitlines()
    # Two pipes read apart: each stream keeps its order, the two interleave as they arrive.
    assert sorted(lines) == ["one", "three", "two"]
    assert lines.index("one") < lines.index("three")


def test_a_missing_dir_fails_clearly(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(command.CommandFailed, match=f"chdir {missing}: no such file"):
        command.Runner().run(command.run_spec("true", {"dir": str(missing)}))


def test_a_missing_interpreter_fails_clearly() -> None:
    with pytest.raises(command.CommandFailed, match='exec: "/no/such/sh": no such file'):
        command.Runner().run(command.run_spec("true", {"interpreter": ["/no/such/sh"]}))


def test_huge_failure_output_keeps_its_tail() -> None:
    with pytest.raises(command.CommandFailed) as failure:
        command.Runner().run(command.run_spec("head -c 200000 /dev/zero | tr '\\0' x; exit 1", {}))
    assert "characters elided" in str(failure.value)
    assert len(str(failure.value)) < command.ERROR_OUTPUT_LIMIT + 200


def test_a_timeout_ends_the_whole_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    spec = command.run_spec(f"sleep 30 & echo $! > {pid_file}; wait", {}, timeout=0.5)
    started = time.monotonic()
    with pytest.raises(command.CommandFailed, match=r"timed out after 0\.5s"):
        command.Runner().run(spec)
    assert time.monotonic() - started < 10
    assert not alive(int(pid_file.read_text()))


def test_cancel_ends_running_commands_and_refuses_later_ones(tmp_path: Path) -> None:
    runner = command.Runner()
    errors: list[str] = []

    def run_slow() -> None:
        try:
            runner.run(command.run_spec(f"touch {tmp_path / 'started'}; sleep 30", {}))
        except command.CommandFailed as failure:
            errors.append(str(failure))

    thread = threading.Thread(target=run_slow)
    thread.start()
    wait_for(lambda: (tmp_path / "started").exists())
    runner.cancel()
    thread.join(10)
    assert not thread.is_alive()
    assert errors and errors[0].startswith("cancelled by the engine")
    with pytest.raises(command.CommandFailed, match="cancelled by the engine"):
        runner.run(command.run_spec("true", {}))


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# The gRPC service, in-process


@pytest.fixture
def provider() -> Iterator[provider_pb2_grpc.ResourceProviderStub]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    provider_pb2_grpc.add_ResourceProviderServicer_to_server(command.CommandProvider(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield provider_pb2_grpc.ResourceProviderStub(channel)
    server.stop(None)


def struct(**values: Any) -> struct_pb2.Struct:
    return rpc.to_struct(values)


def test_plugin_info_and_configuration(provider: provider_pb2_grpc.ResourceProviderStub) -> None:
    assert provider.GetPluginInfo(empty_pb2.Empty()).version == "1.2.1"
    configured = provider.Configure(provider_pb2.ConfigureRequest(acceptSecrets=True))
    assert configured.acceptSecrets and configured.supportsPreview
    assert provider.Handshake(provider_pb2.ProviderHandshakeRequest()).accept_secrets
    same = provider.DiffConfig(provider_pb2.DiffRequest(olds=struct(version="1.2.1")))
    assert same.changes == provider_pb2.DiffResponse.DIFF_NONE


def test_check_returns_the_inputs_and_failures(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    news = struct(create=secret("echo token"), assetPaths=["*.txt"])
    checked = provider.Check(provider_pb2.CheckRequest(urn=URN, news=news))
    assert checked.inputs == news
    assert [f.property for f in checked.failures] == ["assetPaths"]


def test_a_preview_create_runs_nothing(
    provider: provider_pb2_grpc.ResourceProviderStub, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    request = provider_pb2.CreateRequest(
        urn=URN, properties=struct(create=f"touch {marker}"), preview=True
    )
    created = rpc.to_python(provider.Create(request).properties)
    assert created == {"create": f"touch {marker}", "stdout": rpc.UNKNOWN, "stderr": rpc.UNKNOWN}
    assert not marker.exists()


def test_create_runs_and_keeps_secret_inputs_secret(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    request = provider_pb2.CreateRequest(
        urn=URN, properties=struct(create=secret("echo made"), triggers=[1])
    )
    created = provider.Create(request)
    assert created.id.startswith("hello") and len(created.id) == len("hello") + 8
    assert is_secret(created.properties.fields["create"])
    assert rpc.to_python(created.properties) == {
        "create": "echo made",
        "triggers": [1],
        "stdout": "made",
        "stderr": "",
    }


def test_a_failed_create_is_an_error_with_the_output(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    request = provider_pb2.CreateRequest(urn=URN, properties=struct(create="echo bad >&2; false"))
    with pytest.raises(grpc.RpcError) as error:
        provider.Create(request)
    assert error.value.code() == grpc.StatusCode.UNKNOWN
    assert error.value.details() == 'exit status 1: running "echo bad >&2; false":\nbad\n'


def test_update_reruns_create_when_there_is_no_update(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    olds = struct(create="echo one", stdout="one", stderr="")
    news = struct(create='echo "two after $PULUMI_COMMAND_STDOUT"')
    request = provider_pb2.UpdateRequest(id="x", urn=URN, olds=olds, news=news)
    updated = rpc.to_python(provider.Update(request).properties)
    assert updated["stdout"] == "two after one"


def test_update_prefers_the_update_command(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    news = struct(create="echo create", update="echo update")
    request = provider_pb2.UpdateRequest(id="x", urn=URN, olds=struct(stdout="s"), news=news)
    assert rpc.to_python(provider.Update(request).properties)["stdout"] == "update"


def test_an_update_without_commands_keeps_the_output(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    olds = struct(create="echo x", stdout="x", stderr="e")
    request = provider_pb2.UpdateRequest(id="x", urn=URN, olds=olds, news=struct(dir="/"))
    assert rpc.to_python(provider.Update(request).properties) == {
        "dir": "/",
        "stdout": "x",
        "stderr": "e",
    }


def test_a_preview_update_has_unknown_output(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    request = provider_pb2.UpdateRequest(
        id="x", urn=URN, olds=struct(stdout="old"), news=struct(create="exit 1"), preview=True
    )
    assert rpc.to_python(provider.Update(request).properties)["stdout"] == rpc.UNKNOWN


def test_delete_runs_with_the_last_output(
    provider: provider_pb2_grpc.ResourceProviderStub, tmp_path: Path
) -> None:
    out = tmp_path / "deleted"
    state = struct(delete=f'echo "$PULUMI_COMMAND_STDOUT" > {out}', stdout="last", stderr="")
    provider.Delete(provider_pb2.DeleteRequest(id="x", urn=URN, properties=state))
    assert out.read_text() == "last\n"


def test_diff_compares_old_inputs_and_reports_details(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    request = provider_pb2.DiffRequest(
        id="x",
        urn=URN,
        olds=struct(create="a", triggers=["t1"], stdout="out"),
        old_inputs=struct(create="a", triggers=["t1"]),
        news=struct(create="b", triggers=["t2"]),
    )
    diff = provider.Diff(request)
    assert diff.changes == provider_pb2.DiffResponse.DIFF_SOME and diff.hasDetailedDiff
    assert list(diff.replaces) == ["triggers"]
    assert {k: v.kind for k, v in diff.detailedDiff.items()} == {
        "create": UPDATE,
        "triggers[0]": UPDATE_REPLACE,
    }


def test_diff_without_old_inputs_uses_the_state(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    request = provider_pb2.DiffRequest(
        id="x", urn=URN, olds=struct(create="a", stdout="out", stderr=""), news=struct(create="a")
    )
    assert provider.Diff(request).changes == provider_pb2.DiffResponse.DIFF_NONE


def test_read_returns_the_state_as_is(provider: provider_pb2_grpc.ResourceProviderStub) -> None:
    request = provider_pb2.ReadRequest(
        id="x", urn=URN, properties=struct(create="a", stdout="o"), inputs=struct(create="a")
    )
    read = provider.Read(request)
    assert (read.id, read.properties, read.inputs) == ("x", request.properties, request.inputs)


def test_the_run_invoke(provider: provider_pb2_grpc.ResourceProviderStub) -> None:
    request = provider_pb2.InvokeRequest(
        tok="command:local:run", args=struct(command="echo $X", environment={"X": "ran"})
    )
    returned = rpc.to_python(provider.Invoke(request).__getattribute__("return"))
    assert returned["stdout"] == "ran" and returned["command"] == "echo $X"
    missing = provider.Invoke(provider_pb2.InvokeRequest(tok="command:local:run"))
    assert [f.property for f in missing.failures] == ["command"]


def test_other_resource_types_are_refused(
    provider: provider_pb2_grpc.ResourceProviderStub,
) -> None:
    urn = "urn:pulumi:dev::demo::command:remote:Command::hello"
    with pytest.raises(grpc.RpcError) as error:
        provider.Check(provider_pb2.CheckRequest(urn=urn, news=struct()))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---------------------------------------------------------------------------------------------
# Under the real CLI

LIFECYCLE = """\
import pulumi
from pulumi_command import local

config = pulumi.Config()
log = config.require("log")


def record(text: str) -> str:
    return f'echo "{text}" >> {log}'


first = local.Command(
    "first",
    # Slow, so that without the dependency the second would log before it.
    create="sleep 1; " + record("create first") + "; echo first-out",
    delete=record("delete first after $PULUMI_COMMAND_STDOUT"),
    triggers=[config.get("trigger") or "one"],
)
second = local.Command(
    "second",
    create=record("create second " + (config.get("variant") or "a")) + '; cat; echo "$GREETING"',
    delete=record("delete second"),
    stdin="from stdin\\n",
    environment={"GREETING": "hello"},
    opts=pulumi.ResourceOptions(depends_on=[first]),
)
if config.get_bool("fail"):
    local.Command("broken", create="echo to-stdout; echo it-broke >&2; exit 3")
pulumi.export("first", first.stdout)
pulumi.export("second", second.stdout)
"""

EXTRAS = """\
import pulumi
from pulumi_command import local

config = pulumi.Config()
local.Command(
    "ignored",
    create="echo " + (config.get("word") or "first"),
    opts=pulumi.ResourceOptions(ignore_changes=["create"]),
)
hidden = local.Command("hidden", create=pulumi.Output.secret("echo classified"))
if config.get_bool("slow"):
    local.Command(
        "slow",
        create="sleep 30",
        opts=pulumi.ResourceOptions(custom_timeouts=pulumi.CustomTimeouts(create="2s")),
    )
pulumi.export("ran", local.run(command="echo invoked").stdout)
"""


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{output(result)}"
    return result.stdout


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"{result.stdout}\n{result.stderr}"


@pytest.fixture(scope="module")
def cli(pulumi_env: PulumiEnv) -> PulumiEnv:
    """The CLI with this provider installed as plugin `command` 1.2.1 (its wrapper kept off PATH,
    so that the installed plugin is the one the engine runs)."""
    wrapper = pulumi_env.root / "providers" / "pulumi-resource-command"
    wrapper.parent.mkdir()
    python = shlex.join([sys.executable, "-m", "pulumi_plugins.command"])
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {python} "$@"\n')
    wrapper.chmod(0o755)
    install = ["plugin", "install", "resource", "command", command.PLUGIN_VERSION]
    ok(pulumi_env.run([*install, "--file", str(wrapper)]))
    return pulumi_env


def new_stack(cli: PulumiEnv, name: str, program: str) -> Path:
    project = cli.project(name, program)
    ok(cli.run(["stack", "init", "dev"], cwd=project))
    return project


class Log:
    """The file the commands append to; `new()` is what they wrote since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.seen = path, 0

    def new(self) -> list[str]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        fresh, self.seen = lines[self.seen :], len(lines)
        return fresh


def test_commands_follow_the_resource_lifecycle(cli: PulumiEnv) -> None:
    project = new_stack(cli, "lifecycle", LIFECYCLE)
    log = Log(project / "commands.log")

    def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
        return cli.run(list(args), cwd=project)

    ok(pulumi("config", "set", "log", str(log.path)))

    ok(pulumi("up", "--yes"))
    assert log.new() == ["create first", "create second a"]
    outputs = json.loads(ok(pulumi("stack", "output", "--json")))
    assert outputs == {"first": "first-out", "second": "from stdin\nhello"}

    ok(pulumi("preview", "--expect-no-changes"))
    assert "3 unchanged" in ok(pulumi("up", "--yes"))  # the stack and both commands
    assert log.new() == []

    ok(pulumi("config", "set", "trigger", "two"))
    preview = ok(pulumi("preview", "--diff"))
    assert "+-command:local:Command: (replace)" in preview and '"one" => "two"' in preview
    assert log.new() == []
    ok(pulumi("up", "--yes"))
    assert log.new() == ["create first", "delete first after first-out"]

    ok(pulumi("config", "set", "variant", "b"))
    ok(pulumi("up", "--yes"))
    assert log.new() == ["create second b"]

    ok(pulumi("config", "set", "fail", "true"))
    failed = pulumi("up", "--yes")
    assert failed.returncode != 0
    assert 'exit status 3: running "echo to-stdout; echo it-broke >&2; exit 3"' in failed.stdout
    assert "it-broke" in failed.stdout
    ok(pulumi("config", "rm", "fail"))
    ok(pulumi("preview", "--expect-no-changes"))

    ok(pulumi("refresh", "--yes"))
    ok(pulumi("preview", "--expect-no-changes"))
    assert log.new() == []

    ok(pulumi("destroy", "--yes"))
    assert log.new() == ["delete second", "delete first after first-out"]


def test_ignored_changes_secrets_timeouts_and_the_invoke(cli: PulumiEnv) -> None:
    project = new_stack(cli, "extras", EXTRAS)

    def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
        return cli.run(list(args), cwd=project)

    ok(pulumi("up", "--yes"))
    assert json.loads(ok(pulumi("stack", "output", "--json"))) == {"ran": "invoked"}

    ok(pulumi("config", "set", "word", "second"))
    ok(pulumi("preview", "--expect-no-changes"))

    state = json.loads(ok(pulumi("stack", "export")))
    hidden = next(r for r in state["deployment"]["resources"] if r["urn"].endswith("::hidden"))
    assert hidden["outputs"]["create"][rpc.SIG_KEY] == rpc.SECRET_SIG
    assert "classified" not in json.dumps(hidden["outputs"]["create"])
    assert hidden["outputs"]["stdout"] == "classified"

    ok(pulumi("config", "set", "slow", "true"))
    started = time.monotonic()
    timed_out = pulumi("up", "--yes", "--skip-preview")
    assert timed_out.returncode != 0 and 'timed out after 2s: running "sleep 30"' in output(
        timed_out
    )
    assert time.monotonic() - started < 25


def test_interrupting_pulumi_ends_a_running_command(cli: PulumiEnv) -> None:
    project = new_stack(cli, "interrupted", "")
    pid_file = project / "sleep.pid"
    (project / "__main__.py").write_text(
        "from pulumi_command import local\n"
        f'local.Command("slow", create="sleep 120 & echo $! > {pid_file}; wait")\n'
    )
    process = cli.start(
        ["up", "--yes", "--skip-preview"], project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=120)
        process.send_signal(signal.SIGINT)
        shown, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert "cancelled by the engine" in shown
    wait_for(lambda: not alive(int(pid_file.read_text())), timeout=10)


def test_the_module_runs_as_a_plugin() -> None:
    """`python -m pulumi_plugins.command ENGINE` announces a port and answers on it."""
    engine = FakeEngine()
    process = subprocess.Popen(
        [sys.executable, "-m", "pulumi_plugins.command", engine.address],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            assert stub.GetPluginInfo(empty_pb2.Empty(), timeout=10).version == "1.2.1"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
        engine.stop()
