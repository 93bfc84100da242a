#!/usr/bin/env bash
# Installs everything the tests need, then runs every test: formatting and
# lints, unit and integration tests against real peers, and the official
# conformance suite. This is the README's test command; .ci/run calls it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
start=$(date +%s)

scripts/install-test-peers.sh

echo "== module import cycles"
python3 scripts/check-module-cycles.py

echo "== cargo fmt / clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== rustdoc: links between items resolve (STYLE.md, Docs)"
RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" \
  cargo doc --workspace --no-deps --document-private-items --locked -q

echo "== build"
cargo build --workspace --bins --locked

echo "== glibc the binaries need (at most 2.34: docs/operations.md)"
scripts/check-glibc.sh

echo "== cargo test"
cargo test --workspace --locked -- --test-threads "${SWITCHYARD_TEST_THREADS:-4}"

echo "== console (/ui) in a real browser"; scripts/console-test.sh

echo "== Helm chart"; scripts/chart-test.sh

echo "== conformance suite (client side)"
scripts/conformance.sh
echo "== conformance suite (client side, auth/* scenarios: per-server OAuth)"; scripts/conformance-auth.sh

echo "== conformance suite (server side: the fixture, then the fixture behind the gateway)"
scripts/conformance-server.sh direct
scripts/conformance-server.sh gateway

# Chaos, the fast subset: each fault once on a real cluster (three etcd
# members, two replicas, two sidecars), about 90 s (docs/reliability.md).
# Strict: a task result lost or an orphaned card fails the run too.
echo "== chaos (fast subset)"; CHAOS_STRICT=1 scripts/chaos.sh --fast

# Fuzzing, a short run: every target of fuzz/ for 20 s, unoptimised (half
# the build time of a release build; docs/reliability.md).
echo "== fuzzing (short run)"
if why=$(scripts/fuzz.sh --check 2>&1); then
    FUZZ_BUILD="${FUZZ_BUILD:-dev}" scripts/fuzz.sh "${SWITCHYARD_FUZZ_SECONDS:-20}"
else
    echo "== fuzzing SKIPPED: $why"
fi

echo "== all tests passed in $(( $(date +%s) - start ))s"
