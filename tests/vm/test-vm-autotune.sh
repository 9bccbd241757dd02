#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-autotune: closed-loop tuning on the NVMe namespaces of a 6.1 kernel
# (QEMU TCG guest, one boot: --zns --conventional --udev); see
# guest/autotune-nvme.sh: a trial on the conventional namespace under a
# mixed direct-I/O workload decides and sets its winner; on the ZNS
# namespace the pre-6.10 guard refuses it, saying why; SIGTERM restores.
# Usage: test-vm-autotune.sh [BLKMQD [BLKMQCTL]]
#        (default: $BLKMQD/$BLKMQCTL, else build/src/blkmqd, build/src/blkmqctl)
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
vm_prepare

vm_boot vm-autotune 240 --zns --conventional --udev "${VM_DAEMON_ARGS[@]}" \
        --script "$VM_GUEST/autotune-nvme.sh"
