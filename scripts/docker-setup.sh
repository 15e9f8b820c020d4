#!/usr/bin/env bash
# Makes a Docker engine and the default sandbox image available on a Debian machine that can
# reach Debian's apt mirror but no container registry (CI, development VMs). Idempotent:
#
#   1. installs Debian's docker.io and debootstrap when missing (apt-get update first);
#   2. when `docker info` fails, starts dockerd in the background (log:
#      ${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}), falling back to flags that work
#      where iptables or bridges are not available, and waits until the engine answers;
#   3. builds (or finds cached) sandgate/sandbox-python:latest with images/sandbox/build.sh.
#
# Environment: SANDGATE_DOCKERD_ARGS (extra dockerd flags, tried first), SANDGATE_CACHE (image
# cache folder, default $HOME/.cache/sandgate), SANDGATE_SKIP_IMAGE=1 (skip step 3).
#
# Usage: scripts/docker-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "docker-setup: $*" >&2; }
dockerd_log=${SANDGATE_DOCKERD_LOG:-/var/log/sandgate-dockerd.log}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    log "need root for: $*"
    exit 1
  fi
}

# 1. Packages.
missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The engine.
engine_up() { docker info >/dev/null 2>&1; }

# start_dockerd ARGS...: starts dockerd in the background and waits up to 60 s for it to
# answer; returns non-zero (and stops it) when it dies or never answers.
start_dockerd() {
  log "starting dockerd $* (log: $dockerd_log)"
  as_root mkdir -p "$(dirname "$dockerd_log")"
  echo "=== $(date -Is) dockerd $*" | as_root tee -a "$dockerd_log" >/dev/null
  # setsid + nohup: the engine outlives this script and its terminal.
  as_root setsid nohup dockerd "$@" >>"$dockerd_log" 2>&1 </dev/null &
  local launcher=$! i
  for i in $(seq 1 120); do
    if engine_up; then return 0; fi
    if ! pgrep -x dockerd >/dev/null; then
      wait "$launcher" 2>/dev/null || true
      log "dockerd $* exited; last lines of its log:"
      tail -n 5 "$dockerd_log" >&2 || true
      return 1
    fi
    sleep 0.5
  done
  log "dockerd $* did not answer within 60 s; stopping it"
  # Only the dockerd this function started: the one whose pid file it wrote.
  if [ -s /var/run/docker.pid ]; then as_root kill "$(cat /var/run/docker.pid)" 2>/dev/null || true; fi
  sleep 2
  return 1
}

if engine_up; then
  log "engine already running: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>/dev/null)"
elif [ -n "${DOCKER_HOST:-}" ] && [ "${DOCKER_HOST#unix://}" = "$DOCKER_HOST" ]; then
  log "DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local engine for a remote host"
  exit 1
else
  if pgrep -x dockerd >/dev/null; then
    # A dockerd that is still starting up (another run of this script): give it time.
    for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
  fi
  if ! engine_up; then
    # Full networking first; then without iptables (the bridge still gives containers an
    # interface, so "network_egress: deny" is observable); then without a bridge at all.
    candidates=()
    [ -n "${SANDGATE_DOCKERD_ARGS:-}" ] && candidates+=("$SANDGATE_DOCKERD_ARGS")
    candidates+=("" "--iptables=false --ip6tables=false" "--iptables=false --ip6tables=false --bridge=none")
    started=false
    for args in "${candidates[@]}"; do
      # shellcheck disable=SC2086 # word splitting of the flag sets is intended
      if start_dockerd $args; then started=true; break; fi
    done
    [ "$started" = true ] || { log "could not start dockerd; see $dockerd_log"; exit 1; }
  fi
  log "engine up: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
fi

# 3. The sandbox image.
if [ "${SANDGATE_SKIP_IMAGE:-}" = 1 ]; then
  log "SANDGATE_SKIP_IMAGE=1: not building the sandbox image"
else
  images/sandbox/build.sh
fi
