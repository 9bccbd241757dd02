# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-zones.sh (--zns --udev --max-active 4): blkmqd's zone
# allocator (nvme backend: passthrough zone appends) on the real ZNS namespace of a 6.1
# kernel, driven by blkmqctl; every result checked without blkmqd: data
# read back with plain dd from the start LBA and hashed with sha256sum, zone
# conditions and write pointers from blkzone (bundled by the host when it
# has it; blkmqctl zones otherwise).
#   stage 1 B, 4 KiB, 1 MiB+1 and 50 MiB -> sealed, read back, same sha256;
#   more than the capacity (60 MiB) -> TooLarge (exit 8); a fifth lease with
#   max_active 4 -> ZoneLimitReached (exit 8); a wrong checksum -> exit 9;
#   each stage's seal and the batch of resets reach the device as flushes
#   (/sys/block/X/stat field 16: QEMU's NVMe is write back);
#   four releases (ResetBatch= default 4) -> reset as one batch, zones empty;
#   kill -9 mid-append, restart -> reconciled (writing -> releasing, reset),
#   sealed zones keep lease and sha256; an append reported out of place
#   (fault injection) -> the zone is reset and the object written again.
#   At five quiet points every zone's write pointer and condition as
#   zbd report (zbd-utils, libzbd) shows them is what blkmqctl zones says.
. /vm/daemon-lib.sh

export BLKMQD_ADDRESS=/tmp/blkmqd.sock
CONF=/tmp/zones.conf
MIB=1048576

vm_need_zoned
echo "# $Z: $(cat $Q/nr_zones) zones of $(cat $Q/chunk_sectors) sectors, max_active $(cat $Q/max_active_zones)," \
        "max_open $(cat $Q/max_open_zones), logical block $(cat $Q/logical_block_size)"
BLKZONE=
command -v blkzone >/dev/null && BLKZONE=1
echo "# blkzone: ${BLKZONE:+bundled}${BLKZONE:-not bundled, using blkmqctl zones}"

zones_conf $CONF /tmp/zones.db Scheduler=mq-deadline

running() { blkmqctl status 2>/dev/null | grep -q "State: running"; }
start() {
        daemon_start -c $CONF --varlink-address /tmp/blkmqd.sock --log-level debug
        check "blkmqd offers $Z for leases" vm_wait_for 30 zone_listed
}
# zrow IDX: the blkmqctl zones table row of zone IDX (INDEX START-LBA WP COND STATE LEASE LABEL BYTES)
zrow() { blkmqctl --no-legend zones $Z | awk -v i="$1" '$1 == i'; }
zstate() { zrow $1 | awk '{ print $5 }'; }
zstate_is() { [ "$(zstate $1)" = "$2" ]; }
# bz LBA: "cond wptr" of the zone at LBA as blkzone reports it (wptr relative, sectors)
bz() { blkzone report -o $1 -c 1 $DEV | sed -n 's/.*wptr 0x\([0-9a-f]*\).*zcond: *\([0-9]*\).*/\2 \1/p'; }
# dev_cond LBA: the device's view, "empty"/"full"/"open"/"closed" and the write pointer offset in sectors
dev_view() {
        if [ -n "$BLKZONE" ]; then
                set -- $(bz $1)
                case $1 in 1) c=empty ;; 2|3) c=open ;; 4) c=closed ;; 14) c=full ;; *) c=cond$1 ;; esac
                echo "$c $((0x$2))"
        else
                _r=$(blkmqctl --no-legend zones $Z | awk -v l="$1" '$2 == l')
                set -- $_r
                case $4 in implicitOpen|explicitOpen) c=open ;; *) c=$4 ;; esac
                echo "$c $(($3 - $2))"
        fi
}
# zbd_agrees WHEN: every zone as zbd report shows it is what blkmqctl
# zones says, and the zone count is the namespace's (vm_zbd_agrees).
zbd_agrees() {
        blkmqctl --no-legend zones $Z | awk '{ print $2, ($4 == "full" ? "-" : $3), $4 }' > /tmp/blkmqd.view
        vm_zbd_agrees "$1" "blkmqctl zones says" "$(cat $Q/nr_zones)" /tmp/blkmqd.view \
                "empty implicitOpen explicitOpen closed full" -u 512
}
# readback LBA SIZE: sha256 of SIZE bytes from LBA with plain dd, past any cache
readback() {
        sync
        echo 3 > /proc/sys/vm/drop_caches
        if [ $(($2 % MIB)) = 0 ] && [ $(($1 % 2048)) = 0 ]; then
                dd if=$DEV bs=1M skip=$(($1 / 2048)) count=$(($2 / MIB)) 2>/dev/null | sha256sum | cut -d' ' -f1
        else
                dd if=$DEV bs=512 skip=$1 count=$((($2 + 511) / 512)) 2>/dev/null | head -c $2 | sha256sum | cut -d' ' -f1
        fi
}

t0=$(vm_uptime)
start
check "blkmqd reaches running" vm_wait_for 30 running
blkmqctl zones | sed 's/^/# /'
CAP=$(blkmqctl --json zones | sed -n 's/.*"zoneCapacity": *\([0-9]*\).*/\1/p')
check_eq "zone capacity as the harness set it (60 MiB)" $((60 * MIB)) "$CAP"
# The device the zones are handed out on: the kernel's write limits, as
# sysfs has them (6.1: none; 6.12: atomic writes; 7.x: write streams too).
write_limits_agree "blkmqctl zones --json" "$(blkmqctl --json zones)" $Z
check_eq "$Z has a volatile write cache (QEMU's NVMe): seals and resets flush it" "write back" \
        "$(cat $Q/write_cache)"
check_eq "zones free $Z: the first zone" 0 "$(blkmqctl zones free $Z)"

# --- stage ----------------------------------------------------------------
for spec in one:1 4k:4096 1m1:1048577 50m:52428800; do
        n=${spec%%:*} size=${spec#*:}
        head -c $size /dev/urandom > /tmp/$n.bin
        want=$(sha256sum < /tmp/$n.bin | cut -d' ' -f1)
        s=$(vm_uptime)
        f0=$(vm_flushes)
        blkmqctl stage /tmp/$n.bin --device $Z --label $n > /tmp/$n.out 2> /tmp/$n.err
        rc=$?
        echo "# stage $n: $(awk -v a="$s" -v b="$(vm_uptime)" 'BEGIN { printf "%.2f", b - a }') s"
        sed 's/^/# /' /tmp/$n.out /tmp/$n.err
        check_eq "stage $n ($size B): exit code" 0 $rc
        vm_check_flush "stage $n: sealed only after the write cache was flushed" $f0
        lba=$(fld /tmp/$n.out "Start LBA")
        check_eq "stage $n: SHA256 printed is sha256sum's" "$want" "$(fld /tmp/$n.out SHA256)"
        check_eq "stage $n: Device" "$Z" "$(fld /tmp/$n.out Device)"
        check_eq "$n: dd from LBA $lba of $DEV hashes as the file" "$want" "$(readback "$lba" $size)"
        check_eq "$n: the device says the zone is full" "full" "$(dev_view "$lba" | cut -d' ' -f1)"
        eval "LBA_$n=$lba IDX_$n=$(fld /tmp/$n.out Zone) LEASE_$n=$(fld /tmp/$n.out Lease) SHA_$n=$want"
done
rm -f /tmp/50m.bin
zbd_agrees "after four stages"

# --- read back through blkmqd: Read (zones cat) and Verify -----------------
# O_DIRECT reads of the block device through the io_uring pool, the last
# block of 1m1 partial.
blkmqctl zones cat 1m1 -o /tmp/1m1.back > /tmp/cat.out 2>&1
check_eq "zones cat 1m1 -o FILE: exit 0" 0 $?
check_eq "zones cat 1m1: FILE hashes as the staged file" "$SHA_1m1" "$(sha256sum < /tmp/1m1.back | cut -d' ' -f1)"
blkmqctl zones cat one | cmp -s - /tmp/one.bin
check_eq "zones cat one (1 B) to a pipe: the byte staged" 0 $?
blkmqctl --no-legend zones verify $Z > /tmp/verify.out 2>&1
check_eq "zones verify $Z: exit 0" 0 $?
sed 's/^/# /' /tmp/verify.out
check_eq "zones verify: the four objects, each SCRUB ok" 4 "$(grep -c ' ok [0-9]' /tmp/verify.out)"

# --- too large, active limit, checksum --------------------------------------
blkmqctl zones alloc --size=$((60 * MIB + 1)) --device $Z > /tmp/big.out 2>&1
check_eq "zones alloc --size=60 MiB+1: exit 8 (TooLarge)" 8 $?
check "TooLarge: message says it does not fit" grep -q "do not fit" /tmp/big.out
truncate -s 61M /tmp/big.bin
blkmqctl stage /tmp/big.bin --device $Z > /tmp/big.out 2>&1
check_eq "stage of 61 MiB: exit 8" 8 $?
rm -f /tmp/big.bin

i=0
for size in 60M 1 1 1; do
        i=$((i + 1))
        blkmqctl zones alloc --size=$size --device $Z --label active$i > /tmp/a$i.out 2>&1
        check_eq "lease $i of 4 (--size=$size): exit 0" 0 $?
        eval "L$i=$(fld /tmp/a$i.out Lease) I$i=$(fld /tmp/a$i.out Zone)"
done
blkmqctl zones alloc --size=1 --device $Z --json > /tmp/a5.out 2>/tmp/a5.err
check_eq "a fifth lease with max_active 4: exit 8" 8 $?
check_match "ZoneLimitReached, maxActive 4" '*.ZoneLimitReached"*"maxActive":4*' "$(cat /tmp/a5.out)"
sed 's/^/# /' /tmp/a5.err

printf hello | blkmqctl zones append $L4 - > /dev/null 2> /tmp/a4.err
check_eq "zones append LEASE - (stdin, fd passed): exit 0" 0 $?
blkmqctl zones seal $L4 "$(printf world | sha256sum | cut -d' ' -f1)" > /tmp/mm.out 2>&1
check_eq "seal with the wrong sha256: exit 9" 9 $?
check_eq "the zone is failed" failed "$(zstate $I4)"
zbd_agrees "four leases, one failed"

# --- release: resets in a batch of 4 (ResetBatch= default) ------------------
check_eq "before: 4 KiB zone full on the device" full "$(dev_view $LBA_4k | cut -d' ' -f1)"
blkmqctl zones release $LEASE_one > /dev/null
check_eq "release 1 B zone: exit 0" 0 $?
sleep 1
check_eq "one released zone waits for the batch" releasing "$(zstate $IDX_one)"
check_eq "... and is not reset yet (device)" full "$(dev_view $LBA_one | cut -d' ' -f1)"
f0=$(vm_flushes)
for l in $LEASE_4k $L2 $L3; do
        blkmqctl zones release $l > /dev/null
        check "release $l: exit 0" [ $? = 0 ]
done
check "the batch of 4 is reset: 1 B zone free" vm_wait_for 20 zstate_is $IDX_one free
vm_check_flush "the batch of resets: recorded free only after a flush" $f0
check "4 KiB zone free" vm_wait_for 5 zstate_is $IDX_4k free
check_eq "1 B zone: empty at its start on the device" "empty 0" "$(dev_view $LBA_one)"
check_eq "4 KiB zone: empty at its start on the device" "empty 0" "$(dev_view $LBA_4k)"
check_eq "4 KiB zone reads back as zeros" "$(head -c 4096 /dev/zero | sha256sum | cut -d' ' -f1)" \
        "$(readback $LBA_4k 4096)"
blkmqctl zones get $Z $IDX_4k > /tmp/g.out
check_eq "4 KiB zone: Resets 1" 1 "$(fld /tmp/g.out Resets)"
check "log: resetting 4 released zones" log_has "resetting 4 released zones"
zrow $IDX_4k | sed 's/^/# after: /'
zbd_agrees "after the batch of resets"

# --- kill -9 in the middle of an append, restart, reconcile ------------------
LBA1=$(zrow $I1 | awk '{ print $2 }')
rm -f /tmp/fifo
mkfifo /tmp/fifo
blkmqctl zones append $L1 /tmp/fifo > /tmp/app.out 2>&1 &
APP=$!
exec 7> /tmp/fifo
head -c $((8 * MIB)) /dev/urandom >&7
wp_moved() { set -- $(zrow $I1); [ $(($3 - $2)) -ge 8192 ]; }
check "the 60 MiB lease is being written (>= 4 MiB in)" vm_wait_for 20 wp_moved
check_eq "state writing" writing "$(zstate $I1)"
echo "# device: $(dev_view $LBA1)"
kill -9 $DPID
wait $APP
check_eq "zones append: exit 2 (blkmqd closed the connection)" 2 $?
sed 's/^/# append| /' /tmp/app.out
exec 7>&-
vm_wait_for 5 test -s $BLKMQD_RC
cp $BLKMQD_LOG /tmp/blkmqd-1.log

start
check "restarted blkmqd reaches running (READY)" vm_wait_for 20 running
blkmqctl status | sed 's/^/# /'
check "the interrupted zone is reset and free" vm_wait_for 20 zstate_is $I1 free
check "log: zone $I1: writing → releasing" log_has "zone $I1: writing → releasing"
check "log: zone $I1 reset" log_has "zone $I1 reset"
check_eq "interrupted zone: empty at its start on the device" "empty 0" "$(dev_view $LBA1)"
blkmqctl zones get $Z $I1 > /tmp/g.out
check_eq "interrupted zone: Resets 1, no lease" "1 -" "$(fld /tmp/g.out Resets) $(fld /tmp/g.out Lease)"
blkmqctl zones get $L1 > /dev/null 2>&1
check_eq "the interrupted lease is gone: exit 3" 3 $?
for n in 1m1 50m; do
        eval "l=\$LEASE_$n want=\$SHA_$n lba=\$LBA_$n"
        blkmqctl zones get $l > /tmp/g.out 2>&1
        check_eq "$n: after the restart, sealed with the same sha256" "sealed $want" \
                "$(fld /tmp/g.out State) $(fld /tmp/g.out SHA256)"
done
check_eq "1m1: still reads back" "$SHA_1m1" "$(readback $LBA_1m1 1048577)"
check_eq "the failed zone stays failed" failed "$(zstate $I4)"
blkmqctl zones | sed 's/^/# /'
zbd_agrees "after kill -9 and the restart"

# --- appends placed out of order: the zone is reset and written again ---------
# Fault injection (src/zbd/zbd-nvme.c): the 5th append result is reported one
# append further on, as a device that reordered them would place it.
check_eq "SIGTERM before the fault injection: exit 0" 0 "$(daemon_stop)"
cp $BLKMQD_LOG /tmp/blkmqd-2.log
export BLKMQD_TEST_MISPLACE_APPEND=5
start
unset BLKMQD_TEST_MISPLACE_APPEND
head -c $((10 * MIB)) /dev/urandom > /tmp/mis.bin
want=$(sha256sum < /tmp/mis.bin | cut -d' ' -f1)
blkmqctl stage /tmp/mis.bin --device $Z --label misplaced > /tmp/mis.out 2> /tmp/mis.err
rc=$?
sed 's/^/# /' /tmp/mis.out /tmp/mis.err
check_eq "the nvme backend (streams of appends)" nvme \
        "$(blkmqctl --no-legend zones | awk -v z=$Z '$1 == z { print $3 }')"
check_eq "stage 10 MiB with a misplaced append: exit 0" 0 $rc
check "log: the fault was injected" log_has "fault injection: append result 5 "
check "log: an append landed elsewhere" log_has "an append landed at"
check "log: the zone is reset and the object written again" \
        log_has "writing the object again, one append in flight"
check_eq "misplaced: SHA256 printed is sha256sum's" "$want" "$(fld /tmp/mis.out SHA256)"
lba=$(fld /tmp/mis.out "Start LBA")
check_eq "misplaced: dd from LBA $lba hashes as the file" "$want" "$(readback "$lba" $((10 * MIB)))"
rm -f /tmp/mis.bin
zbd_agrees "after the misplaced append"

check_eq "SIGTERM: exit 0" 0 "$(daemon_stop)"
check "no error logged" sh -c "! grep -q '^<[0-3]>' /tmp/blkmqd-1.log /tmp/blkmqd-2.log $BLKMQD_LOG"
grep -v '^<7>' /tmp/blkmqd-1.log $BLKMQD_LOG | grep -iv "sysfs" | sed 's/^/# blkmqd| /' | tail -n 40
echo "# guest time $(awk -v a="$t0" -v b="$(vm_uptime)" 'BEGIN { printf "%.1f", b - a }') s"
vm_summary
