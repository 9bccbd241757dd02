# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of vm-zbd-nvme (--zns --max-active 4 --bin zbd-tool): the NVMe
# ZNS passthrough backend (src/zbd/zbd-nvme.c) on QEMU's ZNS namespace under
# 6.1: zone appends as NVMe Zone Append commands through io_uring uring_cmd
# on /dev/ngXnY, the device choosing the offsets (src/io/uring-pool.c,
# URING_OP_NVME_IO). busybox sh; /vm/lib.sh is sourced.
#   limits (zone_append_max_bytes 512 KiB, but 127 max_segments: 508 KiB
#   per command from arbitrary page-aligned memory, see src/zbd/zbd-nvme.c);
#   reset; 8 appends of 128 KiB in flight at once to one zone, twice:
#   distinct offsets covering the range exactly, read back; 1 MiB appends
#   split at the limit by the caller; what the kernel says to commands above
#   the limits (1 MiB; 512 KiB in 128 discontiguous pages); appends into a
#   full zone and across the capacity fail; the active-zone limit as
#   EOVERFLOW; QD1 vs QD8 bytes/s (printed, never asserted).
# The scheduler stays at the boot default (none): passthrough bypasses it,
# and zone appends need no write ordering.

t_start=$(vm_uptime)
echo "# kernel $(uname -r), zbd-tool $(command -v zbd-tool), uptime ${t_start}s"

vm_need_zoned
NG=/dev/$(echo "$Z" | sed 's/^nvme/ng/')
check "generic char device $NG" [ -c "$NG" ]
check "$NG in /sys/class/nvme-generic" [ -e "/sys/class/nvme-generic/${NG#/dev/}/dev" ]
echo "# $Z: scheduler $(cat $Q/scheduler), zone_append_max_bytes $(cat $Q/zone_append_max_bytes)," \
        "max_hw_sectors_kb $(cat $Q/max_hw_sectors_kb), max_segments $(cat $Q/max_segments)"

# zt ARGS...: zbd-tool --backend nvme on the namespace, output in $OUT
# (echoed with "# "), the result=... word in $RES.
zt() {
        OUT=$(zbd-tool --backend nvme $DEV "$@" 2>&1)
        RES=$(echo "$OUT" | sed -n 's/^result=//p' | tail -n1)
        echo "$OUT" | sed "s/^/# zbd-tool $* | /"
}
# field NAME: NAME=value from $OUT (first line that has it)
field() {
        echo "$OUT" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1
}
# zone_field ZONE NAME
zone_field() {
        zbd-tool --backend nvme $DEV report "$1" 1 2>&1 | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}
# ratio A B: A / B with two decimals
ratio() {
        awk "BEGIN{ if ($2 > 0) printf \"%.2f\", $1 / $2; else print \"?\" }"
}

# --- limits --------------------------------------------------------------
t0=$(vm_uptime)
zt limits
check_eq "limits: result" OK "$RES"
check_eq "limits: backend" nvme "$(field backend)"
check_eq "limits: nr_zones" "$VM_ZONES" "$(field nr_zones)"
check_eq "limits: zone_size 64 MiB" 67108864 "$(field zone_size)"
check_eq "limits: max_active" "$VM_MAX_ACTIVE" "$(field max_active)"
check_eq "limits: zone_append_max_bytes 512 KiB" 524288 "$(cat $Q/zone_append_max_bytes)"
SEGMAX=$(( $(cat $Q/max_segments) * 4096 ))
WANT_AM=$(cat $Q/zone_append_max_bytes)
[ "$SEGMAX" -lt "$WANT_AM" ] && WANT_AM=$SEGMAX
check_eq "limits: zone_append_max = min(zone_append_max_bytes, max_segments pages)" "$WANT_AM" "$(field zone_append_max)"
check_eq "limits: chunk_max (zone appends) = zone_append_max" "$WANT_AM" "$(field chunk_max)"
check_eq "limits: block_size" "$(cat $Q/logical_block_size)" "$(field block_size)"
zt report
check_eq "report: one line per zone" "$VM_ZONES" "$(echo "$OUT" | grep -c '^zone=')"
check_eq "report: zone 0 capacity 60 MiB" 62914560 "$(field cap)"

# --- QD8: 8 appends of 128 KiB in flight at once to one zone ---------------
t1=$(vm_uptime)
zt reset 0
check_eq "reset zone 0" OK "$RES"
check_eq "zone 0 EMPTY" EMPTY "$(zone_field 0 cond)"
zt qappend 0 1048576 131072 8 11
check_eq "QD8: 8 x 128 KiB appends to zone 0" OK "$RES"
check_eq "QD8: 8 appends" 8 "$(field appends)"
check_eq "QD8: all 8 done" 8 "$(field done)"
check_eq "QD8: offsets distinct, covering [0, 1 MiB) exactly" yes "$(field contiguous)"
check_eq "QD8: first at the zone start" 0 "$(field first)"
check_eq "QD8: end at 1 MiB" 1048576 "$(field end)"
check_eq "QD8: every append read back at its offset" 1048576 "$(field verified)"
check_eq "QD8: wp after 1 MiB" 1048576 "$(field wp_rel)"
echo "# QD8 landed in submission order: $(field in_order)"
zt qappend 0 1048576 131072 8 12
check_eq "QD8 again: from the write pointer on" OK "$RES"
check_eq "QD8 again: covering [1 MiB, 2 MiB) exactly" "yes 1048576 2097152" \
        "$(field contiguous) $(field first) $(field end)"
check_eq "QD8 again: wp 2 MiB" 2097152 "$(field wp_rel)"

# --- 1 MiB appends: split by the caller at the limit ---------------------------
zt reset 1
zt qappend 1 4194304 1048576 4 13
check_eq "4 x 1 MiB appends (QD4 commands) to zone 1" OK "$RES"
PER_MIB=$(( (1048576 + WANT_AM - 1) / WANT_AM ))
check_eq "1 MiB appends split by the tool at zone_append_max: $PER_MIB commands each" "$(( 4 * PER_MIB )) 4" \
        "$(field appends) $(field split)"
check_eq "1 MiB appends: covering [0, 4 MiB) exactly, read back" "yes 4194304" \
        "$(field contiguous) $(field verified)"
zt rawappend-scattered 1 "$WANT_AM"
check_eq "one command of zone_append_max from 4 KiB pages none of them adjacent" OK "$RES"
check_eq "it landed at the write pointer" 4194304 "$(field landed)"
WP1=$(( 4194304 + WANT_AM ))
if [ "$SEGMAX" -lt 524288 ]; then
        zt rawappend-scattered 1 524288
        check_eq "512 KiB in 128 discontiguous pages (> max_segments): EINVAL from the kernel" EINVAL "$RES"
fi
zt rawappend 1 1048576
check_eq "one 1 MiB command (> max_hw_sectors_kb): EINVAL from the kernel" EINVAL "$RES"
check_eq "zone 1 wp unchanged by the refused commands" "$WP1" "$(zone_field 1 wp_rel)"
t2=$(vm_uptime)

# --- full zones and the capacity ----------------------------------------------
zt reset 2
zt finish 2
check_eq "finish zone 2" OK "$RES"
check_eq "zone 2 FULL" FULL "$(zone_field 2 cond)"
# The flush a seal ends with goes to the block device (an NVMe Flush of
# the namespace), the appends went through /dev/ngXnY.
check_eq "$Z: queue/write_cache" "write back" "$(cat $Q/write_cache)"
f0=$(vm_flushes)
zt flush
check_eq "flush: OK, write back" "OK yes" "$RES $(field write_back)"
vm_check_flush "zbd_flush() on the nvme backend" $f0
zt qappend 2 131072 131072 1
check_eq "append to a full zone: EIO" EIO "$RES"
check_eq "append to a full zone: NVMe Zone Is Full (0x1b9)" 0x1b9 "$(field nvme_sc)"
zt qappend 2 1048576 131072 8
check_eq "8 appends in flight to a full zone: EIO" EIO "$RES"
check_eq "none of them done" 0 "$(field done)"
zt reset 2
check_eq "reset zone 2" OK "$RES"
t3=$(vm_uptime)
zt reset 3
zt qappend 3 $(( 62914560 - 4096 )) "$WANT_AM" 8 14
check_eq "fill zone 3 to capacity - 4 KiB at QD8" OK "$RES"
check_eq "fill: contiguous, read back" "yes $(( 62914560 - 4096 ))" "$(field contiguous) $(field verified)"
echo "# fill 60 MiB - 4 KiB at QD8 in $WANT_AM-byte appends: $(field usec) us, $(field MiBps) MiB/s"
zt qappend 3 8192 8192 1
check_eq "an append across the capacity: EIO" EIO "$RES"
check_eq "an append across the capacity: NVMe Zone Boundary Error (0x1b8)" 0x1b8 "$(field nvme_sc)"
zt qappend 3 4096 4096 1 15
check_eq "the last 4 KiB fit" OK "$RES"
check_eq "it landed at capacity - 4 KiB" $(( 62914560 - 4096 )) "$(field first)"
check_eq "written to capacity: FULL" FULL "$(field cond)"
zt qappend 3 4096 4096 1
check_eq "one more: EIO (Zone Is Full)" "EIO 0x1b9" "$RES $(field nvme_sc)"
for i in 0 1 3; do
        zt reset $i
        check_eq "reset zone $i" OK "$RES"
done
t4=$(vm_uptime)

# --- the active-zone limit: NVMe status mapped as the kernel does ---------------
check_eq "max_active is 4 in this boot" 4 "$VM_MAX_ACTIVE"
for i in 4 5 6 7; do
        zt qappend $i 4096 4096 1
        check_eq "append opens zone $i" OK "$RES"
done
zt qappend 8 4096 4096 1
check_eq "an append into a fifth zone: EOVERFLOW (Too Many Active Zones)" "EOVERFLOW 0x1bd" \
        "$RES $(field nvme_sc)"
check_eq "zone 8 still EMPTY" EMPTY "$(zone_field 8 cond)"
for i in 4 5 6 7; do
        zt reset $i
done
t5=$(vm_uptime)

# --- QD1 vs QD8 (printed, not asserted: TCG numbers mean little) ---------------
zt qappend 9 8388608 131072 1 21
check_eq "QD1: 8 MiB in 128 KiB appends" "OK yes" "$RES $(field contiguous)"
QD1=$(field Bps); QD1_MIB=$(field MiBps)
zt qappend 10 8388608 131072 8 22
check_eq "QD8: 8 MiB in 128 KiB appends" "OK yes" "$RES $(field contiguous)"
QD8=$(field Bps); QD8_MIB=$(field MiBps)
echo "# zone append 128 KiB: QD1 $QD1 B/s ($QD1_MIB MiB/s), QD8 $QD8 B/s ($QD8_MIB MiB/s), QD8/QD1 $(ratio "$QD8" "$QD1")"
zt qappend 11 8388608 "$WANT_AM" 1 23
QD1L=$(field Bps)
zt qappend 12 8388608 "$WANT_AM" 8 24
QD8L=$(field Bps)
echo "# zone append $WANT_AM B: QD1 $QD1L B/s, QD8 $QD8L B/s, QD8/QD1 $(ratio "$QD8L" "$QD1L")"
for i in 9 10 11 12; do
        zt reset $i
        check_eq "reset zone $i" OK "$RES"
done
zt report
check_eq "every zone EMPTY at the end" "$VM_ZONES" "$(echo "$OUT" | grep -c 'cond=EMPTY')"
t6=$(vm_uptime)

echo "# timings: limits+report $(awk "BEGIN{print $t1-$t0}")s, qd8+split $(awk "BEGIN{print $t2-$t1}")s," \
        "full $(awk "BEGIN{print $t3-$t2}")s, capacity $(awk "BEGIN{print $t4-$t3}")s," \
        "max_active $(awk "BEGIN{print $t5-$t4}")s, qd1-vs-qd8 $(awk "BEGIN{print $t6-$t5}")s," \
        "script total $(awk "BEGIN{print $t6-$t_start}")s"
vm_summary
