# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of vm-stack-trial (issue 33, item 4): a trial on an LVM volume
# striped over two NVMe namespaces (trixie's 6.12, the dm modules from the
# cached kernel package, lvm2 from the host).
#   blkmqctl trial --emit-conf vgtrial/striped: the volume is named as
#   operators name it (VG/LV, to its dm-N); the trial measures the top and
#   gives each candidate to both namespaces in lockstep: sampled every
#   0.1 s, the two never carry different schedulers for longer than an
#   apply (no two samples in a row differ), and both carried each
#   candidate; the drop-in matches the stack (MatchVolume=).
#   SIGTERM: both at their originals. A second daemon's trial, restored
#   while both carry mq-deadline: both are back at their originals. A
#   member whose jobs are held past CallTimeoutSec= (BLKMQD_TEST_JOB_DELAY):
#   the trial aborts naming it, both back at their originals (3b).
# The lockstep's edges, with a third daemon (4, 5, 6):
#   an md RAID 1 over the two other namespaces, made while it runs:
#   AutoTrialOnHotplug= on the array's section starts the array's trial,
#   no trial of a member; one member refuses kyber (BLKMQD_TEST_FAIL_WRITE):
#   refused for the stack, the members never apart two samples in a row
#   and alike after it; a member's own trial meanwhile is refused, naming
#   the array. dm-crypt on the LV: its trial (by its dm-N) refused while
#   a member is in a trial of its own, and while the members differ (one
#   set by hand: both named with their values); then run, sampled as the
#   LV's. At stop, all four namespaces at their originals.
. /vm/daemon-lib.sh

echo "# kernel $(uname -r), uptime $(vm_uptime)s"
. /vm/stacks-lib.sh
stack_setup 4
check "pvcreate" lvm pvcreate -q --config "$LVMC" /dev/$N1 /dev/$N2
check "vgcreate vgtrial" lvm vgcreate -q --config "$LVMC" vgtrial /dev/$N1 /dev/$N2
check "lvcreate -i 2 striped" lvm lvcreate -q -y --config "$LVMC" -i 2 -I 64k -L 192M -n striped vgtrial
udevadm settle -t 20 2>/dev/null
TOP=$(basename "$(readlink -f /dev/vgtrial/striped)")
check "the volume is a dm device ($TOP)" [ -e /sys/block/$TOP/slaves/$N1 ]
O1=$(sched $N1) O2=$(sched $N2)
echo "# before: $N1 $(qstate $N1); $N2 $(qstate $N2); $TOP $(qstate $TOP)"

mkdir -p /etc/blkmqd
cat > /tmp/stack.conf <<EOF
[Daemon]
ProbeIntervalSec=1

[Device volume]
MatchVolume=vgtrial/striped
AutoTune=yes
AutoScheduler=none mq-deadline
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1
EOF
ADDR=/run/blkmqd.varlink
daemon_start -c /tmp/stack.conf --varlink-address $ADDR --log-level debug
check "daemon started" [ -n "$DPID" ]
check "daemon ready" vm_wait_for 30 log_has "; ready\."

# The workload on the volume: 4 KiB direct reads, 64 KiB direct writes.
# reader DEV START, writer DEV: loops over the first 125 MiB and a 32 MiB
# stretch after 128 MiB of DEV (a 192 MiB LV, or the mapping on it).
WL=
reader() {
        i=$2
        while :; do
                i=$(( (i + 7919) % 32000 ))
                dd if=$1 of=/dev/null bs=4k count=16 skip=$i iflag=direct 2>/dev/null
        done
}
writer() {
        i=0
        while :; do
                i=$(( (i + 97) % 500 ))
                dd if=/dev/zero of=$1 bs=64k count=8 seek=$((2048 + i)) oflag=direct conv=notrunc 2>/dev/null
        done
}
reader /dev/vgtrial/striped 1 & WL="$WL $!"
reader /dev/vgtrial/striped 16000 & WL="$WL $!"
writer /dev/vgtrial/striped & WL="$WL $!"

# sampler: "N1's N2's" active schedulers every 0.1 s until
# /tmp/stop-sampler (read, a builtin: no fork per sample under TCG)
sampler() {
        while [ ! -e /tmp/stop-sampler ]; do
                read -r l1 < /sys/block/$N1/queue/scheduler
                read -r l2 < /sys/block/$N2/queue/scheduler
                l1=${l1#*[} l2=${l2#*[}
                echo "${l1%%]*} ${l2%%]*}"
                sleep 0.1
        done > /tmp/samples
}
# worst_run: the longest run of samples in a row where the two differ
worst_run() {
        awk '{ if ($1 != $2) { n++; if (n > w) w = n } else n = 0 } END { print w + 0 }' /tmp/samples
}
# stop_at_originals [TAG]: ends the workload ($WL) and blkmqd, checks its
# exit code and that $N1 and $N2 are back at $O1 and $O2 (parts 3 and 6;
# TAG, "edges" in part 6, goes into the checks' names)
stop_at_originals() {
        kill $WL 2>/dev/null
        wait $WL 2>/dev/null
        rc=$(daemon_stop)
        check_eq "blkmqd exit code${1:+ ($1)}" 0 "$rc"
        check_eq "${1:+$1: }$N1 back to the original" "$O1" "$(sched $N1)"
        check_eq "${1:+$1: }$N2 back to the original" "$O2" "$(sched $N2)"
}
rm -f /tmp/stop-sampler
sampler & SP=$!
sleep 1

# --- 1. a trial of the volume, by its VG/LV name ----------------------------
blkmqctl --address $ADDR trial --emit-conf vgtrial/striped > /tmp/trial.conf 2> /tmp/trial.err
rc=$?
touch /tmp/stop-sampler; wait $SP
sed 's/^/# trial| /' /tmp/trial.conf /tmp/trial.err
check_eq "blkmqctl trial --emit-conf vgtrial/striped exit code" 0 $rc
check "the log names both members of the lockstep" log_has "$TOP: a stack: each candidate goes to its members"
echo "# samples: $(wc -l < /tmp/samples), differing: $(awk '$1 != $2' /tmp/samples | wc -l), longest run apart: $(worst_run)"
check "the members were never apart for two samples in a row" [ "$(worst_run)" -le 1 ]
check "both carried mq-deadline together" grep -qx "mq-deadline mq-deadline" /tmp/samples
check "both carried none together" grep -qx "none none" /tmp/samples
check_eq "after the trial: both alike" "$(sched $N1)" "$(sched $N2)"
W=$(sed -n 's/^Scheduler=//p' /tmp/trial.conf)
check_eq "after the trial: $N1 carries the choice" "$W" "$(sched $N1)"
check "the drop-in matches the stack" grep -qx "MatchVolume=vgtrial/striped" /tmp/trial.conf

# --- 2. stop, and a trial restored while the members carry mq-deadline -----
# (a new daemon: the first one's guard rail may have tripped mq-deadline)
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
check_eq "stop: $N1 back to the original" "$O1" "$(sched $N1)"
check_eq "stop: $N2 back to the original" "$O2" "$(sched $N2)"
daemon_start -c /tmp/stack.conf --varlink-address $ADDR --log-level debug
check "daemon ready again" vm_wait_for 30 log_has "; ready\."
(blkmqctl --address $ADDR --json trial vgtrial/striped > /tmp/trial2.json 2>&1) & TP=$!
other=mq-deadline
[ "$O1" = mq-deadline ] && other=none
i=0
while [ $i -lt 600 ]; do
        read -r l1 < /sys/block/$N1/queue/scheduler
        read -r l2 < /sys/block/$N2/queue/scheduler
        case "$l1|$l2" in *"[$other]"*"|"*"[$other]"*) break ;; esac
        sleep 0.1
        i=$((i + 1))
done
check "both members carry $other during the second trial" [ $i -lt 600 ]
blkmqctl --address $ADDR restore vgtrial/striped > /tmp/restore.out 2>&1
check "the restore came back" [ $? -eq 0 ]
vm_wait_for 30 sh -c "! kill -0 $TP 2>/dev/null"
sed 's/^/# trial 2| /' /tmp/trial2.json | tail -n 3
check "the second trial ended by the restore" grep -q 'restore' /tmp/trial2.json
sleep 1
check_eq "abort: $N1 at its original" "$O1" "$(sched $N1)"
check_eq "abort: $N2 at its original" "$O2" "$(sched $N2)"

# --- 3. stop: the originals, of a trial's choice too -------------------------
stop_at_originals
log_has "lockstep" || log_show
grep -E "trial|stack|member" $BLKMQD_LOG | sed 's/^/# blkmqd| /' | head -n 40

# --- 3b. a member whose jobs do not come back: the trial ends ---------------
# $N2's jobs wait 4 s (BLKMQD_TEST_JOB_DELAY), CallTimeoutSec=1: the trial's
# first apply is overdue, the trial aborts naming $N2, both members go back
# to the setting before it (their originals) once the jobs ran.
{ echo "[Daemon]"; echo "CallTimeoutSec=1"; sed 1d /tmp/stack.conf; } > /tmp/late.conf
both_at_originals() { [ "$(sched $N1) $(sched $N2)" = "$O1 $O2" ]; }
WL=
reader /dev/vgtrial/striped 1 & WL="$WL $!"
export BLKMQD_TEST_JOB_DELAY=$N2:4000
daemon_start -c /tmp/late.conf --varlink-address $ADDR --log-level debug
unset BLKMQD_TEST_JOB_DELAY
check "late: daemon ready" vm_wait_for 30 log_has "; ready\."
sleep 5
blkmqctl --address $ADDR --json trial vgtrial/striped > /tmp/trial-late.json 2>&1
sed 's/^/# trial late| /' /tmp/trial-late.json | tail -n 2
check "late: the trial aborted, naming $N2 and the limit" \
        grep -q "\"abortReason\" *: *\"the apply to $N2 did not come back within 1 s" /tmp/trial-late.json
check "late: $N1 and $N2 at their originals once the jobs ran" vm_wait_for 20 both_at_originals
stop_at_originals late

# --- 4. an md RAID 1, its trial at hotplug, a member that refuses kyber ------
O3=$(sched $N3) O4=$(sched $N4)
dd if=/dev/urandom of=/tmp/key bs=64 count=1 2>/dev/null
check "cryptsetup open ctrial on the LV" cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 256 \
        --key-file /tmp/key /dev/vgtrial/striped ctrial
settle
CT=$(basename "$(readlink -f /dev/mapper/ctrial)")
cat > /tmp/edges.conf <<EOF
[Daemon]
ProbeIntervalSec=1
TrialsPerHourAllDevices=60

[Device mirror]
MatchMDLevel=raid1
AutoTune=yes
AutoTrialOnHotplug=yes
AutoScheduler=none mq-deadline kyber
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1

[Device vault]
MatchCrypt=ctrial
AutoScheduler=none mq-deadline
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1

[Device own]
MatchKernel=$N2
AutoScheduler=none mq-deadline
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1
EOF
export BLKMQD_TEST_FAIL_WRITE="$N4:queue/scheduler=kyber"
daemon_start -c /tmp/edges.conf --varlink-address $ADDR --log-level debug
unset BLKMQD_TEST_FAIL_WRITE
check "daemon ready (edges)" vm_wait_for 30 log_has "; ready\."
check "mdadm RAID1 md0 over $N3 $N4" mdadm --create /dev/md0 --run --quiet --assume-clean --level=1 \
        --raid-devices=2 --metadata=1.2 --name=trialmd --homehost=any /dev/$N3 /dev/$N4
settle
MD=md0
# io DEV: 4 KiB direct reads and 128 KiB direct writes on DEV, forever
io() {
        i=$2
        while :; do
                i=$(( (i + 7919) % 30000 ))
                dd if=$1 of=/dev/null bs=4k count=16 skip=$i iflag=direct 2>/dev/null
                dd if=/dev/zero of=$1 bs=64k count=2 seek=$(( i % 1500 )) oflag=direct conv=notrunc 2>/dev/null
        done
}
WL=
io /dev/$MD 1 & WL="$WL $!"
io /dev/$MD 15000 & WL="$WL $!"
S1=$N1 S2=$N2
N1=$N3 N2=$N4 # the sampler's pair
rm -f /tmp/stop-sampler
sampler & SP=$!
check "the array's trial started by itself (AutoTrialOnHotplug=)" vm_wait_for 60 log_has "$MD: trial of .*automatic"
blkmqctl --address $ADDR trial $N3 > /tmp/own3.out 2>&1
rc=$?
sed "s/^/# trial $N3| /" /tmp/own3.out
check_eq "a member's own trial during the array's: exit code" 6 $rc
check "... refused, naming the array" grep -q "$N3 is a member of $MD, whose trial is running" /tmp/own3.out
check "the array's trial came to its end" vm_wait_for 120 log_has "$MD: trial \(chose\|kept\)"
sleep 1
touch /tmp/stop-sampler; wait $SP
N1=$S1 N2=$S2
echo "# md samples: $(wc -l < /tmp/samples), differing: $(awk '$1 != $2' /tmp/samples | wc -l), longest run apart: $(worst_run)"
check "the log names the member that refused kyber" log_has "$MD: member $N4 refused kyber: refused for the stack"
awk '$1 != $2' /tmp/samples | sort | uniq -c | sed 's/^/# md apart: /'
# Apart no longer than an apply takes under TCG (the members' jobs run side
# by side, a switch waits for the queue to drain: up to 4 samples seen;
# an epoch of 1 s is 10), except while the refused candidate is taken
# back: $N3 took kyber, $N4 refused it, and the next apply (two switches
# of $N3 in a row) puts them alike before any epoch begins.
check "md: apart for 5 samples in a row at most, but while $N3 carried the refused kyber" awk '
        { if ($1 != $2) { n++; if ($1 == "kyber") k = 1 } else { if (n > 5 && !k) bad = 1; n = 0; k = 0 } }
        END { if (n > 5 && !k) bad = 1; exit bad }' /tmp/samples
check "md: apart for 2 s at most (20 samples)" [ "$(worst_run)" -le 20 ]
check "md: never kyber on both" sh -c "! grep -qx 'kyber kyber' /tmp/samples"
check "md: both carried mq-deadline together" grep -qx "mq-deadline mq-deadline" /tmp/samples
check_eq "md: after the trial, both alike" "$(sched $N3)" "$(sched $N4)"
check "no trial of a member by itself, none even asked for at hotplug" \
        sh -c "! grep -q '\($N3\|$N4\): \(trial of\|no trial at hotplug\)' $BLKMQD_LOG"
kill $WL 2>/dev/null
wait $WL 2>/dev/null

# --- 5. dm-crypt on the LV: a member in its own trial, members that differ ---
blkmqctl --address $ADDR trial $N2 > /tmp/own2.out 2>&1 & OP=$!
vm_wait_for 30 log_has "$N2: trial of"
blkmqctl --address $ADDR trial $CT > /tmp/ct1.out 2>&1
rc=$?
sed "s/^/# trial $CT| /" /tmp/ct1.out
check_eq "the mapping's trial while $N2 is in its own: exit code" 6 $rc
check "... refused, naming the member" grep -q "member $N2 is in a trial of its own" /tmp/ct1.out
wait $OP
blkmqctl --address $ADDR restore $N2 > /dev/null 2>&1
echo bfq > /sys/block/$N1/queue/scheduler
blkmqctl --address $ADDR trial $CT > /tmp/ct2.out 2>&1
rc=$?
sed "s/^/# trial $CT| /" /tmp/ct2.out
check_eq "the mapping's trial over members that differ: exit code" 6 $rc
check "... refused, naming the member and both values" \
        sh -c "grep -q 'the members of $CT differ: ' /tmp/ct2.out && grep -q '$N1 has bfq' /tmp/ct2.out && grep -q '$N2 has $O2' /tmp/ct2.out"
echo "$O1" > /sys/block/$N1/queue/scheduler

# --- 6. the mapping's trial over both namespaces of the LV -------------------
# Readers and a writer: each close of the mapping after a write makes
# udev's watch send it a "change" (the stack planned again, its members
# too), so a member is asked for again while many of its jobs run. Once,
# with a writer here, the trial's call had no reply within 120 s after the
# last epoch; a trial that waits for a member job with no apply asked for
# after it (Device.dirty) can wait for ever under such a stream, so it
# counts the member's jobs now (member_job). The hang has not come back
# since, with the old rule either (one run each): this is a check that the
# trial answers with a writer, not proof of that cause.
WL=
reader /dev/mapper/ctrial 1 & WL="$WL $!"
reader /dev/mapper/ctrial 15000 & WL="$WL $!"
writer /dev/mapper/ctrial & WL="$WL $!"
rm -f /tmp/stop-sampler
sampler & SP=$!
blkmqctl --address $ADDR trial --emit-conf $CT > /tmp/ct3.conf 2> /tmp/ct3.err
rc=$?
touch /tmp/stop-sampler; wait $SP
sed "s/^/# trial $CT| /" /tmp/ct3.conf /tmp/ct3.err | tail -n 12
check_eq "blkmqctl trial --emit-conf $CT (dm-crypt on the LV) exit code" 0 $rc
[ $rc -eq 0 ] || grep -E "$CT|$N1|$N2" $BLKMQD_LOG | tail -n 60 | sed 's/^/# debug| /'
check "the log names both members" log_has "$CT: a stack: each candidate goes to its members"
echo "# crypt samples: $(wc -l < /tmp/samples), differing: $(awk '$1 != $2' /tmp/samples | wc -l), longest run apart: $(worst_run)"
check "crypt: apart for 5 samples in a row at most (an apply)" [ "$(worst_run)" -le 5 ]
check "crypt: both carried mq-deadline together" grep -qx "mq-deadline mq-deadline" /tmp/samples
check_eq "crypt: after the trial, both alike" "$(sched $N1)" "$(sched $N2)"
check "the drop-in matches the mapping" grep -qx "MatchCrypt=ctrial" /tmp/ct3.conf
stop_at_originals edges
check_eq "edges: $N3 back to the original" "$O3" "$(sched $N3)"
check_eq "edges: $N4 back to the original" "$O4" "$(sched $N4)"
grep -E "trial|stack|member|FAIL_WRITE" $BLKMQD_LOG | sed 's/^/# blkmqd| /' | head -n 60
vm_summary
