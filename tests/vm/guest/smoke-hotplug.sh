# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-smoke.sh, boot 2 (--subsys --conventional and
# --hotplug-script smoke-hotplug.actions): unplug the ZNS controller and plug
# it back under another controller id on another root port.

# zoned_head, zoned_path, path_ctrl: /vm/lib.sh.

H=$(zoned_head); P=$(zoned_path)
echo "# before: head ${H:-none}, path ${P:-none}"
check "zoned multipath head nvmeXnY present" [ -n "$H" ]
check "hidden path nvmeXcYnZ present" [ -n "$P" ]
if vm_kernel_ge 6 10; then
        # 6.12 and later: a bio-based queue has no queue/scheduler at all
        # (6.1: "none"); mq-deadline is a module, loaded by the write
        check "head $H: bio-based, no queue/scheduler" [ ! -e /sys/block/$H/queue/scheduler ]
        echo mq-deadline > /sys/block/$P/queue/scheduler
else
        check_eq "head $H: bio-based, no scheduler" none "$(cat /sys/block/$H/queue/scheduler)"
fi
check_match "path $P carries the scheduler" "*mq-deadline*" "$(cat /sys/block/$P/queue/scheduler)"
check_eq "path $P queue/zoned" host-managed "$(cat /sys/block/$P/queue/zoned)"
check_eq "path $P is hidden" 1 "$(cat /sys/block/$P/hidden 2>/dev/null)"
check "generic char device /dev/ng${H#nvme}" [ -c /dev/ng${H#nvme} ]
C1=$(path_ctrl $P)
A1=$(cat /sys/class/nvme/$C1/address)
S1=$(cat /sys/class/nvme/$C1/serial | tr -d ' ')
echo "# controller $C1 at $A1, serial $S1, subsystem $(cat /sys/class/nvme/$C1/subsysnqn)"

if [ "$VM_UDEV" = 1 ]; then
        udevadm monitor --kernel --udev --subsystem-match=block > /tmp/udev-events 2>&1 &
        MON=$!
        sleep 0.2
fi
t0=$(vm_uptime)
check "host: device_del ZNS controller" vm_hotplug unplug
check "head $H gone after unplug" vm_wait_for 10 sh -c "! test -e /sys/block/$H"
check "path $P gone after unplug" vm_wait_for 10 sh -c "! test -e /sys/block/$P"
t1=$(vm_uptime)
check "host: device_add under controller nvmeB on rp2" vm_hotplug replug
check "zoned head back after replug" vm_wait_for 20 have_zoned_head
t2=$(vm_uptime)
H2=$(zoned_head); P2=$(zoned_path)
echo "# after: head ${H2:-none}, path ${P2:-none}"
check_eq "head after replug queue/zoned" host-managed "$(cat /sys/block/$H2/queue/zoned 2>/dev/null)"
check_eq "head after replug nr_zones" "$VM_ZONES" "$(cat /sys/block/$H2/queue/nr_zones 2>/dev/null)"
check "hidden path after replug" [ -n "$P2" ]
check_eq "path $P2 queue/zoned" host-managed "$(cat /sys/block/$P2/queue/zoned 2>/dev/null)"
check "/dev/$H2 and /dev/ng${H2#nvme} after replug" [ -b /dev/$H2 -a -c /dev/ng${H2#nvme} ]
C2=$(path_ctrl $P2)
A2=$(cat /sys/class/nvme/$C2/address 2>/dev/null)
echo "# controller $C2 at $A2, serial $(cat /sys/class/nvme/$C2/serial | tr -d ' ')"
check "namespace now behind another PCI function ($A1 -> $A2)" [ -n "$A2" -a "$A1" != "$A2" ]
check_eq "same serial after replug" "$S1" "$(cat /sys/class/nvme/$C2/serial 2>/dev/null | tr -d ' ')"
if [ -n "${MON:-}" ]; then
        udevadm settle -t 10
        kill $MON
        grep -E '^(UDEV|KERNEL)' /tmp/udev-events
        check "udev: remove event for $H" grep -q "^UDEV.*remove .*/$H (block)" /tmp/udev-events
        check "udev: add event for $H2" grep -q "^UDEV.*add .*/$H2 (block)" /tmp/udev-events
        # Kernel fact (6.1): hidden multipath paths get no uevents at all;
        # a daemon sees the head's event and must find the paths in sysfs.
        n=$(grep -c "/$P2 (block)" /tmp/udev-events)
        echo "# note: $n uevent(s) for hidden path $P2 (expected 0 on 6.1: uevents suppressed for hidden disks)"
        check "udev: by-id link back for serial $S1" sh -c "ls /dev/disk/by-id/ | grep -q _${S1}"
fi
echo "# unplug round trip $(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}')s, replug until head visible $(awk -v a=$t1 -v b=$t2 'BEGIN{printf "%.2f", b-a}')s (guest clock)"
vm_summary
