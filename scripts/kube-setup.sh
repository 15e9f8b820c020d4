#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd that the Kubernetes provider's tests run under
# sigs.k8s.io/controller-runtime/pkg/envtest, from the Go module proxy alone (no image registry,
# no envtest download). Idempotent: the binaries are cached per pinned version in
#
#   ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube/<kubernetes version>-etcd<etcd version>/
#
# and rebuilt only when tools/kube/go.mod pins other versions. The tests look in the same folder
# themselves; the exports printed on stdout (TEST_ASSET_KUBE_APISERVER, TEST_ASSET_ETCD,
# KUBEBUILDER_ASSETS) are for other tools:
#
#   eval "$(scripts/kube-setup.sh)"
#
# The first build takes about 20 CPU-minutes on 2 cores (kube-apiserver is ~170 MB); it runs
# under `nice` so that it shares the machine. Environment: SANDGATE_CACHE (cache root),
# SANDGATE_KUBE_FORCE=1 (rebuild even when cached), GO (go command, default go).
#
# With --node (or TEST_KUBE_NODE=1) it also makes what a real single-node cluster needs — the
# one internal/testutil/kubenode brings up for the kubernetes provider's end-to-end tests and
# `make kube-up` — each cached the same way, in folders named by its pinned version:
#
#   <kubernetes>-etcd<etcd>/       kubelet, kube-scheduler, kube-controller-manager (tools/kube)
#   cri-dockerd-<version>/         cri-dockerd (the kubelet's CRI on the Docker engine)
#   agent-sandbox-<version>/       agent-sandbox-controller and its CRDs (crds/*.yaml)
#   pause-<kubernetes>/pause       the pods' infrastructure binary, built from tools/kube/pause
#                                  into the local image sandgate/kube-pause:<kubernetes>
#
# and Debian's containernetworking-plugins (bridge, host-local, loopback in /usr/lib/cni).
# The node binaries take about 3 × 8 CPU-minutes cold (2 minutes each on a warm build cache).
#
# Usage: scripts/kube-setup.sh [--node]
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "kube-setup: $*" >&2; }
GO=${GO:-go}
command -v "$GO" >/dev/null || export PATH="$PATH:/usr/local/go/bin"

node=${TEST_KUBE_NODE:-0}
[ "${1:-}" = --node ] && node=1
# The versions of what is not a Go tool of tools/kube (cri-dockerd and agent-sandbox carry
# replace directives or pins of their own, so they are built as their own main modules).
cri_dockerd_version=$(awk '$1 == "cri-dockerd" {print $2}' tools/kube/node-versions)
agent_sandbox_version=$(awk '$1 == "agent-sandbox" {print $2}' tools/kube/node-versions)

mod=tools/kube/go.mod
kube_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2; exit}' "$mod")
if [ -z "$kube_version" ] || [ -z "$etcd_version" ]; then
  log "cannot read the pinned versions from $mod"
  exit 1
fi
dir=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube/${kube_version}-etcd${etcd_version}

if [ "${SANDGATE_KUBE_FORCE:-}" != 1 ] && [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; then
  log "using cached binaries in $dir"
else
  mkdir -p "$dir"
  # Build into a temporary folder in the cache and rename, so an interrupted build never leaves
  # a half-written binary that a later run would take for a finished one.
  tmp=$(mktemp -d "$dir/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  log "building etcd $etcd_version (cache: $dir)"
  (cd tools/kube && nice -n 10 "$GO" build -trimpath -ldflags='-s -w' -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  log "building kube-apiserver $kube_version (about 20 CPU-minutes the first time)"
  # The version a release build stamps in (a plain go build reports v0.0.0-master).
  minor=${kube_version#v*.}
  minor=${minor%%.*}
  vpkg=k8s.io/component-base/version
  ldflags="-s -w -X $vpkg.gitVersion=$kube_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"
  (cd tools/kube && nice -n 10 "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
  mv -f "$tmp/etcd" "$dir/etcd"
  mv -f "$tmp/kube-apiserver" "$dir/kube-apiserver"
  log "built in $(($(date +%s) - start)) s"
fi

"$dir/etcd" --version >&2
"$dir/kube-apiserver" --version >&2

if [ "$node" = 1 ]; then
  cache=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube
  # The node's Kubernetes binaries, beside the apiserver (same pinned version).
  missing=()
  for b in kubelet kube-scheduler kube-controller-manager; do
    if [ "${SANDGATE_KUBE_FORCE:-}" = 1 ] || [ ! -x "$dir/$b" ]; then missing+=("$b"); fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    tmp=$(mktemp -d "$dir/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    for b in "${missing[@]}"; do
      start=$(date +%s)
      log "building $b $kube_version (about 8 CPU-minutes cold, 2 on a warm build cache)"
      (cd tools/kube && nice -n 15 "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/$b" "k8s.io/kubernetes/cmd/$b")
      mv -f "$tmp/$b" "$dir/$b"
      log "built $b in $(($(date +%s) - start)) s"
    done
  fi

  # cri-dockerd: its go.mod pins its own Kubernetes libraries with replace directives, which
  # only apply to a main module — so it is built inside its own (read-only) module folder.
  cri_dir=$cache/cri-dockerd-$cri_dockerd_version
  if [ "${SANDGATE_KUBE_FORCE:-}" = 1 ] || [ ! -x "$cri_dir/cri-dockerd" ]; then
    mkdir -p "$cri_dir"
    src=$("$GO" mod download -json "github.com/Mirantis/cri-dockerd@$cri_dockerd_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$src" ] || { log "cannot download github.com/Mirantis/cri-dockerd@$cri_dockerd_version"; exit 1; }
    start=$(date +%s)
    log "building cri-dockerd $cri_dockerd_version"
    (cd "$src" && nice -n 15 "$GO" build -trimpath -ldflags='-s -w' -o "$cri_dir/.cri-dockerd.tmp" .)
    mv -f "$cri_dir/.cri-dockerd.tmp" "$cri_dir/cri-dockerd"
    log "built cri-dockerd in $(($(date +%s) - start)) s"
  fi

  # The real agent-sandbox controller and the CRDs of the same module version.
  as_dir=$cache/agent-sandbox-$agent_sandbox_version
  if [ "${SANDGATE_KUBE_FORCE:-}" = 1 ] || [ ! -x "$as_dir/agent-sandbox-controller" ]; then
    mkdir -p "$as_dir/crds"
    start=$(date +%s)
    log "building agent-sandbox-controller $agent_sandbox_version"
    src=$("$GO" mod download -json "sigs.k8s.io/agent-sandbox@$agent_sandbox_version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$src" ] || { log "cannot download sigs.k8s.io/agent-sandbox@$agent_sandbox_version"; exit 1; }
    install -m 0644 "$src"/k8s/crds/*.yaml "$as_dir/crds/"
    (cd "$src" && nice -n 15 "$GO" build -trimpath -ldflags='-s -w' -o "$as_dir/.controller.tmp" ./cmd/agent-sandbox-controller)
    mv -f "$as_dir/.controller.tmp" "$as_dir/agent-sandbox-controller"
    log "built agent-sandbox-controller in $(($(date +%s) - start)) s"
  fi

  # The pause image, from a static binary: no registry is reachable.
  pause_image=sandgate/kube-pause:$kube_version
  if [ "${SANDGATE_KUBE_FORCE:-}" = 1 ] || ! docker image inspect "$pause_image" >/dev/null 2>&1; then
    pause_dir=$cache/pause-$kube_version
    mkdir -p "$pause_dir"
    (cd tools/kube && CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$pause_dir/pause" ./pause)
    printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$pause_dir/Dockerfile"
    DOCKER_BUILDKIT=0 docker build -q -t "$pause_image" "$pause_dir" >&2
  fi

  # Pod networking: the bridge and host-local CNI plugins.
  if [ ! -x /usr/lib/cni/bridge ] || [ ! -x /usr/lib/cni/host-local ]; then
    log "installing containernetworking-plugins"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends containernetworking-plugins >/dev/null
  fi
  echo "export TEST_ASSET_KUBE_NODE=$dir"
fi

echo "export TEST_ASSET_KUBE_APISERVER=$dir/kube-apiserver"
echo "export TEST_ASSET_ETCD=$dir/etcd"
echo "export KUBEBUILDER_ASSETS=$dir"
