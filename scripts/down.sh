#!/usr/bin/env bash
# Take down what scripts/up.sh deployed: `pulumi destroy` of the stack, from this checkout's state.
#   bash scripts/down.sh          the demo stack
#   bash scripts/down.sh STACK    an operator's stack
# The stack itself and its config stay (a later scripts/up.sh deploys it again).
set -euo pipefail
cd "$(dirname "$0")/.."
stack="${1:-demo}"
. scripts/pulumi-env.sh
stacks="$(pulumi stack ls --json --non-interactive)"
if ! STACKS="$stacks" .venv/bin/python -c '
import json, os, sys
sys.exit(sys.argv[1] not in [s["name"] for s in json.loads(os.environ["STACKS"])])' "$stack"; then
  echo "down.sh: no stack '$stack' in $PULUMI_BACKEND_URL: nothing to take down" >&2
  exit 0
fi
pulumi destroy --yes --non-interactive --stack "$stack"
