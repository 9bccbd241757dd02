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
command -v python3 >/dev/null || vm_skip "vm: python3 not found"

"$VM_DIR/prepare.sh" || exit $?

export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
rounds=${CRASH_ROUNDS:-10}
s=$(date +%s.%N)
python3 "$VM_DIR/run-guest.py" --timeout $((120 + rounds * 30)) --zns --udev \
        --bin "$BLKMQD" --bin "$BLKMQCTL" --env "CRASH_ROUNDS=$rounds" \
        --file "$VM_DIR/guest/daemon-lib.sh:/vm/daemon-lib.sh" \
        --log "$VM_LOG_DIR/vm-zones-crash.console.log" \
        --script "$VM_DIR/guest/zones-crash.sh"
rc=$?
e=$(date +%s.%N)
echo "=== vm-zones-crash: rc=$rc, $rounds rounds ($(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b-a }')s)"
exit $rc
