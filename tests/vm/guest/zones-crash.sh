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
readback() {
        dd if=$DEV bs=512 skip=$1 count=$((($2 + 511) / 512)) 2>/dev/null | head -c $2 | sha256sum | cut -d' ' -f1
}

# stager K ROUND: until /tmp/stop exists. Acknowledged seals go to /tmp/ack.K as
# "lease sha256 lba size"; a release in flight is in /tmp/rel.K.
stager() {
        k=$1 round=$2 n=0 full=0
        while [ ! -e /tmp/stop ]; do
                n=$((n + 1))
                if [ -s /tmp/ack.$k ] && { [ $full = 1 ] || [ $((RANDOM % 3)) = 0 ]; }; then
                        full=0
                        set -- $(head -n1 /tmp/ack.$k)
                        echo "$1" > /tmp/rel.$k
                        if blkmqctl zones release $1 >/dev/null 2>&1; then
                                grep -v "^$1 " /tmp/ack.$k > /tmp/ack.$k.new; mv /tmp/ack.$k.new /tmp/ack.$k
                                rm -f /tmp/rel.$k
                        fi
                        continue
                fi
                case $((RANDOM % 4)) in 0) size=1 ;; 1) size=4096 ;; 2) size=100000 ;; *) size=1048577 ;; esac
                head -c $size /dev/urandom > /tmp/s$k.bin
                want=$(sha256sum < /tmp/s$k.bin | cut -d' ' -f1)
                blkmqctl stage /tmp/s$k.bin --device $Z --label r$round-s$k-$n --settle-timeout=60 > /tmp/s$k.out 2> /tmp/s$k.err
                rc=$?
                if [ $rc = 0 ]; then
                        echo "$(fld /tmp/s$k.out Lease) $(fld /tmp/s$k.out SHA256) $(fld /tmp/s$k.out 'Start LBA') $size" >> /tmp/ack.$k
                        [ "$(fld /tmp/s$k.out SHA256)" = "$want" ] || echo "stager $k: stage printed a SHA256 not the file's" >> /tmp/odd
                elif [ $rc = 8 ]; then
                        full=1
                elif grep -q "outcome of lease" /tmp/s$k.err; then
                        cat /tmp/s$k.err >> /tmp/odd
                elif [ $rc != 2 ] && [ $rc != 3 ]; then
                        { echo "stager $k: stage exit $rc"; cat /tmp/s$k.err; } >> /tmp/odd
                fi
        done
}

check_round() {
        i=$1 bad=0
        blkmqctl --no-legend zones $Z > /tmp/z.tab
        cat /tmp/ack.* 2>/dev/null > /tmp/acked
        # INDEX START-LBA WP COND STATE LEASE LABEL BYTES
        awk '$6 != "-" { print $6 }' /tmp/z.tab | sort | uniq -d > /tmp/dup
        [ -s /tmp/dup ] && { echo "# round $i: a lease holds two zones: $(cat /tmp/dup)"; bad=1; }
        awk '$5 == "failed" || $5 == "allocated" || $5 == "writing"' /tmp/z.tab > /tmp/badz
        [ -s /tmp/badz ] && { echo "# round $i: zones left failed/allocated/writing:"; sed 's/^/#   /' /tmp/badz; bad=1; }
        for l in $(awk '$5 == "sealed" { print $6 }' /tmp/z.tab); do
                grep -q "^$l " /tmp/acked || { echo "# round $i: zone sealed under $l, which no stager knows of"; bad=1; }
        done
        for k in $(seq 0 $((STAGERS - 1))); do
                [ -e /tmp/ack.$k ] || continue
                while read -r l h lba size; do
                        blkmqctl zones get $l > /tmp/g.out 2>&1
                        if [ -e /tmp/rel.$k ] && [ "$(cat /tmp/rel.$k)" = "$l" ] && ! grep -q "State: *sealed" /tmp/g.out; then
                                # its release went through before the kill
                                grep -v "^$l " /tmp/ack.$k > /tmp/ack.$k.new; mv /tmp/ack.$k.new /tmp/ack.$k
                                continue
                        fi
                        if [ "$(fld /tmp/g.out State) $(fld /tmp/g.out SHA256)" != "sealed $h" ]; then
                                echo "# round $i: acknowledged seal $l lost: $(tr '\n' ' ' < /tmp/g.out)"; bad=1
                        elif [ "$(readback $lba $size)" != "$h" ]; then
                                echo "# round $i: acknowledged seal $l does not read back from LBA $lba"; bad=1
                        fi
                done < /tmp/ack.$k
                rm -f /tmp/rel.$k
        done
        [ -s /tmp/odd ] && { echo "# round $i: client:"; sed 's/^/#   /' /tmp/odd; bad=1; rm -f /tmp/odd; }
        echo "# round $i: $(awk '{ print $5 }' /tmp/z.tab | sort | uniq -c | tr '\n' ' ')"
        return $bad
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
