# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-harness-nc.sh: the kernel panics after /init
# (sysrq c), so no result line comes. run-guest.py must fail this boot and
# quote the panic.
echo 1 > /proc/sys/kernel/sysrq
echo c > /proc/sysrq-trigger
check "not reached: the kernel panicked" true
