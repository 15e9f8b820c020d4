#!/usr/bin/env bash
# Fetches the third-party browser modules the console serves (it has no build step) into
# web/console/vendor/, from the npm registry, at the versions pinned below. Run it to update
# them; the files are committed because go:embed serves them from the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
XTERM=6.0.0     # @xterm/xterm: the terminal emulator of the console's Terminal tab
XTERM_FIT=0.11.0 # @xterm/addon-fit: sizes the terminal to its box
dest=web/console/vendor/xterm
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@xterm/xterm@$XTERM" "@xterm/addon-fit@$XTERM_FIT" >/dev/null)
mkdir -p "$work/x" "$work/f" "$dest"
tar xzf "$work/xterm-xterm-$XTERM.tgz" -C "$work/x"
tar xzf "$work/xterm-addon-fit-$XTERM_FIT.tgz" -C "$work/f"
cp "$work/x/package/lib/xterm.mjs" "$work/x/package/css/xterm.css" "$dest/"
cp "$work/x/package/LICENSE" "$dest/LICENSE"
cp "$work/f/package/lib/addon-fit.mjs" "$dest/"
# The modules end with a source-map comment naming files that are not served.
sed -i '/^\/\/# sourceMappingURL=/d' "$dest/xterm.mjs" "$dest/addon-fit.mjs"
printf '@xterm/xterm %s and @xterm/addon-fit %s (MIT, see LICENSE), from the npm registry by scripts/vendor-console.sh.\n' "$XTERM" "$XTERM_FIT" >"$dest/VERSION"
echo "vendored @xterm/xterm $XTERM and @xterm/addon-fit $XTERM_FIT into $dest"
