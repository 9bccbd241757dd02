#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The shipped units: systemd-analyze verifies them, and the daemon's sandbox
# keeps an exposure score of at most 2.2 (bookworm's own oomd has 2.0).
# usage: test-unit-security.sh BUILD_SYSTEMD_DIR SOURCE_SYSTEMD_DIR
set -u
built=$1
src=$2
# 2.2: systemd-analyze scores ProtectKernelTunables= by the directive, and
# the unit spells its paths out instead (/proc/irq must stay writable):
# +0.2 for the same protection less /proc/irq.
max=2.2
fail=0 pass=0

skip() {
        if [ "${CI:-}" = true ]; then echo "not ok - $1 (CI=true: a skip is a failure)"; exit 1; fi
        echo "SKIP: $1"; exit 77
}
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed"

check() { # description, command...
        local d=$1; shift
        if "$@"; then echo "ok - $d"; pass=$((pass + 1)); else echo "not ok - $d"; fail=$((fail + 1)); fi
}

out=$(systemd-analyze security --offline=true "$built/blkmqd.service" 2>&1)
score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for blkmqd.service: \([0-9.]*\).*/\1/p')
echo "blkmqd.service exposure: ${score:-?}"
check "exposure score found" test -n "$score"
check "exposure $score <= $max" awk -v s="${score:-99}" -v m="$max" 'BEGIN { exit !(s <= m) }'
# The settings the daemon cannot work without must stay.
check "sysfs below /sys/devices and /proc/irq stay writable" grep -q '^ReadWritePaths=/sys/devices /proc/irq$' "$built/blkmqd.service"
# ProtectKernelTunables= names /proc/irq itself read-only, and for the same
# path that wins over ReadWritePaths= and BindPaths= (EROFS in the
# vm-systemd guest): its list is spelled out instead, /proc/irq left out.
check "no ProtectKernelTunables= (it makes /proc/irq read-only)" bash -c "! grep -q '^ProtectKernelTunables=' '$built/blkmqd.service'"
check "/sys and /proc/sys read-only" grep -q '^ReadOnlyPaths=/sys /proc/sys ' "$built/blkmqd.service"
check "no PrivateNetwork= (it would cut off udev events)" bash -c "! grep -q '^PrivateNetwork=' '$built/blkmqd.service'"
check "Type=notify with a watchdog" bash -c "grep -q '^Type=notify' '$built/blkmqd.service' && grep -q '^WatchdogSec=' '$built/blkmqd.service'"
check "socket passes the name the daemon looks for" grep -q '^FileDescriptorName=varlink' "$src/blkmqd.socket"

# Unit syntax. Binaries are not installed here, so only complaints about
# the files themselves count.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$built"/*.service "$src"/*.socket "$src"/*.timer "$tmp"/ 2>/dev/null
v=$(cd "$tmp" && systemd-analyze verify --man=no --recursive-errors=no ./*.service ./*.socket ./*.timer 2>&1 |
        grep -v -e 'is not executable' -e 'No such file or directory' -e 'Unit is bound to inactive unit' || true)
[ -n "$v" ] && printf '%s\n' "$v"
check "systemd-analyze verify finds nothing wrong in the units" test -z "$v"

echo "units: $pass passed, $fail failed"
[ "$fail" = 0 ]
