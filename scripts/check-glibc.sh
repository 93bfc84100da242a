#!/usr/bin/env bash
# Checks the newest glibc symbol version the built binaries need
# (docs/operations.md: the sidecar is copied into stdio servers' own images,
# which need glibc 2.34 or newer). Fails when a binary needs a newer one, or
# a glibc feature marker such as GLIBC_ABI_DT_RELR (2.36), so that a change
# of link options or of a libc call cannot silently drop RHEL 9 or Ubuntu
# 22.04 based server images.
#
#   scripts/check-glibc.sh [DIR]    # default: ${CARGO_TARGET_DIR:-target}/debug
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-${CARGO_TARGET_DIR:-$root/target}/debug}"
max="2.34"
status=0
for b in switchyard switchyard-control-plane switchyard-sidecar; do
  [ -x "$dir/$b" ] || { echo "check-glibc: $dir/$b is not built" >&2; exit 1; }
  headers=$(objdump -p "$dir/$b") || { echo "check-glibc: objdump cannot read $dir/$b" >&2; exit 1; }
  needs=$(grep -o 'GLIBC_[A-Z_0-9.]*' <<< "$headers" | sort -u || true)
  newest=$(sed -n 's/^GLIBC_\([0-9.]*\)$/\1/p' <<< "$needs" | sort -V | tail -1)
  if [ -z "$newest" ]; then
    echo "check-glibc: $b needs no GLIBC_ symbol version (not a binary linked against glibc?)" >&2
    status=1
    continue
  fi
  markers=$(grep -v '^GLIBC_[0-9.]*$' <<< "$needs" || true)
  if [ "$(printf '%s\n%s\n' "$newest" "$max" | sort -V | tail -1)" != "$max" ] || [ -n "$markers" ]; then
    echo "check-glibc: $b needs GLIBC_$newest ${markers//$'\n'/ } (at most GLIBC_$max, no markers)" >&2
    status=1
  else
    echo "$b: GLIBC_$newest"
  fi
done
exit $status
