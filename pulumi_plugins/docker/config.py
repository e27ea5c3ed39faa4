"""The provider's configuration (`docker.Provider(host=..., ...)`) and which endpoint each
resource kind talks to, resolved as pulumi-docker 5.1.0 does.

    config = ProviderConfig.from_inputs({"host": "ssh://ops@gpu-1"}, environ=os.environ)
    config.endpoint(bridged=True)   # Container, RemoteImage (the Terraform provider's rules)
    config.endpoint(bridged=False)  # Image (the native provider's rules)

The bridged resources follow terraform-provider-docker: a `context` (config, else the
`DOCKER_CONTEXT` environment variable) overrides `host`; `host` defaults to `DOCKER_HOST`, else
the local socket. The native `Image` ignores contexts: `host`, else `DOCKER_HOST`, else the local
socket. SSH options come from `sshOpts`, else `DOCKER_SSH_OPTS` (split on whitespace).
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulumi_plugins.docker.props import Failure

LOCAL_SOCKET = "unix:///var/run/docker.sock"
SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://", "fd://", "npipe://")
SUPPORTED = {
    "host",
    "context",
    "sshOpts",
    "certPath",
    "caMaterial",
    "certMaterial",
    "keyMaterial",
    "disableDockerDaemonCheck",
    "version",
}


class ConfigError(Exception):
    pass


def check_config(news: Mapping[str, Any]) -> list[Failure]:
    """CheckConfig's failures: unknown keys, endpoints of no Docker scheme, malformed sshOpts."""
    failures = [
        Failure(key, f"docker provider: '{key}' is not implemented by this provider")
        for key in sorted(news)
        if key not in SUPPORTED and not key.startswith("__")
    ]
    host = news.get("host")
    if isinstance(host, str) and host and not host.startswith(SCHEMES):
        failures.append(
            Failure("host", f"host: {host!r} is not a Docker endpoint (unix://, tcp://, ssh://)")
        )
    try:
        _ssh_opts(news.get("sshOpts"), {})
    except ConfigError as err:
        failures.append(Failure("sshOpts", str(err)))
    return failures


def _ssh_opts(value: Any, environ: Mapping[str, str]) -> list[str]:
    if value is None:
        return environ.get("DOCKER_SSH_OPTS", "").split()
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ConfigError(f"sshOpts: not a JSON list of strings: {err}") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError("sshOpts: must be a list of strings")
    return value


def context_host(name: str, home: str | None = None) -> str:
    """The docker endpoint of a named Docker CLI context, read as the Terraform provider does
    (the user's ~/.docker/contexts/meta/*/meta.json, not DOCKER_CONFIG)."""
    home = home or pwd.getpwuid(os.getuid()).pw_dir
    meta_dir = Path(home) / ".docker" / "contexts" / "meta"
    try:
        entries = sorted(meta_dir.iterdir())
    except OSError as err:
        raise ConfigError(
            f"Error loading Docker context '{name}': could not read contexts directory: {err}"
        ) from None
    for entry in entries:
        try:
            meta = json.loads((entry / "meta.json").read_text())
        except (OSError, ValueError):
            continue
        if meta.get("Name") == name and "docker" in meta.get("Endpoints", {}):
            return meta["Endpoints"]["docker"].get("Host", "")
    raise ConfigError(f"Error loading Docker context '{name}': context '{name}' not found")


@dataclass
class ProviderConfig:
    host: str | None = None
    context: str | None = None
    ssh_opts: list[str] = field(default_factory=list)
    cert_path: str | None = None
    materials: dict[str, str] = field(default_factory=dict)
    daemon_check: bool = True
    environ: Mapping[str, str] = field(default_factory=dict)
    home: str | None = None
    """Where ~/.docker/contexts is looked up (the user's home directory if None)."""

    @classmethod
    def from_inputs(cls, inputs: Mapping[str, Any], environ: Mapping[str, str]) -> ProviderConfig:
        def text(key: str) -> str | None:
            value = inputs.get(key)
            return value if isinstance(value, str) and value else None

        materials = {
            name: value
            for key, name in (
                ("caMaterial", "ca"),
                ("certMaterial", "cert"),
                ("keyMaterial", "key"),
            )
            if (value := text(key) or environ.get(f"DOCKER_{name.upper()}_MATERIAL"))
        }
        check = inputs.get("disableDockerDaemonCheck")
        return cls(
            host=text("host"),
            context=text("context"),
            ssh_opts=_ssh_opts(inputs.get("sshOpts"), environ),
            cert_path=text("certPath") or environ.get("DOCKER_CERT_PATH") or None,
            materials=materials,
            daemon_check=str(check).lower() != "true",
            environ=dict(environ),
        )

    def endpoint(self, bridged: bool) -> str:
        if bridged:
            context = self.context or self.environ.get("DOCKER_CONTEXT")
            if context:
                return context_host(context, self.home)
        return self.host or self.environ.get("DOCKER_HOST") or LOCAL_SOCKET

    def context_overrides_host(self) -> str | None:
        """A warning when `DOCKER_CONTEXT` silently redirects an explicit `host`."""
        if self.host and not self.context and self.environ.get("DOCKER_CONTEXT"):
            return (
                f"DOCKER_CONTEXT={self.environ['DOCKER_CONTEXT']} overrides host={self.host} for "
                "docker.Container and docker.RemoteImage (as in terraform-provider-docker); "
                "docker.Image still uses host"
            )
        return None

    def cli_env(self, endpoint: str, scratch: Path) -> dict[str, str]:
        """The environment of every `docker` command: this endpoint exactly, no context, the TLS
        files and SSH options of this provider."""
        env = {k: v for k, v in self.environ.items() if k != "DOCKER_CONTEXT"}
        env["DOCKER_HOST"] = endpoint
        if self.materials:
            certs = scratch / "certs"
            certs.mkdir(parents=True, exist_ok=True)
            for name, pem in self.materials.items():
                (certs / f"{name}.pem").write_text(pem)
            env["DOCKER_CERT_PATH"] = str(certs)
            env["DOCKER_TLS_VERIFY" if "ca" in self.materials else "DOCKER_TLS"] = "1"
        elif self.cert_path:
            env["DOCKER_CERT_PATH"] = self.cert_path
            env["DOCKER_TLS_VERIFY"] = "1"
        if self.ssh_opts and endpoint.startswith("ssh://"):
            env["PATH"] = f"{_ssh_wrapper(scratch, self.ssh_opts, env)}:{env.get('PATH', '')}"
        return env


def _ssh_wrapper(scratch: Path, opts: list[str], env: Mapping[str, str]) -> Path:
    """A directory whose `ssh` adds `opts` before the Docker CLI's own arguments."""
    real = shutil.which("ssh", path=env.get("PATH"))
    if real is None:
        raise ConfigError("sshOpts: no ssh client on PATH")
    bindir = scratch / "ssh-bin"
    bindir.mkdir(parents=True, exist_ok=True)
    script = bindir / "ssh"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(real)} {shlex.join(opts)} "$@"\n')
    script.chmod(0o755)
    return bindir


def scratch_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="pulumi-docker-"))
