#!/usr/bin/env bash
# Runs the chaos suite on real processes (docs/reliability.md, "Chaos"):
# three etcd members, two control-plane replicas and two servers of two
# sidecars each (the reference server over stdio, and over Streamable HTTP)
# on loopback, under load, with each fault injected mid-call and mid-task,
# the cluster healed after each.
#
#   scripts/chaos.sh --fast              # each fault once (CI; about 90 s)
#   scripts/chaos.sh --full [--reps N]   # each fault N times (default 5); the
#                                        # report also goes to a file (below)
#   scripts/chaos.sh --fast --faults etcd-cut,replica-kill   # only those
#
# Exits non-zero when a call got no outcome, a background call lost or
# doubled its result, a card was lost, a call that is not read-only ran
# twice upstream, or a call to the restarted HTTP server failed after the
# cluster healed, printing why (and where the processes' logs are).
#
# Binaries: ${CARGO_TARGET_DIR:-target}/debug (built first; a no-op when up to date).
# Environment: CHAOS_REPORT (the --full report file, default
# ${CARGO_TARGET_DIR:-target}/chaos-report.md),
# CHAOS_WORK_DIR (keep the logs and data there), CHAOS_STRICT=1 (also fail
# on the known defects the report lists apart), CHAOS_TIMEOUT (seconds
# before the whole run is stopped: 300 for --fast, 1800 for --full).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

mode=""
reps=""
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --fast) mode=fast ;;
        --full) mode=full ;;
        --reps) reps="$2"; shift ;;
        --faults) extra+=(--faults "$2"); shift ;;
        -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ -z "$mode" ]]; then
    echo "chaos.sh: say --fast or --full (see --help)" >&2
    exit 2
fi

target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$target_dir" in /*) ;; *) target_dir="$root/$target_dir" ;; esac
bin_dir="$target_dir/debug"
# Always built (a no-op when they are up to date), so a run never uses a
# stale binary.
cargo build --locked --quiet -p switchyard-control-plane -p switchyard-sidecar \
    -p switchyard-reference-server -p switchyard-chaos --bins
command -v etcd >/dev/null || { echo "chaos.sh: etcd is missing: run scripts/install-test-peers.sh" >&2; exit 2; }

args=(--bin-dir "$bin_dir")
if [[ -n "${CHAOS_WORK_DIR:-}" ]]; then args+=(--work-dir "$CHAOS_WORK_DIR"); fi
if [[ "${CHAOS_STRICT:-0}" == 1 ]]; then args+=(--strict); fi
if [[ "$mode" == fast ]]; then
    args+=(--reps "${reps:-1}")
    limit="${CHAOS_TIMEOUT:-300}"
else
    args+=(--reps "${reps:-5}" --report "${CHAOS_REPORT:-$target_dir/chaos-report.md}")
    limit="${CHAOS_TIMEOUT:-1800}"
fi
start=$(date +%s)
set +e
timeout --signal=TERM --kill-after=20 "$limit" "$bin_dir/switchyard-chaos" "${args[@]}" "${extra[@]}"
status=$?
set -e
echo "== chaos ($mode): exit $status after $(( $(date +%s) - start )) s"
if [[ $status -eq 124 ]]; then
    echo "chaos.sh: the run did not finish within ${limit} s" >&2
fi
exit $status
