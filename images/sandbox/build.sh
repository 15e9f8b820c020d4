#!/usr/bin/env bash
# Builds the default sandbox image, sandgate/sandbox-python, without any container registry,
# in two layers:
#   1. sandgate/sandbox-base:deb-<hash of this script>: a Debian rootfs made by debootstrap from
#      the machine's own apt mirror, imported with `docker import`;
#   2. sandgate/sandbox-python:sd-<base hash>-<sandboxd hash>: the base plus the sandbox
#      runtime agent (cmd/sandboxd, built static with the Go toolchain) at
#      /usr/local/bin/sandboxd as the entrypoint, labelled dev.sandgate.sandboxd; also tagged
#      sandgate/sandbox-python:latest.
# The docker provider always starts sandboxd from the label's path as the entrypoint.
#
# Cached twice: the base is not rebuilt while the tag of its rootfs hash exists, and the
# rootfs tarball is kept under ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/sandbox-image so a
# lost image is re-imported in seconds. Delete both (or pass --force) to rebuild from nothing.
#
# Needs: a reachable Docker engine; for a fresh rootfs also root, debootstrap and a Debian
# mirror (taken from /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list, or
# SANDGATE_DEBIAN_MIRROR). On machines that can pull, `docker build images/sandbox` with the
# Dockerfile next to this script gives an equivalent image.
#
# Environment: SANDGATE_SANDBOX_REPO and SANDGATE_SANDBOX_BASE_REPO name the two images'
# repositories (default sandgate/sandbox-python and sandgate/sandbox-base), e.g. to try a
# change of this script without retagging the images others use; SANDGATE_CACHE as above.
#
# Usage: images/sandbox/build.sh [--force]
set -euo pipefail

repo=${SANDGATE_SANDBOX_REPO:-sandgate/sandbox-python}
base_repo=${SANDGATE_SANDBOX_BASE_REPO:-sandgate/sandbox-base}
suite=${SANDGATE_DEBIAN_SUITE:-bookworm}
# Packages on top of debootstrap's minbase (which already has bash, coreutils and util-linux's
# setsid): python3 with its standard library, procps (ps, kill -- -pgid), coreutils realpath.
packages=python3-minimal,python3,procps,coreutils
# Then, installed with apt in the rootfs, the data-science set a code interpreter is expected
# to have: numpy, pandas, matplotlib and IPython (sandboxd's python contexts use IPython's
# display machinery for rich results). apt, unlike debootstrap, takes an alternative that is
# already being installed: the small ones named here stand for python3-scipy (with pythran,
# boost and a C++ compiler), python3-all and OpenBLAS, which fonttools and numpy would
# otherwise pull in. No Recommends.
data_packages="python3-numpy python3-pandas python3-matplotlib python3-ipython python3-munkres python3-unicodedata2 python3-ufolib2 libblas3 liblapack3"

force=false
[ "${1:-}" = "--force" ] && force=true

self=$(readlink -f "$0")
# The base image depends only on what goes into the rootfs; bump rootfs-vN when the rootfs
# steps below change.
hash=$(printf '%s\n' "$suite" "$packages" "$data_packages" rootfs-v3 | sha256sum | cut -c1-12)
tag="deb-$hash"
cache=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/sandbox-image
tarball="$cache/rootfs-$suite-$hash.tar"

log() { echo "build.sh: $*" >&2; }

docker info >/dev/null 2>&1 || { log "no Docker engine is reachable (docker info failed); run scripts/docker-setup.sh first"; exit 1; }

mkdir -p "$cache"
# One build at a time per cache folder (CI and a developer may run this concurrently).
exec 9>"$cache/.lock"
flock 9

# add_sandboxd builds cmd/sandboxd and layers it onto the base image (cached by both hashes).
add_sandboxd() {
  local gobin src work sdhash final
  gobin=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$gobin" ] || { log "the Go toolchain is needed to build sandboxd (go not on PATH nor at /usr/local/go/bin)"; exit 1; }
  src=$(cd "$(dirname "$self")/../.." && pwd)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  (cd "$src" && CGO_ENABLED=0 "$gobin" build -trimpath -ldflags='-s -w -buildid=' -o "$work/sandboxd" ./cmd/sandboxd)
  sdhash=$(sha256sum "$work/sandboxd" | cut -c1-12)
  final="$repo:sd-$hash-$sdhash"
  if ! $force && docker image inspect "$final" >/dev/null 2>&1; then
    docker tag "$final" "$repo:latest"
    log "$final is up to date (tagged latest)"
    return
  fi
  cat >"$work/Dockerfile" <<DOCKERFILE
FROM $base_repo:$tag
COPY sandboxd /usr/local/bin/sandboxd
LABEL dev.sandgate.sandboxd=/usr/local/bin/sandboxd org.opencontainers.image.version=sd-$hash-$sdhash
ENTRYPOINT ["/usr/local/bin/sandboxd", "serve"]
CMD []
DOCKERFILE
  # The classic builder needs no registry for a local base image.
  DOCKER_BUILDKIT=0 docker build -q -t "$final" "$work" >/dev/null 2>"$work/build.log" || {
    cat "$work/build.log" >&2
    log "docker build of $final failed"
    exit 1
  }
  docker tag "$final" "$repo:latest"
  log "built $final with sandboxd (tagged latest)"
}

if ! $force && docker image inspect "$base_repo:$tag" >/dev/null 2>&1; then
  add_sandboxd
  exit 0
fi

# mirror prints the first Debian archive URL apt is configured with (not the security one).
mirror() {
  if [ -n "${SANDGATE_DEBIAN_MIRROR:-}" ]; then
    echo "$SANDGATE_DEBIAN_MIRROR"
    return
  fi
  local f url
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -e "$f" ] || continue
    url=$(awk 'tolower($1)=="uris:" {for (i=2;i<=NF;i++) print $i}' "$f" | grep -v -e security -e '^$' | head -n1 || true)
    if [ -n "$url" ]; then echo "$url"; return; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -e "$f" ] || continue
    url=$(awk '$1=="deb" { for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }' "$f" | grep -v security | head -n1 || true)
    if [ -n "$url" ]; then echo "$url"; return; fi
  done
  echo "http://deb.debian.org/debian"
}

if $force || [ ! -s "$tarball" ]; then
  [ "$(id -u)" = 0 ] || { log "building the rootfs needs root (debootstrap)"; exit 1; }
  command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install debootstrap (scripts/docker-setup.sh does)"; exit 1; }
  url=$(mirror)
  rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs" "$tarball.tmp"' EXIT
  log "debootstrap $suite from $url into $rootfs (about a minute)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$url" >"$cache/debootstrap.log" 2>&1 || {
    tail -n 30 "$cache/debootstrap.log" >&2
    log "debootstrap failed (full log: $cache/debootstrap.log)"
    exit 1
  }
  # The data-science set, with apt from the same mirror (debootstrap's sources.list); the
  # chroot needs the machine's resolver for that, and /proc for some maintainer scripts.
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  trap 'umount "$rootfs/proc" 2>/dev/null || true; rm -rf --one-file-system "$rootfs" "$tarball.tmp"' EXIT
  log "installing $data_packages in the rootfs (a few minutes)"
  if ! { chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $data_packages; } \
    >"$cache/apt.log" 2>&1; then
    tail -n 30 "$cache/apt.log" >&2
    log "installing the data-science packages failed (full log: $cache/apt.log)"
    exit 1
  fi
  chroot "$rootfs" apt-get clean
  umount "$rootfs/proc"
  rm -f "$rootfs/etc/resolv.conf"
  # The data-science set must import, or the image is not what it says it is.
  chroot "$rootfs" env -i PATH=/usr/bin:/bin HOME=/tmp MPLCONFIGDIR=/tmp/mplconfig MPLBACKEND=Agg \
    python3 -c 'import numpy, pandas, matplotlib.pyplot, IPython.core.formatters' >"$cache/smoke.log" 2>&1 || {
    cat "$cache/smoke.log" >&2
    log "the rootfs's python3 cannot import numpy, pandas, matplotlib and IPython"
    exit 1
  }
  rm -rf "$rootfs"/tmp/mplconfig "$rootfs"/tmp/.cache
  # Slim down and prepare the workspace; the sandbox runs `sleep infinity` under docker's init.
  # The Python packages' own test suites (about 125 MB) are never imported by programs.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/* "$rootfs"/var/log/*.log
  find "$rootfs/usr/lib/python3/dist-packages" -depth -type d -name tests -exec rm -rf {} +
  mkdir -p "$rootfs/workspace"
  chmod 1777 "$rootfs/workspace"
  tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$rootfs"
  trap - EXIT
  # Older tarballs of other script versions are of no further use.
  find "$cache" -maxdepth 1 -name 'rootfs-*.tar' ! -name "$(basename "$tarball")" -delete
fi

log "importing $tarball as $base_repo:$tag"
docker import \
  --change 'WORKDIR /workspace' \
  --change 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["sleep","infinity"]' \
  --change "LABEL org.opencontainers.image.source=sandgate/images/sandbox org.opencontainers.image.version=$tag" \
  "$tarball" "$base_repo:$tag" >/dev/null
log "imported $base_repo:$tag"
add_sandboxd
