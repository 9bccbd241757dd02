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

# The device-mapper and md modules: prepare.sh caches drivers/block only.
cache=${VM_CACHE:-$VM_DIR/cache}
. "$cache/$( [ "$VM_KERNEL_SET" = bookworm ] && echo vm.env || echo "vm-$VM_KERNEL_SET.env")"
deb=$(ls "$cache"/debs/linux-{image,modules}-"$VM_KVER"*.deb 2>/dev/null | head -n1 || true)
[ -n "$deb" ] || { echo "FAIL: no kernel package of $VM_KVER in $cache/debs"; exit 1; }
mkdir -p "$tmp/x" "$tmp/mods"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/kernel/drivers/md/*' '*/kernel/crypto/xts.ko*'
for m in dm-mod dm-bufio md-mod raid0 raid1 dm-crypt dm-multipath dm-round-robin xts; do
        f=$(find "$tmp/x" -name "$m.ko*" | head -n1)
        [ -n "$f" ] || continue
        case $f in
        *.xz) xz -dc "$f" >"$tmp/mods/$m.ko" ;;
        *.zst) zstd -qdc "$f" >"$tmp/mods/$m.ko" ;;
        *) cp "$f" "$tmp/mods/$m.ko" ;;
        esac
done

args=()
for b in lvm dmsetup mdadm cryptsetup sfdisk; do
        p=$(command -v $b || true)
        [ -n "$p" ] || { echo "FAIL: $b not installed on the host"; exit 1; }
        args+=(--bin "$p:/sbin/$b")
done
for r in 55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules \
         10-dm.rules 13-dm-disk.rules 11-dm-lvm.rules; do
        for d in /usr/lib/udev/rules.d /lib/udev/rules.d; do
                [ -f "$d/$r" ] && { args+=(--file "$d/$r:/usr/lib/udev/rules.d/$r"); break; }
        done
done
q=()
for i in 1 2 3 4 5; do
        truncate -s 256M "$tmp/stk$i.img"
        q+=(--qemu-arg=-drive --qemu-arg="file=$tmp/stk$i.img,id=stk$i,format=raw,if=none"
            --qemu-arg=-device --qemu-arg="nvme-ns,drive=stk$i,bus=stk,nsid=$i")
done
VM_LOG_DIR=$tmp vm_boot capture-stacks 600 --udev --conventional --file "$tmp/mods:/vm/mods" "${args[@]}" \
        --qemu-arg=-device --qemu-arg="nvme,id=stk,serial=stk0" "${q[@]}" \
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
