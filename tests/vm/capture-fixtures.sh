#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# capture-fixtures.sh [OUTDIR]: boots the guest kernel of VM_KERNEL_SET
# (prepare.sh: bookworm, trixie, backports) with a conventional and a ZNS
# NVMe namespace, null_blk zoned and a virtio disk, and writes their /sys/block
# attribute sets as OUTDIR/guest-MAJOR.MINOR-{nvme-conventional,nvme-zns,
# nullblk-zoned,virtio,virtio-mq-deadline}.tsv (default OUTDIR tests/fixtures/sysfs; the format:
# its README). Not a test: run by hand when a kernel's fixtures are wanted.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
OUT=${1:-$VM_DIR/../fixtures/sysfs}
vm_prepare
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/blkmqd-fx.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
VM_LOG_DIR=$tmp vm_boot capture 300 --zns --conventional --data-disk "$tmp/data.img" \
        --quiet-console --script "$VM_GUEST/sysfs-capture.sh"
log=$(ls "$tmp"/capture*.console.log)
kver=$(sed -n 's/.*BLKMQD-VM-BOOTED .* kernel=\([0-9]*\.[0-9]*\).*/\1/p' "$log" | head -n1)
[ -n "$kver" ] || { echo "FAIL: no kernel release in $log"; exit 1; }
for n in nvme-conventional nvme-zns nullblk-zoned virtio virtio-mq-deadline; do
        f=$OUT/guest-$kver-$n.tsv
        grep -a "^@FX@ $n	" "$log" | sed "s/^@FX@ $n	//" | tr -d '\r' >"$f"
        [ "$(wc -l <"$f")" -gt 10 ] || { echo "FAIL: $f: too few lines"; exit 1; }
        echo "$f: $(($(wc -l <"$f") - 1)) attributes"
done
