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

cache=${VM_CACHE:-$VM_DIR/cache}
. "$cache/$( [ "$VM_KERNEL_SET" = bookworm ] && echo vm.env || echo "vm-$VM_KERNEL_SET.env")"
deb=$(ls "$cache"/debs/linux-{image,modules}-"$VM_KVER"*.deb 2>/dev/null | head -n1 || true)
[ -n "$deb" ] || vm_skip "vm-stacks: no kernel package of $VM_KVER in $cache/debs"
mkdir -p "$tmp/x" "$tmp/mods"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/kernel/drivers/md/*' '*/kernel/crypto/xts.ko*'
for m in dm-mod dm-bufio md-mod raid0 raid1 dm-crypt xts; do
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
        [ -n "$p" ] || vm_skip "vm-stacks: $b not installed on the host (tools/install-deps)"
        args+=(--bin "$p:/sbin/$b")
done
for r in 55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 63-md-raid-arrays.rules 95-dm-notify.rules; do
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
vm_boot vm-stacks 600 --udev "${VM_DAEMON_ARGS[@]}" --file "$tmp/mods:/vm/mods" "${args[@]}" \
        --qemu-arg=-device --qemu-arg="nvme,id=stk,serial=stk0" "${q[@]}" \
        --script "$VM_GUEST/stacks.sh"
vm_finish vm-stacks
