# SPDX-License-Identifier: LGPL-2.1-or-later
# Sourced by the guest scripts of stacked devices (stacks.sh,
# stack-trial.sh, stacks-capture.sh), which tests/vm/lib.sh's
# vm_stack_guest puts in /vm with the modules (/vm/mods) and the tools.
#
# stack_setup N: loads the modules there are (device-mapper first, xts
# before dm-crypt), makes lvm's and cryptsetup's run directories, checks
# that device-mapper is up and that the controller with serial "stk0" has
# N namespaces, and sets N1 ... Nn to their names in /sys/block order.
# LVMC: lvm's --config in a guest without udev's device list; lvm_: lvm
# with it; settle: udev's queue emptied (20 s at most).
LVMC='devices { obtain_device_list_from_udev=0 }'
lvm_() { lvm "$@" --config "$LVMC"; }
settle() { udevadm settle -t 20 2>/dev/null; }

stack_setup() {
        for m in dm-mod dm-bufio md-mod raid0 raid1 xts dm-crypt dm-multipath dm-round-robin; do
                [ -f /vm/mods/$m.ko ] || continue
                insmod /vm/mods/$m.ko 2>/dev/null || echo "# insmod $m: $?"
        done
        mkdir -p /run/lock/lvm /run/lvm /etc/lvm /run/cryptsetup /dev/mapper
        dmsetup mknodes 2>/dev/null
        check "device-mapper loaded" [ -e /dev/mapper/control ]
        STK=
        for d in /sys/block/nvme*n*; do
                [ "$(cat $d/device/serial 2>/dev/null | tr -d ' ')" = stk0 ] && STK="$STK ${d##*/}"
        done
        # shellcheck disable=SC2086
        check "$1 namespaces of stk0 ($STK)" [ "$(echo $STK | wc -w)" -eq "$1" ]
        i=1
        for d in $STK; do
                eval "N$i=$d"
                i=$((i + 1))
        done
}
