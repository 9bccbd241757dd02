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
NVME=$(command -v nvme || true)
[ -n "$NVME" ] || vm_skip "vm-zones-lba: nvme-cli not found on the host (tools/install-deps installs it)"
vm_prepare

vm_boot vm-zones-lba 150 --zns --udev --block-size 4096 "${VM_DAEMON_ARGS[@]}" --bin "$NVME" \
        --script "$VM_GUEST/zones-lba.sh"
