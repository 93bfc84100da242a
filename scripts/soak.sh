#!/usr/bin/env bash
# The soak (docs/reliability.md, "Soak"): `switchyard up` (a release build)
# in front of three real MCP servers on loopback, under a steady mixed load
# for MINUTES (default 30), sampled every 10 s.
#
#   scripts/soak.sh [MINUTES]
#
# Installs the MCP peers if missing (scripts/install-test-peers.sh), builds
# the release binaries and the driver (tests/soak, `switchyard-soak`), then
# runs the driver. It writes into SOAK_OUT (default target/soak/<UTC time>):
#   samples.csv  one row per process per sample: RSS, open fds, threads, live
#                tokio tasks, store keys, sessions
#   summary.md   the load done, means per 5 minutes, and the verdict
#   up.log, up.stdout, orders-http.log, soak.toml, store/  the run itself
# Exits 0 when everything of ours is flat after warm-up (mean of the last
# third against the second third, within each measure's limit), 1 when
# something grows, 2 when the run could not be made.
#
# Environment: CARGO_TARGET_DIR (default target); SOAK_OUT; SOAK_SAMPLE_SECS
# (10).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
minutes="${1:-30}"
case "$minutes" in
  '' | *[!0-9]*) echo "usage: scripts/soak.sh [MINUTES]" >&2; exit 64 ;;
esac

scripts/install-test-peers.sh >&2
cargo build --release --quiet --bins \
  -p switchyard-control-plane -p switchyard-sidecar -p switchyard-reference-server -p switchyard-soak
target="${CARGO_TARGET_DIR:-$root/target}"
bin="$target/release"
out="${SOAK_OUT:-$target/soak/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$out"
echo "soak: $minutes min, output in $out" >&2
exec "$bin/switchyard-soak" --minutes "$minutes" --sample-secs "${SOAK_SAMPLE_SECS:-10}" \
  --out "$out" --bin-dir "$bin" \
  --everything "$root/tests/peers/node_modules/.bin/mcp-server-everything"
