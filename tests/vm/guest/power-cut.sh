# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of tests/vm/power-cut.py (--zns --data-disk): one boot after a
# power cut. The NVMe ZNS namespace's and the database disk's (virtio-blk)
# backing files sit on tools/powerdisk on the host (a guest Flush is an
# fdatasync of the file; both drives have a volatile write cache, checked
# below), and the host built this boot's disks from a crash state of each.
#   1. The zones as the drive kept them: QEMU keeps no zone state across a
#      restart (every zone comes up empty), so the host says, in
#      /vm/zones.state ("INDEX SECTORS FINISHED"), how far each zone's data
#      reaches in the crash state and whether the zone was finished (QEMU's
#      trace of the finishes and resets); the data is written again in place
#      (the same bytes) up to there and the finished zones finished.
#   2. blkmqd on the ZNS namespace, its database (and WAL) on ext4 on the
#      virtio-blk disk (/data); the host's record of what the stagers were
#      told before the cut (/vm/book: "ack K LEASE SHA256 LBA SIZE", "rel K
#      LEASE" for a release in flight, "seen LABEL" for a stage in flight) is
#      checked as the kill -9 rounds check it (zones-crash-lib.sh's
#      check_round): every acknowledged seal sealed and reading back (dd) to
#      its SHA-256, no lease on two zones, nothing failed, allocated or
#      writing, no sealed zone that no stager knows of; a stage in flight
#      settles (its zone sealed, or nothing of it held); an Allocate works.
#   3. POWER_WORK=1: two stagers run again, saying on the console what they
#      were told (POWER_ECHO), until the host cuts the power and kills QEMU;
#      otherwise the boot ends here.
. /vm/daemon-lib.sh
. /vm/zones-crash-lib.sh

export BLKMQD_ADDRESS=/tmp/blkmqd.sock
CONF=/tmp/power.conf
STAGERS=2
ROUND=${POWER_ROUND:-1}

vm_need_zoned
C=${VM_DATA_DEV#/dev/}
check "a disk for the database" [ -n "$C" ]
mkdir -p /data
check "ext4 on it mounts (its journal replayed)" mount -t ext4 -o "${POWER_MOUNT_OPTS:-defaults}" /dev/$C /data
echo "# write cache: $Z $(cat /sys/block/$Z/queue/write_cache), $C $(cat /sys/block/$C/queue/write_cache)," \
        "FUA: $C $(cat /sys/block/$C/queue/fua)"
# The cuts matter only where a drive holds writes until a flush.
check_eq "the ZNS drive has a volatile write cache" "write back" "$(cat /sys/block/$Z/queue/write_cache)"
check_eq "the database's drive has a volatile write cache" "write back" "$(cat /sys/block/$C/queue/write_cache)"

ZS=$(cat /sys/block/$Z/queue/chunk_sectors)
restored=0 finished=0
while read -r idx sectors fin; do
        start=$((idx * ZS))
        if [ "$sectors" -gt 0 ]; then
                big=$((sectors / 128)) rem=$((sectors % 128))
                dd if=$DEV of=/tmp/zone bs=65536 skip=$((start / 128)) count=$(((sectors + 127) / 128)) \
                        iflag=direct 2>/dev/null
                [ $big = 0 ] || dd if=/tmp/zone of=$DEV bs=65536 seek=$((start / 128)) count=$big oflag=direct \
                        2>/dev/null || echo "# zone $idx: rewriting $big blocks failed"
                [ $rem = 0 ] || dd if=/tmp/zone of=$DEV bs=512 skip=$((big * 128)) seek=$((start + big * 128)) \
                        count=$rem oflag=direct 2>/dev/null || echo "# zone $idx: rewriting $rem sectors failed"
                restored=$((restored + 1))
        fi
        if [ "$fin" = 1 ]; then
                blkzone finish -o $start -c 1 $DEV && finished=$((finished + 1))
        fi
done < /vm/zones.state
rm -f /tmp/zone
echo "# zone state restored: $restored zones with data, $finished finished"

zones_conf $CONF /data/zones.db Scheduler=mq-deadline "$([ $((ROUND % 2)) = 1 ] && echo ResetBatch=1)"
listed_or_dead() { zone_listed || [ -s $BLKMQD_RC ]; }
daemon_start -c $CONF --varlink-address /tmp/blkmqd.sock --log-level debug
check "blkmqd starts on the crash state and lists the zones" vm_wait_for 60 zone_listed

# What the stagers were told before the cut.
: > /tmp/seen-labels
while read -r what k rest; do
        case $what in
        ack) echo "$rest" >> /tmp/ack.$k ;;
        rel) echo "$rest" > /tmp/rel.$k ;;
        seen) echo "$k" >> /tmp/seen-labels ;;
        esac
done < /vm/book
echo "# book: $(cat /tmp/ack.* 2>/dev/null | wc -l) acknowledged seals, $(wc -l < /tmp/seen-labels) stages in flight"
# (POWER_ECHO: a release found gone through is said, the host's book follows)
if POWER_ECHO=$([ "${POWER_WORK:-0}" = 1 ] && echo 1) check_round $ROUND; then ok "round $ROUND: every acknowledged seal kept, nothing leaked or left half-done"
else not_ok "round $ROUND: every acknowledged seal kept, nothing leaked or left half-done"; grep -v '^<7>' $BLKMQD_LOG | tail -n 30 | sed 's/^/# blkmqd| /'; fi
# A stage in flight settles: its label is on a sealed zone (staged) or on none.
unsettled=0
while read -r label; do
        awk -v l="$label" '$7 == l && $5 != "sealed" && $5 != "free"' /tmp/z.tab | grep -q . && unsettled=$((unsettled + 1))
done < /tmp/seen-labels
check_eq "the stages in flight at the cut settled (sealed, or nothing held)" 0 $unsettled
a=$(blkmqctl zones alloc --size=4096 --device $Z 2>&1)
arc=$?
lease=$(echo "$a" | sed -n 's/^ *Lease: //p')
if [ -n "$lease" ]; then
        ok "Allocate works"
        blkmqctl zones release $lease > /dev/null
elif [ $arc = 8 ] && ! awk '$5 == "free" || $5 == "releasing"' /tmp/z.tab | grep -q .; then
        ok "Allocate works: every zone is held, and it says so (exit 8)"
else
        not_ok "Allocate works: exit $arc: $a"
fi

if [ "${POWER_WORK:-0}" = 1 ]; then
        POWER_ECHO=1
        rm -f /tmp/stop
        for k in $(seq 0 $((STAGERS - 1))); do
                # acknowledged seals carry on: a stager releases its own
                stager $k $((ROUND + 1)) &
        done
        echo "POWER-ARMED round $ROUND"
        sleep 100000
fi
check_eq "SIGTERM: exit 0" 0 "$(daemon_stop)"
umount /data
vm_summary
