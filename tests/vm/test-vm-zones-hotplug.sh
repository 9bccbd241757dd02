#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-zones-hotplug: blkmqd's zone allocator across a controller unplug and
# replug (QEMU TCG guest, one boot: --subsys --udev, 6.1 kernel). The ZNS
# namespace sits behind an nvme-subsys (head nvmeXnY + hidden path
# nvmeXcYnZ); with two sealed zones and a lease in progress, the controller
# is device_del'd while blkmqd runs and device_add'ed back under another id
# on another root port (guest/zones-hotplug.actions). See
# guest/zones-hotplug.sh for what is checked.
# Usage: test-vm-zones-hotplug.sh [BLKMQD [BLKMQCTL]]
#        (default: $BLKMQD/$BLKMQCTL, else build/src/blkmqd, build/src/blkmqctl)
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
command -v python3 >/dev/null || vm_skip "vm: python3 not found"

"$VM_DIR/prepare.sh" || exit $?

export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
G=$VM_DIR/guest

s=$(date +%s.%N)
python3 "$VM_DIR/run-guest.py" --timeout 85 --subsys --udev \
        --bin "$BLKMQD" --bin "$BLKMQCTL" \
        --file "$G/daemon-lib.sh:/vm/daemon-lib.sh" \
        --hotplug-script "$G/zones-hotplug.actions" \
        --log "$VM_LOG_DIR/vm-zones-hotplug.console.log" \
        --script "$G/zones-hotplug.sh"
rc=$?
e=$(date +%s.%N)
echo "=== vm-zones-hotplug: rc=$rc ($(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b-a }')s)"
exit $rc
