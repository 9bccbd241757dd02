# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of vm-autotune (--zns --conventional --udev): closed-loop
# tuning on the emulated NVMe namespaces of a 6.1 kernel.
#   conventional namespace, under a mixed direct-I/O workload (busybox dd:
#   three 4 KiB random readers, one 128 KiB writer): blkmqctl trial compares
#   none and mq-deadline, comes to a decision, and the scheduler in sysfs is
#   the one it chose; blkmqctl export prints a drop-in matched by the
#   model and firmware, which blkmqd --dry-run reads and matches to it;
#   SIGTERM puts the original back.
#   ZNS namespace (6.1 gives it none): a trial is refused, since the
#   baseline's none could not be written back between epochs (the guard
#   writes only mq-deadline there); with mq-deadline set, the same bounds
#   leave only mq-deadline (a zoned disk before 6.10): refused again, saying
#   why. No none is ever written to it by a trial.
#   On 6.10 and later (zone write plugging: any scheduler on a zoned disk)
#   the ZNS namespace's trial runs instead, under reads and sequential zone
#   writes: it compares none and mq-deadline, its choice is in sysfs, and
#   SIGTERM puts the original back.
. /vm/daemon-lib.sh

echo "# kernel $(uname -r), uptime $(vm_uptime)s"
nvme_namespaces || { vm_summary; exit 1; }
C0=$(sched $C) Z0=$(sched $Z)
echo "# before: $C $(qstate $C); $Z $(qstate $Z)"

mkdir -p /etc/blkmqd
cat > /tmp/autotune.conf <<EOF
[Daemon]
ProbeIntervalSec=1

[Device conv]
MatchKernel=$C
ReadAheadKB=256
AutoTune=yes
AutoScheduler=none mq-deadline
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1

[Device zns]
MatchKernel=$Z
AutoTune=yes
AutoScheduler=none mq-deadline
AutoEpochSec=1
AutoRounds=3
AutoMinIOPS=1
EOF
ADDR=/run/blkmqd.varlink
daemon_start -c /tmp/autotune.conf --varlink-address $ADDR --log-level debug
check "daemon started" [ -n "$DPID" ]
check "daemon ready" vm_wait_for 30 log_has "; ready\."

# The workload (daemon-lib.sh): three 4 KiB direct readers and a 128 KiB
# direct writer.
mixed_load $C
sleep 2

# --- 1. a trial on the conventional namespace ------------------------------
blkmqctl --address $ADDR --json trial $C > /tmp/trial.json 2> /tmp/trial.err
rc=$?
kill $WL 2>/dev/null
wait $WL 2>/dev/null
sed 's/^/# trial stderr| /' /tmp/trial.err
last=$(grep '^{' /tmp/trial.json | tail -n1)
echo "# trial: $(echo "$last" | grep -o '"verdict": *"[^"]*"') $(echo "$last" | grep -o '"winner": *"[^"]*"') $(echo "$last" | grep -o '"reason": *"[^"]*"')"
check_eq "blkmqctl trial $C exit code" 0 $rc
check_match "the trial came to a decision" '*"state":*"decided"*' "$(echo "$last" | grep -o '"state": *"[^"]*"' | head -n1)"
check_match "both candidates were measured" '*"epochs":*[1-9]*"epochs":*[1-9]*' "$(echo "$last" | grep -o '"epochs": *[0-9]*' | tr '\n' ' ')"
W=$(echo "$last" | sed -n 's/.*"winner": *"\([^" ]*\).*/\1/p')
check "the winner is a candidate (none or mq-deadline)" sh -c "[ '$W' = none ] || [ '$W' = mq-deadline ]"
check_eq "$C scheduler in sysfs is the winner's" "$W" "$(sched $C)"
# One "running" reply at the end of each epoch, the last one's too (then the
# decision): 6, or 2 where a candidate left the race after its first epoch
# (far worse than the best so far: a loaded host can make it so).
E=0
for n in $(echo "$last" | grep -o '"epochs": *[0-9]*' | grep -o '[0-9]*$'); do E=$((E + n)); done
check_eq "progress came per epoch: replies while running, for $E epochs" $E "$(grep -c '"running"' /tmp/trial.json)"

# --- 1b. export: the namespace's keys as a drop-in matched by its kind ------
blkmqctl --address $ADDR export $C > /tmp/export.conf 2> /tmp/export.err
rc=$?
sed 's/^/# export| /' /tmp/export.conf /tmp/export.err
check_eq "blkmqctl export $C exit code" 0 $rc
check "export matches QEMU's model" grep -qx "MatchModel=QEMU NVMe Ctrl" /tmp/export.conf
check "and its firmware revision" grep -qx "MatchFirmware=$(cat /sys/block/$C/device/firmware_rev | tr -d ' ')" /tmp/export.conf
check "and its zoned model" grep -qx "MatchZoned=none" /tmp/export.conf
check "ReadAheadKB= of [Device conv]" grep -qx "ReadAheadKB=256" /tmp/export.conf
if grep -q '"verdict": *"change"' /tmp/trial.json; then
        check "Scheduler= as the trial chose" grep -qx "Scheduler=$W" /tmp/export.conf
fi
blkmqd -c /tmp/export.conf --dry-run --once > /tmp/export-dry.out 2>&1
sed 's/^/# export dry-run| /' /tmp/export-dry.out
check "blkmqd reads it, and its section matches $C" sh -c \
        "sed -n '/^$C /,/^[^ ]/p' /tmp/export-dry.out | grep -q '\[Device fleet-QEMU-NVMe-Ctrl[^]]*\] (.*) matches'"
check "but not the zoned $Z of the same model and firmware" sh -c \
        "sed -n '/^$Z /,/^[^ ]/p' /tmp/export-dry.out | grep -q 'not managed: no \[Device\] section matches'"

if vm_kernel_ge 6 10; then
# --- 2. the ZNS namespace, 6.10 and later: a trial chooses -----------------
# The workload: 4 KiB direct reads in the first 16 MiB of zone 0 (written
# first), 1 MiB direct writes at the write pointer of zones 1.. (one writer,
# so in order; 60 per zone, its capacity).
dd if=/dev/zero of=/dev/$Z bs=1M count=16 oflag=direct 2>/dev/null
zreader() {
        i=$1
        while :; do
                i=$(( (i + 331) % 4080 ))
                dd if=/dev/$Z of=/dev/null bs=4k count=16 skip=$i iflag=direct 2>/dev/null
        done
}
zwriter() {
        z=1
        while [ $z -lt $VM_ZONES ]; do
                i=0
                while [ $i -lt 60 ]; do
                        dd if=/dev/zero of=/dev/$Z bs=1M count=1 seek=$((z * 64 + i)) oflag=direct \
                                conv=notrunc 2>/dev/null || echo "# zone writer: write at zone $z + $i MiB failed"
                        i=$((i + 1))
                done
                z=$((z + 1))
        done
}
WL=
zreader 1 & WL="$WL $!"
zreader 2000 & WL="$WL $!"
zwriter & WL="$WL $!"
sleep 2
blkmqctl --address $ADDR --json trial $Z > /tmp/ztrial.json 2> /tmp/ztrial.err
rc=$?
kill $WL 2>/dev/null
wait $WL 2>/dev/null
sed 's/^/# zns trial stderr| /' /tmp/ztrial.err
zlast=$(grep '^{' /tmp/ztrial.json | tail -n1)
echo "# zns trial: $(echo "$zlast" | grep -o '"verdict": *"[^"]*"') $(echo "$zlast" | grep -o '"winner": *"[^"]*"') $(echo "$zlast" | grep -o '"reason": *"[^"]*"')"
check_eq "blkmqctl trial $Z ($Z0) on $(uname -r): exit code" 0 $rc
check "no 6.10 guard in its notes" sh -c "! grep -q 'before 6.10' /tmp/ztrial.json /tmp/ztrial.err"
check_match "the zns trial came to a decision" '*"state":*"decided"*' "$(echo "$zlast" | grep -o '"state": *"[^"]*"' | head -n1)"
check_match "both schedulers were measured on $Z" '*"epochs":*[1-9]*"epochs":*[1-9]*' "$(echo "$zlast" | grep -o '"epochs": *[0-9]*' | tr '\n' ' ')"
ZW=$(echo "$zlast" | sed -n 's/.*"winner": *"\([^" ]*\).*/\1/p')
check "the zns winner is a candidate (none or mq-deadline)" sh -c "[ '$ZW' = none ] || [ '$ZW' = mq-deadline ]"
check_eq "$Z scheduler in sysfs is the winner's" "$ZW" "$(sched $Z)"
check "the log: mq-deadline written to $Z by the trial" grep -q "$Z: queue/scheduler .*mq-deadline" $BLKMQD_LOG
else
# --- 2. the ZNS namespace: the kernel guard leaves nothing to compare ------
blkmqctl --address $ADDR trial $Z > /tmp/ztrial.out 2>&1
rc=$?
sed 's/^/# zns trial| /' /tmp/ztrial.out
check_eq "blkmqctl trial $Z ($Z0) is refused: exit code" 6 $rc
check "the refusal says $Z0 cannot be put back" grep -q "the current scheduler $Z0 cannot be put back" /tmp/ztrial.out
echo mq-deadline > /sys/block/$Z/queue/scheduler
blkmqctl --address $ADDR trial $Z > /tmp/ztrial2.out 2>&1
rc=$?
sed 's/^/# zns trial 2| /' /tmp/ztrial2.out
check_eq "with mq-deadline, blkmqctl trial $Z is refused: exit code" 6 $rc
check "the refusal names the 6.10 guard" grep -q "none left out: a zoned disk before 6.10 needs mq-deadline" /tmp/ztrial2.out
check_eq "$Z scheduler stays" mq-deadline "$(sched $Z)"
check "the log: no write of none to $Z" sh -c "! grep -q '$Z: queue/scheduler .*→ none' $BLKMQD_LOG"

fi

# --- 3. stop: the original comes back ---------------------------------------
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
check_eq "$C scheduler back to the original" "$C0" "$(sched $C)"
if vm_kernel_ge 6 10; then
        check_eq "$Z scheduler back to the original" "$Z0" "$(sched $Z)"
else
        check_eq "$Z scheduler as set before the trial (nothing of blkmqd's to restore)" mq-deadline "$(sched $Z)"
fi
# A failure shows what the trial replied and what blkmqd logged.
if ! log_has "trial" || [ "$(vm_failures)" -gt 0 ]; then
        echo "# trial's last reply: $last"
        [ -n "${zlast:-}" ] && echo "# zns trial's last reply: $zlast"
        log_show
fi
vm_summary
