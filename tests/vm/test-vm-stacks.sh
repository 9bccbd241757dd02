#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-stacks: blkmqd on LVM, md and dm-crypt stacks (issue 33) over the five
# namespaces of an NVMe controller, trixie's 6.12 (guest/stacks.sh): the
# settings where they take effect, checked in sysfs; LV deactivation and
# activation, an md member failed, removed and added again, the array
# stopped and assembled, a dm-crypt mapping opened and closed; kill -9 and a
# restart, then every member's boot values back at stop. lvm2, mdadm,
# cryptsetup and sfdisk come from the host (tools/install-deps), the dm and
# md modules from the cached kernel package.
# Usage: test-vm-stacks.sh [BLKMQD [BLKMQCTL]]
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
export VM_KERNEL_SET=${VM_KERNEL_SET:-trixie}
vm_prepare
tmp=$(mktemp -d /tmp/blkmqd-vs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

vm_stack_guest "$tmp" 5 "dm-mod dm-bufio md-mod raid0 raid1 dm-crypt xts" "lvm dmsetup mdadm cryptsetup sfdisk" \
        "55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules" ||
        vm_skip "vm-stacks: $VM_STACK_ERR"
vm_boot vm-stacks 600 --udev "${VM_DAEMON_ARGS[@]}" "${VM_STACK_ARGS[@]}" --script "$VM_GUEST/stacks.sh"
vm_finish vm-stacks
