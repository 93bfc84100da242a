#!/usr/bin/env bash
# Idle resident memory of each binary (docs/reliability.md, "Idle RSS").
#
#   scripts/idle-rss.sh [SECONDS]     # default: measured 40 s after start
#
# Builds the release binaries, then runs, on free loopback ports, with the
# quickstart's three servers (examples/quickstart.toml, the store in a
# temporary directory):
#   1. switchyard-control-plane alone (no sidecars: its servers stay down);
#   2. switchyard up (the control plane in-process, one sidecar per server:
#      orders and everything over stdio, orders-http over HTTP).
# Nothing calls them at first. After SECONDS it prints, per process, VmRSS and its
# parts (RssAnon: heap, stacks; RssFile: the mapped binary and libraries),
# the threads, Pss (shared pages counted as a share) and the binary's size.
# Then it calls, once through the gateway, one tool with an outputSchema on
# each server (orders__get_order, orders-http__get_order,
# everything__get-structured-content: the sidecar compiles a schema on its
# tool's first result, tools::results), waits 5 s and prints the sidecars
# again.
# Environment: CARGO_TARGET_DIR; IDLE_RSS_BIN_DIR: measure the binaries in
# that directory instead (no build; it must hold switchyard,
# switchyard-control-plane, switchyard-sidecar and
# switchyard-reference-server: copy the last one from target/release to
# measure a `--profile dist` build).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
wait_secs="${1:-40}"
scripts/install-test-peers.sh >&2
if [ -n "${IDLE_RSS_BIN_DIR:-}" ]; then
  bin="$(cd "$IDLE_RSS_BIN_DIR" && pwd)"
  for b in switchyard switchyard-control-plane switchyard-sidecar switchyard-reference-server; do
    [ -x "$bin/$b" ] || { echo "idle-rss: $bin/$b is missing (IDLE_RSS_BIN_DIR must hold all four binaries)" >&2; exit 1; }
  done
else
  cargo build --release --quiet --bins \
    -p switchyard-control-plane -p switchyard-sidecar -p switchyard-reference-server
  bin="${CARGO_TARGET_DIR:-$root/target}/release"
fi
export PATH="$bin:$root/tests/peers/node_modules/.bin:$PATH"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# The quickstart's configuration with free ports and the store in $work.
config() { # name
  local grpc http mcp
  grpc=$(free_port); http=$(free_port); mcp=$(free_port)
  sed -e "s|127.0.0.1:7700|127.0.0.1:$grpc|" -e "s|127.0.0.1:7780|127.0.0.1:$http|" \
      -e "s|127.0.0.1:7701|127.0.0.1:$mcp|" -e "s|127.0.0.1:7790|127.0.0.1:$orders_http|" \
      -e "s|^path = .*|path = \"$work/$1/store.redb\"|" examples/quickstart.toml > "$work/$1.toml"
  mkdir -p "$work/$1"
}
# One line per process: name, VmRSS, RssAnon, RssFile, threads, then Pss
# (file pages shared with other processes, such as the sidecars' one binary,
# count a share each: what one more such process costs) and the binary's
# size.
show() { # name pid binary
  local f="/proc/$2/status"
  [ -r "$f" ] || { printf '%-28s gone\n' "$1"; return; }
  awk -v n="$1" -v size="$(stat -c %s "$3")" '
    FNR == NR && /^VmRSS:/ {rss=$2} FNR == NR && /^RssAnon:/ {anon=$2}
    FNR == NR && /^RssFile:/ {file=$2} FNR == NR && /^Threads:/ {thr=$2}
    FNR != NR && /^Pss:/ {pss=$2}
    END {printf "%-32s VmRSS %6.1f MiB  anon %5.1f  file %5.1f  threads %2d  Pss %5.1f  binary %5.1f MiB\n",
         n, rss/1024, anon/1024, file/1024, thr, pss/1024, size/1048576}' "$f" "/proc/$2/smaps_rollup"
}

orders_http=$(free_port)
switchyard-reference-server --http "127.0.0.1:$orders_http" --era 2025-11-25 2>"$work/orders-http.log" &
pids+=($!)

config cp
switchyard-control-plane --config "$work/cp.toml" 2>"$work/cp.log" &
cp=$!; pids+=($cp)
config up
switchyard up --config "$work/up.toml" >"$work/up.out" 2>"$work/up.log" &
up=$!; pids+=($up)

sleep "$wait_secs"
echo "idle for ${wait_secs} s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
show "switchyard-control-plane" "$cp" "$bin/switchyard-control-plane"
show "switchyard up" "$up" "$bin/switchyard"
sidecars() {
  for s in $(pgrep -P "$up" || true); do
    tr '\0' ' ' < "/proc/$s/cmdline" | grep -q 'switchyard-sidecar run' || continue
    name=$(tr '\0' '\n' < "/proc/$s/cmdline" | sed -n '/--config/{n;p}' | xargs basename | sed 's/\.toml$//')
    show "switchyard-sidecar ($name)" "$s" "$bin/switchyard-sidecar"
  done
}
sidecars

endpoint="http://$(sed -n 's/^listen = "\(.*\)".*/\1/p' "$work/up.toml" | head -1)"
for call in 'orders__get_order {"order_id":"O-1001"}' 'orders-http__get_order {"order_id":"O-1001"}' \
            'everything__get-structured-content {"location":"New York"}'; do
  switchyard call --endpoint "$endpoint" "${call%% *}" --args "${call#* }" --json > /dev/null ||
    echo "idle-rss: the call of ${call%% *} failed; its sidecar's figures below are without a call" >&2
done
sleep 5
echo "after one call of a tool with an outputSchema on each server"
sidecars
