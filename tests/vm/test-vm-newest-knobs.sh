#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-newest-knobs: queue/zoned_qd1_writes and queue/async_depth set by
# blkmqd on a real kernel that has them (VM_KERNEL_SET=backports: 7.x;
# meson test vm-newest-knobs@backports), read back, restored after a kill -9
# and a restart, and on a path that came back by hotplug (one boot, --subsys
# --udev); blkmqctl show --json's writeLimits as sysfs has them (write
# streams and atomic writes: reported, not tuned). See guest/newest-knobs.sh.
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
vm_prepare
SRC=$(cd "$VM_DIR/../.." && pwd)

vm_boot vm-newest-knobs 120 --subsys --udev "${VM_DAEMON_ARGS[@]}" \
        --file "$SRC/conf/blkmqd.conf:/etc/blkmqd/blkmqd.conf" \
        --hotplug-script "$VM_GUEST/zones-hotplug.actions" --script "$VM_GUEST/newest-knobs.sh"
vm_finish vm-newest-knobs
