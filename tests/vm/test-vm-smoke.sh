#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-smoke: the harness and the guest kernel do what later vm tests rely on.
#   boot 1 (--zns --conventional): ZNS namespace limits in sysfs, /dev/ngXnY,
#          schedulers (mq-deadline switch, kyber loaded on demand), null_blk
#          zoned through configfs.ko + null_blk.ko.
#   boot 2 (--subsys --conventional --udev --hotplug-script): device_del the ZNS
#          controller, device_add it under another id on another root port,
#          the multipath head nvmeXnY and hidden path nvmeXcYnZ come back,
#          with udev add/remove events (host systemd-udevd in the guest).
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"

command -v python3 >/dev/null || vm_skip "vm: python3 not found"

t0=$(date +%s.%N)
# Fetch/verify the cache once, up front (applies the skip policy itself).
"$VM_DIR/prepare.sh" || exit $?
t1=$(date +%s.%N)

export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
results=()
run() {
        local name=$1; shift
        echo "=== $name: run-guest.py $*"
        python3 "$VM_DIR/run-guest.py" --timeout 150 --log "$VM_LOG_DIR/vm-smoke-$name.console.log" "$@"
        local rc=$?
        echo "=== $name: rc=$rc"
        results+=("$name=$rc")
        return $rc
}

run zns --zns --conventional --script "$VM_DIR/guest/smoke-zns.sh"
rc1=$?
run hotplug --subsys --conventional --udev --script "$VM_DIR/guest/smoke-hotplug.sh" \
        --hotplug-script "$VM_DIR/guest/smoke-hotplug.actions"
rc2=$?
t2=$(date +%s.%N)

awk -v a="$t0" -v b="$t1" -v c="$t2" \
        'BEGIN { printf "=== timing: prepare %.2fs, two boots %.2fs, total %.2fs\n", b-a, c-b, c-a }'
echo "=== results: ${results[*]}"

pass=0 fail=0 skipped=0
for rc in $rc1 $rc2; do
        case $rc in
        0) pass=$((pass + 1)) ;;
        77) skipped=$((skipped + 1)) ;;
        *) fail=$((fail + 1)) ;;
        esac
done
echo "vm-smoke: $pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ] || exit 1
[ $pass -gt 0 ] || vm_skip "vm: every boot skipped"
exit 0
