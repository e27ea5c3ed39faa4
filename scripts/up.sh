#!/usr/bin/env bash
# The main job: `pulumi up` with a local file state backend and the stack's config.
#   bash scripts/up.sh [STACK]        (default stack: dev; config: Pulumi.STACK.yaml)
# Where the Pulumi CLI or a Docker engine is missing it says so and prints the plan instead.
set -euo pipefail
cd "$(dirname "$0")/.."
stack="${1:-dev}"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q -e . >/dev/null

missing=""
command -v pulumi >/dev/null 2>&1 || missing="the Pulumi CLI (https://www.pulumi.com/docs/install/)"
if [ -z "$missing" ] && ! docker info >/dev/null 2>&1; then
  missing="a reachable Docker engine (docker info failed; is dockerd running, DOCKER_HOST set?)"
fi
if [ -n "$missing" ]; then
  echo "paddleocr-fleet: not deploying: this machine lacks $missing."
  echo "This is what 'pulumi up' would build with stack '$stack':"
  echo
  args=()
  [ -f "Pulumi.$stack.yaml" ] && args=(--stack "$stack")
  exec .venv/bin/python -m components.plan "${args[@]}"
fi

export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$PWD/.pulumi-state}"
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-}"
mkdir -p .pulumi-state
pulumi stack select --create "$stack" --non-interactive
pulumi up --yes --non-interactive --stack "$stack"
pulumi stack output --stack "$stack" gateway_url
