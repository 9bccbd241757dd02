# SPDX-License-Identifier: LGPL-2.1-or-later
# Host-side shell helpers for tests/vm. Source it: . "$(dirname "$0")/lib.sh"
VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)}

# vm_skip REASON...: the project's skip policy (exit 77, or 1 when CI=true),
# implemented once in skip.sh (run-guest.py calls it too).
vm_skip() {
        sh "$VM_DIR/skip.sh" "$*"
        exit $?
}
