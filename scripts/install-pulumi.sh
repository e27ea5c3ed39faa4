#!/usr/bin/env bash
# Install the Pulumi toolchain this project deploys with, without downloading any binary:
#   bash scripts/install-pulumi.sh [--prefix DIR] [--force]
#
# The last line of output is the folder that holds `pulumi` (put it first on PATH).
#
# Where a `pulumi` CLI, a `pulumi-language-python` and the `docker` and `command` resource
# plugins at the Python SDKs' versions are already installed (the official way), it uses them.
# Otherwise it builds and installs, under --prefix (default $PADDLEOCR_FLEET_PULUMI_DIR or
# ~/.paddleocr-fleet/pulumi):
#   - the Pulumi CLI and engine, built from the Go modules github.com/pulumi/pulumi/pkg/v3 and
#     sdk/v3 (a small wrapper module repeats pkg's `replace` of the clipboard fork);
#   - pulumi-language-python, pulumi-resource-docker and pulumi-resource-command: this project's
#     own plugins (pulumi_plugins/), run by a Python environment of their own, because the Go
#     module proxy serves neither the official Python language host
#     (github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3) nor the providers'
#     modules (github.com/pulumi/pulumi-docker/provider/v5 and /v4, github.com/pulumi/
#     pulumi-command/provider, the bridged Terraform docker provider); the language host runs
#     programs with the Python SDK's own runner script, taken from the sdk/v3 module.
# The resource plugins are put into the plugin cache with `pulumi plugin install ... --file`,
# so the engine never tries to download one. Everything is cached by version and content: a
# second run only checks. Needs: a Go toolchain (>= 1.24) and python3 with venv.
#
# Versions (why): CLI v3.274.1, the newest the proxy served whole when this was written (it
# refuses pkg/v3 v3.272.0, the Python SDK's version; a newer CLI runs older SDKs). The plugin
# versions are the Python SDK pins of pyproject.toml (pulumi-docker, pulumi-command).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cli_version="v3.274.1"
prefix="${PADDLEOCR_FLEET_PULUMI_DIR:-$HOME/.paddleocr-fleet/pulumi}"
force=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "install-pulumi: unknown argument: $1" >&2; exit 2 ;;
  esac
done

say() { echo "install-pulumi: $*" >&2; }
die() { say "$*"; exit 1; }
started=$SECONDS

pin() {  # the version pyproject.toml pins for a Python package
  python3 - "$repo/pyproject.toml" "$1" <<'EOF'
import re, sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]
found = [d.split("==", 1)[1] for d in deps if re.split(r"[=<>!~ \[]", d, 1)[0] == sys.argv[2]]
print(found[0] if found else "")
EOF
}
sdk_version="$(pin pulumi)"
docker_version="$(pin pulumi-docker)"
command_version="$(pin pulumi-command)"
[[ -n "$sdk_version" && -n "$docker_version" && -n "$command_version" ]] ||
  die "pyproject.toml must pin pulumi, pulumi-docker and pulumi-command with =="

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
if [[ $force -eq 0 ]] && official="$(command -v pulumi 2>/dev/null)" &&
   [[ "$(dirname "$official")" != "$prefix/bin" ]] &&
   command -v pulumi-language-python >/dev/null 2>&1 &&
   has_plugin "$official" docker "$docker_version" && has_plugin "$official" command "$command_version"; then
  say "using the installed $("$official" version) at $official"
  dirname "$official"
  exit 0
fi

mkdir -p "$prefix/bin"

# 2. The CLI from Go modules, once per version.
cli="$prefix/cli-$cli_version/pulumi"
if [[ $force -eq 1 || ! -x "$cli" ]]; then
  command -v go >/dev/null 2>&1 ||
    die "no Go toolchain on PATH: install Go >= 1.24 (Debian: golang), or Pulumi the official way"
  build="$prefix/build/cli-$cli_version"
  mkdir -p "$build"
  cat >"$build/go.mod" <<EOF
module paddleocr-fleet/pulumi-cli

go 1.24

require (
	github.com/pulumi/pulumi/pkg/v3 $cli_version
	github.com/pulumi/pulumi/sdk/v3 $cli_version
)

replace github.com/atotto/clipboard => github.com/tgummerer/clipboard v0.0.0-20241001131231-d02d263e614e
EOF
  cat >"$build/tools.go" <<'EOF'
//go:build tools

package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
EOF
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
ln -f "$cli" "$prefix/bin/pulumi" 2>/dev/null || cp -f "$cli" "$prefix/bin/pulumi"

# 3. The Python SDK's program runner, from the sdk/v3 module the CLI was built with.
exec_script="$prefix/bin/pulumi-language-python-exec"  # beside pulumi, as Pulumi ships it
if [[ $force -eq 1 || ! -s "$exec_script" ]]; then
  sdk_dir="$(cd "$prefix/build/cli-$cli_version" 2>/dev/null &&
             go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3 2>/dev/null ||
             go mod download -json "github.com/pulumi/pulumi/sdk/v3@$cli_version" |
             python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  [[ -f "$sdk_dir/python/cmd/pulumi-language-python-exec" ]] ||
    die "the sdk/v3 module at $sdk_dir has no python/cmd/pulumi-language-python-exec"
  cp "$sdk_dir/python/cmd/pulumi-language-python-exec" "$exec_script"
fi

# 4. Our plugins: a Python environment with the SDK, a copy of pulumi_plugins/, the wrappers.
plugins_hash="$( (cd "$repo" && find pulumi_plugins -name '*.py' -print0 | sort -z |
                  xargs -0 sha256sum; echo "$sdk_version") | sha256sum | cut -c1-12)"
lib="$prefix/plugins-$plugins_hash"
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
for old in "$prefix"/plugins-*; do  # earlier builds of the plugins
  [[ "$old" == "$lib" ]] || rm -rf "$old"
done

wrapper() {  # wrapper NAME MODULE [ARGS...]
  local name="$1" module="$2"; shift 2
  {
    echo '#!/bin/sh'
    echo "# paddleocr-fleet plugin (scripts/install-pulumi.sh); source: pulumi_plugins/"
    printf 'exec %q -m %s' "$lib/venv/bin/python" "$module"
    for arg in "$@"; do printf ' %q' "$arg"; done
    echo ' "$@"'
  } >"$prefix/bin/$name.tmp"
  chmod +x "$prefix/bin/$name.tmp"
  mv "$prefix/bin/$name.tmp" "$prefix/bin/$name"
}
wrapper pulumi-language-python pulumi_plugins.langhost --exec-script "$exec_script"
wrapper pulumi-resource-docker pulumi_plugins.docker
wrapper pulumi-resource-command pulumi_plugins.command

# The plugin cache gets a stable shim that runs the current wrapper, so a new plugin build needs
# no reinstall; an official plugin of the same version already in the cache is left alone.
export PULUMI_SKIP_UPDATE_CHECK=true
mkdir -p "$prefix/shims"
for plugin in "docker $docker_version" "command $command_version"; do
  read -r name version <<<"$plugin"
  shim="$prefix/shims/pulumi-resource-$name"
  printf '#!/bin/sh\nexec %q "$@"\n' "$prefix/bin/pulumi-resource-$name" >"$shim"
  chmod +x "$shim"
  if [[ $force -eq 1 ]] || ! has_plugin "$cli" "$name" "$version"; then
    "$cli" plugin install resource "$name" "$version" --file "$shim" --reinstall >/dev/null ||
      die "pulumi plugin install resource $name $version --file $shim failed"
  fi
done

say "Pulumi $("$cli" version) with plugins docker $docker_version, command $command_version" \
    "ready in $((SECONDS - started)) s"
echo "$prefix/bin"
