#!/usr/bin/env bash
# Short fuzzing run: each cargo-fuzz target in fuzz/ (mount_image, fsck_image, recovery) for
# N seconds, one after the other. Prints one summary line per target (executions, crash or
# not); a crash leaves its input in fuzz/artifacts/TARGET/ and the exit status is non-zero.
#
#   bash scripts/fuzz-short.sh [SECONDS]          (default 30 per target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). On a stable toolchain, cargo-fuzz's nightly
# flags are allowed through RUSTC_BOOTSTRAP=1 (set here). Environment: TARGETS (default all
# three), SANITIZER (default address; `none` is faster), KEEP_LOGS=1 keeps the logs.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-30}
targets=${TARGETS:-mount_image fsck_image recovery}
sanitizer=${SANITIZER:-address}
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
cd "$repo/fuzz"
logs=$(mktemp -d)
[ "${KEEP_LOGS:-0}" = 1 ] || trap 'rm -rf "$logs"' EXIT

cargo fuzz build --sanitizer "$sanitizer" || exit 2
failed=0
for t in $targets; do
    log="$logs/$t.log"
    cargo fuzz run --sanitizer "$sanitizer" "$t" -- -max_total_time="$secs" >"$log" 2>&1
    rc=$?
    # libFuzzer's last "#N ... exec/s" line; "Done N runs" when the time ran out.
    execs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' | tail -1)
    [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "$t: ${secs}s, ${execs:-?} executions, ${cov:-cov: ?}, no crash"
    else
        failed=1
        echo "$t: FAILED (exit $rc) after ${execs:-?} executions"
        grep -E "panicked at|^SUMMARY|Test unit written to" "$log" | head -5 | sed 's/^/    /'
        [ "${KEEP_LOGS:-0}" = 1 ] && echo "    log: $log"
    fi
done
exit $failed
