#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# capture-trial-series.sh [OUTDIR]: boots the guest kernel of
# VM_KERNEL_SET (prepare.sh: bookworm, trixie, backports; trixie by
# default here, the current stable's 6.12) with the NVMe namespaces of
# vm-autotune and records, under vm-autotune's workload on the
# conventional one, the epoch series a trial sees (guest/trial-series.sh)
# into OUTDIR/guest-MAJOR.MINOR-mixed.tsv (default OUTDIR
# tests/fixtures/trial-series; the format: its README), for the trial
# simulator. Not a test: run by hand when a recording is wanted (about 5
# minutes under TCG). A setting not in force as asked fails the guest. TS_ROUNDS, TS_SETTLE, TS_SAMPLES reach the guest.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export VM_KERNEL_SET=${VM_KERNEL_SET:-trixie}
. "$VM_DIR/lib.sh"
OUT=${1:-$VM_DIR/../fixtures/trial-series}
vm_prepare
mkdir -p "$OUT"
tmp=$(mktemp -d /tmp/blkmqd-ts.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
envs=()
for v in TS_ROUNDS TS_SETTLE TS_SAMPLES; do
        [ -z "${!v:-}" ] || envs+=(--env "$v=${!v}")
done
VM_LOG_DIR=$tmp vm_boot trial-series 1200 --zns --conventional --quiet-console "${envs[@]}" \
        --file "$VM_GUEST/daemon-lib.sh:/vm/daemon-lib.sh" \
        --script "$VM_GUEST/trial-series.sh" ||
        { grep -a '^not ok' "$tmp"/trial-series*.console.log; echo "FAIL: the guest's recording failed"; exit 1; }
log=$(ls "$tmp"/trial-series*.console.log)
kver=$(sed -n 's/.*BLKMQD-VM-BOOTED .* kernel=\([0-9]*\.[0-9]*\).*/\1/p' "$log" | head -n1)
[ -n "$kver" ] || { echo "FAIL: no kernel release in $log"; exit 1; }
f=$OUT/guest-$kver-mixed.tsv
grep -a "^@TS@ " "$log" | sed "s/^@TS@ //" | tr -d '\r' >"$f"
n=$(grep -c '^[0-9]' "$f" || true)
[ "$n" -gt 100 ] || { echo "FAIL: $f: $n samples"; exit 1; }
echo "$f: $n samples"
