# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-daemon.sh, boot 1 (--zns --conventional --udev):
# blkmqd with the shipped /etc/blkmqd/blkmqd.conf on a 6.1 kernel (and on
# 6.10 and later, vm-daemon@6.12: no guard, the zoned disks stay on none
# as [Device zoned] lists it first, and Scheduler=kyber is taken there).
#   dry run (--once --json): parses, plans kyber/256/4096 and the zoned guard,
#   writes nothing; daemon: conventional namespace kyber/256/4096, ZNS
#   namespace mq-deadline (guard), Scheduler=kyber for zoned refused, null_blk
#   zoned hotplug tuned, SIGHUP re-applies a changed drop-in, SIGTERM restores
#   every original and exits 0.
. /vm/daemon-lib.sh

echo "# kernel $(uname -r), blkmqd $(command -v blkmqd), uptime $(vm_uptime)s"
check "blkmqd is in the guest" command -v blkmqd
check "shipped config at /etc/blkmqd/blkmqd.conf" [ -f /etc/blkmqd/blkmqd.conf ]

nvme_namespaces || { vm_summary; exit 1; }
# zone write plugging (6.10): no guard, and null_blk zoned boots with none
NEW=; NULLB_DEF=mq-deadline
vm_kernel_ge 6 10 && NEW=1 NULLB_DEF=none

# null_blk zoned, once before the daemon runs: its kernel defaults.
M=/lib/modules/$(uname -r)/kernel
grep -qw configfs /proc/filesystems || insmod $M/fs/configfs/configfs.ko
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs configfs /sys/kernel/config
NULLB_ARGS="zoned=1 zone_size=64 zone_capacity=60 gb=1 nr_devices=1"
check "insmod null_blk.ko zoned=1 (to record its defaults)" insmod $M/drivers/block/null_blk/null_blk.ko $NULLB_ARGS
vm_wait_for 5 test -e /sys/block/nullb0/queue/zoned
udevadm settle -t 10
N0=$(qstate nullb0); qsnap nullb0 > /tmp/nullb0.orig
check_eq "nullb0 queue/zoned" host-managed "$(qattr nullb0 zoned)"
check_eq "nullb0 default scheduler" $NULLB_DEF "$(sched nullb0)"
check "rmmod null_blk" rmmod null_blk
udevadm settle -t 10

C0=$(qstate $C); Z0=$(qstate $Z)
echo "# before: $C $C0; $Z $Z0; nullb0 $N0"
qsnap $C > /tmp/$C.orig; qsnap $Z > /tmp/$Z.orig

# --- 1. dry run: parses the shipped config, plans, writes nothing ---------
t0=$(vm_uptime)
blkmqd -c $BLKMQD_CONF --dry-run --once --json > /tmp/dry.json 2> /tmp/dry.err
rc=$?
echo "# dry run: $(vm_uptime) - $t0 s, $(wc -l < /tmp/dry.json) lines"
sed 's/^/# dry-run stderr| /' /tmp/dry.err
check_eq "blkmqd --dry-run --once --json exit code" 0 $rc
check "no error logged by the dry run" sh -c '! grep -q "^<[0-3]>" /tmp/dry.err'
check "JSON document {\"devices\": [...]}" sh -c \
        'head -n1 /tmp/dry.json | grep -qx "{" && sed -n 2p /tmp/dry.json | grep -qx " *\"devices\": \[" && tail -n1 /tmp/dry.json | grep -qx "}"'
check_eq "JSON braces balance" "$(tr -cd '{' < /tmp/dry.json | wc -c)" "$(tr -cd '}' < /tmp/dry.json | wc -c)"
check_eq "JSON brackets balance" "$(tr -cd '[' < /tmp/dry.json | wc -c)" "$(tr -cd ']' < /tmp/dry.json | wc -c)"
# One line per device: the object, flattened.
awk '/^    \{$/ { if (cur != "") print cur; cur = "" } { sub(/^ +/, ""); cur = cur $0 } END { print cur }' \
        /tmp/dry.json > /tmp/dry.flat
devj() { grep "\"device\": \"$1\"" /tmp/dry.flat; }
# planj DEV ATTR: that device's plan entry for ATTR
planj() { devj $1 | grep -o "{\"attribute\": \"$2\"[^}]*}"; }
echo "# dry run $C scheduler: $(planj $C queue/scheduler)"
echo "# dry run $Z scheduler: $(planj $Z queue/scheduler)"
check_match "dry run: $C matched [Device nvme] only" '*"matched": \["nvme"\]*' "$(devj $C | grep -o '"matched": [^]]*]')"
check_match "dry run: $C transport nvme" '*"transport": "nvme"*' "$(devj $C)"
check_match "dry run: $C NrRequests planned 256" '*"wanted": "256","outcome": "planned"*' "$(planj $C queue/nr_requests)"
check_match "dry run: $C ReadAheadKB planned 4096" '*"wanted": "4096","outcome": "planned"*' "$(planj $C queue/read_ahead_kb)"
check_match "dry run: $C Scheduler planned kyber (as the daemon then applies)" '*"wanted": "kyber","outcome": "planned"*' "$(planj $C queue/scheduler)"
check_match "dry run: $Z matched [Device zoned] only" '*"matched": \["zoned"\]*' "$(devj $Z | grep -o '"matched": [^]]*]')"
if [ -n "$NEW" ]; then
        check_match "dry run: $Z Scheduler none, the first of [Device zoned]'s (6.10+)" '*"wanted": "none"*' "$(planj $Z queue/scheduler)"
        check "dry run: no 6.10 guard note on $Z" sh -c "! grep -q 'before 6.10' /tmp/dry.json"
else
        check_match "dry run: $Z Scheduler planned mq-deadline" '*"wanted": "mq-deadline","outcome": "planned"*' "$(planj $Z queue/scheduler)"
        check_match "dry run: $Z note names the 6.10 guard" '*"note": "zoned device on a kernel before 6.10: mq-deadline chosen"*' "$(planj $Z queue/scheduler)"
fi
check "dry run wrote nothing to $C queue/" same_snap $C /tmp/$C.orig
check "dry run wrote nothing to $Z queue/" same_snap $Z /tmp/$Z.orig
check "dry run loaded no scheduler module (kyber)" sh -c '! grep -q "^kyber" /proc/modules'

# --- 2. the daemon --------------------------------------------------------
mkdir -p $DROPIN
printf '[Device nullb]\nMatchKernel=nullb*\nReadAheadKB=512\n' > $DROPIN/60-nullb.conf
printf '[Device nvme]\nNrRequests=256\n' > $DROPIN/70-conventional.conf
t0=$(vm_uptime)
daemon_start -c $BLKMQD_CONF --varlink-address /run/blkmqd.sock --log-target=console
check "daemon started" [ -n "$DPID" ]
check "daemon ready" vm_wait_for 20 log_has "; ready\."
t1=$(vm_uptime)
echo "# daemon ready after $(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}')s"
check "varlink socket /run/blkmqd.sock" [ -S /run/blkmqd.sock ]
check "log: kernel $(uname -r | cut -d. -f1-2) detected" log_has "starting, kernel $(uname -r | cut -d. -f1-2),"
check_eq "$C scheduler" kyber "$(sched $C)"
check_eq "$C nr_requests" 256 "$(qattr $C nr_requests)"
check_eq "$C read_ahead_kb" 4096 "$(qattr $C read_ahead_kb)"
check "log: $C scheduler → kyber" log_has "$C: queue/scheduler none → kyber (Device nvme)"
if [ -n "$NEW" ]; then
        check_eq "$Z scheduler (6.10+: none, the first of [Device zoned]'s)" none "$(sched $Z)"
        check "log: no scheduler write on $Z" sh -c "! grep -q '$Z: queue/scheduler .*→' $BLKMQD_LOG"
else
        check_eq "$Z scheduler (guard: mq-deadline before 6.10)" mq-deadline "$(sched $Z)"
        check "log: $Z scheduler → mq-deadline by [Device zoned]" log_has "$Z: queue/scheduler none → mq-deadline (Device zoned)"
fi
check_eq "$Z read_ahead_kb untouched" "${Z0##*ra=}" "$(qattr $Z read_ahead_kb)"
ZS=$(qstate $Z)   # as tuned: mq-deadline with the kernel's nr_requests for it
echo "# tuned: $C $(qstate $C); $Z $ZS"

# --- null_blk zoned hotplugged while the daemon runs ------------------------
t0=$(vm_uptime)
check "insmod null_blk.ko zoned=1 (daemon running)" insmod $M/drivers/block/null_blk/null_blk.ko $NULLB_ARGS
check "nullb0 read_ahead_kb 512 by [Device nullb]" vm_wait_for 15 attr_is nullb0 read_ahead_kb 512
echo "# nullb0 tuned $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN{printf "%.2f", b-a}')s after insmod"
check_eq "nullb0 scheduler" $NULLB_DEF "$(sched nullb0)"
check "log: nullb0 read_ahead_kb → 512" log_has "nullb0: queue/read_ahead_kb ${N0##*ra=} → 512 (Device nullb)"

# --- Scheduler=kyber for zoned devices: refused (SchedulerForce) -----------
printf '[Device zoned]\nScheduler=kyber\n' > $DROPIN/50-zoned-kyber.conf
check "SIGHUP: reloaded (zoned kyber drop-in)" daemon_reload
if [ -n "$NEW" ]; then
        # 6.10 and later: any scheduler on a zoned disk, kyber taken
        check_eq "$Z scheduler kyber (6.10+)" kyber "$(sched $Z)"
        check_eq "nullb0 scheduler kyber (6.10+)" kyber "$(sched nullb0)"
        check "log: no refusal" sh -c "! grep -q 'refusing Scheduler=kyber' $BLKMQD_LOG"
else
check "log: kyber refused on $Z (SchedulerForce note)" \
        log_has "$Z: queue/scheduler skipped: refusing Scheduler=kyber on a host-managed device.*SchedulerForce=yes overrides"
check "log: kyber refused on nullb0" log_has "nullb0: queue/scheduler skipped: refusing Scheduler=kyber"
check_eq "$Z scheduler stays" mq-deadline "$(sched $Z)"
check_eq "nullb0 scheduler stays" mq-deadline "$(sched nullb0)"
# No NrRequests= applies to $Z: a reload must leave the nr_requests the
# mq-deadline switch gave it (not put back the value from before the switch).
check_eq "$Z untouched by the reload" "$ZS" "$(qstate $Z)"
check "log: no nr_requests write on $Z (no NrRequests= for it)" sh -c "! grep -q '$Z: queue/nr_requests' $BLKMQD_LOG"
fi

# --- SIGHUP after changing the conventional drop-in -------------------------
rm -f $DROPIN/50-zoned-kyber.conf
printf '[Device nvme]\nNrRequests=128\n' > $DROPIN/70-conventional.conf
check "SIGHUP: reloaded (NrRequests=128)" daemon_reload
check_eq "$C nr_requests after reload" 128 "$(qattr $C nr_requests)"
check_eq "$C scheduler after reload" kyber "$(sched $C)"
check_eq "$C read_ahead_kb after reload" 4096 "$(qattr $C read_ahead_kb)"
check "log: $C nr_requests 256 → 128" log_has "$C: queue/nr_requests 256 → 128"
if [ -n "$NEW" ]; then
        check_eq "$Z back on none with the kyber drop-in gone" none "$(sched $Z)"
else
        check_eq "$Z untouched by the second reload" "$ZS" "$(qstate $Z)"
fi
check "daemon still running" daemon_alive

# --- SIGTERM: restore everything, exit 0 -----------------------------------
t0=$(vm_uptime)
rc=$(daemon_stop)
echo "# SIGTERM → exit in $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN{printf "%.2f", b-a}')s"
check_eq "daemon exit code after SIGTERM" 0 "$rc"
check "log: stopping (SIGTERM)" log_has "Stopping (SIGTERM)"
check_eq "$C restored" "$C0" "$(qstate $C)"
check_eq "$Z restored" "$Z0" "$(qstate $Z)"
check_eq "nullb0 restored" "$N0" "$(qstate nullb0)"
check "$C queue/ identical to before the daemon" same_snap $C /tmp/$C.orig
check "$Z queue/ identical to before the daemon" same_snap $Z /tmp/$Z.orig
check "nullb0 queue/ identical to its defaults" same_snap nullb0 /tmp/nullb0.orig
for d in $C $Z nullb0; do qsnap $d | diff /tmp/$d.orig - | sed "s/^/# $d diff| /"; done
check_eq "error lines (<3>) in the daemon log" 0 "$(log_count '^<[0-3]>')"
echo "# after: $C $(qstate $C); $Z $(qstate $Z); nullb0 $(qstate nullb0)"
log_show
vm_summary
