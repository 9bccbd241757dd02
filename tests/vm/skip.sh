#!/bin/sh
# SPDX-License-Identifier: LGPL-2.1-or-later
# skip.sh REASON...: the one implementation of the project's skip policy for
# the vm suite. Prints one line and exits 77 (skip) -- or 1 (fail) when
# CI=true, because CI must not go green by skipping.
# Shell: . lib.sh; vm_skip "reason"      Python (run-guest.py): skip("reason")
reason=$(echo "$*" | tr '\n' ' ' | sed 's/ *$//')
[ -n "$reason" ] || reason=skipped
if [ "${CI:-}" = true ]; then
        echo "FAIL: $reason (a skip is a failure when CI=true)"
        exit 1
fi
echo "SKIP: $reason"
exit 77
