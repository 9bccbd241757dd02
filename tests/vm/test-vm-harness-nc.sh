#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-harness-nc: negative controls of run-guest.py's kernel checks, two
# boots of a few seconds each. Each passes only if run-guest.py FAILS the
# boot and its message quotes the kernel's line:
#   boot 1: the guest script passes beside an "Oops:" line on the console;
#   boot 2: the kernel panics after /init (sysrq c), no result line.
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_prepare

fails=0
# nc NAME SCRIPT EXPECTED-MESSAGE: one boot that must fail with the message
nc() {
        local name=$1 script=$2 want=$3 out rc
        out=$(vm_boot "$name" 120 --quiet-console --script "$VM_GUEST/$script" 2>&1)
        rc=$?
        printf '%s\n' "$out" | grep -v "^run-guest: qemu:"
        if [ $rc -eq 77 ]; then
                vm_skip "vm-harness-nc: $name skipped"
        elif [ $rc -eq 0 ]; then
                echo "not ok - $name: run-guest.py passed the boot"
                fails=$((fails + 1))
        elif ! printf '%s\n' "$out" | grep -qF -- "$want"; then
                echo "not ok - $name: run-guest.py failed (rc=$rc) without: $want"
                fails=$((fails + 1))
        else
                echo "ok - $name: run-guest.py failed the boot (rc=$rc): $want"
        fi
}
nc vm-harness-oops harness-oops.sh \
        'FAIL (guest script rc=0, but its kernel said "Oops: harness negative control, written by the guest script")'
nc vm-harness-panic harness-panic.sh \
        'its kernel said "Kernel panic - not syncing: sysrq triggered crash"'
echo "vm-harness-nc: $((2 - fails)) of 2 negative controls held"
[ $fails -eq 0 ]
