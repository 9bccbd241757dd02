# SPDX-License-Identifier: LGPL-2.1-or-later
# Host-side shell helpers for tests/vm. Source it: . "$(dirname "$0")/lib.sh"
VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)}

# vm_skip REASON...: the project's skip policy (exit 77, or 1 when CI=true),
# implemented once in skip.sh (run-guest.py calls it too).
vm_skip() {
        sh "$VM_DIR/skip.sh" "$*"
        exit $?
}

# vm_binaries [BLKMQD [BLKMQCTL]]: sets BLKMQD and BLKMQCTL to absolute paths
# (run-guest.py --bin needs them so): the arguments, else $BLKMQD/$BLKMQCTL,
# else build/src/. A missing binary fails the test, it is not a skip.
vm_binaries() {
        local src
        src=$(cd "$VM_DIR/../.." && pwd)
        BLKMQD=${1:-${BLKMQD:-$src/build/src/blkmqd}}
        BLKMQCTL=${2:-${BLKMQCTL:-$src/build/src/blkmqctl}}
        [ -x "$BLKMQD" ] || { echo "FAIL: blkmqd binary not found: $BLKMQD (pass it as the first argument)"; exit 1; }
        [ -x "$BLKMQCTL" ] || { echo "FAIL: blkmqctl binary not found: $BLKMQCTL (pass it as the second argument)"; exit 1; }
        BLKMQD=$(cd "$(dirname "$BLKMQD")" && pwd)/$(basename "$BLKMQD")
        BLKMQCTL=$(cd "$(dirname "$BLKMQCTL")" && pwd)/$(basename "$BLKMQCTL")
}
