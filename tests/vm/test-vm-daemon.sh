#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-daemon: blkmqd tunes real NVMe devices of a 6.1 kernel (QEMU TCG guest).
#   boot 1 (--zns --conventional --udev), guest/daemon-zns.sh: the shipped
#          config; dry run writes nothing; kyber/256/4096 on the conventional
#          namespace, mq-deadline on the ZNS one (the pre-6.10 guard),
#          Scheduler=kyber for zoned refused, null_blk zoned hotplug tuned,
#          SIGHUP re-applies, SIGTERM restores every original, exit 0.
#   boot 2 (--subsys --udev), guest/daemon-multipath.sh: bio-based head
#          left alone, hidden path nvmeXcYnZ tuned, controller unplug +
#          replug under another id: the path is dropped, found again, tuned.
# Usage: test-vm-daemon.sh [BLKMQD [BLKMQCTL]]
#        (default: $BLKMQD/$BLKMQCTL, else build/src/blkmqd, build/src/blkmqctl)
# Exit: 0 pass, 1 fail, 77 skip (1 when CI=true).
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
vm_binaries "$@"
vm_prepare
SRC=$(cd "$VM_DIR/../.." && pwd)

common=(--udev "${VM_DAEMON_ARGS[@]}" --file "$SRC/conf/blkmqd.conf:/etc/blkmqd/blkmqd.conf")
t1=$(date +%s.%N)
vm_boot vm-daemon-zns 120 --zns --conventional "${common[@]}" --script "$VM_GUEST/daemon-zns.sh"
vm_boot vm-daemon-multipath 120 --subsys "${common[@]}" --script "$VM_GUEST/daemon-multipath.sh" \
        --hotplug-script "$VM_GUEST/daemon-hotplug.actions"
t2=$(date +%s.%N)
awk -v a="$t1" -v b="$t2" 'BEGIN { printf "=== timing: two boots %.2fs\n", b-a }'
vm_finish vm-daemon
