#!/usr/bin/env bash
# Install the Pulumi toolchain this project deploys with, without downloading any binary:
#   bash scripts/install-pulumi.sh [--plugins auto|official|ours] [--prefix DIR] [--force]
#   bash scripts/install-pulumi.sh --which      which plugin set the plugin cache and PATH give
#
# The last line of output is the folder that holds `pulumi` (put it first on PATH); the line
# before it says which plugin set it installed.
#
# 1. Where a `pulumi` CLI, a `pulumi-language-python` and the `docker` and `command` resource
#    plugins at the Python SDKs' versions are already installed (the official way), it uses them.
# 2. Otherwise it builds the Pulumi CLI and engine from the Go modules github.com/pulumi/pulumi/
#    pkg/v3 and sdk/v3 (a small wrapper module repeats pkg's `replace` of the clipboard fork) and
#    installs, under --prefix (default $PADDLEOCR_FLEET_PULUMI_DIR or ~/.paddleocr-fleet/pulumi),
#    one plugin set in PREFIX/SET/ (bin/: the CLI, the language host and its exec script;
#    plugins/: the two resource plugins):
#    - `official`: the official plugins built from their public source (pulumi-language-python,
#      pulumi-resource-docker 5.1.0, pulumi-resource-command 1.2.1), taken from
#      $PADDLEOCR_FLEET_OFFICIAL_PLUGINS or ../shared/official-plugins beside the checkout,
#      checked against its SHA256SUMS. What `pulumi` downloads by itself anywhere else.
#    - `ours`: this project's own plugins (pulumi_plugins/), run by a Python environment of
#      their own; the fallback where no official plugin can be had (the Go module proxy serves
#      neither the official language host nor the providers).
#    `auto` (the default) installs `official` where those files are, else `ours`.
# The set's resource plugins go into the plugin cache ($PULUMI_HOME, default ~/.pulumi) with
# `pulumi plugin install ... --file --reinstall`, so the engine never tries to download one; none
# is put on PATH (the engine would take a plugin on PATH before the cache, with a warning).
# Everything is cached by version and content: a second run only checks. Needs: a Go toolchain
# (>= 1.24) and python3 with venv.
#
# Versions (why): CLI v3.274.1, the newest the proxy served whole when this was written (it
# refuses pkg/v3 v3.272.0, the Python SDK's version; a newer CLI runs older SDKs). The plugin
# versions are the Python SDK pins of pyproject.toml (pulumi-docker, pulumi-command).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cli_version="v3.274.1"
prefix="${PADDLEOCR_FLEET_PULUMI_DIR:-$HOME/.paddleocr-fleet/pulumi}"
official_dir="${PADDLEOCR_FLEET_OFFICIAL_PLUGINS:-$repo/../shared/official-plugins}"
plugins="auto"
force=0
which_only=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --plugins) plugins="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --which) which_only=1; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "install-pulumi: unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$plugins" in
  auto|official|ours) ;;
  *) echo "install-pulumi: --plugins must be auto, official or ours, not '$plugins'" >&2; exit 2 ;;
esac

say() { echo "install-pulumi: $*" >&2; }
die() { say "$*"; exit 1; }
started=$SECONDS
export PULUMI_SKIP_UPDATE_CHECK=true
cache="${PULUMI_HOME:-$HOME/.pulumi}/plugins"
MARK="paddleocr-fleet plugin"  # in each of our wrappers: how --which tells them apart

pin() {  # the version pyproject.toml pins for a Python package
  python3 - "$repo/pyproject.toml" "$1" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
found = [d.split("==", 1)[1] for d in deps if re.split(r"[=<>!~ \[]", d, 1)[0] == sys.argv[2]]
print(found[0] if found else "")
PY
}
sdk_version="$(pin pulumi)"
docker_version="$(pin pulumi-docker)"
command_version="$(pin pulumi-command)"
[[ -n "$sdk_version" && -n "$docker_version" && -n "$command_version" ]] ||
  die "pyproject.toml must pin pulumi, pulumi-docker and pulumi-command with =="
resource_plugins=("docker $docker_version" "command $command_version")

cached_plugin() {  # cached_plugin NAME VERSION: the plugin cache's binary of it
  echo "$cache/resource-$1-v$2/pulumi-resource-$1"
}

set_of() {  # set_of FILE: official, ours or other
  if [[ ! -e "$1" ]]; then
    echo "missing"
  elif [[ $(stat -c %s "$1") -lt 4096 ]] && grep -q "$MARK" "$1" 2>/dev/null; then
    echo "ours"
  elif [[ -f "$official_dir/SHA256SUMS" ]] &&
       grep -q "^$(sha256sum "$1" | cut -d' ' -f1) " "$official_dir/SHA256SUMS"; then
    echo "official"
  else
    echo "other ($(sha256sum "$1" | cut -c1-12))"
  fi
}

if [[ $which_only -eq 1 ]]; then
  cli="$(command -v pulumi 2>/dev/null)" || die "no pulumi on PATH"
  host="$(dirname "$(readlink -f "$cli")")/pulumi-language-python"
  [[ -x "$host" ]] || host="$(command -v pulumi-language-python 2>/dev/null || echo missing)"
  echo "pulumi: $cli ($("$cli" version))"
  echo "language host: $host: $(set_of "$host")"
  for plugin in "${resource_plugins[@]}"; do
    read -r name version <<<"$plugin"
    if on_path="$(command -v "pulumi-resource-$name" 2>/dev/null)"; then
      echo "resource $name: $on_path on PATH (taken before the plugin cache): $(set_of "$on_path")"
    else
      found="$(cached_plugin "$name" "$version")"
      echo "resource $name $version: $found: $(set_of "$found")"
    fi
  done
  exit 0
fi

has_plugin() {  # has_plugin PULUMI NAME VERSION
  "$1" plugin ls --json 2>/dev/null | python3 -c '
import json, sys
name, version = sys.argv[1], sys.argv[2]
plugins = json.load(sys.stdin) or []
sys.exit(0 if any(p.get("kind") == "resource" and p.get("name") == name
                  and p.get("version") == version for p in plugins) else 1)
' "$2" "$3"
}

# 1. An official installation, if complete, is used as it is.
if [[ $force -eq 0 && $plugins != ours ]] && official="$(command -v pulumi 2>/dev/null)" &&
   [[ "$(readlink -f "$official")" != "$prefix"/* ]] &&
   command -v pulumi-language-python >/dev/null 2>&1 &&
   has_plugin "$official" docker "$docker_version" && has_plugin "$official" command "$command_version"; then
  say "using the installed $("$official" version) at $official"
  say "plugin set: installed (the official installation on PATH)"
  dirname "$official"
  exit 0
fi

if [[ $plugins == auto ]]; then
  if [[ -f "$official_dir/SHA256SUMS" ]]; then plugins=official; else plugins=ours; fi
fi
if [[ $plugins == official ]]; then
  [[ -f "$official_dir/SHA256SUMS" ]] ||
    die "--plugins official: no official plugins at $official_dir (set PADDLEOCR_FLEET_OFFICIAL_PLUGINS)"
  official_dir="$(cd "$official_dir" && pwd)"
fi
set_dir="$prefix/$plugins"
# The layout before plugin sets: a bin/ holding our resource wrappers, which anyone who kept it
# on PATH would have the engine take before the plugin cache.
rm -rf "$prefix/bin" "$prefix/shims"
mkdir -p "$set_dir/bin" "$set_dir/plugins"

# 2. The CLI from Go modules, once per version.
cli="$prefix/cli-$cli_version/pulumi"
if [[ $force -eq 1 || ! -x "$cli" ]]; then
  command -v go >/dev/null 2>&1 ||
    die "no Go toolchain on PATH: install Go >= 1.24 (Debian: golang), or Pulumi the official way"
  build="$prefix/build/cli-$cli_version"
  mkdir -p "$build"
  cat >"$build/go.mod" <<GOMOD
module paddleocr-fleet/pulumi-cli

go 1.24

require (
	github.com/pulumi/pulumi/pkg/v3 $cli_version
	github.com/pulumi/pulumi/sdk/v3 $cli_version
)

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
GOMOD
  cat >"$build/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
GO
  say "building the Pulumi CLI $cli_version from Go modules (several minutes on a cold cache)"
  if ! (cd "$build" && go mod tidy >"$build/tidy.log" 2>&1); then
    grep -E "40[34]|not available|unknown revision|invalid version" "$build/tidy.log" | head -5 >&2 || true
    die "the Go module proxy refused a module the CLI needs (above; full log: $build/tidy.log)"
  fi
  mkdir -p "$(dirname "$cli")"
  (cd "$build" && CGO_ENABLED=0 go build -o "$cli.tmp" \
     -ldflags "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$cli_version" \
     github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) || die "building the Pulumi CLI failed"
  mv "$cli.tmp" "$cli"
fi
# A hard link, not a symlink: the CLI looks for language hosts beside its own (resolved) path
# first, and warns about one found only on PATH.
ln -f "$cli" "$set_dir/bin/pulumi" 2>/dev/null || cp -f "$cli" "$set_dir/bin/pulumi"

put() {  # put SOURCE TARGET: copy where the content differs, keep the execute bits
  cmp -s "$1" "$2" 2>/dev/null && return 0
  cp -f "$1" "$2.tmp" && chmod 755 "$2.tmp" && mv -f "$2.tmp" "$2"
}

if [[ $plugins == official ]]; then
  # 3a. The official plugins, as built from their source (../shared/official-plugins/README.md).
  (cd "$official_dir" && sha256sum --quiet -c SHA256SUMS >&2) ||
    die "the official plugins at $official_dir do not match their SHA256SUMS"
  put "$official_dir/pulumi-language-python" "$set_dir/bin/pulumi-language-python"
  put "$official_dir/pulumi-language-python-exec" "$set_dir/bin/pulumi-language-python-exec"
  for plugin in "${resource_plugins[@]}"; do
    read -r name _ <<<"$plugin"
    put "$official_dir/pulumi-resource-$name" "$set_dir/plugins/pulumi-resource-$name"
  done
  described="official ($official_dir, SHA256SUMS checked)"
else
  # 3b. The Python SDK's program runner, from the sdk/v3 module the CLI was built with.
  exec_script="$set_dir/bin/pulumi-language-python-exec"  # beside pulumi, as Pulumi ships it
  if [[ $force -eq 1 || ! -s "$exec_script" ]]; then
    sdk_dir="$(cd "$prefix/build/cli-$cli_version" 2>/dev/null &&
               go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3 2>/dev/null ||
               go mod download -json "github.com/pulumi/pulumi/sdk/v3@$cli_version" |
               python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    [[ -f "$sdk_dir/python/cmd/pulumi-language-python-exec" ]] ||
      die "the sdk/v3 module at $sdk_dir has no python/cmd/pulumi-language-python-exec"
    put "$sdk_dir/python/cmd/pulumi-language-python-exec" "$exec_script"
  fi

  # 4. Our plugins: a Python environment with the SDK, a copy of pulumi_plugins/, the wrappers.
  plugins_hash="$( (cd "$repo" && find pulumi_plugins -name '*.py' -print0 | sort -z |
                    xargs -0 sha256sum; echo "$sdk_version") | sha256sum | cut -c1-12)"
  lib="$set_dir/lib-$plugins_hash"
  if [[ $force -eq 1 || ! -x "$lib/venv/bin/python" ]]; then
    say "installing the plugins' Python environment (pulumi==$sdk_version)"
    rm -rf "$lib.tmp" && mkdir -p "$lib.tmp"
    python3 -m venv "$lib.tmp/venv"
    "$lib.tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "pulumi==$sdk_version"
    (cd "$repo" && find pulumi_plugins -name '*.py' -exec cp --parents {} "$lib.tmp/" \;)
    rm -rf "$lib" && mv "$lib.tmp" "$lib"
    # venvs are not relocatable: the interpreter path inside still names $lib.tmp.
    python3 -m venv --upgrade "$lib/venv" >/dev/null
    # The plugins import from $lib through a .pth file, not PYTHONPATH, which would leak into
    # the environment of the programs and commands they run.
    site="$("$lib/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$lib" >"$site/paddleocr_fleet_plugins.pth"
  fi
  for old in "$set_dir"/lib-* "$prefix"/plugins-*; do  # earlier builds of the plugins
    [[ "$old" == "$lib" || ! -e "$old" ]] || rm -rf "$old"
  done

  wrapper() {  # wrapper PATH MODULE [ARGS...]
    local target="$1" module="$2"; shift 2
    {
      echo '#!/bin/sh'
      echo "# $MARK (scripts/install-pulumi.sh); source: pulumi_plugins/"
      printf 'exec %q -m %s' "$lib/venv/bin/python" "$module"
      for arg in "$@"; do printf ' %q' "$arg"; done
      echo ' "$@"'
    } >"$target.new"
    put "$target.new" "$target"
    rm -f "$target.new"
  }
  wrapper "$set_dir/bin/pulumi-language-python" pulumi_plugins.langhost --exec-script "$exec_script"
  wrapper "$set_dir/plugins/pulumi-resource-docker" pulumi_plugins.docker
  wrapper "$set_dir/plugins/pulumi-resource-command" pulumi_plugins.command
  described="ours (pulumi_plugins/)"
fi

# 5. The set's resource plugins into the plugin cache, wherever the cache holds another binary.
for plugin in "${resource_plugins[@]}"; do
  read -r name version <<<"$plugin"
  if [[ $force -eq 1 ]] || ! cmp -s "$set_dir/plugins/pulumi-resource-$name" "$(cached_plugin "$name" "$version")"; then
    if ! said="$("$cli" plugin install resource "$name" "$version" --reinstall \
                   --file "$set_dir/plugins/pulumi-resource-$name" 2>&1)"; then
      echo "$said" >&2
      die "pulumi plugin install resource $name $version --file $set_dir/plugins/pulumi-resource-$name failed"
    fi
  fi
done

say "Pulumi $("$cli" version) with plugins docker $docker_version, command $command_version" \
    "ready in $((SECONDS - started)) s"
say "plugin set: $described; check with: bash scripts/install-pulumi.sh --which"
echo "$set_dir/bin"
