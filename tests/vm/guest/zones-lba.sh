# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-zones-lba.sh (--zns --udev --block-size 4096): the
# LBAs blkmqctl prints against what nvme-cli reports for the same zones of a
# ZNS namespace with 4 KiB logical blocks. blkmqctl counts 512-byte sectors
# (as blkzone does), `nvme zns report-zones` the namespace's own blocks: every
# zone's start and write pointer must be 8 times nvme-cli's number, and the
# Start byte of a lease nvme-cli's start times the block size. Zones are
# moved first: an object staged (sealed: full), and a lease with 3 blocks
# appended (open, the write pointer inside the zone).
. /vm/daemon-lib.sh

export BLKMQD_ADDRESS=/tmp/blkmqd.sock
CONF=/tmp/zones.conf

vm_need_zoned
LBS=$(cat /sys/block/$Z/queue/logical_block_size)
check_eq "the namespace's logical block size" 4096 "$LBS"
check "nvme-cli is bundled" command -v nvme
[ "$LBS" = 4096 ] && command -v nvme >/dev/null || { vm_summary; exit 1; }
K=$((LBS / 512))                # 512-byte sectors per namespace block

zones_conf $CONF /tmp/zones.db

daemon_start -c $CONF --varlink-address /tmp/blkmqd.sock
check "blkmqd offers $Z for leases" vm_wait_for 30 zone_listed

# Move two zones: one staged and sealed (full), one with 3 blocks appended (open).
head -c 40000 /dev/urandom > /tmp/obj.bin
blkmqctl stage /tmp/obj.bin --device $Z --label obj > /tmp/stage.out 2>&1
check_eq "stage 40000 B: exit 0" 0 $?
blkmqctl zones alloc --size=1M --device $Z --label open > /tmp/alloc.out 2>&1
check_eq "zones alloc: exit 0" 0 $?
LEASE=$(fld /tmp/alloc.out Lease)
IDX=$(fld /tmp/alloc.out Zone)
head -c $((3 * LBS)) /dev/urandom > /tmp/three.bin
blkmqctl zones append $LEASE /tmp/three.bin > /dev/null 2> /tmp/append.err
check_eq "zones append 3 blocks: exit 0" 0 $?
sed 's/^/# /' /tmp/stage.out /tmp/alloc.out /tmp/append.err

blkmqctl zones $Z | sed 's/^/# blkmqctl| /'
nvme zns report-zones $DEV > /tmp/nvme.out 2>&1
check_eq "nvme zns report-zones: exit 0" 0 $?
sed 's/^/# nvme| /' /tmp/nvme.out

# nvme-cli: "SLBA: 0x3c000    WP: 0x3c003    Cap: 0x3c00     State: 0x20 ..."
# (a zero may print as 0, without 0x); one line per zone, in zone order.
grep '^SLBA:' /tmp/nvme.out | awk '{ print $2, $4, $8 }' > /tmp/nvme.zones
blkmqctl --no-legend zones $Z | awk '{ print $1, $2, $3, $4 }' > /tmp/ctl.zones
NZ=$(cat /sys/block/$Z/queue/nr_zones)
check_eq "nvme-cli reports every zone" "$NZ" "$(wc -l < /tmp/nvme.zones)"
check_eq "blkmqctl lists every zone" "$NZ" "$(wc -l < /tmp/ctl.zones)"

bad_start=0 bad_wp=0 bad_cond=0 seen_open=0 seen_full=0
i=0
while read -r slba wp state; do
        set -- $(awk -v i=$i '$1 == i' /tmp/ctl.zones)
        start=$2 cwp=$3 cond=$4
        [ "$start" = "$((slba * K))" ] || { bad_start=$((bad_start + 1)); echo "# zone $i: START-LBA $start, nvme SLBA $slba"; }
        # nvme-cli 2.3 prints the raw state byte (0x10 empty, 0x20 implicitly
        # open, 0xe0 full: ZNS's state in the upper nibble); newer ones a word.
        case $state in
        0x*) state=$(((state >> 4) & 15)) ;;
        esac
        case $state in
        EMPTY|1) want=empty ;;
        IMP_OPENED|2) want=implicitOpen; seen_open=1 ;;
        EXP_OPENED|3) want=explicitOpen; seen_open=1 ;;
        CLOSED|4) want=closed ;;
        FULL|14) want=full; seen_full=1 ;;
        *) want=$state ;;
        esac
        [ "$cond" = "$want" ] || { bad_cond=$((bad_cond + 1)); echo "# zone $i: COND $cond, nvme $state"; }
        # A full zone's write pointer is not defined by NVMe: only the others.
        if [ "$want" != full ] && [ "$cwp" != "$((wp * K))" ]; then
                bad_wp=$((bad_wp + 1)); echo "# zone $i: WP $cwp, nvme WP $wp"
        fi
        i=$((i + 1))
done < /tmp/nvme.zones
check_eq "every zone's START-LBA is nvme-cli's SLBA x $K" 0 $bad_start
check_eq "every open or empty zone's WP is nvme-cli's WP x $K" 0 $bad_wp
check_eq "every zone's condition is nvme-cli's state" 0 $bad_cond
check "a full zone (the staged object) was compared" [ $seen_full = 1 ]
check "an open zone (3 blocks appended) was compared" [ $seen_open = 1 ]

# The open zone: its write pointer 3 namespace blocks (24 sectors) past its start.
set -- $(awk -v i=$IDX '$1 == i' /tmp/ctl.zones)
check_eq "the open zone's WP, in 512-byte sectors, is 3 x $K past its START-LBA" $(($2 + 3 * K)) $3
nslba=$(sed -n "$((IDX + 1))p" /tmp/nvme.zones | awk '{ print $1 }')
nwp=$(sed -n "$((IDX + 1))p" /tmp/nvme.zones | awk '{ print $2 }')
check_eq "nvme-cli: the open zone's WP is 3 namespace blocks past its SLBA" $((nslba + 3)) $((nwp))

# Start byte (zones get, stage) = nvme-cli's SLBA x the block size; Start LBA = SLBA x 8.
blkmqctl zones get $Z $IDX > /tmp/get.out
check_eq "zones get: Start byte is nvme-cli's SLBA x $LBS" $((nslba * LBS)) "$(fld /tmp/get.out 'Start byte')"
check_eq "zones get: Start LBA is nvme-cli's SLBA x $K" $((nslba * K)) "$(fld /tmp/get.out 'Start LBA')"
SIDX=$(fld /tmp/stage.out Zone)
sslba=$(sed -n "$((SIDX + 1))p" /tmp/nvme.zones | awk '{ print $1 }')
check_eq "stage: Start byte is nvme-cli's SLBA x $LBS" $((sslba * LBS)) "$(fld /tmp/stage.out 'Start byte')"
check_eq "stage: Start LBA is nvme-cli's SLBA x $K" $((sslba * K)) "$(fld /tmp/stage.out 'Start LBA')"
# And the data is where both say: nvme-cli's block x 4096 = blkmqctl's sector x 512.
check_eq "the staged object reads back from nvme-cli's SLBA" "$(sha256sum < /tmp/obj.bin | cut -d' ' -f1)" \
        "$(dd if=$DEV bs=$LBS skip=$((sslba)) count=10 2>/dev/null | head -c 40000 | sha256sum | cut -d' ' -f1)"

check_eq "SIGTERM: exit 0" 0 "$(daemon_stop)"
vm_summary
