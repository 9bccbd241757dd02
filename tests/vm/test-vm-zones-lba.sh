#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-zones-lba: blkmqctl's LBAs against nvme-cli's on a ZNS namespace with
# 4 KiB logical blocks (QEMU nvme-ns logical_block_size=4096, one boot:
# --zns --udev --block-size 4096); see guest/zones-lba.sh. blkmqctl counts
# 512-byte sectors, `nvme zns report-zones` the namespace's blocks. nvme-cli
# is bundled from the host (tools/install-deps installs it); without it the
# test is skipped (a failure under CI=true).
# Usage: test-vm-zones-lba.sh [BLKMQD [BLKMQCTL]]
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
command -v python3 >/dev/null || vm_skip "vm: python3 not found"
NVME=$(command -v nvme || true)
[ -n "$NVME" ] || vm_skip "vm-zones-lba: nvme-cli not found on the host (tools/install-deps installs it)"

"$VM_DIR/prepare.sh" || exit $?

export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
G=$VM_DIR/guest

s=$(date +%s.%N)
python3 "$VM_DIR/run-guest.py" --timeout 150 --zns --udev --block-size 4096 \
        --bin "$BLKMQD" --bin "$BLKMQCTL" --bin "$NVME" \
        --file "$G/daemon-lib.sh:/vm/daemon-lib.sh" \
        --log "$VM_LOG_DIR/vm-zones-lba.console.log" \
        --script "$G/zones-lba.sh"
rc=$?
e=$(date +%s.%N)
echo "=== vm-zones-lba: rc=$rc ($(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b-a }')s)"
exit $rc
