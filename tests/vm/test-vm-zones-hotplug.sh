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
vm_prepare

vm_boot vm-zones-hotplug 85 --subsys --udev "${VM_DAEMON_ARGS[@]}" \
        --hotplug-script "$VM_GUEST/zones-hotplug.actions" --script "$VM_GUEST/zones-hotplug.sh"
