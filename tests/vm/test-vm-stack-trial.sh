#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-stack-trial: a trial on an LVM volume striped over two NVMe namespaces
# (issue 33, item 4), trixie's 6.12 (guest/stack-trial.sh): blkmqctl trial
# VG/LV measures the volume and gives each candidate to both namespaces in
# lockstep, checked in sysfs while it runs; --emit-conf's section matches
# the volume; a trial restored midway, and blkmqd's stop, leave both at
# their originals. lvm2 and dmsetup come from the host
# (tools/install-deps), the dm modules from the cached kernel package.
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

cache=${VM_CACHE:-$VM_DIR/cache}
. "$cache/$( [ "$VM_KERNEL_SET" = bookworm ] && echo vm.env || echo "vm-$VM_KERNEL_SET.env")"
deb=$(ls "$cache"/debs/linux-{image,modules}-"$VM_KVER"*.deb 2>/dev/null | head -n1 || true)
[ -n "$deb" ] || vm_skip "vm-stack-trial: no kernel package of $VM_KVER in $cache/debs"
mkdir -p "$tmp/x" "$tmp/mods"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/kernel/drivers/md/*'
for m in dm-mod dm-bufio; do
        f=$(find "$tmp/x" -name "$m.ko*" | head -n1)
        [ -n "$f" ] || continue
        case $f in
        *.xz) xz -dc "$f" >"$tmp/mods/$m.ko" ;;
        *.zst) zstd -qdc "$f" >"$tmp/mods/$m.ko" ;;
        *) cp "$f" "$tmp/mods/$m.ko" ;;
        esac
done
args=()
for b in lvm dmsetup; do
        p=$(command -v $b || true)
        [ -n "$p" ] || vm_skip "vm-stack-trial: $b not installed on the host (tools/install-deps)"
        args+=(--bin "$p:/sbin/$b")
done
for r in 55-dm.rules 56-lvm.rules 60-persistent-storage-dm.rules 95-dm-notify.rules; do
        for d in /usr/lib/udev/rules.d /lib/udev/rules.d; do
                [ -f "$d/$r" ] && { args+=(--file "$d/$r:/usr/lib/udev/rules.d/$r"); break; }
        done
done
q=()
for i in 1 2; do
        truncate -s 256M "$tmp/stk$i.img"
        q+=(--qemu-arg=-drive --qemu-arg="file=$tmp/stk$i.img,id=stk$i,format=raw,if=none"
            --qemu-arg=-device --qemu-arg="nvme-ns,drive=stk$i,bus=stk,nsid=$i")
done
vm_boot vm-stack-trial 420 --udev "${VM_DAEMON_ARGS[@]}" --file "$tmp/mods:/vm/mods" "${args[@]}" \
        --qemu-arg=-device --qemu-arg="nvme,id=stk,serial=stk0" "${q[@]}" \
        --script "$VM_GUEST/stack-trial.sh"
vm_finish vm-stack-trial
