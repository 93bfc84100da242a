#!/usr/bin/env bash
# Runs the gateway on examples/quickstart.toml: installs the MCP peers,
# builds the binaries, starts the HTTP reference server on 127.0.0.1:7790,
# then `switchyard up`. Ctrl-C stops everything.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/install-test-peers.sh >&2
cargo build --quiet --bins -p switchyard-control-plane -p switchyard-sidecar -p switchyard-reference-server
bin="${CARGO_TARGET_DIR:-$root/target}/debug"
export PATH="$bin:$root/tests/peers/node_modules/.bin:$PATH"

switchyard-reference-server --http 127.0.0.1:7790 --era 2025-11-25 &
http_pid=$!
up_pid=""
# SIGTERM or SIGINT to this script (kill, timeout, a supervisor) stops the
# gateway too: `up` drains, stops its sidecars and their servers.
stop() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  kill "$http_pid" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
switchyard up --config examples/quickstart.toml &
up_pid=$!
wait "$up_pid"

