"""A test-only stand-in for the Pulumi engine: applies a mocks recording to real Docker engines.

No Pulumi CLI or provider plugin can be had here, so the e2e tests record the stack program
under mocks (tests/pulumi_harness.py) and apply that record with the docker CLI:

- a container becomes `docker create` with exactly the recorded fields (any field this file
  does not translate is refused), its uploads are copied in, then `docker start`;
- a command runs its `create` string with `/bin/sh -c`, its environment and its stdin;
- an image becomes `docker build`;
- each resource talks to the engine of its provider (`host` input -> DOCKER_HOST).

`destroy()` runs the commands' `delete` strings and removes the containers, newest first.
Every step is logged with its start and end time so tests can check the ordering.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass, field

from tests.pulumi_harness import COMMAND, CONTAINER, IMAGE, PROVIDER, Recording, Registration

CONTAINER_FIELDS = {
    "name", "image", "networkMode", "privileged", "restart", "shmSize", "devices",
    "deviceRequests", "envs", "volumes", "entrypoints", "command", "labels", "uploads",
}  # fmt: skip


class UntranslatedField(Exception):
    """The recording has a field this stand-in does not know how to apply."""


@dataclass
class Step:
    name: str
    kind: str
    started: float
    ended: float
    ok: bool
    output: str = ""


@dataclass
class Applied:
    recording: Recording
    steps: list[Step] = field(default_factory=list)
    containers: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)


class StandInEngine:
    """Applies `recording` in registration order (a valid dependency order: the SDK registers a
    resource only after the resources its inputs and `depends_on` name are registered)."""

    def __init__(self, recording: Recording, base_env: dict[str, str] | None = None):
        self.recording = recording
        self.base_env = dict(base_env or os.environ)
        self.applied = Applied(recording)

    def apply(self) -> Applied:
        for resource in self.recording.resources:
            if not resource.custom or resource.type == PROVIDER:
                continue
            started = time.monotonic()
            try:
                output = self._apply_one(resource)
            except subprocess.CalledProcessError as exc:
                self._log(resource, started, False, f"{exc.stdout or ''}{exc.stderr or ''}")
                raise RuntimeError(
                    f"{resource.type} {resource.name} failed (exit {exc.returncode}):\n"
                    f"{exc.stderr or exc.stdout}"
                ) from None
            self._log(resource, started, True, output)
        return self.applied

    def destroy(self) -> list[str]:
        """Delete in reverse order; returns the errors (best effort, like `pulumi destroy`)."""
        errors: list[str] = []
        for resource in reversed(self.recording.resources):
            if resource.type == COMMAND and resource.inputs.get("delete"):
                result = self._sh(resource, resource.inputs["delete"], check=False)
                if result.returncode != 0:
                    errors.append(f"{resource.name}: {result.stderr.strip()}")
            elif resource.type == CONTAINER:
                env = self._docker_env(resource)
                result = subprocess.run(
                    ["docker", "rm", "-f", resource.inputs["name"]],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if result.returncode != 0 and "No such container" not in result.stderr:
                    errors.append(f"{resource.name}: {result.stderr.strip()}")
        return errors

    def _apply_one(self, resource: Registration) -> str:
        if resource.type == CONTAINER:
            return self._container(resource)
        if resource.type == COMMAND:
            return self._sh(resource, resource.inputs["create"], check=True).stdout
        if resource.type == IMAGE:
            return self._image(resource)
        raise UntranslatedField(f"{resource.type} {resource.name}: resource type not translated")

    def _container(self, resource: Registration) -> str:
        inputs = resource.inputs
        unknown = sorted(set(inputs) - CONTAINER_FIELDS)
        if unknown:
            raise UntranslatedField(f"container {resource.name}: fields {unknown} not translated")
        argv = ["docker", "create", "--name", inputs["name"]]
        if inputs.get("networkMode"):
            argv += ["--network", inputs["networkMode"]]
        if inputs.get("privileged"):
            argv.append("--privileged")
        if inputs.get("restart"):
            argv += ["--restart", inputs["restart"]]
        if inputs.get("shmSize"):
            argv += ["--shm-size", f"{inputs['shmSize']}m"]
        for device in inputs.get("devices") or []:
            perms = device.get("permissions", "rwm")
            argv += ["--device", f"{device['hostPath']}:{device['containerPath']}:{perms}"]
        for request in inputs.get("deviceRequests") or []:
            argv += ["--gpus", f"device={','.join(request['deviceIds'])}"]
        for env in inputs.get("envs") or []:
            argv += ["--env", env]
        for volume in inputs.get("volumes") or []:
            suffix = ":ro" if volume.get("readOnly") else ""
            argv += ["--volume", f"{volume['hostPath']}:{volume['containerPath']}{suffix}"]
        for label in inputs.get("labels") or []:
            argv += ["--label", f"{label['label']}={label['value']}"]
        entrypoints = inputs.get("entrypoints") or []
        if entrypoints:
            argv += ["--entrypoint", entrypoints[0]]
        argv.append(inputs["image"])
        argv += entrypoints[1:] + (inputs.get("command") or [])
        env = self._docker_env(resource)
        subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        self.applied.containers.append((inputs["name"], env))
        for upload in inputs.get("uploads") or []:
            self._upload(inputs["name"], upload["file"], upload["content"], env)
        subprocess.run(
            ["docker", "start", inputs["name"]],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return inputs["name"]

    @staticmethod
    def _upload(container: str, path: str, content: str, env: dict[str, str]) -> None:
        """Copies `content` to `path` in the container, creating its folders (a tar stream)."""
        buffer = io.BytesIO()
        data = content.encode()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            archive.addfile(info, io.BytesIO(data))
        subprocess.run(
            ["docker", "cp", "-", f"{container}:/"],
            input=buffer.getvalue(),
            env=env,
            capture_output=True,
            check=True,
        )

    def _image(self, resource: Registration) -> str:
        build = resource.inputs["build"]
        argv = ["docker", "build", "-t", resource.inputs["imageName"]]
        if build.get("dockerfile"):
            argv += ["-f", build["dockerfile"]]
        if build.get("network"):
            argv += ["--network", build["network"]]
        for key, value in (build.get("args") or {}).items():
            argv += ["--build-arg", f"{key}={value}"]
        argv.append(build.get("context", "."))
        subprocess.run(
            argv, env=self._docker_env(resource), capture_output=True, text=True, check=True
        )
        return resource.inputs["imageName"]

    def _sh(self, resource: Registration, script: str, *, check: bool):
        env = {**self.base_env, **(resource.inputs.get("environment") or {})}
        return subprocess.run(
            ["/bin/sh", "-c", script],
            env=env,
            input=resource.inputs.get("stdin"),
            capture_output=True,
            text=True,
            check=check,
        )

    def _docker_env(self, resource: Registration) -> dict[str, str]:
        env = dict(self.base_env)
        provider_urn = resource.provider.split("::")[0:4]
        provider = next(
            (p for p in self.recording.of_type(PROVIDER) if p.urn == "::".join(provider_urn)),
            None,
        )
        host = provider.inputs.get("host") if provider else None
        if host:
            env["DOCKER_HOST"] = host
        return env

    def _log(self, resource: Registration, started: float, ok: bool, output: str) -> None:
        kind = resource.type.rsplit(":", 1)[-1]
        self.applied.steps.append(Step(resource.name, kind, started, time.monotonic(), ok, output))


def temp_model_dir() -> str:
    """A host folder for `/data` (logs land in it); readable by the containers."""
    path = tempfile.mkdtemp(prefix="paddleocr-fleet-model-")
    os.chmod(path, 0o777)
    return path
