#!/usr/bin/env bash
# Sets up everything the tests need on a fresh Debian machine (as root), then runs them.
#   bash scripts/test.sh [pytest args]
# Installs the Python packages into .venv, builds the Pulumi toolchain (scripts/install-pulumi.sh,
# in the background meanwhile), starts a Docker engine and builds the simulator and gateway
# images (skipped, with the reason, where no engine can start), runs ruff and pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
python -m pip install -q -e '.[test,sim,bench]'
# PaddleX pins OpenCV's GUI build, whose cv2 needs libGL; the headless build of the same version
# is the same module without it (as in sim/paddlex/Dockerfile).
python -m pip install -q --no-deps --force-reinstall opencv-contrib-python-headless==4.10.0.84
echo "python packages ready after $(( $(date +%s) - started )) s"

# Both plugin sets: the real-engine tests run on the default one (the official plugins where
# ../shared/official-plugins is, as users run the program), our own plugins' smoke on `ours`.
if [ -z "${PADDLEOCR_FLEET_OFFICIAL_PLUGINS:-}" ] && [ -f ../shared/official-plugins/SHA256SUMS ]; then
  # the tests that run scripts/up.sh in a copy of the checkout find them through it
  PADDLEOCR_FLEET_OFFICIAL_PLUGINS="$(cd ../shared/official-plugins && pwd)"
  export PADDLEOCR_FLEET_OFFICIAL_PLUGINS
fi
pulumi_log="$(mktemp)"
ours_log="$(mktemp)"
{ bash scripts/install-pulumi.sh --plugins ours >"$ours_log" 2>&1 &&
  bash scripts/install-pulumi.sh >"$pulumi_log" 2>&1; } &
pulumi_job=$!

# The second host of tests/e2e/test_two_hosts.py is a network namespace with its own engine and
# an sshd (tests/e2e/netns_host.py): it needs ip, nsenter, sshd, ssh and ssh-keygen.
has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
netns_packages=()
has ip || netns_packages+=(iproute2)
has nsenter || netns_packages+=(util-linux)
has sshd || netns_packages+=(openssh-server)
{ has ssh && has ssh-keygen; } || netns_packages+=(openssh-client)
# The balancer's tests (tests/components/test_haproxy.py, tests/bench/test_hierarchy.py) run it.
has haproxy || netns_packages+=(haproxy)
# nginx and wrk: the CPU benchmark's smoke test (tests/bench/test_proxy_cpu.py) runs both
has nginx || netns_packages+=(nginx-light)
has wrk || netns_packages+=(wrk)
# promtool (Debian's prometheus) tests the alert rules (tests/monitoring/test_rules.py); chromium
# loads the status page headless (tests/gateway/test_status_page.py)
has promtool || netns_packages+=(prometheus)
has chromium || netns_packages+=(chromium)
# PostgreSQL's server: the job store tests start their own cluster (tests/postgres_server.py)
compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || netns_packages+=(postgresql)
if [ ${#netns_packages[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
  echo "installing ${netns_packages[*]} for the tests"
  # The tests start their own sshd: keep the package from starting one on port 22.
  no_start=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    no_start=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' >"$no_start" && chmod +x "$no_start"
  fi
  if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           "${netns_packages[@]}" >/dev/null; }; then
    echo "could not install ${netns_packages[*]}: the tests that need them will say so" >&2
  fi
  [ -z "$no_start" ] || rm -f "$no_start"
fi

if bash .ci/docker-up.sh; then
  bash .ci/build-images.sh
  echo "docker engine and images ready after $(( $(date +%s) - started )) s"
else
  echo "no Docker engine could start here: the docker-marked tests will skip, saying why"
fi

if wait "$pulumi_job"; then
  PADDLEOCR_FLEET_PULUMI="$(tail -n 1 "$pulumi_log")/pulumi"
  PADDLEOCR_FLEET_PULUMI_OURS="$(tail -n 1 "$ours_log")/pulumi"
  export PADDLEOCR_FLEET_PULUMI PADDLEOCR_FLEET_PULUMI_OURS
  echo "pulumi toolchain ready after $(( $(date +%s) - started )) s: $PADDLEOCR_FLEET_PULUMI"
  tail -n 2 "$pulumi_log" | head -n 1
else
  cat "$ours_log" "$pulumi_log" >&2
  echo "scripts/install-pulumi.sh failed: the tests of the real Pulumi engine cannot run" >&2
  exit 1
fi

ruff check .
ruff format --check .
python -m pytest "$@"
echo "scripts/test.sh finished in $(( $(date +%s) - started )) s"
