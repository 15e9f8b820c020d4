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
# Usage: scripts/kube-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "kube-setup: $*" >&2; }
GO=${GO:-go}
command -v "$GO" >/dev/null || export PATH="$PATH:/usr/local/go/bin"

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

echo "export TEST_ASSET_KUBE_APISERVER=$dir/kube-apiserver"
echo "export TEST_ASSET_ETCD=$dir/etcd"
echo "export KUBEBUILDER_ASSETS=$dir"
