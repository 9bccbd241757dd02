# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of vm-zbd (--zns --max-active 4 --bin zbd-tool): the kernel
# zoned backend (src/zbd/zbd-kernel.c) on QEMU's ZNS namespace under 6.1.
# busybox sh; /vm/lib.sh (ok, not_ok, check, check_eq, ...) is sourced.
#   limits from sysfs; report; reset; 1 MiB of writes at the write pointer
#   in max_write chunks through the io_uring pool; read-back; close/reopen
#   by writing; finish (wp = start + capacity); reset (reads zeros); the
#   active-zone limit: a fifth open zone is EOVERFLOW by ioctl and by write;
#   the errors for refused writes and state transitions (zbd-emu mirrors
#   them); a write across the zone capacity; FULL at capacity; twice, every
#   zone as zbd report (zbd-utils, libzbd) shows it is what zbd-tool reports.

t_start=$(vm_uptime)
echo "# kernel $(uname -r), zbd-tool $(command -v zbd-tool), uptime ${t_start}s"

vm_need_zoned

# 6.1 has no zone write plugging: writes need mq-deadline (RECIPE.md).
echo mq-deadline > $Q/scheduler
check_match "$Z scheduler mq-deadline" "*\[mq-deadline\]*" "$(cat $Q/scheduler)"

# zt ARGS...: runs zbd-tool on the namespace, output in $OUT (echoed with
# "# "), the result=... word in $RES.
zt() {
        OUT=$(zbd-tool $DEV "$@" 2>&1)
        RES=$(echo "$OUT" | sed -n 's/^result=//p' | tail -n1)
        echo "$OUT" | sed "s/^/# zbd-tool $* | /"
}
# field NAME: NAME=value from $OUT (first line that has it)
field() {
        echo "$OUT" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n1
}
# zone_field ZONE NAME
zone_field() {
        zbd-tool $DEV report "$1" 1 2>&1 | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# zbd_agrees WHEN: every zone as zbd report shows it is what zbd-tool's
# report (src/zbd/zbd-kernel.c) says (vm_zbd_agrees).
zbd_agrees() {
        zbd-tool $DEV report 2>&1 | tr ' ' '\n' | awk -F= '
                $1 == "start" { s = $2 } $1 == "wp" { w = $2 }
                $1 == "cond" { print s, ($2 == "FULL" ? "-" : w), $2 }' > /tmp/ours.view
        vm_zbd_agrees "$1" "zbd-kernel.c reports them" "$VM_ZONES" /tmp/ours.view "EMPTY IMP_OPEN EXP_OPEN CLOSED FULL"
}
check "zbd (zbd-utils) is bundled" command -v zbd

# --- limits --------------------------------------------------------------
t0=$(vm_uptime)
zt limits
check_eq "limits: result" OK "$RES"
check_eq "limits: backend" kernel "$(field backend)"
check_eq "limits: nr_zones" "$VM_ZONES" "$(field nr_zones)"
check_eq "limits: zone_size = chunk_sectors" $(( $(cat $Q/chunk_sectors) * 512 )) "$(field zone_size)"
check_eq "limits: zone_size 64 MiB" 67108864 "$(field zone_size)"
check_eq "limits: max_active" "$VM_MAX_ACTIVE" "$(field max_active)"
check_eq "limits: max_open" "$VM_MAX_OPEN" "$(field max_open)"
check_eq "limits: zone_append_max" "$(cat $Q/zone_append_max_bytes)" "$(field zone_append_max)"
check_eq "limits: max_write = max_sectors_kb" $(( $(cat $Q/max_sectors_kb) * 1024 )) "$(field max_write)"
check_eq "limits: block_size" "$(cat $Q/logical_block_size)" "$(field block_size)"
check_eq "limits: chunk_max (regular writes) = max_write" "$(field max_write)" "$(field chunk_max)"
MAXW=$(field max_write)

# --- report --------------------------------------------------------------
zt report
check_eq "report: result" OK "$RES"
check_eq "report: one line per zone" "$VM_ZONES" "$(echo "$OUT" | grep -c '^zone=')"
check_eq "report: zone 0 capacity 60 MiB (BLK_ZONE_REP_CAPACITY)" 62914560 "$(field cap)"
check_eq "report: zone 0 len 64 MiB" 67108864 "$(field len)"
check_eq "report: zone 0 type" SWR "$(field type)"
check_eq "report: zone 1 start" "start=67108864" "$(echo "$OUT" | grep '^zone=1 ' | tr ' ' '\n' | grep '^start=')"
zt report 15 4
check_eq "report from the last zone: 1 zone" 1 "$(echo "$OUT" | grep -c '^zone=')"

# --- reset, 1 MiB of writes, read back -------------------------------------
zt reset 0
check_eq "reset zone 0" OK "$RES"
check_eq "zone 0 EMPTY after reset" EMPTY "$(zone_field 0 cond)"
check_eq "zone 0 wp at start after reset" 0 "$(zone_field 0 wp_rel)"
t1=$(vm_uptime)
zt append 0 1048576
check_eq "append 1 MiB to zone 0" OK "$RES"
check_eq "append: writes of max_write" $(( 1048576 / MAXW )) "$(field writes)"
check_eq "append: wp after 1 MiB" 1048576 "$(field wp_rel)"
check_eq "append: zone implicitly open" IMP_OPEN "$(field cond)"
echo "# append 1 MiB: $(field usec) us, $(field MiBps) MiB/s"
check_eq "zone 0 wp in a fresh report" 1048576 "$(zone_field 0 wp_rel)"
zt verify 0 0 1048576
check_eq "read back 1 MiB matches" OK "$RES"
echo "# verify 1 MiB: $(field usec) us"
t2=$(vm_uptime)

# --- what the device refuses (zbd-emu mirrors these, see src/zbd/zbd-emu.c) -----
zt write 0 2097152 4096
check_eq "write not at the wp: EIO from the device (zbd-emu refuses it in prep: EINVAL)" EIO "$RES"
check_eq "zone 0 wp unchanged by the refused write" 1048576 "$(zone_field 0 wp_rel)"
zt close 0
check_eq "close an implicitly open zone" OK "$RES"
check_eq "closed zone: CLOSED" CLOSED "$(zone_field 0 cond)"
zt close 0
check_eq "close of a closed zone: no-op" OK "$RES"
zt append 0 4096 7
check_eq "a write reopens the closed zone" OK "$RES"
check_eq "reopened by writing: IMP_OPEN" IMP_OPEN "$(field cond)"
check_eq "wp after 1 MiB + 4 KiB" 1052672 "$(field wp_rel)"

# --- finish, reset -------------------------------------------------------
zt finish 0
check_eq "finish zone 0" OK "$RES"
check_eq "finished: FULL" FULL "$(zone_field 0 cond)"
# The flush a seal ends with: QEMU's NVMe has a volatile write cache.
check_eq "$Z: queue/write_cache" "write back" "$(cat $Q/write_cache)"
f0=$(vm_flushes)
zt flush
check_eq "flush: OK, write back" "OK yes" "$RES $(field write_back)"
vm_check_flush "zbd_flush() on the kernel backend" $f0
check_eq "finished: wp = start + capacity (normalized)" 62914560 "$(zone_field 0 wp_rel)"
zt write 0 62914560 4096
check_eq "write into a full zone at its wp: EIO" EIO "$RES"
zt write 0 1052672 4096
check_eq "write into a full zone inside its capacity: EIO" EIO "$RES"
zt open 0
check_eq "open of a full zone: EIO" EIO "$RES"
zt close 0
check_eq "close of a full zone: EIO" EIO "$RES"
zt verify 0 0 1048576
check_eq "finished zone keeps its data" OK "$RES"
zt reset 0
check_eq "reset zone 0 again" OK "$RES"
check_eq "reset: EMPTY" EMPTY "$(zone_field 0 cond)"
zt zeros 0 0 1048576
check_eq "reset zone reads zeros" OK "$RES"
zt close 1
check_eq "close of an empty zone: EIO" EIO "$RES"
zt finish 2
check_eq "finish of an empty zone" OK "$RES"
check_eq "finished empty zone: FULL" FULL "$(zone_field 2 cond)"
zt reset 2
t3=$(vm_uptime)

# --- the active-zone limit -------------------------------------------------
check_eq "max_active is 4 in this boot" 4 "$VM_MAX_ACTIVE"
for i in 1 2 3 4; do
        zt open $i
        check_eq "explicit open of zone $i" OK "$RES"
done
check_eq "zone 4 EXP_OPEN" EXP_OPEN "$(zone_field 4 cond)"
zt open 5
check_eq "a fifth open zone: EOVERFLOW (BLKOPENZONE)" EOVERFLOW "$RES"
zt append 5 4096
check_eq "a write into a fifth zone: EOVERFLOW (in the completion)" EOVERFLOW "$RES"
check_eq "zone 5 still EMPTY" EMPTY "$(zone_field 5 cond)"
zt close 1
check_eq "close explicitly opened empty zone 1" OK "$RES"
check_eq "closed unwritten zone: CLOSED, not EMPTY (QEMU ZNS)" CLOSED "$(zone_field 1 cond)"
zt open 5
check_eq "so it still holds its active resource: EOVERFLOW" EOVERFLOW "$RES"
zt append 2 4096
check_eq "a write into an already open zone goes on" OK "$RES"
zt finish 2
check_eq "finish frees an active resource" OK "$RES"
zt append 6 4096
check_eq "then a write opens another zone" OK "$RES"
zbd_agrees "closed, full, explicitly and implicitly open zones"
for i in 1 2 3 4 5 6; do
        zt reset $i
        check_eq "reset zone $i" OK "$RES"
done
t4=$(vm_uptime)

# --- the capacity: fill zone 7 to 4 KiB short, then a write across it -------
zt append 7 $(( 62914560 - 4096 )) 3
check_eq "fill zone 7 to capacity - 4 KiB" OK "$RES"
echo "# append 60 MiB - 4 KiB: $(field usec) us, $(field MiBps) MiB/s"
check_eq "zone 7 wp at capacity - 4 KiB" $(( 62914560 - 4096 )) "$(field wp_rel)"
zbd_agrees "zone 7 4 KiB short of its capacity"
zt write 7 $(( 62914560 - 4096 )) 8192
check_eq "write across the zone capacity: EIO" EIO "$RES"
zt append 7 4096 3
check_eq "the last 4 KiB fit" OK "$RES"
check_eq "written to capacity: FULL" FULL "$(field cond)"
check_eq "written to capacity: wp = start + capacity" 62914560 "$(field wp_rel)"
zt verify 7 $(( 62914560 - 1048576 )) 1048576 3
check_eq "the zone's last MiB reads back" OK "$RES"
zt reset 7
check_eq "reset zone 7" OK "$RES"
zt report
check_eq "every zone EMPTY at the end" "$VM_ZONES" "$(echo "$OUT" | grep -c 'cond=EMPTY')"
t5=$(vm_uptime)

echo "# timings: limits+report $(awk "BEGIN{print $t1-$t0}")s, reset+append+verify $(awk "BEGIN{print $t2-$t1}")s," \
        "refusals+finish+reset $(awk "BEGIN{print $t3-$t2}")s, max_active $(awk "BEGIN{print $t4-$t3}")s," \
        "capacity $(awk "BEGIN{print $t5-$t4}")s, script total $(awk "BEGIN{print $t5-$t_start}")s"
vm_summary
