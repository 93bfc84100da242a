#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ (docs/reliability.md, "Fuzzing").
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   # default: 60 s, every target
#   scripts/fuzz.sh --check                            # can this machine fuzz? (exit 0 if so)
#
# Installs cargo-fuzz if it is missing, builds every target once (release,
# debug assertions on, no sanitizer; FUZZ_ASAN=1 for AddressSanitizer, which
# needs RUSTC_BOOTSTRAP=1 on a stable toolchain and is set here), then runs
# each for the given time on a copy of its seed corpus (fuzz/corpus/<target>)
# in a work directory, so a run never grows the committed corpus. Prints one
# line per target: seconds, executions, crashes, peak RSS. Exits non-zero on
# a crash, a timeout, an out-of-memory or any crash artifact, and prints the
# artifact's path (reproduce with `<binary> <artifact>`).
#
# Environment: CARGO_TARGET_DIR (default fuzz/target); FUZZ_WORK_DIR (default
# a new temporary directory; kept when something failed or FUZZ_KEEP=1);
# FUZZ_BUILD=dev for an unoptimised build (about half the build time, 3 to 15
# times fewer executions: what scripts/test.sh uses); FUZZ_ASAN=1;
# FUZZ_RSS_LIMIT_MB (2048); FUZZ_TIMEOUT (10 s per input).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

CARGO_FUZZ_VERSION=0.13.2

# Whether this machine can build and run the targets; prints why not.
preflight() {
    case "$(uname -s)-$(uname -m)" in
        Linux-x86_64 | Linux-aarch64) ;;
        *)
            echo "libFuzzer targets are only run on Linux x86_64/aarch64 (this is $(uname -s) $(uname -m))"
            return 1
            ;;
    esac
    if ! command -v c++ > /dev/null; then
        echo "no C++ compiler (c++) to build libFuzzer (libfuzzer-sys); install g++ or clang"
        return 1
    fi
    if ! cargo fuzz --version > /dev/null 2>&1; then
        echo "installing cargo-fuzz $CARGO_FUZZ_VERSION" >&2
        if ! cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION" > /tmp/cargo-fuzz-install.$$ 2>&1; then
            tail -5 /tmp/cargo-fuzz-install.$$
            rm -f /tmp/cargo-fuzz-install.$$
            echo "cargo-fuzz $CARGO_FUZZ_VERSION could not be installed (no crates.io?)"
            return 1
        fi
        rm -f /tmp/cargo-fuzz-install.$$
    fi
    return 0
}

if [ "${1:-}" = "--check" ]; then
    if why=$(preflight); then
        echo "ok: $(cargo fuzz --version), $(rustc --version)"
        exit 0
    fi
    echo "$why"
    exit 1
fi

seconds="${1:-60}"
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
    echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...] | --check" >&2
    exit 2
fi
if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi
for t in "${targets[@]}"; do
    if [ ! -f "fuzz/fuzz_targets/$t.rs" ]; then
        echo "no such target: $t (fuzz/fuzz_targets/$t.rs)" >&2
        exit 2
    fi
done

if ! why=$(preflight); then
    echo "fuzzing cannot run here: $why" >&2
    exit 1
fi

target_dir="${CARGO_TARGET_DIR:-$root/fuzz/target}"
triple="$(rustc -vV | sed -n 's/^host: //p')"
sanitizer=none
build_env=()
case "${FUZZ_BUILD:-release}" in
    release) profile=(--release) out=release ;;
    dev) profile=(--dev) out=debug ;;
    *)
        echo "FUZZ_BUILD must be release or dev, not ${FUZZ_BUILD}" >&2
        exit 2
        ;;
esac
if [ "${FUZZ_ASAN:-0}" = 1 ]; then
    sanitizer=address
    build_env=(RUSTC_BOOTSTRAP=1)
fi

work="${FUZZ_WORK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/switchyard-fuzz.XXXXXX")}"
mkdir -p "$work"

echo "== building the fuzz targets (${FUZZ_BUILD:-release}, sanitizer: $sanitizer)"
build_start=$(date +%s)
build_log="$work/build.log"
# One cargo invocation builds them all; `cargo fuzz build` takes no list.
if ! (cd fuzz && env "${build_env[@]}" cargo fuzz build "${profile[@]}" --sanitizer "$sanitizer" \
    --debug-assertions --target-dir "$target_dir") > "$build_log" 2>&1; then
    tail -40 "$build_log"
    echo "fuzz targets did not build (whole log: $build_log)" >&2
    exit 1
fi
echo "   built in $(($(date +%s) - build_start))s"

status=0
summary=()
for t in "${targets[@]}"; do
    bin="$target_dir/$triple/$out/$t"
    corpus="$work/corpus/$t"
    artifacts="$work/artifacts/$t"
    log="$work/$t.log"
    mkdir -p "$corpus" "$artifacts"
    if [ -d "fuzz/corpus/$t" ]; then
        cp -R "fuzz/corpus/$t/." "$corpus/"
    fi
    echo "== fuzzing $t for ${seconds}s"
    start=$(date +%s)
    : > "$log"
    # Every target is deterministic, so a timeout that does not come back
    # when its input is run again alone was the machine (a process starved
    # on a busy host), not the parser: reported, its input kept apart, and
    # fuzzing goes on (same corpus) for the time left.
    while :; do
        rc=0
        left=$((seconds - ($(date +%s) - start)))
        "$bin" -max_total_time="$((left > 1 ? left : 1))" -rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}" \
            -timeout="${FUZZ_TIMEOUT:-10}" -print_final_stats=1 \
            -artifact_prefix="$artifacts/" "$corpus" >> "$log" 2>&1 || rc=$?
        found=$(find "$artifacts" -type f | head -1)
        if [ "$rc" -ne 0 ] && [ -n "$found" ] && [[ "$(basename "$found")" == timeout-* ]] &&
            "$bin" -timeout="${FUZZ_TIMEOUT:-10}" "$found" > "$log.rerun" 2>&1; then
            echo "   $t: a timeout that does not reproduce (the input runs in time alone): $found"
            mkdir -p "$work/not-reproduced/$t"
            mv "$found" "$work/not-reproduced/$t/"
            found=""
            rc=0
            [ $(($(date +%s) - start)) -lt "$seconds" ] && continue
        fi
        break
    done
    took=$(($(date +%s) - start))
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{n += $1} END {print n}')
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | sort -n | tail -1)
    crashes=0
    if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
        crashes=1
        status=1
        grep -a -E "^(==[0-9]+== ?)?ERROR: |panicked at|SUMMARY: " "$log" | head -5 || true
        echo "   $t failed (exit $rc); log: $log"
        if [ -n "$found" ]; then
            echo "   artifact: $found"
            echo "   reproduce: $bin $found"
        fi
    fi
    line=$(printf '%-16s %5ss  %12s runs  crashes %d  peak RSS %s MB' \
        "$t" "$took" "${runs:-?}" "$crashes" "${rss:-?}")
    if [ -d "$work/not-reproduced/$t" ]; then
        line+="  (timeouts not reproduced: $(find "$work/not-reproduced/$t" -type f | wc -l))"
    fi
    summary+=("$line")
    echo "   $line"
done

echo "== fuzzing summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [ "$status" -ne 0 ] || [ "${FUZZ_KEEP:-0}" = 1 ]; then
    echo "work directory (corpus, logs, artifacts): $work"
else
    rm -rf "$work"
fi
exit "$status"
