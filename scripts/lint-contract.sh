#!/usr/bin/env bash
# Lints openapi.yaml with the tools its users point at it: Redocly's and Spectral's linters
# (0 errors; warnings are shown) and openapi-typescript, whose generated types must compile
# against internal/api/testdata/contract/check.ts (file bodies are Blob, command xor code, …).
# kin-openapi's Validate runs in `go test ./internal/api -run TestContract`.
# Installs the pinned tools (npm ci, cached like scripts/test-setup.sh) when missing.
set -euo pipefail
cd "$(dirname "$0")/../internal/api/testdata/contract"
spec=../../../../openapi.yaml
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.sandgate-lock 2>/dev/null)" != "$want" ]; then
  npm ci --no-audit --no-fund --prefer-offline --cache "${SANDGATE_CACHE:-$HOME/.cache/sandgate}/npm" >&2
  echo "$want" >node_modules/.sandgate-lock
fi
echo "== redocly lint"
npx --no-install redocly lint "$spec" --format=stylish
echo "== spectral lint (oas ruleset)"
npx --no-install spectral lint --ruleset .spectral.yaml --fail-severity=error "$spec"
echo "== openapi-typescript + tsc"
node types.mjs "$spec"
npx --no-install tsc -p .
echo "contract lint: 0 errors"
