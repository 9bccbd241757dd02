# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-newest-knobs.sh (--subsys --udev,
# zones-hotplug.actions; a kernel with queue/zoned_qd1_writes and
# queue/async_depth: 7.x). blkmqd sets both on the ZNS namespace's path
# disk (with mq-deadline and nr_requests 64, under which async_depth is
# capped), reads them back; kill -9 and a restart adopt the originals
# recorded in the runtime directory, which SIGTERM then puts back; after a
# controller unplug + replug the new path is tuned again, and SIGTERM gives
# it back its own values. blkmqctl show --json reports the path's write
# streams and atomic write limits as sysfs has them.
. /vm/daemon-lib.sh

H=$(zoned_head); P=$(zoned_path)
echo "# kernel $(uname -r); head ${H:-none}, path ${P:-none}"
check "hidden zoned path present" [ -n "$P" ]
[ -n "$P" ] || { vm_summary; exit 1; }
check "$P has queue/zoned_qd1_writes" [ -f /sys/block/$P/queue/zoned_qd1_writes ]
check "$P has queue/async_depth" [ -f /sys/block/$P/queue/async_depth ]
snap() { echo "sched=$(sched $1) nr=$(qattr $1 nr_requests) ad=$(qattr $1 async_depth) qd1=$(qattr $1 zoned_qd1_writes)"; }
B0=$(snap $P)
echo "# at boot: $P $B0"

mkdir -p $DROPIN
printf '[Device zns]\nMatchZoned=host-managed\nScheduler=mq-deadline\nNrRequests=64\nAsyncDepth=48\nZonedQD1Writes=yes\n' \
        > $DROPIN/50-zns.conf
tuned="sched=mq-deadline nr=64 ad=48 qd1=1"
start() {
        daemon_start -c $BLKMQD_CONF --varlink-address /run/blkmqd.sock --log-target=console
        check "daemon started ($1)" [ -n "$DPID" ]
        check "daemon ready ($1)" vm_wait_for 30 log_has "; ready\."
}
start "first start"
check_eq "$P tuned: read back" "$tuned" "$(snap $P)"
check "log: zoned_qd1_writes written" log_has "$P: queue/zoned_qd1_writes"
check "log: async_depth written" log_has "$P: queue/async_depth"
# Reported, not tuned: write streams and atomic write limits (7.x has
# both; QEMU's NVMe offers atomic writes of 512 B and no write streams).
check "$P has queue/max_write_streams and atomic_write_max_bytes" \
        sh -c "[ -f /sys/block/$P/queue/max_write_streams ] && [ -f /sys/block/$P/queue/atomic_write_max_bytes ]"
export BLKMQD_ADDRESS=/run/blkmqd.sock
write_limits_agree "blkmqctl show --json $P" "$(blkmqctl show --json $P)" $P
blkmqctl show $P | sed -n '/^Write limits/,$p' | sed 's/^/# /'

# kill -9: the settings stay; a restart adopts the recorded originals.
kill -KILL $DPID
vm_wait_for 10 test -s $BLKMQD_RC
check_eq "$P still tuned after kill -9" "$tuned" "$(snap $P)"
start "restart"
check_eq "$P tuned after the restart" "$tuned" "$(snap $P)"
rc=$(daemon_stop)
check_eq "blkmqd exit code (stop after restart)" 0 "$rc"
check_eq "$P: the boot values back from the adopted originals" "$B0" "$(snap $P)"

# Hotplug: the controller leaves and comes back under another id.
start "before the hotplug"
check_eq "$P tuned again" "$tuned" "$(snap $P)"
C1=$(path_ctrl $P)
A1=$(cat /sys/class/nvme/$C1/address 2>/dev/null)
check "host: device_del the ZNS controller" vm_hotplug unplug
check "path $P gone" vm_wait_for 10 gone $P
replug_zoned
[ -n "$P2" ] || { vm_summary; exit 1; }
check "the new path $P2 tuned" vm_wait_for 30 sh -c "[ \"\$(cat /sys/block/$P2/queue/zoned_qd1_writes)\" = 1 ] && [ \"\$(cat /sys/block/$P2/queue/async_depth)\" = 48 ]"
check_eq "$P2 tuned: read back" "$tuned" "$(snap $P2)"
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
check_eq "$P2: its boot values back" "$B0" "$(snap $P2)"
grep -q '<[0-3]>' $BLKMQD_LOG && log_show
vm_summary
