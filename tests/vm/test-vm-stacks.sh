#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-stacks: blkmqd on LVM, md and dm-crypt stacks (issue 33) over the five
# namespaces of an NVMe controller, trixie's 6.12 (guest/stacks.sh): the
# settings where they take effect, checked in sysfs, and explain's tree of
# the striped LV; LV deactivation and
# activation, an md member failed, removed and added again, the array
# stopped and assembled, a dm-crypt mapping opened and closed; kill -9 and a
# restart, then every member's boot values back at stop. An NVMe subsystem
# of two controllers and three shared namespaces, with nvme_core.multipath=N
# (a disk per controller and namespace, as dm-multipath wants them): a
# dm-multipath map over both paths of one namespace (request-based, then
# bio-based) and md RAID1 over two namespaces, one through each
# controller; controller hpB unplugged and plugged again by QMP
# (guest/stacks.actions) while both stacks are up. lvm2, mdadm, cryptsetup
# and sfdisk come from the host (tools/install-deps), the dm, md and
# dm-multipath modules from the cached kernel package.
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

vm_stack_guest "$tmp" 5 "dm-mod dm-bufio md-mod raid0 raid1 dm-crypt xts dm-multipath dm-round-robin" \
        "lvm dmsetup mdadm cryptsetup sfdisk" \
        "55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules" ||
        vm_skip "vm-stacks: $VM_STACK_ERR"
# Subsystem hps: hpA on root port rp2, hpB on rp3 (run-guest.py makes the
# root ports for --hotplug-script), namespaces 1-3 of 64 MiB shared by both
# (owned by the subsystem: they outlive hpB's unplug, data and all).
HP_ARGS=(--hotplug-script "$VM_GUEST/stacks.actions" --append nvme_core.multipath=N
        --qemu-arg=-device --qemu-arg="nvme-subsys,id=hps,nqn=nqn.2026-11.io.blkmqd:hps"
        --qemu-arg=-device --qemu-arg="nvme,id=hpA,serial=hp0,subsys=hps,bus=rp2"
        --qemu-arg=-device --qemu-arg="nvme,id=hpB,serial=hp0,subsys=hps,bus=rp3")
for i in 1 2 3; do
        truncate -s 64M "$tmp/hp$i.img"
        HP_ARGS+=(--qemu-arg=-drive --qemu-arg="file=$tmp/hp$i.img,id=hp$i,format=raw,if=none"
                  --qemu-arg=-device --qemu-arg="nvme-ns,drive=hp$i,bus=hpA,nsid=$i,shared=on")
done
vm_boot vm-stacks 600 --udev "${VM_DAEMON_ARGS[@]}" "${VM_STACK_ARGS[@]}" "${HP_ARGS[@]}" --script "$VM_GUEST/stacks.sh"
vm_finish vm-stacks
