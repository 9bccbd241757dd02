# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-daemon.sh, boot 2 (--subsys --udev,
# --hotplug-script daemon-hotplug.actions): blkmqd and NVMe multipath.
#   The head nvmeXnY is bio-based: no scheduler/nr_requests write on it. The
#   hidden path nvmeXcYnZ (no uevents of its own) is found through the head
#   and tuned. The controller leaves and comes back under another id: the
#   daemon drops the path and tunes the new one, without an error storm.
. /vm/daemon-lib.sh

H=$(zoned_head); P=$(zoned_path)
echo "# kernel $(uname -r); head ${H:-none}, path ${P:-none}"
check "zoned multipath head present" [ -n "$H" ]
check "hidden zoned path present" [ -n "$P" ]
[ -n "$H" ] && [ -n "$P" ] || { vm_summary; exit 1; }
check_eq "$P is hidden" 1 "$(cat /sys/block/$P/hidden)"
# Before 6.10 the guard puts the zoned path on mq-deadline; from 6.10 none,
# the drop-in's first, stays (and the bio-based head has no queue/scheduler)
PSCHED=mq-deadline HSCHED=none
vm_kernel_ge 6 10 && PSCHED=none HSCHED=
H0=$(qstate $H); P0=$(qstate $P)
echo "# before: $H $H0; $P $P0"
qsnap $P > /tmp/path.orig; qsnap $H > /tmp/head.orig

mkdir -p $DROPIN
printf '[Device zns]\nMatchZoned=host-managed\nScheduler=none mq-deadline\nReadAheadKB=1024\nNrRequests=64\n' \
        > $DROPIN/50-zns.conf
t0=$(vm_uptime)
daemon_start -c $BLKMQD_CONF --varlink-address /run/blkmqd.sock --log-target=console
check "daemon started" [ -n "$DPID" ]
check "daemon ready" vm_wait_for 20 log_has "; ready\."
echo "# daemon ready after $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN{printf "%.2f", b-a}')s"

# The head: bio-based, its scheduler and nr_requests are not touched.
check_eq "head $H scheduler stays ${HSCHED:-absent} (bio-based)" "$HSCHED" "$(sched $H)"
check "log: no scheduler/nr_requests write on $H" sh -c "! grep -E -q '$H: queue/(scheduler|nr_requests) .*→' $BLKMQD_LOG"
if log_has "$H: queue/scheduler skipped"; then
        echo "# head: $(grep "$H: queue/scheduler skipped" $BLKMQD_LOG)"
fi
check_eq "head $H read_ahead_kb (the head carries read-ahead)" 1024 "$(qattr $H read_ahead_kb)"
# The hidden path: the blk-mq queue.
check_eq "path $P scheduler" $PSCHED "$(sched $P)"
check_eq "path $P nr_requests" 64 "$(qattr $P nr_requests)"
check_eq "path $P read_ahead_kb" 1024 "$(qattr $P read_ahead_kb)"
check "log: path $P nr_requests → 64" log_has "$P: queue/nr_requests .* → 64 (Device zns)"
if [ $PSCHED = mq-deadline ]; then
        check "log: path $P scheduler → mq-deadline" log_has "$P: queue/scheduler none → mq-deadline"
else
        check "log: no scheduler write on path $P (6.10+)" sh -c "! grep -q '$P: queue/scheduler .*→' $BLKMQD_LOG"
fi
echo "# tuned: $H $(qstate $H); $P $(qstate $P)"

# Unplug the controller, plug it back under another id and root port.
C1=$(path_ctrl $P)
A1=$(cat /sys/class/nvme/$C1/address 2>/dev/null)
L1=$(wc -l < $BLKMQD_LOG)
t0=$(vm_uptime)
check "host: device_del the ZNS controller" vm_hotplug unplug
check "head $H gone" vm_wait_for 10 gone $H
check "path $P gone" vm_wait_for 10 gone $P
check "log: $H removed" vm_wait_for 10 log_has "$H: removed"
check "log: path $P removed (no uevent of its own)" vm_wait_for 10 log_has "$P: removed"
check "daemon alive after unplug" daemon_alive
t1=$(vm_uptime)
replug_zoned
check "path $P2 nr_requests back to 64" vm_wait_for 20 attr_is $P2 nr_requests 64
t2=$(vm_uptime)
echo "# unplug handled in $(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}')s, replug to path tuned $(awk -v a=$t1 -v b=$t2 'BEGIN{printf "%.2f", b-a}')s"
check_eq "path $P2 scheduler" $PSCHED "$(sched $P2)"
check_eq "path $P2 read_ahead_kb" 1024 "$(qattr $P2 read_ahead_kb)"
check_eq "head $H2 read_ahead_kb" 1024 "$(qattr $H2 read_ahead_kb)"
check_eq "head $H2 scheduler stays ${HSCHED:-absent}" "$HSCHED" "$(sched $H2)"
check_eq "log: path $P2 tuned again after the replug (nr_requests → 64 once)" 1 \
        "$(tail -n +$((L1 + 1)) $BLKMQD_LOG | grep -c "$P2: queue/nr_requests .* → 64")"
check "daemon still running" daemon_alive
check_eq "error lines (<3>) in the daemon log" 0 "$(log_count '^<[0-3]>')"
echo "# log: $(wc -l < $BLKMQD_LOG) lines, $(log_count '^<4>') warnings, $(log_count '^<5>') notices"

t0=$(vm_uptime)
rc=$(daemon_stop)
echo "# SIGTERM → exit in $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN{printf "%.2f", b-a}')s"
check_eq "daemon exit code after SIGTERM" 0 "$rc"
check_eq "path $P2 restored to the kernel defaults" "$P0" "$(qstate $P2)"
check_eq "head $H2 restored" "$H0" "$(qstate $H2)"
check "path $P2 queue/ identical to the first path before the daemon" same_snap $P2 /tmp/path.orig
check "head $H2 queue/ identical to before the daemon" same_snap $H2 /tmp/head.orig
qsnap $P2 | diff /tmp/path.orig - | sed "s/^/# $P2 diff| /"
qsnap $H2 | diff /tmp/head.orig - | sed "s/^/# $H2 diff| /"
check_eq "error lines (<3>) in the daemon log at exit" 0 "$(log_count '^<[0-3]>')"
log_show
vm_summary
