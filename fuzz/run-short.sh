#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Builds the fuzzers (the varlink message path, the IDL parser, the config
# loader with drop-ins, the emulated zones' state decoder) with clang, libFuzzer, ASan and UBSan (no meson
# needed) and runs each for FUZZ_SECONDS (default 15, so ~30 s in all) over
# its corpus in fuzz/corpus/<target>/ (FUZZ_TARGETS= picks some). New inputs go to a scratch
# directory, the seeds stay as they are. Exit status: 0, or libFuzzer's on a
# crash, leak or sanitizer report (the reproducer is left in $FUZZ_OUT).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz-short}
secs=${FUZZ_SECONDS:-15}
cc=${CC_FUZZ:-clang}

command -v "$cc" >/dev/null || { echo "run-short.sh: $cc not found, skipping" >&2; exit 77; }
mkdir -p "$out"

python3 "$root/tools/embed-file.py" "$root/src/varlink/org.varlink.service.varlink" "$out/org.varlink.service.varlink.h"
flags=(-g -O1 -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$out" -I"$root/include" -I"$root/lib")
# The layers' folders (HACKING.md); the fuzzers may include any of them.
for d in basic io varlink policy zbd; do flags+=(-I"$root/src/$d"); done
# shellcheck disable=SC2207
libs=($(pkg-config --cflags --libs libsystemd jansson))

"$cc" "${flags[@]}" "$root/fuzz/fuzz-varlink.c" "$root/src/varlink/varlink.c" "$root/lib/varlink-wire.c" "$root/src/varlink/varlink-idl.c" \
        "$root/src/basic/log.c" "${libs[@]}" -o "$out/fuzz-varlink"
"$cc" "${flags[@]}" "$root/fuzz/fuzz-varlink-idl.c" "$root/src/varlink/varlink-idl.c" "${libs[@]}" \
        -o "$out/fuzz-varlink-idl"
# conf.c wants the build's config.h: the paths do not matter here.
cat > "$out/config.h" <<'H'
#pragma once
#define PACKAGE_VERSION "fuzz"
#define SYSCONFDIR "/nonexistent/etc"
#define LIBDIR_CONF "/nonexistent/lib"
#define RUNSTATEDIR "/nonexistent/run"
#define VARLINK_ADDRESS "/nonexistent/io.blkmqd"
H
# shellcheck disable=SC2207
"$cc" "${flags[@]}" "$root/fuzz/fuzz-conf.c" "$root/src/policy/conf.c" "$root/src/policy/knobs.c" "$root/src/policy/autotune-policy.c" "$root/src/basic/util.c" "$root/src/basic/log.c" \
        $(pkg-config --cflags --libs inih libsystemd) -lm -o "$out/fuzz-conf"
"$cc" "${flags[@]}" "$root/fuzz/fuzz-zone-record.c" "$root/src/zbd/zbd.c" "$root/src/basic/log.c" "$root/src/basic/util.c" "$root/src/basic/test-hooks.c" \
        $(pkg-config --cflags --libs libsystemd liburing) -lpthread -o "$out/fuzz-zone-record"

[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# fuzz-conf writes its files under $TMPDIR: a scratch one, removed after.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/blkmqd-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
for target in ${FUZZ_TARGETS:-varlink varlink-idl conf zone-record}; do
        work="$out/work-$target"
        mkdir -p "$work"
        # Every crash found so far, first: each must run clean now.
        if compgen -G "$root/fuzz/regressions/$target/*" > /dev/null; then
                echo "== fuzz-$target: regression cases"
                (cd "$out" && "./fuzz-$target" "$root/fuzz/regressions/$target"/*)
        fi
        echo "== fuzz-$target for ${secs}s"
        (cd "$out" && "./fuzz-$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
                -max_len=65536 -print_final_stats=1 "$work" "$root/fuzz/corpus/$target")
done
