"""Thin wrapper over the ``docker`` CLI, one engine per fleet host.

A host's ``docker_host`` from the topology (for example ``ssh://ops@gpu2``) is passed as
``DOCKER_HOST`` to every command for that host's containers; without it the caller's own
``DOCKER_HOST`` (or the local engine) is used.

Usage::

    d = Docker()
    states = d.inspect(["paddle-9126-npu-0"], docker_host=None)
    d.restart("paddle-9126-npu-0", docker_host="ssh://gpu2")
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass


class DockerError(Exception):
    """The docker CLI is missing or a command failed."""


@dataclass(frozen=True)
class ContainerState:
    """What ``docker inspect`` says about one container."""

    name: str
    status: str  # running | exited | restarting | paused | created | dead | missing | unknown
    health: str | None = None  # the image HEALTHCHECK status, when there is one
    exit_code: int | None = None
    started_at: str | None = None

    @property
    def running(self) -> bool:
        return self.status == "running"

    def describe(self) -> str:
        s = self.status
        if self.health:
            s += f" ({self.health})"
        elif self.status == "exited" and self.exit_code is not None:
            s += f" ({self.exit_code})"
        return s


class Docker:
    """Runs ``docker`` subcommands, with ``DOCKER_HOST`` set per fleet host."""

    def __init__(self, binary: str = "docker", timeout: float = 120.0) -> None:
        self.binary = binary
        self.timeout = timeout

    @property
    def available(self) -> bool:
        return shutil.which(self.binary) is not None

    def env(self, docker_host: str | None) -> dict[str, str]:
        env = dict(os.environ)
        if docker_host:
            env["DOCKER_HOST"] = docker_host
        return env

    def argv(self, *args: str) -> list[str]:
        return [self.binary, *args]

    def run(
        self,
        args: Sequence[str],
        docker_host: str | None = None,
        *,
        check: bool = True,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``docker ARGS`` and capture its output; raise `DockerError` on failure."""
        if not self.available:
            raise DockerError(f"the `{self.binary}` CLI is not on PATH")
        where = f" (DOCKER_HOST={docker_host})" if docker_host else ""
        return self._capture(
            self.argv(*args), f"docker {' '.join(args)}", where, docker_host, timeout, check
        )

    def inspect(
        self, names: Sequence[str], docker_host: str | None = None
    ) -> dict[str, ContainerState]:
        """State of each named container; absent ones come back with status ``missing``.

        ``docker inspect`` prints the containers it found and exits 1 when any is absent,
        so the exit code alone is not an error here.
        """
        if not names:
            return {}
        proc = self.run(["inspect", "--type", "container", *names], docker_host, check=False)
        found: dict[str, ContainerState] = {}
        try:
            data = json.loads(proc.stdout) if proc.stdout.strip() else []
        except json.JSONDecodeError:
            data = []
        if not data and proc.returncode != 0 and "no such" not in proc.stderr.lower():
            raise DockerError(f"docker inspect failed: {proc.stderr.strip()[-400:]}")
        for item in data:
            name = str(item.get("Name", "")).lstrip("/")
            st = item.get("State") or {}
            health = (st.get("Health") or {}).get("Status")
            found[name] = ContainerState(
                name=name,
                status=st.get("Status", "unknown"),
                health=health,
                exit_code=st.get("ExitCode"),
                started_at=st.get("StartedAt"),
            )
        return {n: found.get(n, ContainerState(name=n, status="missing")) for n in names}

    def restart(self, name: str, docker_host: str | None = None) -> None:
        self.run(["restart", name], docker_host)

    def start(self, name: str, docker_host: str | None = None) -> None:
        self.run(["start", name], docker_host)

    def logs_argv(self, name: str, tail: int | None, follow: bool) -> list[str]:
        args = ["logs"]
        if tail is not None:
            args += ["--tail", str(tail)]
        if follow:
            args.append("-f")
        return self.argv(*args, name)

    def exec_argv(self, name: str, *cmd: str) -> list[str]:
        return self.argv("exec", name, *cmd)

    def stream(self, argv: list[str], docker_host: str | None = None) -> int:
        """Run a command with the terminal attached (for ``logs -f``); returns its exit code."""
        if not self.available:
            raise DockerError(f"the `{self.binary}` CLI is not on PATH")
        try:
            return subprocess.run(argv, env=self.env(docker_host), check=False).returncode
        except KeyboardInterrupt:
            return 130

    def shell(
        self, command: str, docker_host: str | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a rendered shell command (e.g. a PaddleX ``start_command``) with that host's
        ``DOCKER_HOST``."""
        return self._capture(["sh", "-c", command], f"`{command}`", "", docker_host, timeout)

    def _capture(
        self,
        argv: list[str],
        label: str,
        where: str,
        docker_host: str | None,
        timeout: float | None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` with the host's ``DOCKER_HOST``, capturing its output; a timeout, or
        (with ``check``) a non-zero exit, is a `DockerError` naming ``label`` and ``where``."""
        try:
            proc = subprocess.run(
                argv,
                env=self.env(docker_host),
                text=True,
                capture_output=True,
                timeout=timeout or self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DockerError(f"{label}: timed out") from None
        if check and proc.returncode != 0:
            raise DockerError(
                f"{label}{where} exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-400:]}"
            )
        return proc
