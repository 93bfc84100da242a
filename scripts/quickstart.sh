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

# The servers run in process groups of their own (job control): Ctrl-C in
# the terminal reaches this script alone, which passes one SIGTERM on, so
# `up` drains (a second one would hurry it).
set -m
switchyard-reference-server --http 127.0.0.1:7790 --era 2025-11-25 &
http_pid=$!
up_pid=""
# SIGTERM or SIGINT to this script (Ctrl-C, kill, timeout, a supervisor)
# stops the gateway too: `up` drains, stops its sidecars and their
# servers. Another one meanwhile hurries it (calls cancelled at once).
stop() {
  if [ -n "$up_pid" ]; then
    trap 'kill -TERM "$up_pid" 2>/dev/null || true' INT TERM
    kill -TERM "$up_pid" 2>/dev/null || true
    # `wait` returns early when a trapped signal comes: wait again.
    while kill -0 "$up_pid" 2>/dev/null; do
      wait "$up_pid" 2>/dev/null || true
    done
  fi
  kill "$http_pid" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
switchyard up --config examples/quickstart.toml &
up_pid=$!
wait "$up_pid"

