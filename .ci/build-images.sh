#!/usr/bin/env bash
# Build every image the fleet needs in sim mode, on a machine without an image registry:
#   paddleocr-fleet/base:bookworm       (sim/base/build.sh: debootstrap + docker import)
#   paddleocr-fleet/vllm-sim:latest     (sim/vllm/Dockerfile)
#   paddleocr-fleet/paddlex-sim:latest  (sim/paddlex/Dockerfile)
#   paddleocr-fleet/gateway:latest      (gateway/Dockerfile; skipped with a message if absent)
#
#   .ci/build-images.sh [--only base,vllm,paddlex,gateway] [--no-cache]
#
# Uses the engine of DOCKER_HOST (default socket); start one first with .ci/docker-up.sh.
# Prints the time each build took and the image sizes; logs go to $BUILD_LOG_DIR (/tmp).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base_tag="paddleocr-fleet/base:bookworm"
only="base,vllm,paddlex,gateway"
no_cache=()
log_dir="${BUILD_LOG_DIR:-/tmp}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) only="$2"; shift 2 ;;
    --no-cache) no_cache=(--no-cache); shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build-images: unknown argument: $1" >&2; exit 2 ;;
  esac
done

say() { echo "build-images: $*" >&2; }
wanted() { [[ ",$only," == *",$1,"* ]]; }
summary=()

build() {  # build NAME TAG DOCKERFILE CONTEXT
  local name="$1" tag="$2" dockerfile="$3" context="$4" start=$SECONDS log="$log_dir/build-$1.log"
  say "building $tag (log $log)"
  if ! docker build --network host "${no_cache[@]}" --build-arg "BASE_IMAGE=$base_tag" \
      -t "$tag" -f "$dockerfile" "$context" >"$log" 2>&1; then
    say "FAILED: $tag; last lines of $log:"
    tail -n 40 "$log" >&2
    exit 1
  fi
  summary+=("$(printf '%-36s %4ss  %s' "$tag" "$((SECONDS - start))" \
    "$(docker image inspect -f '{{.Size}}' "$tag" | numfmt --to=iec)")")
}

if ! docker info >/dev/null 2>&1; then
  say "no Docker engine answers (DOCKER_HOST=${DOCKER_HOST:-unset}); run .ci/docker-up.sh first"
  exit 1
fi

if wanted base; then
  start=$SECONDS
  "$repo/sim/base/build.sh"
  summary+=("$(printf '%-36s %4ss  %s' "$base_tag" "$((SECONDS - start))" \
    "$(docker image inspect -f '{{.Size}}' "$base_tag" | numfmt --to=iec)")")
fi
wanted vllm && build vllm paddleocr-fleet/vllm-sim:latest "$repo/sim/vllm/Dockerfile" "$repo/sim/vllm"
wanted paddlex && build paddlex paddleocr-fleet/paddlex-sim:latest \
  "$repo/sim/paddlex/Dockerfile" "$repo/sim/paddlex"
if wanted gateway; then
  if [[ -f "$repo/gateway/Dockerfile" ]]; then
    build gateway paddleocr-fleet/gateway:latest "$repo/gateway/Dockerfile" "$repo/gateway"
  else
    say "gateway/Dockerfile does not exist yet: skipping paddleocr-fleet/gateway:latest"
  fi
fi

say "done in ${SECONDS}s:"
printf '  %s\n' "${summary[@]}" >&2
