#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-stack-trial: a trial on an LVM volume striped over two NVMe namespaces
# (issue 33, item 4), trixie's 6.12 (guest/stack-trial.sh): blkmqctl trial
# VG/LV measures the volume and gives each candidate to both namespaces in
# lockstep, checked in sysfs while it runs; --emit-conf's section matches
# the volume; a trial restored midway, and blkmqd's stop, leave both at
# their originals. Then the lockstep's edges over two more namespaces: an
# md RAID 1's hotplug trial with a member that refuses kyber
# (BLKMQD_TEST_FAIL_WRITE), a member's own trial refused meanwhile, and
# dm-crypt on the LV, refused while a member is in its own trial and while
# the members differ, then tried. lvm2, dmsetup, mdadm and cryptsetup come
# from the host (tools/install-deps), the dm and md modules from the cached
# kernel package.
# Usage: test-vm-stack-trial.sh [BLKMQD [BLKMQCTL]]
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
export VM_KERNEL_SET=${VM_KERNEL_SET:-trixie}
vm_prepare
tmp=$(mktemp -d /tmp/blkmqd-vst.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

vm_stack_guest "$tmp" 4 "dm-mod dm-bufio md-mod raid1 dm-crypt xts" "lvm dmsetup mdadm cryptsetup" \
        "55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules" ||
        vm_skip "vm-stack-trial: $VM_STACK_ERR"
vm_boot vm-stack-trial 600 --udev "${VM_DAEMON_ARGS[@]}" "${VM_STACK_ARGS[@]}" --script "$VM_GUEST/stack-trial.sh"
vm_finish vm-stack-trial
