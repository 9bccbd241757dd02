#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-zones-crash: kill -9 rounds against blkmqd's zone allocator on the real
# ZNS namespace of a 6.1 kernel (QEMU TCG guest, one boot: --zns --udev);
# see guest/zones-crash.sh. CRASH_ROUNDS rounds (default 10; bench/zone-crash
# --guest runs 50).
# Usage: test-vm-zones-crash.sh [BLKMQD [BLKMQCTL]]
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
vm_prepare

rounds=${CRASH_ROUNDS:-10}
echo "# $rounds rounds"
vm_boot vm-zones-crash $((120 + rounds * 30)) --zns --udev "${VM_DAEMON_ARGS[@]}" --env "CRASH_ROUNDS=$rounds" \
        --file "$VM_GUEST/zones-crash-lib.sh:/vm/zones-crash-lib.sh" \
        --script "$VM_GUEST/zones-crash.sh"
