# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of bench/zones (busybox sh, /vm/lib.sh sourced; one boot with
# --zns --conventional --data-disk). Measures, on the ZNS namespace:
#   1. fio, rw=write, one fresh zone per run ($BZ_FIO_REPEAT rounds of all
#      runs), through io_uring passthrough
#      (/dev/ngXnY, io_uring_cmd) and through the block device (io_uring,
#      direct, mq-deadline), for each of $BZ_BS x $BZ_DEPTHS;
#   2. blkmqctl stage of a $BZ_SIZE_MIB MiB file from tmpfs ($BZ_STAGES
#      times), then the same as separate zones alloc / append / seal calls
#      (the time split), and for reference a QD1 1 MiB O_DIRECT read-back of
#      the zone (what seal reads) by fio, the seal's read+hash loop replayed
#      by bz-tool readhash (read and hash timed apart), a sha256sum;
#   3. Allocate+Release pairs: blkmqctl in a shell loop ($BZ_ITERS pairs),
#      with spawn baselines (blkmqctl --version, zones free DEV), and
#      bz-tool (one connection, no spawn) with $BZ_CITERS pairs; the zone
#      database on ext2 on the conventional NVMe namespace (fsync reaches
#      QEMU), the client run again with the database on tmpfs.
# Every figure is a "BZ ..." line on the console and in results.txt; the fio
# JSON files and results.txt are tarred to $VM_DATA_DEV for the host.
# Timing: bz-tool now (CLOCK_MONOTONIC; busybox date has no %N).

SIZE_MIB=${BZ_SIZE_MIB:-48}
BS_LIST=${BZ_BS:-128k 512k}
DEPTHS=${BZ_DEPTHS:-1 4 8}
STAGES=${BZ_STAGES:-3}
SPLITS=${BZ_SPLITS:-3}
FIO_REPEAT=${BZ_FIO_REPEAT:-3}
ITERS=${BZ_ITERS:-100}
CITERS=${BZ_CITERS:-400}
OUT=/tmp/out
MIB=1048576
SOCK=/tmp/blkmqd.sock
export BLKMQD_ADDRESS=$SOCK
mkdir -p $OUT
# stderr to a file: on the serial console (a tty) blkmqctl draws a progress
# bar, and every character written there costs guest time under TCG.
exec 2>> $OUT/stderr.txt

now() { bz-tool now; }
dt() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
res() { echo "BZ $*" | tee -a $OUT/results.txt; }
die() { not_ok "$*"; finish; exit 1; }
finish() {
        if [ -n "$DPID" ]; then
                kill -TERM $DPID 2>/dev/null && vm_wait_for 30 test -s /tmp/blkmqd.rc
                cat /tmp/blkmqd.log >> $OUT/blkmqd.log
        fi
        [ -s $OUT/stderr.txt ] && tail -n 20 $OUT/stderr.txt | sed 's/^/# stderr| /'
        if [ -n "$VM_DATA_DEV" ]; then
                tar -cf "$VM_DATA_DEV" -C $OUT . && sync
        fi
}

Z=$(vm_zoned_disks | head -n1)
[ -n "$Z" ] || die "no host-managed namespace"
DEV=/dev/$Z
NG=/dev/ng${Z#nvme}
[ -c "$NG" ] || die "no generic char device $NG for $Z"
Q=/sys/block/$Z/queue
ZSECT=$(cat $Q/chunk_sectors)
ZBYTES=$((ZSECT * 512))
NZ=$(cat $Q/nr_zones)
C=
for d in /sys/block/nvme*n*; do
        [ "$(cat $d/queue/zoned 2>/dev/null)" = none ] && C=${d##*/} && break
done
[ -n "$C" ] || die "no conventional namespace for the zone database"
res "env kernel=$(uname -r) zns=$Z ng=$NG zones=$NZ zone_bytes=$ZBYTES conv=$C" \
        "max_sectors_kb=$(cat $Q/max_sectors_kb) max_segments=$(cat $Q/max_segments)" \
        "zone_append_max_bytes=$(cat $Q/zone_append_max_bytes) max_active=$(cat $Q/max_active_zones)" \
        "fio=$(fio --version) size_mib=$SIZE_MIB"
echo mq-deadline > $Q/scheduler || die "mq-deadline on $Z"
res "env scheduler=\"$(cat $Q/scheduler)\""
blkzone reset $DEV || die "blkzone reset $DEV"

# --- 1. fio -----------------------------------------------------------------
# fio_run ENGINE BS QD ZONE REP: one sequential write of SIZE_MIB into zone ZONE
# (zbd mode wants the range to be at least one zone: --size is the zone,
# --io_size the amount).
fio_run() {
        _e=$1 _bs=$2 _qd=$3 _z=$4 _r=$5
        _off=$((_z * ZBYTES))
        blkzone reset -o $((_z * ZSECT)) -c 1 $DEV
        if [ $_e = cmd ]; then
                set -- --ioengine=io_uring_cmd --cmd_type=nvme --filename=$NG
        else
                set -- --ioengine=io_uring --direct=1 --filename=$DEV
        fi
        _f=$OUT/fio-$_e-$_bs-$_qd-$_r.json
        _s=$(now)
        fio --name=w-$_e-$_bs-$_qd --rw=write --bs=$_bs --iodepth=$_qd --size=$ZBYTES --io_size=${SIZE_MIB}M \
                --offset=$_off --zonemode=zbd "$@" --output-format=json --output=$_f \
                > $OUT/fio-$_e-$_bs-$_qd-$_r.err 2>&1
        _rc=$?
        _wall=$(dt $_s $(now))
        _wp=$(blkzone report -o $((_z * ZSECT)) -c 1 $DEV | sed -n 's/.*wptr 0x\([0-9a-f]*\).*/\1/p')
        res "fio engine=$_e bs=$_bs qd=$_qd rep=$_r zone=$_z rc=$_rc wall=$_wall wp_sectors=$((0x${_wp:-0}))"
        [ $_rc = 0 ] || sed 's/^/# fio| /' $_f $OUT/fio-$_e-$_bs-$_qd-$_r.err | head -n 8
        return $_rc
}

t0=$(now)
zi=0
rep=0
while [ $rep -lt $FIO_REPEAT ]; do
        rep=$((rep + 1))
        for e in cmd blk; do
                for bs in $BS_LIST; do
                        for qd in $DEPTHS; do
                                if ! fio_run $e $bs $qd $((zi % NZ)) $rep && [ $e = cmd ] && [ $bs = 512k ]; then
                                        # > max_segments (127) discontiguous pages: EINVAL (src/zbd-nvme.c)
                                        zi=$((zi + 1))
                                        fio_run $e 508k $qd $((zi % NZ)) $rep
                                        res "fio-fallback engine=$e bs=512k qd=$qd rep=$rep -> 508k"
                                fi
                                zi=$((zi + 1))
                        done
                done
        done
done
res "fio-total secs=$(dt $t0 $(now))"
blkzone reset $DEV || die "blkzone reset after fio"

# --- blkmqd -----------------------------------------------------------------
mkdir -p /mnt/db
mke2fs -q /dev/$C > /dev/null 2>&1 || mke2fs /dev/$C > /dev/null || die "mke2fs /dev/$C"
mount -t ext2 /dev/$C /mnt/db || die "mount /dev/$C"

DPID=
start_daemon() {
        cat > /tmp/zones.conf <<EOF
[Device zns]
MatchZoned=host-managed
ZoneAllocator=yes
Scheduler=mq-deadline

[Zones]
Database=$1
EOF
        rm -f /tmp/blkmqd.rc
        : > /tmp/blkmqd.log
        ( blkmqd -c /tmp/zones.conf --varlink-address $SOCK >> /tmp/blkmqd.log 2>&1; echo $? > /tmp/blkmqd.rc ) &
        vm_wait_for 5 pidof blkmqd > /dev/null
        DPID=$(pidof blkmqd)
        vm_wait_for 30 sh -c "blkmqctl --no-legend zones 2>/dev/null | grep -q '^$Z '" ||
                die "blkmqd offers $Z for leases"
        res "daemon db=$1 backend=$(blkmqctl --no-legend zones | awk -v z=$Z '$1 == z { print $3 }')"
}
stop_daemon() {
        kill -TERM $DPID
        vm_wait_for 30 test -s /tmp/blkmqd.rc || die "blkmqd stops"
        cat /tmp/blkmqd.log >> $OUT/blkmqd.log
        DPID=
}
# dticks: the daemon's utime+stime, clock ticks (USER_HZ, 100 a second)
dticks() { awk '{ print $14 + $15 }' /proc/$DPID/stat; }
lease_of() { sed -n 's/^ *Lease: //p' "$1" | head -n1; }

start_daemon /mnt/db/zones.db

# --- 2. stage ---------------------------------------------------------------
head -c $((SIZE_MIB * MIB)) /dev/urandom > /tmp/s.bin
s=$(now); SHA=$(sha256sum /tmp/s.bin | cut -d' ' -f1); res "sha256sum secs=$(dt $s $(now))"
i=0
while [ $i -lt $STAGES ]; do
        i=$((i + 1))
        s=$(now)
        blkmqctl stage /tmp/s.bin --device $Z > /tmp/st.out 2> /tmp/st.err
        rc=$?
        e=$(now)
        res "stage i=$i rc=$rc secs=$(dt $s $e) lba=$(sed -n 's/^ *Start LBA: //p' /tmp/st.out)"
        [ $rc = 0 ] || sed 's/^/# stage| /' /tmp/st.err
        [ "$(sed -n 's/^ *SHA256: //p' /tmp/st.out)" = "$SHA" ] || not_ok "stage $i: sha256 as sha256sum's"
        LBA=$(sed -n 's/^ *Start LBA: //p' /tmp/st.out)
        blkmqctl zones release "$(lease_of /tmp/st.out)" > /dev/null || not_ok "release after stage $i"
done

# The read the seal does (QD1, 1 MiB, O_DIRECT) of a written zone, alone.
blkmqctl zones alloc --size=$((SIZE_MIB * MIB)) --device $Z > /tmp/a.out
L=$(lease_of /tmp/a.out)
blkmqctl zones append $L /tmp/s.bin > /dev/null
LBA=$(blkmqctl zones get $L | sed -n 's/^ *Start LBA: //p')
s=$(now)
fio --name=rb --rw=read --bs=1M --iodepth=1 --ioengine=psync --direct=1 --filename=$DEV \
        --offset=$((LBA * 512)) --size=${SIZE_MIB}M --output-format=json --output=$OUT/fio-readback.json \
        > /dev/null 2>&1
res "readback rc=$? wall=$(dt $s $(now))"
# ... and the seal's loop replicated (bz-tool readhash: blkmqd's sha256.c)
out=$(bz-tool readhash $DEV $((LBA * 512)) $((SIZE_MIB * MIB))) || not_ok "bz-tool readhash"
[ "${out##*sha256=}" = "$SHA" ] || not_ok "readhash: the zone hashes as the file"
res "readhash $out"
s=$(now)
blkmqctl zones seal $L $SHA > /dev/null || not_ok "seal after the readback"
res "seal-alone secs=$(dt $s $(now))"
blkmqctl zones release $L > /dev/null

i=0
while [ $i -lt $SPLITS ]; do
        i=$((i + 1))
        s=$(now)
        blkmqctl zones alloc --size=$((SIZE_MIB * MIB)) --device $Z > /tmp/a.out; r1=$?
        a=$(now)
        L=$(lease_of /tmp/a.out)
        blkmqctl zones append $L /tmp/s.bin > /dev/null; r2=$?
        b=$(now)
        # the seal's read + hash loop replayed on this zone (not in the split)
        LBA=$(blkmqctl zones get $L | sed -n 's/^ *Start LBA: //p')
        res "readhash i=$i $(bz-tool readhash $DEV $((LBA * 512)) $((SIZE_MIB * MIB)))"
        t1=$(dticks) b2=$(now)
        blkmqctl zones seal $L $SHA > /dev/null; r3=$?
        c=$(now) t2=$(dticks)
        res "seal-cpu i=$i daemon_ticks=$((t2 - t1))"
        blkmqctl zones release $L > /dev/null; r4=$?
        d=$(now)
        res "split i=$i rc=$r1$r2$r3$r4 alloc=$(dt $s $a) append=$(dt $a $b) seal=$(dt $b2 $c) release=$(dt $c $d)"
done

# --- 3. Allocate + Release --------------------------------------------------
# loop KIND N: N iterations of KIND, prints the seconds
loop() {
        _k=$1 _n=$2 _i=0
        _s=$(now)
        while [ $_i -lt $_n ]; do
                _i=$((_i + 1))
                case $_k in
                version) blkmqctl --version > /dev/null ;;
                free) blkmqctl zones free $Z > /dev/null ;;
                pair)
                        _o=$(blkmqctl zones alloc --size=4096 --device=$Z) || return 1
                        _o=${_o#*Lease: }
                        blkmqctl zones release "${_o%%[!0-9a-f-]*}" > /dev/null || return 1
                        ;;
                esac
        done
        dt $_s $(now)
}
for k in version free pair; do
        secs=$(loop $k $ITERS) || not_ok "loop $k"
        res "loop kind=$k db=ext2 n=$ITERS secs=$secs"
done
out=$(bz-tool alloc-release $SOCK $Z $CITERS) || not_ok "bz-tool alloc-release (ext2)"
res "client db=ext2 $out"
stop_daemon
blkzone reset $DEV
start_daemon /tmp/zones.db
out=$(bz-tool alloc-release $SOCK $Z $CITERS) || not_ok "bz-tool alloc-release (tmpfs)"
res "client db=tmpfs $out"
secs=$(loop pair $ITERS) || not_ok "loop pair (tmpfs)"
res "loop kind=pair db=tmpfs n=$ITERS secs=$secs"
stop_daemon

grep -q '^<[0-3]>' $OUT/blkmqd.log && not_ok "blkmqd logged errors" && grep '^<[0-3]>' $OUT/blkmqd.log | head
umount /mnt/db
finish
ok "bench done"
vm_summary
