"""A Pulumi language host for Python programs (the engine's `pulumi-language-python`).

The engine starts `pulumi-language-python [engine flags...] ENGINE_ADDRESS`; the wrapper of that
name on PATH runs::

    python -m pulumi_plugins.langhost --exec-script PATH/pulumi-language-python-exec \\
        [engine flags...] ENGINE_ADDRESS

(`--exec-script` defaults to a `pulumi-language-python-exec` beside this file). A program runs
as `PYTHON -u EXEC_SCRIPT --monitor ... PROGRAM`, where PYTHON is the `virtualenv` runtime option
of Pulumi.yaml (relative to the project root) or else `$PULUMI_PYTHON_CMD`/`python3`; its stack
config travels in PULUMI_CONFIG and PULUMI_CONFIG_SECRET_KEYS. The program shares this host's
stdout/stderr, which the engine shows to the user line by line.

As the official host (pulumi sdk/python/toolchain pip.go `EnsureVenv`, called from its
`GetRequiredPackages`), a `virtualenv` that does not exist yet (or is an empty directory) is
created on the first `preview`/`up`: `python3 -m venv`, `pip install --upgrade pip setuptools
wheel`, then `pip install -r requirements.txt` of the program directory when there is one, with
the same progress lines sent to the engine's log as ephemeral messages (pip's stdout as info, its
stderr as errors). `pulumi install` (InstallDependencies) runs the same steps.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    language_pb2,
    language_pb2_grpc,
    plugin_pb2,
)

from pulumi_plugins import rpc

EXEC_SCRIPT_NAME = "pulumi-language-python-exec"
USER_ACTIONABLE_EXIT_CODE = 32
"""The exec script's exit code after it has already shown the user an actionable error."""
PLUGIN_FILES = ("pulumi-plugin.json", "pulumiplugin.json")

# Run by the program's interpreter: every installed distribution's plugin files, as JSON.
_PLUGIN_SCAN = """
import importlib.metadata, json
found = []
for dist in importlib.metadata.distributions():
    for file in dist.files or ():
        if file.name in {names!r}:
            try:
                found.append({{"plugin": json.loads(file.read_text()), "version": dist.version}})
            except (OSError, ValueError):
                pass
print(json.dumps(found))
"""


class CommandFailed(Exception):
    def __init__(self, command: list[str], code: int) -> None:
        super().__init__(f"`{' '.join(command)}` exited with code {code}")


@dataclass(frozen=True)
class HostArgs:
    exec_script: Path
    engine_address: str | None


@dataclass(frozen=True)
class Runtime:
    """How a project runs Python: its toolchain and interpreter, from Pulumi.yaml's options."""

    toolchain: str
    virtualenv: Path | None
    root: Path
    program_dir: Path | None = None
    """Where requirements.txt is read and pip runs (the official host's cwd); default: root."""

    @property
    def workdir(self) -> Path:
        return self.program_dir or self.root

    @property
    def python(self) -> str:
        if self.virtualenv is not None:
            return str(venv_bin(self.virtualenv) / "python")
        return os.environ.get("PULUMI_PYTHON_CMD") or "python3"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment with the virtualenv activated, plus `extra`."""
        env = dict(os.environ)
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        if self.virtualenv is not None:
            env.pop("PYTHONHOME", None)
            env["VIRTUAL_ENV"] = str(self.virtualenv)
            env["PATH"] = os.pathsep.join([str(venv_bin(self.virtualenv)), env.get("PATH", "")])
        env.update(extra or {})
        return env

    def missing_virtualenv(self) -> str | None:
        """An actionable message when the configured virtualenv has no interpreter."""
        if self.virtualenv is None or Path(self.python).exists():
            return None
        return (
            f"The virtualenv {self.virtualenv} (the `virtualenv` runtime option of Pulumi.yaml) "
            "does not exist. Run `pulumi install` to create it and install the dependencies."
        )


def venv_bin(virtualenv: Path) -> Path:
    return virtualenv / ("Scripts" if os.name == "nt" else "bin")


def parse_args(argv: list[str]) -> HostArgs:
    """`--exec-script PATH` (or `=PATH`) is ours; every other argument is the engine's."""
    exec_script = Path(__file__).with_name(EXEC_SCRIPT_NAME)
    rest: list[str] = []
    args = iter(argv)
    for arg in args:
        if arg == "--exec-script":
            exec_script = Path(next(args, ""))
        elif arg.startswith("--exec-script="):
            exec_script = Path(arg.partition("=")[2])
        else:
            rest.append(arg)
    return HostArgs(exec_script=exec_script.resolve(), engine_address=rpc.engine_address(rest))


def runtime_of(info: language_pb2.ProgramInfo, fallback_root: str = "") -> Runtime:
    options = rpc.to_python(info.options) or {}
    root = Path(info.root_directory or info.program_directory or fallback_root or os.getcwd())
    virtualenv = options.get("virtualenv")
    return Runtime(
        toolchain=str(options.get("toolchain") or "pip"),
        virtualenv=(root / str(virtualenv)).resolve() if virtualenv else None,
        root=root,
        program_dir=Path(info.program_directory) if info.program_directory else None,
    )


def program_path(request: language_pb2.RunRequest) -> str:
    """The absolute path of the program: its directory, or a file in it."""
    directory = Path(request.info.program_directory or request.pwd or os.getcwd())
    entry_point = request.info.entry_point or request.program or "."
    return str((directory / entry_point).resolve())


def exec_command(host: HostArgs, runtime: Runtime, request: language_pb2.RunRequest) -> list[str]:
    flags = {
        "--monitor": request.monitor_address,
        "--engine": host.engine_address or "",
        "--project": request.project,
        "--stack": request.stack,
        "--pwd": request.pwd or request.info.program_directory,
        "--dry_run": "true" if request.dryRun else "false",
        "--parallel": str(request.parallel),
        "--organization": request.organization,
        "--root_directory": request.info.root_directory or str(runtime.root),
    }
    command = [runtime.python, "-u", str(host.exec_script)]
    for flag, value in flags.items():
        if value:
            command.append(f"{flag}={value}")
    return [*command, program_path(request), *request.args]


def config_env(request: language_pb2.RunRequest) -> dict[str, str]:
    return {
        "PULUMI_CONFIG": json.dumps(dict(request.config)),
        "PULUMI_CONFIG_SECRET_KEYS": json.dumps(list(request.configSecretKeys)),
    }


def exit_response(code: int) -> language_pb2.RunResponse:
    if code == 0:
        return language_pb2.RunResponse()
    if code == USER_ACTIONABLE_EXIT_CODE:
        return language_pb2.RunResponse(bail=True)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return language_pb2.RunResponse(error=f"Program was killed by signal {name}")
    return language_pb2.RunResponse(error=f"Program exited with non-zero exit code: {code}")


def installed_plugins(runtime: Runtime) -> list[dict[str, Any]]:
    """The resource plugins of the packages installed for the program's interpreter."""
    if runtime.missing_virtualenv():
        return []
    scan = _PLUGIN_SCAN.format(names=PLUGIN_FILES)
    result = subprocess.run(
        [runtime.python, "-c", scan],
        env=runtime.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    plugins: dict[tuple[str, str], dict[str, Any]] = {}
    for found in json.loads(result.stdout):
        plugin = found["plugin"]
        if not isinstance(plugin, dict) or not plugin.get("resource") or not plugin.get("name"):
            continue
        plugin.setdefault("version", found["version"])
        plugins.setdefault((plugin["name"], str(plugin["version"])), plugin)
    return sorted(plugins.values(), key=lambda p: p["name"])


def plugin_version(plugin: Mapping[str, Any]) -> str:
    version = str(plugin.get("version") or "")
    return version if not version or version.startswith("v") else f"v{version}"


def parameterization(plugin: Mapping[str, Any]) -> plugin_pb2.PackageParameterization | None:
    param = plugin.get("parameterization")
    if not isinstance(param, dict):
        return None
    return plugin_pb2.PackageParameterization(
        name=str(param.get("name", "")),
        version=str(param.get("version", "")),
        value=base64.b64decode(param.get("value") or ""),
    )


def _dependency(plugin: Mapping[str, Any]) -> dict[str, str]:
    """What a package and a plugin dependency both say of a resource plugin entry."""
    return {
        "name": plugin["name"],
        "kind": "resource",
        "version": plugin_version(plugin),
        "server": str(plugin.get("server") or ""),
    }


def package_dependency(plugin: Mapping[str, Any]) -> plugin_pb2.PackageDependency:
    return plugin_pb2.PackageDependency(
        **_dependency(plugin), parameterization=parameterization(plugin)
    )


def plugin_dependency(plugin: Mapping[str, Any]) -> plugin_pb2.PluginDependency:
    return plugin_pb2.PluginDependency(**_dependency(plugin))


def _pump(pipe: IO[bytes], stream: str, lines: queue.Queue[tuple[str, bytes] | None]) -> None:
    for line in iter(pipe.readline, b""):
        lines.put((stream, line))
    lines.put(None)


def stream_command(
    command: list[str], cwd: Path, env: Mapping[str, str]
) -> Iterator[tuple[str, bytes]]:
    """Run `command`, yielding ("stdout"|"stderr", line) as lines come; CommandFailed on failure."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
    pipes = {"stdout": process.stdout, "stderr": process.stderr}
    for stream, pipe in pipes.items():
        assert pipe is not None
        threading.Thread(target=_pump, args=(pipe, stream, lines), daemon=True).start()
    open_pipes = len(pipes)
    while open_pipes:
        item = lines.get()
        if item is None:
            open_pipes -= 1
        else:
            yield item
    if code := process.wait():
        raise CommandFailed(command, code)


def base_python() -> str:
    """The interpreter that creates a virtualenv: $PULUMI_PYTHON_CMD, else python3, else python
    on PATH (the official toolchain's `CommandPath`)."""
    names = [os.environ["PULUMI_PYTHON_CMD"]] if os.environ.get("PULUMI_PYTHON_CMD") else []
    for name in names or ["python3", "python"]:
        if found := shutil.which(name):
            return found
    raise OSError(f"failed to locate any of {names or ['python3', 'python']} on your PATH")


def needs_virtualenv(runtime: Runtime) -> bool:
    """Whether the first run must create the virtualenv: it is configured and missing or an
    empty directory (a directory with other content is left alone, and reported by Run)."""
    if runtime.virtualenv is None or Path(runtime.python).exists():
        return False
    venv = runtime.virtualenv
    if venv.exists() and not venv.is_dir():
        raise OSError(
            f"the 'virtualenv' option in Pulumi.yaml is set to {str(venv)!r} "
            "but it is not a directory"
        )
    return not venv.exists() or not any(venv.iterdir())


def install_commands(runtime: Runtime, create: bool) -> Iterator[tuple[str, list[str], str]]:
    """(announcement, command, closing message) steps of the official pip toolchain's install:
    the virtualenv (when `create`), pip's own tools, then requirements.txt if there is one."""
    venv = runtime.virtualenv
    if venv is not None and create:
        yield (
            "Creating virtual environment...",
            [base_python(), "-m", "venv", str(venv)],
            "Finished creating virtual environment",
        )
    if venv is not None:
        yield (
            "Updating pip, setuptools, and wheel in virtual environment...",
            [runtime.python, "-m", "pip", "install", "--upgrade", "pip", "setuptools", "wheel"],
            "Finished updating",
        )
    if (runtime.workdir / "requirements.txt").exists():
        yield (
            "Installing dependencies in virtual environment...",
            [runtime.python, "-m", "pip", "install", "-r", "requirements.txt"],
            "Finished installing dependencies",
        )


def run_install(runtime: Runtime, create: bool) -> Iterator[tuple[str, bytes]]:
    """Run `install_commands`, yielding ("stdout"|"stderr", line): the announcements and pip's
    output as they come; CommandFailed or OSError on a failed step."""
    for announcement, command, finished in install_commands(runtime, create):
        yield "stdout", f"{announcement}\n".encode()
        yield from stream_command(command, runtime.workdir, runtime.env())
        yield "stdout", f"{finished}\n".encode()


class EngineLog:
    """Lines sent to the engine's log as ephemeral messages of one stream (the official host's
    `createEngineWriters`): shown while an operation runs, as `pulumi` shows progress."""

    def __init__(self, address: str | None) -> None:
        self._stub = engine_pb2_grpc.EngineStub(grpc.insecure_channel(address)) if address else None
        self._stream = random.randint(1, 2**31 - 1)

    def write(self, stream: str, line: bytes) -> None:
        text = line.decode(errors="replace")
        if self._stub is None:
            (sys.stdout if stream == "stdout" else sys.stderr).write(text)
            return
        severity = engine_pb2.INFO if stream == "stdout" else engine_pb2.ERROR
        request = engine_pb2.LogRequest(
            severity=severity, message=text, ephemeral=True, streamId=self._stream
        )
        with contextlib.suppress(grpc.RpcError):
            self._stub.Log(request, timeout=30)


def python_version(python: str) -> str:
    result = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def pip_list(runtime: Runtime, transitive: bool) -> list[dict[str, str]]:
    command = [runtime.python, "-m", "pip", "list", "--format", "json"]
    if not transitive:
        command.append("--not-required")
    result = subprocess.run(
        command,
        env=runtime.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


class PythonLanguageHost(language_pb2_grpc.LanguageRuntimeServicer):
    def __init__(self, host: HostArgs) -> None:
        self.host = host
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def Handshake(
        self, request: language_pb2.LanguageHandshakeRequest, context: grpc.ServicerContext
    ) -> language_pb2.LanguageHandshakeResponse:
        if request.engine_address:
            self.host = dataclasses.replace(self.host, engine_address=request.engine_address)
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(
        self, request: empty_pb2.Empty, context: grpc.ServicerContext
    ) -> plugin_pb2.PluginInfo:
        return plugin_pb2.PluginInfo(version=importlib.metadata.version("pulumi"))

    def GetRequiredPlugins(
        self, request: language_pb2.GetRequiredPluginsRequest, context: grpc.ServicerContext
    ) -> language_pb2.GetRequiredPluginsResponse:
        plugins = self._plugins(runtime_of(request.info, request.pwd), context)
        return language_pb2.GetRequiredPluginsResponse(plugins=map(plugin_dependency, plugins))

    def GetRequiredPackages(
        self, request: language_pb2.GetRequiredPackagesRequest, context: grpc.ServicerContext
    ) -> language_pb2.GetRequiredPackagesResponse:
        plugins = self._plugins(runtime_of(request.info), context)
        return language_pb2.GetRequiredPackagesResponse(packages=map(package_dependency, plugins))

    def _plugins(self, runtime: Runtime, context: grpc.ServicerContext) -> list[dict[str, Any]]:
        try:
            if needs_virtualenv(runtime):
                log = EngineLog(self.host.engine_address)
                for stream, line in run_install(runtime, create=True):
                    log.write(stream, line)
        except (CommandFailed, OSError) as exc:
            context.abort(
                grpc.StatusCode.UNKNOWN, f"creating the virtualenv {runtime.virtualenv}: {exc}"
            )
        try:
            return installed_plugins(runtime)
        except subprocess.CalledProcessError as exc:
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"listing the plugins installed for {runtime.python} failed: {exc.stderr}",
            )
        except (OSError, ValueError) as exc:
            context.abort(grpc.StatusCode.UNKNOWN, f"listing the installed plugins failed: {exc}")

    def Run(
        self, request: language_pb2.RunRequest, context: grpc.ServicerContext
    ) -> language_pb2.RunResponse:
        runtime = runtime_of(request.info, request.pwd)
        if request.attach_debugger:
            return language_pb2.RunResponse(error="This language host cannot attach a debugger")
        if problem := runtime.missing_virtualenv():
            return language_pb2.RunResponse(error=problem)
        if not self.host.exec_script.is_file():
            return language_pb2.RunResponse(
                error=f"The Python program runner {self.host.exec_script} does not exist"
            )
        command = exec_command(self.host, runtime, request)
        try:
            code = self._wait(command, runtime.env(config_env(request)), request.pwd or None)
        except OSError as exc:
            return language_pb2.RunResponse(error=f"Could not start the Python program: {exc}")
        return exit_response(code)

    def _wait(self, command: list[str], env: Mapping[str, str], cwd: str | None) -> int:
        sys.stdout.flush()
        process = subprocess.Popen(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
        with self._lock:
            self._running.add(process)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def InstallDependencies(
        self, request: language_pb2.InstallDependenciesRequest, context: grpc.ServicerContext
    ) -> Iterator[language_pb2.InstallDependenciesResponse]:
        runtime = runtime_of(request.info, request.directory)
        if runtime.toolchain != "pip":
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"toolchain {runtime.toolchain!r} is not supported by this language host (pip is)",
            )
        try:
            yield language_pb2.InstallDependenciesResponse(stdout=b"Installing dependencies...\n\n")
            create = runtime.virtualenv is not None and not Path(runtime.python).exists()
            for stream, line in run_install(runtime, create):
                yield language_pb2.InstallDependenciesResponse(**{stream: line})
            yield language_pb2.InstallDependenciesResponse(
                stdout=b"Finished installing dependencies\n\n"
            )
        except (CommandFailed, OSError) as exc:
            context.abort(grpc.StatusCode.UNKNOWN, f"installing dependencies failed: {exc}")

    def RuntimeOptionsPrompts(
        self, request: language_pb2.RuntimeOptionsRequest, context: grpc.ServicerContext
    ) -> language_pb2.RuntimeOptionsResponse:
        return language_pb2.RuntimeOptionsResponse()

    def About(
        self, request: language_pb2.AboutRequest, context: grpc.ServicerContext
    ) -> language_pb2.AboutResponse:
        runtime = runtime_of(request.info)
        if problem := runtime.missing_virtualenv():
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        python = shutil.which(runtime.python, path=runtime.env()["PATH"]) or runtime.python
        metadata = {"toolchain": runtime.toolchain}
        if runtime.virtualenv is not None:
            metadata["virtualenv"] = str(runtime.virtualenv)
        try:
            version = python_version(python)
        except (OSError, subprocess.CalledProcessError) as exc:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"cannot run {python}: {exc}")
        return language_pb2.AboutResponse(executable=python, version=version, metadata=metadata)

    def GetProgramDependencies(
        self, request: language_pb2.GetProgramDependenciesRequest, context: grpc.ServicerContext
    ) -> language_pb2.GetProgramDependenciesResponse:
        runtime = runtime_of(request.info, request.pwd)
        if problem := runtime.missing_virtualenv():
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, problem)
        try:
            packages = pip_list(runtime, request.transitiveDependencies)
        except (OSError, subprocess.CalledProcessError, ValueError) as exc:
            context.abort(grpc.StatusCode.UNKNOWN, f"listing the installed packages failed: {exc}")
        return language_pb2.GetProgramDependenciesResponse(dependencies=dependency_infos(packages))

    def Cancel(self, request: empty_pb2.Empty, context: grpc.ServicerContext) -> empty_pb2.Empty:
        with self._lock:
            running = list(self._running)
        for process in running:
            process.terminate()
        return empty_pb2.Empty()


def dependency_infos(packages: Iterable[Mapping[str, str]]) -> list[language_pb2.DependencyInfo]:
    return [language_pb2.DependencyInfo(name=p["name"], version=p["version"]) for p in packages]


def main(argv: list[str] | None = None) -> None:
    host = parse_args(sys.argv[1:] if argv is None else argv)
    # The engine stops its plugins with SIGINT: a normal end, not a crash worth a traceback.
    with contextlib.suppress(KeyboardInterrupt):
        rpc.serve(
            language_pb2_grpc.add_LanguageRuntimeServicer_to_server,
            PythonLanguageHost(host),
            engine=host.engine_address,
        )


if __name__ == "__main__":
    main()
