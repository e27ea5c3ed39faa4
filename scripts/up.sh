#!/usr/bin/env bash
# The main job: deploy the fleet with the real Pulumi engine and a local file state backend.
#   bash scripts/up.sh            the embedded `demo` stack: 1 simulated card on this machine's
#                                 Docker engine (started and its sim images built where needed),
#                                 then a sample document through the gateway
#   bash scripts/up.sh STACK      an operator's stack as configured (Pulumi.STACK.yaml)
# The Pulumi toolchain and state: scripts/pulumi-env.sh. A second run changes nothing;
# scripts/down.sh takes it down.
set -euo pipefail
cd "$(dirname "$0")/.."
stack="${1:-demo}"
started=$SECONDS
say() { echo "up.sh: $*" >&2; }

. scripts/pulumi-env.sh

if [ "$stack" = demo ]; then
  bash .ci/docker-up.sh >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers (docker info failed; is dockerd running, DOCKER_HOST set?)"
  exit 1
fi

if ! pulumi stack select "$stack" --non-interactive 2>/dev/null; then
  pulumi stack init "$stack" --non-interactive
  if [ "$stack" = demo ]; then
    mkdir -p /var/lib/paddleocr-fleet/demo && chmod 777 /var/lib/paddleocr-fleet/demo
    pulumi config set --stack demo accelerator sim
    pulumi config set --stack demo cards 1
    pulumi config set --stack demo modelDir /var/lib/paddleocr-fleet/demo
    pulumi config set --stack demo buildArgs '{"BASE_IMAGE": "paddleocr-fleet/base:bookworm"}'
    pulumi config set --stack demo vllmReadyTimeout 300
    pulumi config set --stack demo paddlexReadyTimeout 300
    # Prometheus with the fleet's alert rules, and the exporter (docs/monitoring.md)
    pulumi config set --stack demo monitoring true
    # The gateway is never open by accident: the demo gets its own tokens, as Pulumi secrets.
    pulumi config set --stack demo --secret --path tokens.demo "$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(24))')"
    pulumi config set --stack demo --secret --path adminTokens.ops "$(.venv/bin/python -c 'import secrets; print(secrets.token_hex(24))')"
  fi
fi

# A container of the same name that this stack's state does not own would fail pulumi up
# half-way: name them all first (components/preflight.py).
state="$(mktemp)"
trap 'rm -f "$state"' EXIT
pulumi stack export --stack "$stack" >"$state"
.venv/bin/python -m components.preflight --stack "$stack" --state "$state"

if [ "$stack" = demo ]; then
  bash .ci/build-images.sh --only base,vllm,paddlex
fi
pulumi up --yes --non-interactive --stack "$stack"
gateway="$(pulumi stack output --stack "$stack" gateway_url)"
say "deployed stack '$stack' in $((SECONDS - started)) s"

if [ "$stack" = demo ]; then
  token="$(pulumi config get --stack demo --path tokens.demo)"
  echo
  echo "== a sample document through the gateway ($gateway/ocr):"
  .venv/bin/python -c 'import sys; from fleetctl.png import encode_png
sys.stdout.buffer.write(encode_png(64, 32, [bytes([255] * 64)] * 32, rgb=False))' \
    >/tmp/paddleocr-fleet-demo.png
  curl -fsS -X POST "$gateway/ocr" -H 'Content-Type: application/json' \
    -H "Authorization: Bearer $token" \
    -d "{\"base64\": \"$(base64 -w0 /tmp/paddleocr-fleet-demo.png)\"}" |
    .venv/bin/python -c 'import json, sys; r = json.load(sys.stdin); print(r["text"]); print("(served by", r["upstream"] + ")")'
fi
echo
echo "== upstreams:"
pulumi stack output --stack "$stack" upstreams --json
echo
echo "== call the gateway (a token: pulumi config get --stack $stack --path tokens.NAME):"
echo "  export PATH=$pulumi_bin:$PWD/.venv/bin:\$PATH PULUMI_BACKEND_URL=$PULUMI_BACKEND_URL"
echo "  export PULUMI_CONFIG_PASSPHRASE=\"\${PULUMI_CONFIG_PASSPHRASE-}\"   # the stack's passphrase (empty for the demo)"
echo "  export PADDLEOCR_FLEET_TOKEN=\$(pulumi config get --stack $stack --path tokens.demo)"
echo "  curl -X POST $gateway/ocr -H \"Authorization: Bearer \$PADDLEOCR_FLEET_TOKEN\" \\"
echo "       -H 'Content-Type: application/json' -d \"{\\\"base64\\\": \\\"\$(base64 -w0 doc.png)\\\"}\""
echo "  fleetctl ocr ./scans --out ./markdown --gateway $gateway"
echo
echo "== watch it (docs/monitoring.md):"
echo "  status page: $gateway/status (log in with: pulumi config get --stack $stack --path adminTokens.NAME)"
echo "  fleetctl top (PADDLEOCR_FLEET_ADMIN_TOKEN set to that admin token)"
if prometheus="$(pulumi stack output --stack "$stack" prometheus_url 2>/dev/null)"; then
  echo "  Prometheus: $prometheus (alerts: $prometheus/alerts); Grafana dashboard to import: monitoring/grafana/paddleocr-fleet.json"
fi
