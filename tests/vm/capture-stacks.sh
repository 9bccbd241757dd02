#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# capture-stacks.sh [OUTDIR]: boots the guest kernel of VM_KERNEL_SET
# (default trixie) with an NVMe controller of five namespaces (serial stk0),
# builds LVM, dm-crypt, md and dm-multipath stacks on them
# (guest/stacks-capture.sh) and writes their sysfs trees and udev
# properties as OUTDIR/guest-MAJOR.MINOR-stacks.tsv (default
# tests/fixtures/sysfs; the format: its README). Not a test: run by hand.
# Needs lvm2, mdadm, cryptsetup-bin, dmsetup and fdisk (sfdisk) on the host:
# they are bundled into the guest with their libraries.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
OUT=${1:-$VM_DIR/../fixtures/sysfs}
export VM_KERNEL_SET=${VM_KERNEL_SET:-trixie}
vm_prepare
tmp=$(mktemp -d /tmp/blkmqd-st.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT

vm_stack_guest "$tmp" 5 "dm-mod dm-bufio md-mod raid0 raid1 dm-crypt dm-multipath dm-round-robin xts" \
        "lvm dmsetup mdadm cryptsetup sfdisk" \
        "55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules
         10-dm.rules 13-dm-disk.rules 11-dm-lvm.rules" || { echo "FAIL: $VM_STACK_ERR"; exit 1; }
VM_LOG_DIR=$tmp vm_boot capture-stacks 600 --udev --conventional "${VM_STACK_ARGS[@]}" \
        --quiet-console --script "$VM_GUEST/stacks-capture.sh"
log=$(ls "$tmp"/capture-stacks*.console.log)
kver=$(sed -n 's/.*BLKMQD-VM-BOOTED .* kernel=\([0-9]*\.[0-9]*\).*/\1/p' "$log" | head -n1)
[ -n "$kver" ] || { echo "FAIL: no kernel release in $log"; exit 1; }
f=$OUT/guest-$kver-stacks.tsv
{
        echo "# sysfs trees and udev properties of LVM, dm-crypt, md and dm-multipath stacks, captured by tests/vm/capture-stacks.sh, kernel $(sed -n 's/.*BLKMQD-VM-BOOTED .* kernel=\([^ ]*\).*/\1/p' "$log" | head -n1)"
        grep -a '^@ST@ ' "$log" | sed 's/^@ST@ //' | tr -d '\r'
} >"$f"
grep -a '^# ' "$log" | tr -d '\r' | grep -E '^# (dm|md)' || true
[ "$(wc -l <"$f")" -gt 100 ] || { echo "FAIL: $f: too few lines"; exit 1; }
echo "$f: $(($(wc -l <"$f") - 1)) lines"
