# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-harness-nc.sh: a kernel "Oops:" line on the console
# (written at KERN_CRIT through /dev/kmsg, as the kernel prints one), then a
# script that passes. run-guest.py must fail this boot.
echo "<2>Oops: harness negative control, written by the guest script" > /dev/kmsg
check "the guest script itself passes" true
