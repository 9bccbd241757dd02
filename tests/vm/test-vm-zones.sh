#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-zones: blkmqd's zone allocator with the kernel backend on the real ZNS
# namespace of a 6.1 kernel (QEMU TCG guest, one boot: --zns --udev
# --max-active 4), driven by blkmqctl; see guest/zones-kernel.sh. zbd
# (zbd-utils, tools/install-deps) is bundled with libzbd: its report of every
# zone is checked against blkmqctl zones. blkzone is bundled when the host
# has it (another independent view); the data is read back with plain dd.
# Usage: test-vm-zones.sh [BLKMQD [BLKMQCTL]]
#        (default: $BLKMQD/$BLKMQCTL, else build/src/blkmqd, build/src/blkmqctl)
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
vm_prepare

extra=()
BLKZONE=$(command -v blkzone || true)
[ -n "$BLKZONE" ] && extra+=(--bin "$BLKZONE")
ZBD=$(command -v zbd || true)
[ -n "$ZBD" ] || vm_skip "vm: zbd (zbd-utils) missing: tools/install-deps installs it"
extra+=(--bin "$ZBD")

vm_boot vm-zones 150 --zns --udev --max-active 4 "${VM_DAEMON_ARGS[@]}" "${extra[@]}" \
        --script "$VM_GUEST/zones-kernel.sh"
