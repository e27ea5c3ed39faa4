#!/usr/bin/env bash
# Build the local base image paddleocr-fleet/base:bookworm without any image registry:
# debootstrap a minimal Debian bookworm root filesystem and `docker import` it.
#
#   sim/base/build.sh [--force] [--tag TAG] [--cache DIR] [--mirror URL]
#
# Skips when the tag already exists with the same package list and CAs (unless --force). The rootfs tarball is cached in
# $PADDLEOCR_FLEET_CACHE (default /var/cache/paddleocr-fleet), so a rebuild on the same machine
# (for example on a second engine) only re-imports it. Needs root, debootstrap and a Docker engine.
#
# The host's extra CA certificates (/usr/local/share/ca-certificates/*.crt, e.g. a corporate or
# sandbox TLS proxy) are added to the image's trust store, so `pip install` inside image builds
# reaches the package index the way the host does. --no-host-ca leaves them out.
set -euo pipefail

tag="paddleocr-fleet/base:bookworm"
cache="${PADDLEOCR_FLEET_CACHE:-/var/cache/paddleocr-fleet}"
mirror="${DEBIAN_MIRROR:-}"
force=0
host_ca=1
host_ca_dir=/usr/local/share/ca-certificates
packages="python3,python3-venv,python3-pip,ca-certificates,curl,procps,bash,tini"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --force) force=1; shift ;;
    --no-host-ca) host_ca=0; shift ;;
    --tag) tag="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --mirror) mirror="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "base/build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

say() { echo "base/build.sh: $*" >&2; }

apt_mirror() {  # the first Debian archive this machine's apt is configured with
  local files=() file
  for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -r "$file" ]] && files+=("$file")
  done
  [[ ${#files[@]} -gt 0 ]] || return 0
  {
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' "${files[@]}"
    awk '$1 == "URIs:" { print $2 }' "${files[@]}"
  } | grep -v -e '-security' -e 'security\.' | sed 's#/*$##' | head -n 1 || true
}

start=$SECONDS

extra_cas=()
if [[ $host_ca -eq 1 && -d "$host_ca_dir" ]]; then
  mapfile -t extra_cas < <(find "$host_ca_dir" -name '*.crt' -type f | sort)
fi
# The tarball name carries the package list and the extra CAs, so a change invalidates the cache.
key="$( { printf '%s' "$packages"; cat "${extra_cas[@]}" /dev/null; } | sha256sum | cut -c1-12)"

if [[ $force -eq 0 ]] && [[ "$(docker image inspect -f '{{index .Config.Labels "org.paddleocr-fleet.base-key"}}' "$tag" 2>/dev/null)" == "$key" ]]; then
  say "$tag already exists (key $key), skipping (use --force to rebuild)"
  exit 0
fi

tarball="$cache/bookworm-minbase-$key.tar"

if [[ $force -eq 1 || ! -s "$tarball" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mkdir -p "$cache"
  rootfs="$(mktemp -d "$cache/rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' EXIT
  if [[ -z "$mirror" ]]; then
    mirror="$(apt_mirror)"
    [[ -n "$mirror" ]] || { say "no Debian archive in this machine's apt sources: pass --mirror URL or set DEBIAN_MIRROR"; exit 1; }
  fi
  say "debootstrap bookworm into $rootfs (mirror $mirror)"
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" \
    >"$cache/debootstrap.log" 2>&1 || {
      say "debootstrap failed; last lines of $cache/debootstrap.log:"
      tail -n 30 "$cache/debootstrap.log" >&2
      exit 1
    }
  if [[ ${#extra_cas[@]} -gt 0 ]]; then
    say "adding ${#extra_cas[@]} host CA certificate(s) from $host_ca_dir"
    cp "${extra_cas[@]}" "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null
  fi
  # Slim the image: package caches and docs are not needed at run time.
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/var/cache/debconf/*-old "$rootfs"/tmp/*
  # pip inside builds: Debian marks the system Python as externally managed (PEP 668);
  # images install into their own venvs, so nothing is lost by keeping the marker.
  tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  say "rootfs cached at $tarball ($(du -h "$tarball" | cut -f1)) after $((SECONDS - start))s"
else
  say "using cached rootfs $tarball"
fi

docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["bash"]' \
  --change "LABEL org.paddleocr-fleet.base-key=$key" \
  "$tarball" "$tag" >/dev/null
say "imported $tag in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$tag" | numfmt --to=iec))"
