# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of bench/zones (busybox sh, /vm/lib.sh sourced; one boot with
# --zns --conventional --data-disk). Measures, on the ZNS namespace:
#   1. side by side, $BZ_FIO_REPEAT rounds, each through every $BZ_BS x
#      $BZ_DEPTHS: fio rw=write of $BZ_SIZE_MIB MiB into a zone leased from
#      blkmqd, through io_uring passthrough (/dev/ngXnY, io_uring_cmd) and
#      through the block device (io_uring, direct, mq-deadline); then blkmqd
#      reloaded with AppendChunkKB=BS AppendDepth=QD, VerifyWhileWriting=yes
#      (the default) and =no, and the same file staged by bz-tool stage
#      (Allocate, Append of the file's fd, Seal: each call timed, no process
#      spawn, no client-side hashing);
#   2. blkmqctl stage of the file with the defaults ($BZ_STAGES times: spawn,
#      the client's hash, allocate, append, seal), and the seal's read+hash
#      loop replayed by bz-tool readhash (read and hash timed apart);
#   3. Allocate+Release pairs: blkmqctl in a shell loop ($BZ_ITERS pairs),
#      with spawn baselines (blkmqctl --version, zones free DEV), and
#      bz-tool (one connection, no spawn) with $BZ_CITERS pairs; the zone
#      database on ext2 on the conventional NVMe namespace (fsync reaches
#      QEMU), the client run again with the database on tmpfs.
# Every figure is a "BZ ..." line on the console and in results.txt; the fio
# JSON files and results.txt are tarred to $VM_DATA_DEV for the host.
# Timing: bz-tool now (CLOCK_MONOTONIC; busybox date has no %N).
# blkmqd is started, reloaded and stopped through /vm/daemon-lib.sh
# (tests/vm/guest/daemon-lib.sh, shipped by bench/zones).
. /vm/daemon-lib.sh

SIZE_MIB=${BZ_SIZE_MIB:-48}
BS_LIST=${BZ_BS:-128k 512k}
DEPTHS=${BZ_DEPTHS:-1 4 8}
STAGES=${BZ_STAGES:-3}
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
# step WHAT: where the script is, on the console (a run that hangs shows where)
step() { echo "# $(vm_uptime) s: $*"; }
die() {
        not_ok "$*"
        [ -n "$DPID" ] && tail -n 30 $BLKMQD_LOG | sed 's/^/# blkmqd| /'
        finish
        exit 1
}
finish() {
        if [ -n "$DPID" ]; then
                daemon_stop > /dev/null
                cat $BLKMQD_LOG >> $OUT/blkmqd.log
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
step "blkzone reset $DEV"
blkzone reset $DEV || die "blkzone reset $DEV"

# --- the daemon -------------------------------------------------------------
mkdir -p /mnt/db
step "mke2fs and mount /dev/$C"
mke2fs -q /dev/$C > /dev/null 2>&1 || mke2fs /dev/$C > /dev/null || die "mke2fs /dev/$C"
mount -t ext2 /dev/$C /mnt/db || die "mount /dev/$C"

# write_conf DB [ZONES-KEYS]: the daemon's configuration
write_conf() { zones_conf /tmp/zones.conf "$1" Scheduler=mq-deadline "${2:-}"; }
start_daemon() {
        write_conf "$1"
        step "blkmqd starts on $1"
        daemon_start -c /tmp/zones.conf --varlink-address $SOCK --log-level debug
        vm_wait_for 30 zone_listed || die "blkmqd offers $Z for leases"
        res "daemon db=$1 backend=$(blkmqctl --no-legend zones | awk -v z=$Z '$1 == z { print $3 }')"
}
stop_daemon() {
        [ "$(daemon_stop)" != hung ] || die "blkmqd stops"
        cat $BLKMQD_LOG >> $OUT/blkmqd.log
        DPID=
}
# reconf KB DEPTH VERIFY: AppendChunkKB=, AppendDepth=, VerifyWhileWriting=
# by a reload (SIGHUP)
reconf() {
        write_conf /mnt/db/zones.db "AppendChunkKB=$1
AppendDepth=$2
VerifyWhileWriting=$3"
        daemon_reload || die "blkmqd reloads"
}
# dticks: the daemon's utime+stime, clock ticks (USER_HZ, 100 a second)
dticks() { awk '{ print $14 + $15 }' /proc/$DPID/stat; }
lease_of() { sed -n 's/^ *Lease: //p' "$1" | head -n1; }

start_daemon /mnt/db/zones.db
head -c $((SIZE_MIB * MIB)) /dev/urandom > /tmp/s.bin
s=$(now); SHA=$(sha256sum /tmp/s.bin | cut -d' ' -f1); res "sha256sum secs=$(dt $s $(now))"

# --- 1. side by side: fio and blkmqd, each round through every bs x qd -----
# fio writes into a zone leased from blkmqd for the run (the daemon owns the
# namespace: the zone is empty, and the release resets it).
# fio_run ENGINE BS QD REP: one sequential write of SIZE_MIB (zbd mode wants
# the range to be at least one zone: --size is the zone, --io_size the amount).
fio_run() {
        _e=$1 _bs=$2 _qd=$3 _r=$4
        blkmqctl zones alloc --size=$((SIZE_MIB * MIB)) --device $Z --label fio > /tmp/fa.out ||
                die "a lease for fio"
        _l=$(lease_of /tmp/fa.out)
        _lba=$(sed -n 's/^ *Start LBA: //p' /tmp/fa.out)
        if [ $_e = cmd ]; then
                set -- --ioengine=io_uring_cmd --cmd_type=nvme --filename=$NG
        else
                set -- --ioengine=io_uring --direct=1 --filename=$DEV
        fi
        _f=$OUT/fio-$_e-$_bs-$_qd-$_r.json
        _s=$(now)
        fio --name=w-$_e-$_bs-$_qd --rw=write --bs=$_bs --iodepth=$_qd --size=$ZBYTES --io_size=${SIZE_MIB}M \
                --offset=$((_lba * 512)) --zonemode=zbd "$@" --output-format=json --output=$_f \
                > $OUT/fio-$_e-$_bs-$_qd-$_r.err 2>&1
        _rc=$?
        _wall=$(dt $_s $(now))
        _wp=$(blkzone report -o $_lba -c 1 $DEV | sed -n 's/.*wptr 0x\([0-9a-f]*\).*/\1/p')
        res "fio engine=$_e bs=$_bs qd=$_qd rep=$_r lba=$_lba rc=$_rc wall=$_wall wp_sectors=$((0x${_wp:-0}))"
        [ $_rc = 0 ] || sed 's/^/# fio| /' $_f $OUT/fio-$_e-$_bs-$_qd-$_r.err | head -n 8
        blkmqctl zones release $_l > /dev/null || die "release fio's lease"
        return $_rc
}
# bz_run BS QD REP VERIFY: the same object through blkmqd (bz-tool stage:
# Allocate, Append of the file's fd, Seal, each timed, then Release), with
# AppendChunkKB=BS (capped to the device's largest), AppendDepth=QD and
# VerifyWhileWriting=VERIFY.
bz_run() {
        reconf ${1%k} $2 $4
        _t1=$(dticks)
        _o=$(bz-tool stage $SOCK $Z /tmp/s.bin $SHA)
        _rc=$?
        _t2=$(dticks)
        res "blkmqd bs=$1 qd=$2 rep=$3 verify=$4 rc=$_rc daemon_ticks=$((_t2 - _t1)) $_o"
        [ $_rc = 0 ] || not_ok "bz-tool stage bs=$1 qd=$2 verify=$4"
}

t0=$(now)
rep=0
while [ $rep -lt $FIO_REPEAT ]; do
        rep=$((rep + 1))
        for bs in $BS_LIST; do
                for qd in $DEPTHS; do
                        if ! fio_run cmd $bs $qd $rep && [ $bs = 512k ]; then
                                # > max_segments (127) discontiguous pages: EINVAL (src/zbd/zbd-nvme.c)
                                fio_run cmd 508k $qd $rep
                                res "fio-fallback engine=cmd bs=512k qd=$qd rep=$rep -> 508k"
                        fi
                        fio_run blk $bs $qd $rep
                        bz_run $bs $qd $rep yes
                        bz_run $bs $qd $rep no
                done
        done
done
res "side-by-side secs=$(dt $t0 $(now))"
grep -o 'appending from [a-z ()]*, writes of [0-9]* KiB, up to [0-9]* in flight' /tmp/blkmqd.log | sort | uniq -c |
        sed 's/^/# /'

# --- 2. blkmqctl stage, the defaults ------------------------------------------
# As a person runs it: one process, the client hashes the file meanwhile.
write_conf /mnt/db/zones.db
daemon_reload || die "blkmqd reloads"
i=0
while [ $i -lt $STAGES ]; do
        i=$((i + 1))
        s=$(now)
        blkmqctl stage /tmp/s.bin --device $Z > /tmp/st.out 2> /tmp/st.err
        rc=$?
        e=$(now)
        # blkmqctl's own split (its Time field): allocate, append, its hash alongside, seal
        split=$(sed -n 's/^ *Time: [0-9.]* s: allocate \([0-9.]*\), append \([0-9.]*\) (hash \([0-9.]*\) alongside), seal \([0-9.]*\)$/alloc_s=\1 append_s=\2 hash_s=\3 seal_s=\4/p' /tmp/st.out)
        res "stage i=$i rc=$rc secs=$(dt $s $e) lba=$(sed -n 's/^ *Start LBA: //p' /tmp/st.out) $split"
        [ $rc = 0 ] || sed 's/^/# stage| /' /tmp/st.err
        [ "$(sed -n 's/^ *SHA256: //p' /tmp/st.out)" = "$SHA" ] || not_ok "stage $i: sha256 as sha256sum's"
        blkmqctl zones release "$(lease_of /tmp/st.out)" > /dev/null || not_ok "release after stage $i"
done
# The seal's read + hash loop, replayed on a written zone (bz-tool readhash:
# blkmqd's sha256.c), read and hash timed apart.
blkmqctl zones alloc --size=$((SIZE_MIB * MIB)) --device $Z > /tmp/a.out
L=$(lease_of /tmp/a.out)
blkmqctl zones append $L /tmp/s.bin > /dev/null
LBA=$(blkmqctl zones get $L | sed -n 's/^ *Start LBA: //p')
out=$(bz-tool readhash $DEV $((LBA * 512)) $((SIZE_MIB * MIB))) || not_ok "bz-tool readhash"
[ "${out##*sha256=}" = "$SHA" ] || not_ok "readhash: the zone hashes as the file"
res "readhash $out"
blkmqctl zones seal $L $SHA > /dev/null || not_ok "seal after the readhash"
blkmqctl zones release $L > /dev/null
grep -o 'sealed, [0-9]* bytes ([0-9]* of them verified while written)' /tmp/blkmqd.log | tail -n 4 | sed 's/^/# /'
# What each seal spent in the flush of the write cache (its log line says),
# the STAGES seals of blkmqctl stage and the one after the readhash.
res "flush us=$(grep -o 'write cache flushed in [0-9]* ' /tmp/blkmqd.log | tail -n $((STAGES + 1)) |
        sed 's/.* in \([0-9]*\) /\1/' | tr '\n' ',' | sed 's/,$//')"

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
