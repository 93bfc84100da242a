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
trap 'kill $http_pid 2>/dev/null || true' EXIT
switchyard up --config examples/quickstart.toml
