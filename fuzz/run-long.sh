#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The long fuzzing runs: each target (default all four) to RUNS executions
# (default 10,000,000), ASan + UBSan, JOBS targets at a time (default 2),
# starting from fuzz/corpus/<target>/ and the regression cases. The corpus
# that grew is merged back into fuzz/corpus/<target>/ (minimized: only
# inputs that add coverage), to be committed. Prints per target the
# executions, exec/s, coverage, features, corpus size and crashes; a crash
# leaves its reproducer in $FUZZ_OUT (add it to fuzz/regressions/<target>/
# with the fix).
#
#   fuzz/run-long.sh                          # ~1 h on 2 cores (fuzz-conf writes files: ~3k exec/s)
#   RUNS=1000000 fuzz/run-long.sh conf        # one target, shorter
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz-long}
runs=${RUNS:-10000000}
jobs=${JOBS:-2}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(varlink varlink-idl conf zone-record)

# Build with the short run's recipe (0 s of fuzzing).
FUZZ_OUT=$out FUZZ_BUILD_ONLY=1 "$root/fuzz/run-short.sh" > /dev/null || exit 1
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# fuzz-conf writes its files for every input: in memory they cost less.
[ -w /dev/shm ] && export TMPDIR=${TMPDIR:-/dev/shm}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/blkmqd-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch

run_one() {
        local t=$1 work=$out/long-$t log=$out/long-$t.log
        rm -rf "$work"
        mkdir -p "$work"
        local s=$(date +%s)
        # fuzz-varlink's limits are scaled down to 2 KiB messages: longer
        # inputs only cost time.
        local max_len=65536
        [ "$t" = varlink ] && max_len=8192
        (cd "$out" && "./fuzz-$t" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -max_len=$max_len \
                -print_final_stats=1 "$work" "$root/fuzz/corpus/$t" > "$log" 2>&1)
        local rc=$?
        local e=$(date +%s)
        local before=$(ls "$root/fuzz/corpus/$t" | wc -l)
        mkdir -p "$out/merged-$t"
        (cd "$out" && "./fuzz-$t" -merge=1 "$root/fuzz/corpus/$t" "$work" > "$log.merge" 2>&1)
        local after=$(ls "$root/fuzz/corpus/$t" | wc -l)
        local n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        local cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1)
        local ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n1)
        printf 'fuzz-%s: rc %s, %s executions in %s s (%s exec/s), %s, %s, corpus %s -> %s files\n' \
                "$t" "$rc" "${n:-?}" "$((e - s))" "$(( ${n:-0} / (e - s > 0 ? e - s : 1) ))" "${cov:-cov: ?}" \
                "${ft:-ft: ?}" "$before" "$after"
        [ $rc = 0 ] || grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -n 5
}

pids=()
for t in "${targets[@]}"; do
        run_one "$t" > "$out/long-$t.result" &
        pids+=($!)
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 5; done
done
wait

for t in "${targets[@]}"; do cat "$out/long-$t.result"; done
! grep -q 'rc [1-9]' "$out"/long-*.result
