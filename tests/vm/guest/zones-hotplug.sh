# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-zones-hotplug.sh (--subsys --udev, --hotplug-script
# zones-hotplug.actions): blkmqd's zone allocator while the ZNS controller
# leaves and comes back under another controller id and root port.
#   The namespace sits behind an nvme-subsys: head nvmeXnY (bio-based, the
#   allocator's device) over the hidden path nvmeXcYnZ (the tuned queue).
#   Before: two files staged (1 MiB+1, 4 KiB) -> sealed; a third zone leased
#   and 1 MiB of a 2 MiB file appended (a lease in progress, state writing).
#   Unplug: the daemon logs the device going away, keeps its records under the
#   same deviceId (no kernel name), Allocate -> DeviceGone/NoFreeZone, Append
#   -> DeviceGone, no crash.
#   Replug: the same deviceId gets a kernel name again (found by identity);
#   sealed zones still sealed with the same sha256, and dd from their start
#   LBA hashes as the files; the in-progress lease either survives (then the
#   rest is appended and sealed) or is reclaimed as blkmqd-varlink(7) says
#   ("an interrupted write is reclaimed"), with the reason logged; a new stage
#   works; the new path is tuned again (nr_requests 64); no <3> line.
. /vm/daemon-lib.sh

export BLKMQD_ADDRESS=/tmp/blkmqd.sock
CONF=/tmp/zones.conf
MIB=1048576

el() { awk -v a="$1" -v b="$(vm_uptime)" 'BEGIN { printf "%.2f", b - a }'; }

# js KEY: string value of KEY in the one JSON object on stdin; jn KEY: a number.
js() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" | head -n1; }
jn() { sed -n "s/.*\"$1\": *\([0-9-]*\).*/\1/p" | head -n1; }
# devline ID: the ListDevices object of ID, one line; zline IDX: the zone's.
devline() { blkmqctl --json zones 2>/dev/null | tr '{' '\n' | grep "\"deviceId\": *\"$1\""; }
zline() { blkmqctl --json zones "$ID" 2>/dev/null | tr '{}' '\n\n' | grep "\"zoneIndex\": *$1,"; }
zstate() { zline $1 | js state; }
zstate_is() { [ "$(zstate $1)" = "$2" ]; }
attached() { devline "$ID" | grep -q "\"device\": *\"$1\""; }
# readback DEV LBA SIZE: sha256 of SIZE bytes from LBA, plain dd (4 KiB blocks)
readback() {
        sync
        echo 3 > /proc/sys/vm/drop_caches
        dd if=/dev/$1 bs=4096 skip=$(($2 / 8)) count=$((($3 + 4095) / 4096)) 2>/dev/null | head -c $3 |
                sha256sum | cut -d' ' -f1
}

H=$(zoned_head); P=$(zoned_path)
echo "# kernel $(uname -r); head ${H:-none}, path ${P:-none}"
check "zoned multipath head present" [ -n "$H" ]
check "hidden zoned path present" [ -n "$P" ]
[ -n "$H" ] && [ -n "$P" ] || { vm_summary; exit 1; }
echo "# $H: wwid $(cat /sys/block/$H/wwid 2>/dev/null), $(cat /sys/block/$H/queue/nr_zones) zones," \
        "max_active $(cat /sys/block/$H/queue/max_active_zones); nodes: $(ls /dev | grep -E '^(nvme|ng)' | tr '\n' ' ')"

zones_conf $CONF /tmp/zones.db "Scheduler=mq-deadline
NrRequests=64"

t0=$(vm_uptime)
daemon_start -c $CONF --varlink-address /tmp/blkmqd.sock --log-level debug
check "daemon started" [ -n "$DPID" ]
check "blkmqd offers $H for leases" vm_wait_for 30 zone_listed $H
check "path $P nr_requests 64" vm_wait_for 20 attr_is $P nr_requests 64
echo "# daemon ready, $H listed after $(el $t0) s"
blkmqctl zones | sed 's/^/# /'
ID=$(blkmqctl --json zones | tr '{' '\n' | grep "\"device\": *\"$H\"" | js deviceId)
echo "# deviceId $ID"
check "$H has a stable deviceId" [ -n "$ID" ]
check_eq "one allocator device (the head; the hidden path is not a second one)" 1 \
        "$(blkmqctl --json zones | tr '{' '\n' | grep -c '"deviceId"')"

# --- before: two sealed zones and a lease in progress -------------------------
for spec in 1m1:1048577 4k:4096; do
        n=${spec%%:*} size=${spec#*:}
        head -c $size /dev/urandom > /tmp/$n.bin
        want=$(sha256sum < /tmp/$n.bin | cut -d' ' -f1)
        blkmqctl stage /tmp/$n.bin --device $H --label $n > /tmp/$n.out 2>&1
        check_eq "stage $n ($size B): exit 0" 0 $?
        check_eq "stage $n: SHA256 is sha256sum's" "$want" "$(fld /tmp/$n.out SHA256)"
        lba=$(fld /tmp/$n.out "Start LBA")
        check_eq "$n: dd from LBA $lba hashes as the file" "$want" "$(readback $H "$lba" $size)"
        eval "LBA_$n=$lba IDX_$n=$(fld /tmp/$n.out Zone) LEASE_$n=$(fld /tmp/$n.out Lease) SHA_$n=$want"
done
head -c $((2 * MIB)) /dev/urandom > /tmp/part.bin
SHA_part=$(sha256sum < /tmp/part.bin | cut -d' ' -f1)
blkmqctl zones alloc --size=$((2 * MIB)) --device $H --label inprog > /tmp/l3.out 2>&1
check_eq "third zone leased: exit 0" 0 $?
L3=$(fld /tmp/l3.out Lease) I3=$(fld /tmp/l3.out Zone) LBA_part=$(fld /tmp/l3.out "Start LBA")
head -c $MIB /tmp/part.bin | blkmqctl zones append $L3 - > /tmp/a3.out 2>&1
check_eq "append the first 1 MiB of 2 MiB: exit 0" 0 $?
check_eq "lease in progress: state writing" writing "$(zstate $I3)"
check_eq "lease in progress: bytesWritten 1 MiB" $MIB "$(zline $I3 | jn bytesWritten)"
for i in $IDX_1m1 $IDX_4k $I3; do zline $i | sed 's/^/# before: /'; done
blkmqctl --json zones > /tmp/devs.before
blkmqctl --json zones $ID > /tmp/zones.before
sed 's/^/# before: /' /tmp/devs.before
D0=$(devline $ID)

# --- unplug -------------------------------------------------------------------
C1=$(path_ctrl $P)
A1=$(cat /sys/class/nvme/$C1/address 2>/dev/null)
L1=$(wc -l < $BLKMQD_LOG)
t0=$(vm_uptime)
check "host: device_del the ZNS controller" vm_hotplug unplug
check "head $H gone" vm_wait_for 10 gone $H
check "log: $H went away (zone allocator)" vm_wait_for 10 log_has "$ID: $H went away"
check "log: path $P removed" vm_wait_for 10 log_has "$P: removed"
echo "# unplug: device_del to the allocator's log line $(el $t0) s"
check "daemon alive after unplug" daemon_alive
D1=$(devline $ID)
echo "# gone: $D1"
check "gone: $ID still listed by zones" [ -n "$D1" ]
check "gone: no kernel name for $ID" sh -c "! echo '$D1' | grep -q '\"device\"'"
check_eq "gone: still 2 sealed, 1 writing" "2 1" "$(echo "$D1" | jn sealed) $(echo "$D1" | jn writing)"
blkmqctl zones | sed 's/^/# gone: /'
blkmqctl zones get $LEASE_1m1 > /tmp/g.out 2>&1
check_eq "gone: 1m1 record still sealed, same sha256" "sealed $SHA_1m1" "$(fld /tmp/g.out State) $(fld /tmp/g.out SHA256)"
check_eq "gone: zones $ID lists the sealed 1m1 zone" sealed "$(zstate $IDX_1m1)"
blkmqctl zones alloc --size=4096 --device $ID > /tmp/gone1.out 2>&1
rc=$?
sed 's/^/# alloc --device ID| /' /tmp/gone1.out
check "gone: alloc --device $ID: exit 10 (DeviceGone) or 8 (NoFreeZone), got $rc" [ $rc = 10 -o $rc = 8 ]
blkmqctl --json zones alloc --size=4096 > /tmp/gone2.out 2>&1
rc=$?
sed 's/^/# alloc (any device)| /' /tmp/gone2.out
check_eq "gone: alloc on any device: exit 8 (NoFreeZone)" 8 $rc
blkmqctl zones alloc --size=4096 --device $H > /tmp/gone3.out 2>&1
echo "# alloc --device $H (the old kernel name): rc=$? $(head -n1 /tmp/gone3.out)"
printf x | blkmqctl zones append $L3 - > /tmp/gone4.out 2>&1
rc=$?
sed 's/^/# append while gone| /' /tmp/gone4.out
check_eq "gone: append to the lease in progress: exit 10 (DeviceGone)" 10 $rc
check "daemon alive after calls on the gone device" daemon_alive

# --- replug -------------------------------------------------------------------
t1=$(vm_uptime)
replug_zoned
check "$ID attached again as $H2 (by identity)" vm_wait_for 20 attached $H2
t2=$(vm_uptime)
echo "# replug: device_add to $ID attached $(el $t1) s"
D2=$(devline $ID)
echo "# back: $D2"
check_eq "still one allocator device, the same deviceId" "1 $ID" \
        "$(blkmqctl --json zones | tr '{' '\n' | grep -c '"deviceId"') $(echo "$D2" | js deviceId)"
check_eq "same zone count" "$(echo "$D0" | jn zones)" "$(echo "$D2" | jn zones)"
check "log: $ID available for leases again" vm_wait_for 5 \
        sh -c "tail -n +$((L1 + 1)) $BLKMQD_LOG | grep -q '$ID: .* available for leases'"
for n in 1m1 4k; do
        eval "l=\$LEASE_$n want=\$SHA_$n lba=\$LBA_$n i=\$IDX_$n"
        blkmqctl zones get $l > /tmp/g.out 2>&1
        check_eq "$n: sealed, same sha256, same zone" "sealed $want $i $lba" \
                "$(fld /tmp/g.out State) $(fld /tmp/g.out SHA256) $(fld /tmp/g.out Zone) $(fld /tmp/g.out 'Start LBA')"
        check_eq "$n: condition full" full "$(zline $i | js condition)"
done
check_eq "1m1: dd from $H2 LBA $LBA_1m1 hashes as the file" "$SHA_1m1" "$(readback $H2 $LBA_1m1 1048577)"
check_eq "4k: dd from $H2 LBA $LBA_4k hashes as the file" "$SHA_4k" "$(readback $H2 $LBA_4k 4096)"

# The lease in progress: kept, or reclaimed with the reason logged.
tail -n +$((L1 + 1)) $BLKMQD_LOG | grep "zone $I3[: ]" | sed 's/^/# lease in progress| /'
blkmqctl zones get $L3 > /tmp/g3.out 2>&1
rc=$?
if [ $rc = 0 ]; then
        echo "# the lease in progress survived: $(fld /tmp/g3.out State), $(fld /tmp/g3.out Bytes) bytes"
        tail -c +$((MIB + 1)) /tmp/part.bin | blkmqctl zones append $L3 - > /tmp/a3.out 2>&1
        check_eq "kept lease: append the second MiB: exit 0" 0 $?
        blkmqctl zones seal $L3 $SHA_part > /tmp/s3.out 2>&1
        check_eq "kept lease: seal with the whole file's sha256: exit 0" 0 $?
        check_eq "kept lease: dd hashes as the 2 MiB file" "$SHA_part" "$(readback $H2 $LBA_part $((2 * MIB)))"
else
        check_eq "reclaimed lease: zones get $L3: exit 3 (LeaseNotFound)" 3 $rc
        check "log: zone $I3 writing → releasing, with why" \
                sh -c "tail -n +$((L1 + 1)) $BLKMQD_LOG | grep -q 'zone $I3: writing → releasing: a write was interrupted'"
        check "reclaimed zone $I3 reset and free" vm_wait_for 20 zstate_is $I3 free
        check_eq "reclaimed zone $I3: empty, write pointer at its start" "empty $LBA_part" \
                "$(zline $I3 | js condition) $(($(zline $I3 | jn writePointer) / 512))"
fi

# New staging after the replug, by deviceId.
head -c $((64 * 1024 + 3)) /dev/urandom > /tmp/new.bin
want=$(sha256sum < /tmp/new.bin | cut -d' ' -f1)
blkmqctl stage /tmp/new.bin --device $ID --label new > /tmp/new.out 2>&1
check_eq "stage after the replug (--device $ID): exit 0" 0 $?
sed 's/^/# /' /tmp/new.out
check_eq "new stage: on $H2" "$H2" "$(fld /tmp/new.out Device)"
lba=$(fld /tmp/new.out "Start LBA")
check_eq "new stage: dd from LBA $lba hashes as the file" "$want" "$(readback $H2 "$lba" $((64 * 1024 + 3)))"

# The new hidden path is tuned again.
check "path $P2 nr_requests back to 64" vm_wait_for 20 attr_is $P2 nr_requests 64
check_eq "path $P2 scheduler" mq-deadline "$(sched $P2)"
check_eq "log: $P2 nr_requests → 64 once after the replug" 1 \
        "$(tail -n +$((L1 + 1)) $BLKMQD_LOG | grep -c "$P2: queue/nr_requests .* → 64")"
blkmqctl zones | sed 's/^/# after: /'
check "daemon still running" daemon_alive
check_eq "error lines (<3>) in the daemon log" 0 "$(log_count '^<[0-3]>')"

check_eq "SIGTERM: exit 0" 0 "$(daemon_stop)"
check_eq "error lines (<3>) in the daemon log at exit" 0 "$(log_count '^<[0-3]>')"
grep -v '^<7>' $BLKMQD_LOG | sed 's/^/# blkmqd| /' | tail -n 60
echo "# log: $(wc -l < $BLKMQD_LOG) lines, $(log_count '^<4>') warnings, $(log_count '^<5>') notices"
vm_summary
