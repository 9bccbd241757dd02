#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Builds the varlink fuzzers with clang, libFuzzer, ASan and UBSan (no meson
# needed) and runs each for FUZZ_SECONDS (default 15, so ~30 s in all) over
# its seed corpus in fuzz/corpus/<target>/. New inputs go to a scratch
# directory, the seeds stay as they are. Exit status: 0, or libFuzzer's on a
# crash, leak or sanitizer report (the reproducer is left in $FUZZ_OUT).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz-short}
secs=${FUZZ_SECONDS:-15}
cc=${CC_FUZZ:-clang}

command -v "$cc" >/dev/null || { echo "run-short.sh: $cc not found, skipping" >&2; exit 77; }
mkdir -p "$out"

python3 "$root/tools/embed-file.py" "$root/src/org.varlink.service.varlink" "$out/org.varlink.service.varlink.h"
flags=(-g -O1 -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$out" -I"$root/src" -I"$root/include")
# shellcheck disable=SC2207
libs=($(pkg-config --cflags --libs libsystemd jansson))

"$cc" "${flags[@]}" "$root/fuzz/fuzz-varlink.c" "$root/src/varlink.c" "$root/src/varlink-wire.c" "$root/src/varlink-idl.c" \
        "$root/src/log.c" "${libs[@]}" -o "$out/fuzz-varlink"
"$cc" "${flags[@]}" "$root/fuzz/fuzz-varlink-idl.c" "$root/src/varlink-idl.c" "${libs[@]}" \
        -o "$out/fuzz-varlink-idl"

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
for target in varlink varlink-idl; do
        work="$out/work-$target"
        mkdir -p "$work"
        echo "== fuzz-$target for ${secs}s"
        (cd "$out" && "./fuzz-$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
                -max_len=65536 -print_final_stats=1 "$work" "$root/fuzz/corpus/$target")
done
