"""The fleet program under the real Pulumi engine: a copy of the project, a stack, the CLI.

The CLI and the plugins come from `scripts/install-pulumi.sh`, in the plugin set a test asks for
(tests/pulumi_sets.py: the default is the official plugins where they are); each stack gets a
file backend, a PULUMI_HOME with the set's resource plugins installed, and a copy of the project
(so a test may change a source file), run with the repository's virtualenv::

    stack = PulumiStack.create(tmp_path, "e2e", {"accelerator": "sim", "cards": "1"})
    steps = stack.up()
    assert {s.op for s in steps if s.urn.endswith("gateway")} <= {"same"}
    stack.use_plugins("ours")  # the same stack on our own plugins from now on
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.pulumi_sets import CLI_VARIABLE, PluginSet, clean_path, plugin_set

REPO = Path(__file__).resolve().parents[2]
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "requirements.txt")
PROJECT_DIRS = ("components", "config", "gateway", "monitoring")
PLUGIN_VERSIONS = {"docker": "pulumi-docker", "command": "pulumi-command"}


def sdk_pin(package: str) -> str:
    """The version pyproject.toml pins for `package` (the provider plugin's version)."""
    import tomllib

    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.split("==", 1)[1] for d in deps if d.split("==", 1)[0] == package)


@dataclass(frozen=True)
class Step:
    """One resource step of an update, from the engine's event log."""

    urn: str
    op: str
    type: str
    started: int
    """Sequence number of the step's start event."""
    ended: int | None
    """Sequence number of its outputs event (None when it failed or had none)."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


class PulumiError(AssertionError):
    """A `pulumi` command failed; the message carries its output."""


class PulumiStack:
    def __init__(self, root: Path, plugins: PluginSet, name: str):
        self.root, self.plugins, self.name = root, plugins, name
        self.project = root / "project"
        self.config_file = root / f"Pulumi.{name}.yaml"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
        self.env.update(
            PATH=clean_path(plugins.bin_dir, self.env.get("PATH", "")),
            PULUMI_HOME=str(root / "home"),
            # no metadata file beside each state file: the file backend writes it in place, not
            # renamed into place, and a CLI killed meanwhile leaves it empty ("EOF" ever after)
            PULUMI_BACKEND_URL=(root / "state").as_uri() + "?metadata=skip",
            PULUMI_CONFIG_PASSPHRASE="",
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            PULUMI_ENABLE_STREAMING_JSON_PREVIEW="true",
        )
        self.env.pop("DOCKER_CONTEXT", None)
        self._log = 0

    @property
    def cli(self) -> Path:
        return self.plugins.cli

    def prepend_path(self, *directories: Path | str) -> None:
        """Put `directories` first on PATH for later `pulumi` runs, their plugins and the
        commands those run (e.g. a wrapper that shadows `ssh`)."""
        self.env["PATH"] = os.pathsep.join([*map(str, directories), self.env["PATH"]])

    def use_plugins(self, name: str | None) -> None:
        """Run this stack's later commands on the plugin set `name` (None: the default set):
        its CLI and language host, its resource plugins installed over the ones before."""
        found = plugin_set(name)
        if found is None:
            raise FileNotFoundError(f"no plugin set {name!r}: scripts/test.sh installs both")
        before = self.plugins.bin_dir
        self.env["PATH"] = os.pathsep.join(
            str(found.bin_dir) if part == str(before) else part
            for part in self.env["PATH"].split(os.pathsep)
        )
        self.plugins = found
        for plugin, package in PLUGIN_VERSIONS.items():
            version = sdk_pin(package)
            binary = found.resource_plugin(plugin, version)
            self.run(
                ["plugin", "install", "resource", plugin, version, "--reinstall", "--file", binary]
            )

    @classmethod
    def create(
        cls,
        root: Path,
        name: str,
        config: Mapping[str, str],
        secrets: Mapping[str, str] | None = None,
        plugins: str | None = None,
    ) -> PulumiStack:
        """A new stack `name` under `root` on the plugin set `plugins` (None: the default)."""
        found = plugin_set(plugins)
        if found is None:
            raise FileNotFoundError(
                f"no Pulumi CLI of plugin set {plugins or 'default'}: run scripts/install-pulumi.sh"
                f" and set ${CLI_VARIABLE} (scripts/test.sh does both)"
            )
        stack = cls(root, found, name)
        (root / "state").mkdir(parents=True, exist_ok=True)
        stack._copy_project()
        stack.use_plugins(plugins)
        stack.run(["stack", "init", name])
        stack.set_config(config)
        stack.set_config(secrets or {}, secret=True)
        return stack

    def _copy_project(self) -> None:
        self.project.mkdir(parents=True)
        for name in PROJECT_FILES:
            shutil.copy2(REPO / name, self.project / name)
        for name in PROJECT_DIRS:
            shutil.copytree(
                REPO / name, self.project / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        venv = Path(sys.prefix)  # the virtualenv running the tests has the program's packages
        pulumi_yaml = self.project / "Pulumi.yaml"
        pulumi_yaml.write_text(
            pulumi_yaml.read_text().replace("virtualenv: .venv", f"virtualenv: {venv}")
        )

    def start(self, args: Iterable[Any], output: int | None = subprocess.PIPE) -> subprocess.Popen:
        """`pulumi ARGS` running in a session of its own (an interrupted test ends the CLI and
        every plugin it started); `output` takes its stdout and stderr."""
        return subprocess.Popen(
            [str(self.cli), *map(str, args)],
            cwd=self.project,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
            text=True,
            start_new_session=True,
        )

    def up_args(self) -> list[str]:
        """`up` of this stack as the tests run it: no preview, no questions."""
        return ["up", *self._stack_args(), "--yes", "--skip-preview", "--non-interactive"]

    def run(
        self, args: Iterable[Any], timeout: float = 1800, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.cli), *map(str, args)]
        process = self.start(args)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
        done = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
        if check and done.returncode != 0:
            raise PulumiError(
                f"`pulumi {' '.join(argv[1:])}` exited {done.returncode}:\n"
                f"{_errors(done.stdout) or done.stdout[-6000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def _stack_args(self) -> list[str]:
        return ["--stack", self.name, "--config-file", str(self.config_file)]

    def set_config(self, values: Mapping[str, str], secret: bool = False) -> None:
        flags = ["--secret"] if secret else []
        for key, value in values.items():
            self.run(["config", "set", *self._stack_args(), *flags, key, value])

    def remove_config(self, key: str) -> None:
        self.run(["config", "rm", *self._stack_args(), key])

    def _logged(self, verb: str, extra: Iterable[str], check: bool) -> tuple[list[Step], str]:
        """Run `verb` with `--json`, which streams the engine's events one JSON object a line
        (PULUMI_ENABLE_STREAMING_JSON_PREVIEW does the same for a preview)."""
        self._log += 1
        args = [verb, *self._stack_args(), "--non-interactive", "--json", *extra]
        if verb != "preview":  # the steps of the update alone, not of a preview before it
            args += ["--yes", "--skip-preview"]
        done = self.run(args, check=check)
        log = self.root / f"events-{self._log}-{verb}.jsonl"
        log.write_text(done.stdout)
        return read_steps(log), done.stdout + done.stderr

    def preview(self, *extra: str, check: bool = True) -> list[Step]:
        return self._logged("preview", extra, check)[0]

    def up(self, *extra: str) -> list[Step]:
        return self._logged("up", extra, True)[0]

    def destroy(self) -> list[Step]:
        return self._logged("destroy", (), True)[0]

    def outputs(self) -> dict[str, Any]:
        done = self.run(["stack", "output", "--stack", self.name, "--json", "--show-secrets"])
        return json.loads(done.stdout)

    def state(self) -> list[dict[str, Any]]:
        done = self.run(["stack", "export", "--stack", self.name])
        return json.loads(done.stdout)["deployment"].get("resources", [])


def _errors(output: str) -> str:
    """The error diagnostics of a `--json` event stream (what the CLI shows as errors)."""
    messages = []
    for line in output.splitlines():
        if line.startswith("{") and '"severity":"error"' in line:
            event = json.loads(line).get("diagnosticEvent", {})
            messages.append(f"{event.get('urn', '')}: {event.get('message', '')}".strip())
    return "\n".join(messages)


def read_steps(path: Path) -> list[Step]:
    """The resource steps of a stream of engine events, in the order they started.

    A replacement is several steps of one URN (e.g. `delete-replaced`, `replace`,
    `create-replacement`): each start event is a step, ended by the outputs event of its op.
    """
    steps: list[Step] = []
    if not path.exists():
        return steps
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        sequence = event.get("sequence", 0)
        if "resourcePreEvent" in event:
            meta = event["resourcePreEvent"]["metadata"]
            steps.append(Step(meta["urn"], meta["op"], meta.get("type", ""), sequence, None))
        elif "resOutputsEvent" in event:
            meta = event["resOutputsEvent"]["metadata"]
            for i, step in enumerate(steps):
                if step.urn == meta["urn"] and step.op == meta["op"] and step.ended is None:
                    steps[i] = Step(step.urn, step.op, step.type, step.started, sequence)
                    break
    return steps


def changed(steps: Iterable[Step]) -> dict[str, set[str]]:
    """Resource name -> its ops, for every step that is not `same` (a real change). The reads
    of the refresh before an update (Pulumi.yaml `refresh: always`) are no change either: what
    they find changed shows as the update's own steps."""
    found: dict[str, set[str]] = {}
    for step in steps:
        if step.op not in ("same", "read", "refresh"):
            found.setdefault(step.name, set()).add(step.op)
    return found
