#!/usr/bin/env bash
# Prepares this machine for `make test`, idempotently and from caches where it can:
#
#   1. the Debian packages the suites need — postgresql (every suite), chromium (the console's
#      browser test), docker.io and debootstrap (the Docker engine and the sandbox image), curl
#      (the README walkthrough test), python3 with IPython, pandas and matplotlib (rich
#      results), e2fsprogs (mkfs.ext4 for the size-bounded docker workspaces),
#      docker-compose (the compose file's tests), python3-httpx, python3-pytest,
#      python3-pytest-asyncio, python3-yaml and mypy (the Python client's tests) — installed
#      when missing and this
#      user is root or may sudo without a password; otherwise it names each package and the
#      suites that will skip;
#   2. a running Docker engine and the sandbox image (scripts/docker-setup.sh);
#   3. the kube-apiserver and etcd test binaries (scripts/kube-setup.sh; about 20 CPU-minutes
#      the first time, cached under ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube), and as root
#      the binaries of a real single-node cluster (kube-setup.sh --node: kubelet, scheduler,
#      controller manager, cri-dockerd, the agent-sandbox controller, a pause image; about 25
#      CPU-minutes more the first time) with TEST_KUBE_NODE=1 exported;
#   4. the node_modules of the small node projects that drive the cloud fakes and /mcp with
#      the vendors' official SDKs, and of the TypeScript client (clients/typescript, built and
#      tested live by its Go test) (npm ci from their package-lock.json, npm's cache under
#      ${SANDGATE_CACHE:-$HOME/.cache/sandgate}/npm; skipped when the lock is unchanged).
#
# It prints nothing on stdout but the exports the tests use (eval "$(scripts/test-setup.sh)");
# progress goes to stderr. A step that cannot be done is reported and skipped, except under
# CI=true, where it fails: CI must run every suite.
#
# Environment: SANDGATE_SKIP_SETUP=1 (do nothing), SANDGATE_SKIP_KUBE=1 (leave out step 3),
# SANDGATE_SKIP_KUBE_NODE=1 (leave out the real node of step 3),
# SANDGATE_SKIP_DOCKER=1 (leave out step 2), and those of the scripts it runs.
#
# Usage: eval "$(scripts/test-setup.sh)"
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "test-setup: $*" >&2; }
[ "${SANDGATE_SKIP_SETUP:-}" = 1 ] && exit 0
ci() { [ "${CI:-}" = true ]; }
fail_or_skip() {
  if ci; then
    log "CI=true: $*"
    exit 1
  fi
  log "$*"
}

can_root() { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

# 1. Packages: name → what skips without it.
declare -A suites=(
  [postgresql]="every suite that needs a database (most of them)"
  [chromium]="the web console's browser test (web/)"
  [docker.io]="the Docker provider's suites and the docker walkthrough"
  [debootstrap]="the sandbox image, so the Docker suites"
  [curl]="the README walkthrough tests (cmd/gateway)"
  [python3]="the Python executions of the local provider's suites"
  [python3-ipython]="the rich results (charts, tables) of sandboxd's and the local provider's suites"
  [python3-pandas]="the rich results (charts, tables) of sandboxd's and the local provider's suites"
  [python3-matplotlib]="the rich results (charts, tables) of sandboxd's and the local provider's suites"
  [docker-compose]="the docker-compose.yml tests (cmd/gateway TestCompose*)"
  [nodejs]="the fidelity tests of the cloud fakes and of /mcp with the vendors' official SDKs"
  [npm]="the fidelity tests of the cloud fakes and of /mcp with the vendors' official SDKs"
  [e2fsprogs]="the size-bounded docker workspaces (policy disk_mb) and internal/loopdisk"
  [python3-httpx]="the Python client's tests (clients/python)"
  [python3-pytest]="the Python client's tests (clients/python)"
  [python3-pytest-asyncio]="the Python client's tests (clients/python)"
  [python3-yaml]="the Python client's contract test (clients/python)"
  [mypy]="the Python client's type check (clients/python)"
)
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null || missing+=(chromium)
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v curl >/dev/null || missing+=(curl)
command -v python3 >/dev/null || missing+=(python3)
# The data-science set the sandbox image has, for the local provider's python (Debian's).
for m in IPython:python3-ipython pandas:python3-pandas matplotlib:python3-matplotlib; do
  python3 -c "import ${m%%:*}" >/dev/null 2>&1 || missing+=("${m#*:}")
done
# The Python client's tests run with Debian's python3 (/usr/bin/python3) and its packages.
for m in httpx:python3-httpx pytest:python3-pytest pytest_asyncio:python3-pytest-asyncio yaml:python3-yaml mypy:mypy; do
  /usr/bin/python3 -c "import ${m%%:*}" >/dev/null 2>&1 || missing+=("${m#*:}")
done
# The Compose CLI: the docker plugin when present, else Debian's docker-compose (v1).
{ docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null; } || missing+=(docker-compose)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v mkfs.ext4 >/dev/null || [ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] || missing+=(e2fsprogs)
if [ ${#missing[@]} -gt 0 ]; then
  if can_root; then
    log "installing ${missing[*]} (Debian packages)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    for p in "${missing[@]}"; do
      fail_or_skip "package $p is missing and this user can neither be root nor sudo: skipped: ${suites[$p]} (apt-get install $p)"
    done
  fi
fi

# The python3 first on PATH (a pyenv or venv one, say) may lack the set Debian's has now: the
# suites then run Debian's, through a folder of its own put first on their PATH.
data_science="import IPython, pandas, matplotlib"
if ! python3 -c "$data_science" >/dev/null 2>&1 && /usr/bin/python3 -c "$data_science" >/dev/null 2>&1; then
  pybin=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/python-bin
  mkdir -p "$pybin"
  ln -sfn /usr/bin/python3 "$pybin/python3"
  log "python3 on PATH ($(command -v python3)) lacks IPython, pandas or matplotlib: the suites use Debian's (/usr/bin/python3)"
  echo "export PATH=\"$pybin:\$PATH\""
fi

# 2. The Docker engine and the sandbox image.
if [ "${SANDGATE_SKIP_DOCKER:-}" = 1 ]; then
  log "SANDGATE_SKIP_DOCKER=1: the Docker suites will skip"
elif docker info >/dev/null 2>&1 || can_root; then
  scripts/docker-setup.sh >&2 || fail_or_skip "the Docker engine or the sandbox image could not be set up (see above): the Docker suites will skip"
else
  fail_or_skip "no Docker engine answers and this user cannot start one (root or sudo): the Docker suites will skip (scripts/docker-setup.sh)"
fi

# 3. kube-apiserver and etcd.
if [ "${SANDGATE_SKIP_KUBE:-}" = 1 ]; then
  log "SANDGATE_SKIP_KUBE=1: the Kubernetes suites will skip"
else
  kube_cache=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/kube
  if ! ls "$kube_cache"/*/kube-apiserver >/dev/null 2>&1; then
    log "building kube-apiserver and etcd from the Go module proxy: about 20 CPU-minutes the first time (cached in $kube_cache; SANDGATE_SKIP_KUBE=1 leaves it out)"
  fi
  if ! scripts/kube-setup.sh; then
    fail_or_skip "the kube-apiserver test binaries could not be built (see above): the Kubernetes suites will skip"
  fi
  # The real single-node cluster (kubelet, scheduler, controller manager, cri-dockerd, the
  # agent-sandbox controller; internal/testutil/kubenode) needs root: its network namespace,
  # cgroups and mounts. TEST_KUBE_NODE=1 makes the kubernetes provider's TestNode* run
  # on it (and fail, never skip, when it cannot start).
  if [ "${SANDGATE_SKIP_KUBE_NODE:-}" = 1 ]; then
    log "SANDGATE_SKIP_KUBE_NODE=1: the kubernetes tests on a real node will skip"
  elif [ "$(id -u)" = 0 ]; then
    if ! ls "$kube_cache"/*/kubelet >/dev/null 2>&1; then
      log "building the node's binaries (kubelet, scheduler, controller manager, cri-dockerd, agent-sandbox): about 25 CPU-minutes the first time (cached in $kube_cache; SANDGATE_SKIP_KUBE_NODE=1 leaves them out)"
    fi
    if scripts/kube-setup.sh --node; then
      echo "export TEST_KUBE_NODE=1"
    else
      fail_or_skip "the node's binaries could not be built (see above): the kubernetes tests on a real node will skip"
    fi
  else
    fail_or_skip "the kubernetes tests on a real node need root (network namespace, cgroups, mounts): they will skip"
  fi
fi

# 4. Node projects of the SDK fidelity tests.
npm_projects=(
  internal/providers/daytona/daytonafake/testdata/sdk
  internal/providers/e2b/e2bfake/testdata/sdk
  internal/e2bdoor/testdata/sdk
  internal/mcp/testdata/sdk-js
  internal/api/testdata/contract
  clients/typescript
)
npm_cache=${SANDGATE_CACHE:-$HOME/.cache/sandgate}/npm
for dir in "${npm_projects[@]}"; do
  if ! command -v npm >/dev/null; then
    fail_or_skip "npm is missing: the SDK fidelity test of $dir will skip"
    continue
  fi
  stamp=$dir/node_modules/.sandgate-lock
  want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && continue
  log "installing the node modules of $dir (npm ci; cached in $npm_cache)"
  if (cd "$dir" && npm ci --no-audit --no-fund --prefer-offline --cache "$npm_cache" >&2); then
    echo "$want" >"$stamp"
  else
    fail_or_skip "npm ci failed in $dir (see above): its SDK fidelity test will skip"
  fi
done
