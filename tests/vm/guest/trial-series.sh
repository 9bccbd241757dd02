# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of tests/vm/capture-trial-series.sh (--zns --conventional, as
# vm-autotune): records
# the epoch series a trial sees on the conventional NVMe namespace under
# vm-autotune's workload (daemon-lib.sh mixed_load), in the format of
# tests/fixtures/trial-series/ (its README), one "@TS@ LINE" per line on the
# console. Each candidate of bench/autotune's trial (none, the setting at
# boot; mq-deadline and kyber at nr_requests 4, 32 and 256) is set by hand
# in turn, TS_ROUNDS times (forward, then backward), and after TS_SETTLE s
# /sys/block/X/stat is sampled every 0.25 s of the clock, TS_SAMPLES times. The time
# of a sample is the kernel's monotonic clock in ns (/proc/timer_list),
# where that file is missing /proc/uptime's (10 ms).
. /vm/daemon-lib.sh

ROUNDS=${TS_ROUNDS:-4} SETTLE=${TS_SETTLE:-1.5} SAMPLES=${TS_SAMPLES:-25}
echo "# kernel $(uname -r), uptime $(vm_uptime)s"
nvme_namespaces || { vm_summary; exit 1; }
for m in mq-deadline kyber-iosched; do
        vm_modprobe $m 2>/dev/null
done
check "mq-deadline and kyber offered on $C" sh -c \
        "grep -q mq-deadline /sys/block/$C/queue/scheduler && grep -q kyber /sys/block/$C/queue/scheduler"
check_eq "$C starts on none" none "$(sched $C)"

# now_usec: the monotonic clock, in µs
CLOCK="CLOCK_MONOTONIC (/proc/timer_list)"
now_usec() { sed -n 's/^now at \([0-9]*\)[0-9][0-9][0-9] nsecs$/\1/p;3q' /proc/timer_list 2>/dev/null; }
if [ -z "$(now_usec)" ]; then
        CLOCK="/proc/uptime (10 ms)"
        now_usec() { read _u _r < /proc/uptime; echo $(( ${_u%.*} * 1000000 + 10000 * 1${_u#*.} - 1000000 )); }
fi

CANDS="none:0 mq-deadline:4 mq-deadline:32 mq-deadline:256 kyber:4 kyber:32 kyber:256"
ts() { echo "@TS@ $*"; }
ts "# recorded by tests/vm/capture-trial-series.sh in a QEMU guest: kernel $(uname -r)," \
        "$(grep -c ^processor /proc/cpuinfo) vCPUs, QEMU NVMe $C ($(cat /sys/block/$C/size) sectors)"
ts "# workload: tests/vm/guest/daemon-lib.sh mixed_load (busybox dd: 3 readers of 4 KiB direct reads, 16 a dd;" \
        "1 writer of 128 KiB direct writes, 8 a dd); $ROUNDS rounds, settle $SETTLE s, $SAMPLES samples a stretch;" \
        "clock $CLOCK"
ts "step_usec	250000"
i=0
for c in $CANDS; do
        ts "candidate	$i	${c%:*}	${c#*:}"
        i=$((i + 1))
done

mixed_load $C
sleep 2
stretch=0 r=0
while [ $r -lt $ROUNDS ]; do
        if [ $((r % 2)) = 0 ]; then order="0 1 2 3 4 5 6"; else order="6 5 4 3 2 1 0"; fi
        for k in $order; do
                set -- $CANDS
                shift $k
                s=${1%:*} n=${1#*:}
                echo $s > /sys/block/$C/queue/scheduler
                [ $n = 0 ] || echo $n > /sys/block/$C/queue/nr_requests
                # a recording under another setting than its label is no recording
                [ $n = 0 ] && want="$s/*" || want="$s/$n"
                check_match "round $r: $s nr_requests=$n in force (scheduler/nr_requests)" "$want" \
                        "$(sched $C)/$(qattr $C nr_requests)"
                sleep $SETTLE
                # a sample every 0.25 s on the clock: each sleep ends at
                # the next step's time (a sample takes about 80 ms of
                # shell under TCG; a plain sleep 0.25 made steps of 330)
                j=0 prev= t0=$(now_usec)
                while [ $j -lt $SAMPLES ]; do
                        t=$(now_usec)
                        st=$(cat /sys/block/$C/stat)
                        ts "$k	$stretch	$([ -n "$prev" ] && echo $((t - prev)) || echo 0)	$(echo $st | tr ' ' '\t')"
                        prev=$t
                        j=$((j + 1))
                        left=$((t0 + j * 250000 - $(now_usec)))
                        [ $left -le 0 ] || sleep $(printf '%d.%06d' $((left / 1000000)) $((left % 1000000)))
                done
                stretch=$((stretch + 1))
        done
        echo "# round $r done, uptime $(vm_uptime)s"
        r=$((r + 1))
done
kill $WL 2>/dev/null
wait $WL 2>/dev/null
echo none > /sys/block/$C/queue/scheduler
ok "recorded $stretch stretches of $SAMPLES samples"
vm_summary
