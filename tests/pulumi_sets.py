"""The Pulumi plugin sets the real-engine tests run on, from `scripts/install-pulumi.sh`.

`scripts/test.sh` installs two sets and names their CLIs: $PADDLEOCR_FLEET_PULUMI (the default:
the official plugins where ../shared/official-plugins is, as users run the program) and
$PADDLEOCR_FLEET_PULUMI_OURS (this project's pulumi_plugins/). A set is a `bin/` (the CLI, the
language host and its exec script) and a `plugins/` beside it (the resource plugins, never on
PATH)::

    official = plugin_set()            # the default set, or None when no CLI is installed
    ours = plugin_set("ours")
    env["PATH"] = clean_path(official.bin_dir, env["PATH"])
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

CLI_VARIABLE = "PADDLEOCR_FLEET_PULUMI"
OURS_VARIABLE = "PADDLEOCR_FLEET_PULUMI_OURS"
RESOURCE_PLUGINS = ("docker", "command")


@dataclass(frozen=True)
class PluginSet:
    name: str
    """`official` or `ours` (a set installed by scripts/install-pulumi.sh), or `installed` (an
    official installation found on PATH, its resource plugins in ~/.pulumi)."""
    cli: Path
    """The `pulumi` of the set: its language host is beside it."""

    @property
    def bin_dir(self) -> Path:
        return self.cli.parent

    def resource_plugin(self, name: str, version: str) -> Path:
        """The binary of the resource plugin `name` to install into a PULUMI_HOME."""
        beside = self.bin_dir.parent / "plugins" / f"pulumi-resource-{name}"
        if beside.is_file():
            return beside
        home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
        return home / "plugins" / f"resource-{name}-v{version}" / f"pulumi-resource-{name}"


def find_cli(name: str | None = None) -> Path | None:
    """The `pulumi` of the set `name` (None: the default set, else `pulumi` on PATH)."""
    if name is None:
        path = os.environ.get(CLI_VARIABLE) or shutil.which("pulumi")
    else:
        found = plugin_set(name)
        path = str(found.cli) if found else None
    return Path(path) if path and Path(path).is_file() else None


def _set_name(cli: Path) -> str:
    if (cli.parent.parent / "plugins").is_dir():
        return cli.parent.parent.name
    return "installed"


def plugin_set(name: str | None = None) -> PluginSet | None:
    """The installed set `name` (`official`, `ours`; None: the default set), or None."""
    candidates = [os.environ.get(CLI_VARIABLE), os.environ.get(OURS_VARIABLE)]
    if name is None:
        cli = find_cli()
        return PluginSet(_set_name(cli), cli) if cli else None
    for path in filter(None, candidates):
        cli = Path(path)
        if cli.is_file() and _set_name(cli) == name:
            return PluginSet(name, cli)
    return None


def clean_path(first: Path, path: str) -> str:
    """`path` with `first` before it and without any other folder that holds a resource plugin:
    the engine takes a plugin found on PATH before the one installed in PULUMI_HOME, so a set
    put on PATH by hand (or a stray plugin) would run instead of the set a test means."""
    kept = [str(first)]
    for folder in path.split(os.pathsep):
        if not folder or folder == str(first) or _holds_plugin(Path(folder)):
            continue
        kept.append(folder)
    return os.pathsep.join(kept)


def _holds_plugin(folder: Path) -> bool:
    try:
        return any(entry.name.startswith("pulumi-resource-") for entry in folder.iterdir())
    except OSError:
        return False
