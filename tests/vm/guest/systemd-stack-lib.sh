# SPDX-License-Identifier: LGPL-2.1-or-later
# The stacks of the systemd guest (guest/systemd-running.sh; copied to
# /vm/systemd-stack-lib.sh, sourced after systemd-lib.sh): an LVM volume vgsd/striped over the namespaces 1 and 2 of the controller
# stk0, an md RAID1 vmmirror over 3 and 4, made with Debian's lvm2 and
# mdadm, whose own udev rules give the names blkmqd matches (DM_VG_NAME,
# DM_LV_NAME; MD_LEVEL, MD_NAME). The dm and md modules are in the guest's
# modules tree (test-vm-systemd.sh: vm_module_tree), loaded by kmod on
# demand.
VG=vgsd
LVN=striped
MDN=vmmirror
RA_STACK=3072
STACK_CONF=/etc/blkmqd/blkmqd.conf.d/70-vmtest-stack.conf

# stack_disks: N1..N4, the namespaces of stk0 by their nsid
stack_disks() {
        N1= N2= N3= N4=
        for _d in /sys/block/nvme*n*; do
                case ${_d##*/} in *c*) continue ;; esac
                [ "$(cat $_d/device/serial 2>/dev/null | tr -d ' ')" = stk0 ] || continue
                eval "N$(cat $_d/nsid)=${_d##*/}"
        done
        echo "# stk0: nsid 1-4 are ${N1:-none} ${N2:-none} ${N3:-none} ${N4:-none}"
}
# stack_conf: the drop-in of the stacks. The shipped [Device nvme] sets
# Scheduler= and NrRequests= on every NVMe namespace; the drop-in's stack
# sections come later in the configuration and win on the members, but a
# member whose stack goes away would stay under [Device nvme]: the drop-in
# keeps it to the disks in no stack (this guest's conventional disk and
# the hot-added ones, by serial), so that the members get every boot
# value back, as the checks compare.
stack_conf() {
        mkdir -p ${STACK_CONF%/*}
        cat > $STACK_CONF <<EOC
[Device nvme]
MatchSerial=conv0 hot*

[Device vmstack]
MatchVolume=$VG/$LVN
Scheduler=mq-deadline
NrRequests=64
ReadAheadKB=$RA_STACK

[Device vmmirror]
MatchMDLevel=raid1
MatchMDName=$MDN
Scheduler=bfq
NrRequests=32
EOC
}
# sq DEV: what the stack sections set on a member
sq() { echo "sched=$(sched $1) nr=$(qattr $1 nr_requests)"; }
sq_is() { [ "$(sq $1)" = "$2" ]; }
# lv_dev: the dm device of the LV (dm-N, its dm/name VG-LV), empty when it
# is not active
lv_dev() {
        for _d in /sys/block/dm-*; do
                [ "$(cat $_d/dm/name 2>/dev/null)" = $VG-$LVN ] && echo ${_d##*/} && return 0
        done
        return 1
}
# lv_tuned WHEN: the LV's read-ahead and both its namespaces, in sysfs
lv_tuned() {
        LV=$(lv_dev)
        check "$1: $VG/$LVN (${LV:-not active}) read_ahead_kb $RA_STACK" vm_wait_for 20 attr_is "$LV" read_ahead_kb $RA_STACK
        for _n in $N1 $N2; do
                check "$1: $_n under $VG/$LVN: mq-deadline, nr_requests 64" vm_wait_for 20 sq_is $_n "sched=mq-deadline nr=64"
        done
}
# snap_sq DIR DEV: sq of DEV as its snapshot in DIR has it (snap_one)
snap_sq() {
        echo "sched=$(sed -n 's|^queue/scheduler:||p' $1/$(dkey $2)) nr=$(sed -n 's|^queue/nr_requests:||p' $1/$(dkey $2))"
}
# has_prop DEV KEY=VALUE: udev's database gives DEV that property
has_prop() { udevadm info -q property /dev/$1 2>/dev/null | grep -qx "$2"; }
