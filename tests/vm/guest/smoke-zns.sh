# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-smoke.sh, boot 1 (--zns --conventional).
# busybox sh; /vm/lib.sh (ok, not_ok, check, check_eq, ...) is already sourced.

echo "# kernel $(uname -r), uptime $(vm_uptime)s"

# The controllers probe asynchronously: find the zoned namespace by scanning.
Z= C=
for d in /sys/block/nvme*; do
        n=${d##*/}
        case $(cat "$d/queue/zoned") in
        host-managed) Z=$n ;;
        none) C=$n ;;
        esac
done
echo "# zoned namespace: ${Z:-none}, conventional namespace: ${C:-none}"
check "a host-managed NVMe namespace exists" [ -n "$Z" ]
check "a conventional NVMe namespace exists" [ -n "$C" ]
Q=/sys/block/$Z/queue
check_eq "$Z queue/zoned" host-managed "$(cat $Q/zoned)"
check_eq "$Z nr_zones" "$VM_ZONES" "$(cat /sys/block/$Z/queue/nr_zones)"
check_eq "$Z chunk_sectors (64 MiB zones)" 131072 "$(cat $Q/chunk_sectors)"
zamb=$(cat $Q/zone_append_max_bytes 2>/dev/null)
check_match "$Z zone_append_max_bytes is set" "[1-9]*" "$zamb"
# From 6.10 a limit of at least the number of zones reads 0 (no limit).
want_active=$VM_MAX_ACTIVE want_open=$VM_MAX_OPEN
if vm_kernel_ge 6 10; then
        [ "$VM_MAX_ACTIVE" -ge "$VM_ZONES" ] && want_active=0
        [ "$VM_MAX_OPEN" -ge "$VM_ZONES" ] && want_open=0
fi
check_eq "$Z max_active_zones" "$want_active" "$(cat $Q/max_active_zones)"
check_eq "$Z max_open_zones" "$want_open" "$(cat $Q/max_open_zones)"
echo "# $Z: max_sectors_kb=$(cat $Q/max_sectors_kb) zone_append_max_bytes=$zamb"

ng=/dev/ng${Z#nvme}
check "$ng exists (generic char device)" [ -c "$ng" ]
check "/dev/$Z exists (block device)" [ -b "/dev/$Z" ]

sched=$(cat $Q/scheduler)
echo "# $Z scheduler: $sched"
check_match "$Z boots with scheduler none" "*\[none\]*" "$sched"
if vm_kernel_ge 6 10; then
        # trixie's and later cloud kernels build mq-deadline as a module:
        # listed once loaded (the write below loads it)
        check "$Z: mq-deadline is a module (mq-deadline.ko)" \
                [ -f /lib/modules/$(uname -r)/kernel/block/mq-deadline.ko ]
else
        check_match "$Z offers mq-deadline (built in)" "*mq-deadline*" "$sched"
fi
echo mq-deadline > $Q/scheduler
check_match "$Z scheduler switched to mq-deadline" "*\[mq-deadline\]*" "$(cat $Q/scheduler)"

# A scheduler name loads its module on demand (kernel -> /sbin/modprobe,
# busybox's, with the modules.dep prepare.sh made).
check_eq "$C queue/zoned" none "$(cat /sys/block/$C/queue/zoned)"
echo kyber > /sys/block/$C/queue/scheduler
check_match "$C: kyber loaded on demand" "*\[kyber\]*" "$(cat /sys/block/$C/queue/scheduler)"
check "$C: kyber tunable read_lat_nsec" [ -f /sys/block/$C/queue/iosched/read_lat_nsec ]

# null_blk, zoned: configfs.ko first, then null_blk.ko (the recipe's way).
M=/lib/modules/$(uname -r)/kernel
if ! grep -qw configfs /proc/filesystems; then
        check "insmod configfs.ko" insmod $M/fs/configfs/configfs.ko
fi
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs /sys/kernel/config
check "configfs mounted" grep -q ' /sys/kernel/config configfs' /proc/mounts
check "insmod null_blk.ko zoned=1" insmod $M/drivers/block/null_blk/null_blk.ko \
        zoned=1 zone_size=64 zone_capacity=60 gb=1 nr_devices=1
vm_wait_for 5 test -e /sys/block/nullb0/queue/zoned
check_eq "nullb0 queue/zoned" host-managed "$(cat /sys/block/nullb0/queue/zoned 2>/dev/null)"
check_eq "nullb0 nr_zones" 16 "$(cat /sys/block/nullb0/queue/nr_zones 2>/dev/null)"
# Before 6.10 a zoned disk needs mq-deadline, the kernel's default there;
# from 6.10 (zone write plugging) the default is none, as on any other disk.
if vm_kernel_ge 6 10; then
        check_match "nullb0 scheduler none (zone write plugging)" "*\[none\]*" "$(cat /sys/block/nullb0/queue/scheduler 2>/dev/null)"
else
        check_match "nullb0 scheduler mq-deadline" "*\[mq-deadline\]*" "$(cat /sys/block/nullb0/queue/scheduler 2>/dev/null)"
fi
check "null_blk configfs interface" [ -d /sys/kernel/config/nullb ]

echo "# guest uptime at end: $(vm_uptime)s"
vm_summary
