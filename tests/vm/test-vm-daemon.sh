#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-daemon: blkmqd tunes real NVMe devices of a 6.1 kernel (QEMU TCG guest).
#   boot 1 (--zns --conventional --udev), guest/daemon-zns.sh: the shipped
#          config; dry run writes nothing; kyber/256/4096 on the conventional
#          namespace, mq-deadline on the ZNS one (the pre-6.10 guard),
#          Scheduler=kyber for zoned refused, null_blk zoned hotplug tuned,
#          SIGHUP re-applies, SIGTERM restores every original, exit 0.
#   boot 2 (--subsys --udev), guest/daemon-multipath.sh: bio-based head
#          left alone, hidden path nvmeXcYnZ tuned, controller unplug +
#          replug under another id: the path is dropped, found again, tuned.
# Usage: test-vm-daemon.sh [BLKMQD]   (default: $BLKMQD, else build/src/blkmqd)
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
SRC=$(cd "$VM_DIR/../.." && pwd)

BLKMQD=${1:-${BLKMQD:-$SRC/build/src/blkmqd}}
[ -x "$BLKMQD" ] || { echo "FAIL: blkmqd binary not found: $BLKMQD (pass it as the argument)"; exit 1; }
BLKMQD=$(cd "$(dirname "$BLKMQD")" && pwd)/$(basename "$BLKMQD")   # absolute: run-guest.py --bin
command -v python3 >/dev/null || vm_skip "vm: python3 not found"

t0=$(date +%s.%N)
"$VM_DIR/prepare.sh" || exit $?
t1=$(date +%s.%N)

export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
G=$VM_DIR/guest
common=(--udev --bin "$BLKMQD" --file "$G/daemon-lib.sh:/vm/daemon-lib.sh"
        --file "$SRC/conf/blkmqd.conf:/etc/blkmqd/blkmqd.conf")
results=()
run() {
        local name=$1; shift
        local s e
        s=$(date +%s.%N)
        echo "=== $name: run-guest.py $*"
        python3 "$VM_DIR/run-guest.py" --timeout 120 --log "$VM_LOG_DIR/vm-daemon-$name.console.log" "$@"
        local rc=$?
        e=$(date +%s.%N)
        echo "=== $name: rc=$rc ($(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b-a }')s)"
        results+=("$name=$rc")
        return $rc
}

run zns --zns --conventional "${common[@]}" --script "$G/daemon-zns.sh"
rc1=$?
run multipath --subsys "${common[@]}" --script "$G/daemon-multipath.sh" \
        --hotplug-script "$G/daemon-hotplug.actions"
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
echo "vm-daemon: $pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ] || exit 1
[ $pass -gt 0 ] || vm_skip "vm: every boot skipped"
exit 0
