# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-zones-crash.sh (--zns --udev): crash consistency of
# the zone allocator on the real ZNS namespace of a 6.1 kernel (nvme backend:
# zone appends through passthrough). $CRASH_ROUNDS rounds (default 10), each:
#   ResetBatch=1 on odd rounds, the default on even ones;
#   two stagers (blkmqctl stage, and zones release of their own sealed
#   leases) run while blkmqd is killed with SIGKILL, at a random moment or at
#   a kill point (BLKMQD_TEST_KILL_AT: a Release's or Seal's or Allocate's
#   record durable but no reply, a reset done but not recorded);
#   blkmqd is started again, the stagers' blkmqctl settles what it had open;
#   then: no lease holds two zones; every acknowledged seal is sealed with its
#   SHA-256 and reads back to it with dd; nothing is failed, allocated or
#   writing; no sealed zone that no stager knows of.
# At the end every lease is released and all zones can be leased again.
. /vm/daemon-lib.sh
. /vm/zones-crash-lib.sh

export BLKMQD_ADDRESS=/tmp/blkmqd.sock
CONF=/tmp/crash.conf
ROUNDS=${CRASH_ROUNDS:-10}
STAGERS=2
POINTS="durable:io.blkmqd.Zones.Release reset-done durable:io.blkmqd.Zones.Seal durable:io.blkmqd.Zones.Allocate"

vm_need_zoned
NZ=$(cat /sys/block/$Z/queue/nr_zones)

conf() { zones_conf $CONF /tmp/crash.db Scheduler=mq-deadline "$1"; }
listed_or_dead() { zone_listed || [ -s $BLKMQD_RC ]; }
start() {
        daemon_start -c $CONF --varlink-address /tmp/blkmqd.sock --log-level debug
        vm_wait_for 30 listed_or_dead   # a kill point may end it in its start-up reconcile
}
t0=$(vm_uptime)
failed=0
kills=
for i in $(seq 1 $ROUNDS); do
        if [ $((i % 2)) = 1 ]; then conf "ResetBatch=1"; else conf ""; fi
        point=
        case $((RANDOM % 6)) in
        0|1) ;;
        *) set -- $POINTS; shift $((RANDOM % 4)); point=$1 ;;
        esac
        rm -f /tmp/stop
        [ -n "$point" ] && export BLKMQD_TEST_KILL_AT=$point
        start
        unset BLKMQD_TEST_KILL_AT
        pids=
        for k in $(seq 0 $((STAGERS - 1))); do stager $k $i & pids="$pids $!"; done
        if [ -n "$point" ] && vm_wait_for 20 test -s $BLKMQD_RC; then
                kills="$kills $point"
        else
                usleep $(( (RANDOM % 2000 + 100) * 1000 ))
                kill -9 $DPID 2>/dev/null
                vm_wait_for 10 test -s $BLKMQD_RC
                kills="$kills timer"
        fi
        touch /tmp/stop
        cp $BLKMQD_LOG /tmp/round-$i.log
        start
        wait $pids
        if ! check_round $i; then
                failed=$((failed + 1))
                grep -v '^<7>' /tmp/round-$i.log | tail -n 20 | sed 's/^/# killed| /'
                grep -v '^<7>' $BLKMQD_LOG | tail -n 20 | sed 's/^/# restarted| /'
        fi
        kill -TERM $DPID; vm_wait_for 30 test -s $BLKMQD_RC
done
check_eq "$ROUNDS rounds of kill -9 in the ZNS guest: rounds failed" 0 $failed
echo "# kills:$(echo $kills | tr ' ' '\n' | sort | uniq -c | tr '\n' ' ')"
echo "# guest time $(awk -v a="$t0" -v b="$(vm_uptime)" 'BEGIN { printf "%.1f", b - a }') s for $ROUNDS rounds"

# Everything released; then every zone can be leased again.
conf "ResetBatch=1"
start
cat /tmp/ack.* 2>/dev/null | while read -r l h lba size; do blkmqctl zones release $l > /dev/null; done
got=0
for j in $(seq 1 $NZ); do
        for try in $(seq 1 50); do
                blkmqctl zones alloc --size=4096 --device $Z > /dev/null 2>&1 && { got=$((got + 1)); break; }
                usleep 100000
        done
done
check_eq "after the rounds: all $NZ zones leased again" $NZ $got
check_eq "SIGTERM: exit 0" 0 "$(daemon_stop)"
vm_summary
