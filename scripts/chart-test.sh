#!/usr/bin/env bash
# Tests the Helm chart (helm/switchyard) offline: renders it with the real
# Helm engine for every values file in helm/tests/values/, lints it,
# validates every manifest with `kubernetes-validate --strict -k 1.30.0`,
# loads every rendered configuration with `switchyard check-config` and
# `switchyard-sidecar check-config`, and checks the Grafana dashboard.
# scripts/test.sh runs it; scripts/install-test-peers.sh installs the tools.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/tests/peers/.venv"
if ! "$venv/bin/python" -c 'import helm_python, kubernetes_validate, yamllint' 2>/dev/null; then
  scripts/install-test-peers.sh
fi
# The binaries whose config checks the test runs (a no-op when built).
cargo build --locked --quiet -p switchyard-control-plane -p switchyard-sidecar --bins
export SWITCHYARD_BIN_DIR="${CARGO_TARGET_DIR:-$root/target}/debug"
cd helm/tests
"$venv/bin/python" -m unittest -v test_chart
