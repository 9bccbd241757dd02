# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of bench/pgbench --stack lvm (run-guest.py's busybox guest,
# trixie's 6.12; the host script puts the tools, PostgreSQL and the database
# in, and reads what this leaves on the data disk). The story of
# bench/pgbench on an LVM volume striped over the two namespaces of the
# controller stk0, each backed by a tools/modeldisk on the host:
#   ext4 on vgpg/lv; PostgreSQL on it (run as postgres by $SETPRIV) (the host's pgbench database, from the
#   data disk), pgbench -S from $CLIENTS clients, fio's bulk writer beside
#   it; every second the page cache dropped (drop_caches: no Python here
#   for the host's POSIX_FADV_DONTNEED, and the database is the only file
#   read);
#   1. the oracle: each of $CANDS ("scheduler:nr_requests", 0 for none's)
#      set on both namespaces by hand for $ORACLE_SEC after 2 s;
#   2. $DEFAULT_C on both, then blkmqctl trial vgpg/lv (AutoScheduler=
#      $SCHEDS, AutoNrRequests=$NRS, AutoWriteTolerance=$TOL%);
#   3. $AFTER_SEC more, the daemon running, a window a minute;
#   4. the oracle's best writer again for $ORACLE_SEC, the daemon stopped.
# Each window is two "mark" lines in /tmp/out/marks (label, uptime, epoch,
# the volume's /sys/block stat); the host computes every figure from them
# and from pgbench's transaction log (bench/pgbench). Out: a tar of
# /tmp/out written over the data disk.
. /vm/daemon-lib.sh
. /vm/stacks-lib.sh

echo "# kernel $(uname -r), uptime $(vm_uptime)s"
stack_setup 2
OUT=/tmp/out
mkdir -p $OUT $OUT/pgbench /mnt /tmp/pgsock /dev/shm
mount -t tmpfs tmpfs /dev/shm
check "pvcreate" lvm_ pvcreate -q /dev/$N1 /dev/$N2
check "vgcreate vgpg" lvm_ vgcreate -q vgpg /dev/$N1 /dev/$N2
check "lvcreate -i 2 -I 64k lv" lvm_ lvcreate -q -y -i 2 -I 64k -l 100%FREE -n lv vgpg
settle
TOP=$(basename "$(readlink -f /dev/vgpg/lv)")
check "the volume is a dm device over both ($TOP)" test -e /sys/block/$TOP/slaves/$N1 -a -e /sys/block/$TOP/slaves/$N2
echo "# before: $N1 $(qstate $N1); $N2 $(qstate $N2); $TOP $(qstate $TOP)"

# setc SCHED:NR: the candidate on both members, read back
setc() {
        for m in $N1 $N2; do
                echo "${1%%:*}" > /sys/block/$m/queue/scheduler
                [ "${1#*:}" = 0 ] || echo "${1#*:}" > /sys/block/$m/queue/nr_requests
        done
}
# in_force: what both members carry, "SCHED:NR" (NR 0 under none); the
# second member's differs only if the lockstep broke
in_force1() { s=$(sched $1); [ "$s" = none ] && echo none:0 || echo "$s:$(qattr $1 nr_requests)"; }
in_force() { echo "$(in_force1 $N1) $(in_force1 $N2)"; }
# mark LABEL: the uptime, the epoch (pgbench logs it) and the volume's stat
mark() {
        read -r st < /sys/block/$TOP/stat
        read -r up _ < /proc/uptime
        ep=$(adjtimex | awk '/tv_sec/ { s = $2 } /tv_usec/ { u = $2 } END { printf "%d.%06d", s, u }')
        echo "$1 $up $ep $st" >> $OUT/marks
}
# measure LABEL SECS: one window
measure() { mark "$1.0"; sleep "$2"; mark "$1.1"; }

setc "$DEFAULT_C"
check "mkfs.ext4 on the volume" mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard /dev/vgpg/lv
check "mount" mount -o noatime /dev/vgpg/lv /mnt
t0=$(vm_uptime)
tar -x -f "$VM_DATA_DEV" -C /mnt
check "the database unpacked" [ -f /mnt/pgdata/PG_VERSION ]
chown -R "$PG_UID:$PG_GID" /mnt/pgdata /tmp/pgsock
chmod 700 /mnt/pgdata
chmod 755 /mnt
grep -q "^postgres:" /etc/passwd || echo "postgres:x:$PG_UID:$PG_GID:postgres:/tmp:/bin/sh" >> /etc/passwd
grep -q "^postgres:" /etc/group 2>/dev/null || echo "postgres:x:$PG_GID:" >> /etc/group
as_pg() { "$SETPRIV" --reuid="$PG_UID" --regid="$PG_GID" --clear-groups "$@"; }
as_pg "$PG_BIN/pg_ctl" -D /mnt/pgdata -l /tmp/postgres.log -w -t 300 \
        -o "-c listen_addresses='' -k /tmp/pgsock -p 5432 -c shared_buffers=1MB -c max_connections=20 -c autovacuum=off -c fsync=off -c full_page_writes=off" \
        start > /tmp/pg_ctl.out 2>&1
rc=$?
check_eq "PostgreSQL started" 0 $rc
[ $rc = 0 ] || sed 's/^/# postgres| /' /tmp/pg_ctl.out /tmp/postgres.log
echo "# PostgreSQL ready in $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN { printf "%.0f", b - a }') s on /dev/vgpg/lv"

rm -f /tmp/stop-dropper
( while [ ! -e /tmp/stop-dropper ]; do echo 1 > /proc/sys/vm/drop_caches; sleep 1; done ) & DROP=$!

n=$(echo $CANDS | wc -w)
total=$(awk -v n=$n -v o=$ORACLE_SEC -v a=$AFTER_SEC 'BEGIN { printf "%d", (n + 2) * (o + 2) + 600 + a + 60 }')
fio --name=bulk --filename=/mnt/bulk --size=${BULK_MB}M --rw=write --bs=1M --iodepth=$WDEPTH \
        --ioengine=libaio --direct=1 --time_based --runtime=$total > /tmp/fio.out 2>&1 & FIO=$!
( cd $OUT/pgbench && exec pgbench -h /tmp/pgsock -p 5432 -U postgres -n -S -c $CLIENTS -j 1 -T $total -l \
        --log-prefix=$OUT/pgbench/pgbench postgres > $OUT/pgbench.out 2>&1 ) & PGB=$!
vm_wait_for 300 sh -c "[ \$(stat -c %s /mnt/bulk 2>/dev/null || echo 0) -ge $((BULK_MB << 20)) ]"
check "fio laid out its ${BULK_MB} MiB" [ "$(stat -c %s /mnt/bulk)" -ge $((BULK_MB << 20)) ]
sleep 3
echo "# workload: pgbench -S -c $CLIENTS beside fio 1 MiB sequential writes QD $WDEPTH, on vgpg/lv ($TOP over $N1 $N2)"

# 1. the oracle
i=0
for c in $CANDS; do
        setc "$c"
        sleep 2
        measure "oracle-$i" "$ORACLE_SEC"
        echo "cand $i $c $(in_force)" >> $OUT/settings
        echo "# oracle $c: carried $(in_force)"
        i=$((i + 1))
done
# the best writer: the most sectors written a second
best=$(awk 'NR == FNR { if ($1 == "cand") c[$2] = $3; next }
        $1 ~ /^oracle-[0-9]+\.[01]$/ { split($1, p, /[-.]/); t[p[2], p[3]] = $2; w[p[2], p[3]] = $10 }
        END { for (k in c) { r = (w[k, 1] - w[k, 0]) / (t[k, 1] - t[k, 0]); if (r > b || bk == "") { b = r; bk = c[k] } }
              print bk }' $OUT/settings $OUT/marks)
echo "best $best" >> $OUT/settings
echo "# the best writer by hand: $best"

# 2. the trial, from the default
setc "$DEFAULT_C"
sleep 2
measure before "$(awk -v o=$ORACLE_SEC 'BEGIN { print (o > 5 ? o : 5) }')"
mkdir -p /etc/blkmqd
cat > /tmp/stack.conf <<EOF
[Daemon]
ProbeIntervalSec=1

[Device pgbench]
MatchVolume=vgpg/lv
AutoTune=yes
AutoScheduler=$SCHEDS
AutoNrRequests=$NRS
AutoWriteTolerance=$TOL%
${EPOCH:+AutoEpochSec=$EPOCH}
${ROUNDS:+AutoRounds=$ROUNDS}
EOF
ADDR=/run/blkmqd.varlink
daemon_start -c /tmp/stack.conf --varlink-address $ADDR
check "daemon ready" vm_wait_for 60 log_has "; ready\."
sleep 1
t0=$(vm_uptime)
blkmqctl --address $ADDR --json trial vgpg/lv > $OUT/trial.json 2> $OUT/trial.err
rc=$?
check_eq "blkmqctl trial vgpg/lv" 0 $rc
[ $rc = 0 ] || sed 's/^/# trial| /' $OUT/trial.err
echo "chosen $(in_force)" >> $OUT/settings
echo "# the trial took $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN { printf "%.0f", b - a }') s and left $(in_force)"

# 3. the minutes after
i=0
end=$(awk -v a=$(vm_uptime) -v s=$AFTER_SEC 'BEGIN { print a + s }')
while :; do
        left=$(awk -v e=$end -v n=$(vm_uptime) 'BEGIN { l = e - n; print (l <= 0.5 ? 0 : (l > 60 ? 60 : (l < 1 ? 1 : l))) }')
        [ "$left" = 0 ] && break
        measure "after-$i" "$left"
        echo "after $i $(in_force)" >> $OUT/settings
        echo "# after, $i: $(in_force)"
        i=$((i + 1))
done
blkmqctl --address $ADDR --json show vgpg/lv > $OUT/show.json 2>&1
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
cp $BLKMQD_LOG $OUT/blkmqd.log

# 4. the best writer again
setc "$best"
sleep 2
measure again "$ORACLE_SEC"

kill -INT $PGB 2>/dev/null
kill -INT $FIO 2>/dev/null
vm_wait_for 60 sh -c "! kill -0 $PGB 2>/dev/null && ! kill -0 $FIO 2>/dev/null"
touch /tmp/stop-dropper
wait $DROP
as_pg "$PG_BIN/pg_ctl" -D /mnt/pgdata -m immediate -w stop > /dev/null 2>&1
cp /tmp/postgres.log /tmp/fio.out $OUT/ 2>/dev/null
umount /mnt
check "the results written to the data disk" tar -c -f "$VM_DATA_DEV" -C /tmp out
sync
vm_summary
