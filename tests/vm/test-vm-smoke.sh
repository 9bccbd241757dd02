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
vm_prepare

t1=$(date +%s.%N)
vm_boot vm-smoke-zns 150 --zns --conventional --script "$VM_GUEST/smoke-zns.sh"
vm_boot vm-smoke-hotplug 150 --subsys --conventional --udev --script "$VM_GUEST/smoke-hotplug.sh" \
        --hotplug-script "$VM_GUEST/smoke-hotplug.actions"
t2=$(date +%s.%N)
awk -v a="$t1" -v b="$t2" 'BEGIN { printf "=== timing: two boots %.2fs\n", b-a }'
vm_finish vm-smoke
