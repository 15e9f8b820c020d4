#!/usr/bin/env bash
# What `make run` needs beyond Go: the PostgreSQL server binaries (initdb, pg_ctl) for the
# throwaway development database. Installs Debian's postgresql when missing and this user is
# root or may sudo without a password; otherwise says what to install. Idempotent.
#
# Usage: scripts/run-setup.sh
set -euo pipefail

log() { echo "run-setup: $*" >&2; }
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && exit 0
command -v initdb >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ]; then
  as_root() { "$@"; }
elif sudo -n true 2>/dev/null; then
  as_root() { sudo -n "$@"; }
else
  log "the PostgreSQL server binaries are missing and this user can neither be root nor sudo: run 'apt-get install postgresql' as root, then 'make run' again"
  exit 1
fi
log "installing postgresql (Debian package) for the development database"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
