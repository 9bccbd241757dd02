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
#   while both carry mq-deadline: both are back at their originals.
. /vm/daemon-lib.sh

echo "# kernel $(uname -r), uptime $(vm_uptime)s"
. /vm/stacks-lib.sh
stack_setup 2
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
WL=
reader() {
        i=$1
        while :; do
                i=$(( (i + 7919) % 32000 ))
                dd if=/dev/vgtrial/striped of=/dev/null bs=4k count=16 skip=$i iflag=direct 2>/dev/null
        done
}
writer() {
        i=0
        while :; do
                i=$(( (i + 97) % 500 ))
                dd if=/dev/zero of=/dev/vgtrial/striped bs=64k count=8 seek=$((2048 + i)) oflag=direct conv=notrunc 2>/dev/null
        done
}
reader 1 & WL="$WL $!"
reader 16000 & WL="$WL $!"
writer & WL="$WL $!"

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
kill $WL 2>/dev/null
wait $WL 2>/dev/null
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
check_eq "$N1 back to the original" "$O1" "$(sched $N1)"
check_eq "$N2 back to the original" "$O2" "$(sched $N2)"
log_has "lockstep" || log_show
grep -E "trial|stack|member" $BLKMQD_LOG | sed 's/^/# blkmqd| /' | head -n 40
vm_summary
