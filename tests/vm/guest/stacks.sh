# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of test-vm-stacks.sh: blkmqd on LVM, md and dm-crypt stacks
# over the five namespaces of the NVMe controller "stk0" (6.12).
#   vgdata/striped over nvme0n1 and nvme0n2: ReadAheadKB= on the LV, the
#   queue keys (mq-deadline among them) on both namespaces, and explain's
#   tree of the volume (text and --json) naming both; md0 (RAID1) over nvme0n3p1 and
#   nvme0n4p1: on both disks through their partitions; nvme0n5 in no stack:
#   untouched. Hotplug: the LV deactivated and activated again, md0 stopped
#   and assembled again, a member failed, removed and added again, a
#   dm-crypt mapping opened on an LV after the start and closed.
#   Subsystem hps (controllers hpA and hpB, three shared namespaces,
#   nvme_core.multipath=N: a disk per controller and namespace): a
#   dm-multipath map over namespace 1 through both, request-based (the map
#   carries its section's keys, its paths keep theirs) and bio-based (the
#   paths carry them); md1 (RAID1) over namespace 2 through hpA and 3
#   through hpB; hpB unplugged by QMP (a path and a member gone: the rest
#   keep their keys) and plugged again (the new path added to the map and
#   the member re-added take the keys); both stacks gone: boot values.
#   kill -9 and a restart while the stacks are tuned: at stop every
#   member's boot values are back.
. /vm/daemon-lib.sh

. /vm/stacks-lib.sh
stack_setup 5
# nq DEV: the queue keys the stacks set, one line
nq() { echo "nr=$(qattr $1 nr_requests) wbt=$(qattr $1 wbt_lat_usec) rq=$(qattr $1 rq_affinity) ra=$(qattr $1 read_ahead_kb)"; }
for n in $N1 $N2 $N3 $N4 $N5; do eval "B_$n=\"\$(nq $n)\""; echo "# boot: $n $(nq $n)"; done
b() { eval "echo \"\$B_$1\""; }

# hp CNTLID NSID: the disk of namespace NSID through the controller CNTLID
# of subsystem hps (serial hp0, test-vm-stacks.sh: hpA is 0, hpB 1, and 1
# again when it is back); names follow probe order.
hp() {
        for _d in /sys/block/nvme*n*; do
                [ "$(tr -d ' ' <$_d/device/serial 2>/dev/null)" = hp0 ] && [ "$(cat $_d/device/cntlid)" = $1 ] &&
                        [ "$(cat $_d/nsid 2>/dev/null)" = $2 ] && echo ${_d##*/} && return 0
        done
        return 1
}
# hp_disks: P1 P2, the paths of namespace 1 through hpA and hpB; M1 M2,
# md1's disks: namespace 2 through hpA, 3 through hpB
hp_disks() { P1=$(hp 0 1) && P2=$(hp 1 1) && M1=$(hp 0 2) && M2=$(hp 1 3); }
# nqs DEV: nq with the scheduler
nqs() { echo "sched=$(sched $1) $(nq $1)"; }
check_eq "nvme_core.multipath=N: a disk per path" N "$(cat /sys/module/nvme_core/parameters/multipath)"
check "hps: paths of namespace 1 and md1's disks" vm_wait_for 20 hp_disks
W=$(cat /sys/block/$P1/wwid)
check_eq "$P1 and $P2: one WWID" "$W" "$(cat /sys/block/$P2/wwid)"
BOOT_P=$(nqs $P1) BOOT_M=$(nqs $M1)
check_eq "$P2 at boot as $P1" "$BOOT_P" "$(nqs $P2)"
check_eq "$M2 at boot as $M1" "$BOOT_M" "$(nqs $M2)"
echo "# boot: paths $P1 $P2: $BOOT_P; md1's disks $M1 $M2: $BOOT_M; WWID $W"

check "pvcreate, vgcreate vgdata" sh -c "lvm pvcreate -q /dev/$N1 /dev/$N2 --config '$LVMC' && lvm vgcreate -q vgdata /dev/$N1 /dev/$N2 --config '$LVMC'"
check "lvcreate striped" lvm_ lvcreate -q -y -i 2 -I 64k -L 64M -n striped vgdata
check "lvcreate cryptlv (on $N1)" lvm_ lvcreate -q -y -L 32M -n cryptlv vgdata /dev/$N1
for n in $N3 $N4; do printf 'label: gpt\n,48M\n,48M\n' | sfdisk -q /dev/$n >/dev/null 2>&1; done
settle
check "mdadm RAID1 md0 over ${N3}p1 ${N4}p1" mdadm --create /dev/md0 --run --quiet --assume-clean --level=1 \
        --raid-devices=2 --metadata=1.2 --name=mirror --homehost=any /dev/${N3}p1 /dev/${N4}p1
settle
LV=$(basename $(readlink -f /dev/vgdata/striped))
RA_LV=$(qattr $LV read_ahead_kb)
echo "# striped is $LV (read_ahead_kb $RA_LV)"

mkdir -p $DROPIN
cat > $BLKMQD_CONF <<EOC
[Daemon]
RestoreOnExit=yes
# a member taken out of an md array sends no uevent: the drift check finds it
DriftCheckSec=2

# before pg: of two stacks' sections on one disk the later wins a key
[Device vault]
MatchCrypt=vault
WbtLatUsec=7000

[Device pg]
MatchVolume=vgdata/striped
ReadAheadKB=4096
Scheduler=mq-deadline
NrRequests=64
WbtLatUsec=3000

[Device mirror]
MatchMDLevel=raid1
MatchMDName=mirror
NrRequests=32
RqAffinity=2

[Device hot]
MatchMDName=hot
NrRequests=48
WbtLatUsec=4000

[Device mpath]
MatchMultipathWWID=$W
Scheduler=mq-deadline
NrRequests=96
EOC
WANT_P="sched=mq-deadline nr=96 wbt=$(qattr $P1 wbt_lat_usec) rq=$(qattr $P1 rq_affinity) ra=$(qattr $P1 read_ahead_kb)"
WANT_M="sched=$(sched $M1) nr=48 wbt=4000 rq=$(qattr $M1 rq_affinity) ra=$(qattr $M1 read_ahead_kb)"
WANT1="nr=64 wbt=3000 rq=$(qattr $N1 rq_affinity) ra=$(qattr $N1 read_ahead_kb)"
WANT2="nr=64 wbt=3000 rq=$(qattr $N2 rq_affinity) ra=$(qattr $N2 read_ahead_kb)"
WANT3="nr=32 wbt=$(qattr $N3 wbt_lat_usec) rq=2 ra=$(qattr $N3 read_ahead_kb)"
WANT4="nr=32 wbt=$(qattr $N4 wbt_lat_usec) rq=2 ra=$(qattr $N4 read_ahead_kb)"

start() {
        daemon_start -c $BLKMQD_CONF --varlink-address /run/blkmqd.sock --log-target=console
        check "daemon ready ($1)" vm_wait_for 30 log_has "; ready\."
}
tuned() { # tuned WHEN: the stacks' values in sysfs
        check "$1: $LV read_ahead_kb 4096 (the LV's)" vm_wait_for 20 attr_is $LV read_ahead_kb 4096
        check "$1: $N1 under the LV" vm_wait_for 20 sh -c "[ \"\$(echo nr=\$(cat /sys/block/$N1/queue/nr_requests) wbt=\$(cat /sys/block/$N1/queue/wbt_lat_usec))\" = 'nr=64 wbt=3000' ]"
        check_eq "$1: $N1" "$WANT1" "$(nq $N1)"
        check_eq "$1: $N2" "$WANT2" "$(nq $N2)"
        check "$1: $N3 under md0" vm_wait_for 20 attr_is $N3 nr_requests 32
        check_eq "$1: $N3 (through ${N3}p1)" "$WANT3" "$(nq $N3)"
        check_eq "$1: $N4 (through ${N4}p1)" "$WANT4" "$(nq $N4)"
        check_eq "$1: $N5 in no stack, untouched" "$(b $N5)" "$(nq $N5)"
}
export BLKMQD_ADDRESS=/run/blkmqd.sock
start "first start"
tuned "start"
check "log: $N1 nr_requests written" log_has "$N1: queue/nr_requests"
blkmqctl explain $N3 | sed 's/^/# explain| /'
check "explain $N3 names md0 and its section" sh -c "blkmqctl explain $N3 | grep -q 'mirror.*md0'"
# explain on the volume by its name draws the stack: the LV at the top, both
# namespaces below it with the scheduler pg sets there; --json the same tree
if grep -q '\[mq-deadline\]' /sys/block/$N1/queue/scheduler && grep -q '\[mq-deadline\]' /sys/block/$N2/queue/scheduler; then
        ok "$N1 and $N2 on mq-deadline"
else
        # failed once in CI (load 3-4; their nr_requests and wbt pg's
        # already): what the schedulers and blkmqd said
        not_ok "$N1 and $N2 on mq-deadline: $N1 $(cat /sys/block/$N1/queue/scheduler), $N2 $(cat /sys/block/$N2/queue/scheduler)"
        grep -E "($N1|$N2)[:(]" $BLKMQD_LOG | tail -n 30 | sed 's/^/# blkmqd| /'
fi
blkmqctl explain vgdata/striped >/tmp/ex.txt 2>&1
sed -n '/^Stack/,$p' /tmp/ex.txt | sed 's/^/# explain| /'
check "explain vgdata/striped: $LV at the top, a striped LV" grep -qx "  $LV (vgdata/striped): top, striped LV" /tmp/ex.txt
for n in $N1 $N2; do
        check "explain vgdata/striped: $n below it, mq-deadline from pg" sh -c \
                "grep -A3 -e '-$n: request-based disk\$' /tmp/ex.txt | grep -q 'Scheduler=mq-deadline (\[Device pg via $LV\]'"
done
blkmqctl --json explain vgdata/striped >/tmp/ex.json 2>&1
check_eq "explain --json: the tree's members" "$N1 $N2" \
        "$(grep -o '"device":"[^"]*","role":"request-based disk","top":false,"member":true' /tmp/ex.json | cut -d'"' -f4 | tr '\n' ' ' | sed 's/ $//')"

# The LV deactivated: its disks back to their boot values (nvme0n1 holds
# cryptlv too, which no section names); activated again: tuned.
check "lvchange -an vgdata/striped" lvm_ lvchange -q -an vgdata/striped
settle
check "$N2 back to its boot values (LV gone)" vm_wait_for 20 sh -c "[ \"\$(echo nr=\$(cat /sys/block/$N2/queue/nr_requests))\" = 'nr=$(b $N2 | sed 's/nr=\([0-9]*\).*/\1/')' ]"
check_eq "$N2 after lvchange -an" "$(b $N2)" "$(nq $N2)"
check_eq "$N1 after lvchange -an" "$(b $N1)" "$(nq $N1)"
check "lvchange -ay vgdata/striped" lvm_ lvchange -q -ay vgdata/striped
settle
LV=$(basename $(readlink -f /dev/vgdata/striped))
tuned "LV active again"

# md0: a member failed and removed, added again; the array stopped, assembled.
check "mdadm --fail --remove ${N4}p1" sh -c "mdadm /dev/md0 --fail /dev/${N4}p1 && sleep 1 && mdadm /dev/md0 --remove /dev/${N4}p1"
settle
check "$N4 back to its boot values (out of md0)" vm_wait_for 20 sh -c "[ \"\$(cat /sys/block/$N4/queue/nr_requests)\" != 32 ]"
check_eq "$N4 out of md0" "$(b $N4)" "$(nq $N4)"
check_eq "$N3 still in md0" "$WANT3" "$(nq $N3)"
check "mdadm --add ${N4}p1" mdadm /dev/md0 --add /dev/${N4}p1
settle
check "$N4 tuned again (back in md0)" vm_wait_for 20 attr_is $N4 nr_requests 32
check_eq "$N4 back in md0" "$WANT4" "$(nq $N4)"
check "mdadm --stop md0" mdadm --stop /dev/md0
settle
check "$N3 back to its boot values (md0 stopped)" vm_wait_for 20 sh -c "[ \"\$(cat /sys/block/$N3/queue/nr_requests)\" != 32 ]"
check_eq "$N3 md0 stopped" "$(b $N3)" "$(nq $N3)"
check_eq "$N4 md0 stopped" "$(b $N4)" "$(nq $N4)"
check "mdadm --assemble md0" mdadm --assemble /dev/md0 /dev/${N3}p1 /dev/${N4}p1
settle
tuned "md0 assembled again"

# dm-crypt opened after the start on cryptlv (on $N1): its WbtLatUsec=
# is the vault's only where the LV's section does not set it (pg comes
# later in the configuration).
dd if=/dev/urandom of=/tmp/key bs=64 count=1 2>/dev/null
check "cryptsetup open vault" cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 256 \
        --key-file /tmp/key /dev/vgdata/cryptlv vault
settle
sleep 2
check_eq "$N1 with vault open: pg's keys stay (later in the configuration)" "$WANT1" "$(nq $N1)"
blkmqctl explain $N1 | sed 's/^/# explain| /'
check "explain $N1: vault's WbtLatUsec= not applied, pg later" sh -c "blkmqctl explain $N1 | grep -q 'WbtLatUsec=7000 of \[Device vault via [^]]*\] not applied to $N1: \[Device pg via $LV\] comes later'"
check "lvchange -an vgdata/striped (vault stays)" lvm_ lvchange -q -an vgdata/striped
settle
check "$N1 takes vault's WbtLatUsec=7000 (the LV gone)" vm_wait_for 20 attr_is $N1 wbt_lat_usec 7000
check "cryptsetup close vault" cryptsetup close vault
settle
check "$N1 back to its boot values (vault closed)" vm_wait_for 20 sh -c "[ \"\$(cat /sys/block/$N1/queue/wbt_lat_usec)\" != 7000 ]"
check_eq "$N1 after close" "$(b $N1)" "$(nq $N1)"
check "lvchange -ay vgdata/striped" lvm_ lvchange -q -ay vgdata/striped
settle
LV=$(basename $(readlink -f /dev/vgdata/striped))
tuned "before kill -9"

# dm-multipath over namespace 1 of hps through both controllers, made with
# dmsetup as multipathd makes it (DM_UUID mpath-WWID). Request-based,
# multipathd's default: the map is a member of its own (its paths'
# schedulers are bypassed), the section's keys go to it, its paths keep
# their values (3 s: the drift check, DriftCheckSec=2, has looked again).
HP_T0=$(vm_uptime)
mp_table() { # mp_table FEATURES PATH...: one priority group over the paths
        _f=$1
        shift
        _t="0 $(cat /sys/block/$1/size) multipath $_f 0 1 1 round-robin 0 $# 1"
        for _p in "$@"; do _t="$_t $(cat /sys/block/$_p/dev) 1000"; done
        echo "$_t"
}
check "dmsetup create mpatha (request-based) over $P1 $P2" dmsetup create mpatha --uuid "mpath-$W" \
        --table "$(mp_table 0 $P1 $P2)"
settle
MA=$(basename $(readlink -f /dev/mapper/mpatha))
check "mpatha ($MA) takes the section's NrRequests=96" vm_wait_for 20 attr_is $MA nr_requests 96
check_eq "mpatha's scheduler" mq-deadline "$(sched $MA)"
# explain on the map draws it at the top, its own member, and both paths
# below it taking none of its keys; explain on a path draws the same tree
blkmqctl explain $MA >/tmp/ex.txt 2>&1
sed -n '/^Stack/,$p' /tmp/ex.txt | sed 's/^/# explain| /'
check "explain mpatha: $MA at the top, takes the queue keys itself" \
        grep -q "$MA (mpatha): top, dm-multipath, request-based: takes the queue keys itself" /tmp/ex.txt
for p in $P1 $P2; do
        check "explain mpatha: $p below it, a multipath path" grep -q "$p: multipath path" /tmp/ex.txt
done
check_eq "explain mpatha: neither path takes the map's keys" 2 \
        "$(grep -c "(a path of $MA: the stack's keys stay on $MA, none go here)" /tmp/ex.txt)"
check "explain $P1 draws the map's tree" sh -c "blkmqctl explain $P1 | grep -q '$MA (mpatha): top, dm-multipath'"
sleep 3
check_eq "$P1 below the request-based map: its own values" "$BOOT_P" "$(nqs $P1)"
check_eq "$P2 below the request-based map: its own values" "$BOOT_P" "$(nqs $P2)"
check "dmsetup remove mpatha" dmsetup remove mpatha
settle

# Bio-based (queue_mode bio): the paths carry the section's keys. md1
# (RAID1, internal bitmap) over namespace 2 through hpA, 3 through hpB.
check "dmsetup create mpathb (queue_mode bio) over $P1 $P2" dmsetup create mpathb --uuid "mpath-$W" \
        --table "$(mp_table '2 queue_mode bio' $P1 $P2)"
check "mdadm RAID1 md1 over $M1 $M2" mdadm --create /dev/md1 --run --quiet --assume-clean --level=1 \
        --raid-devices=2 --metadata=1.2 --bitmap=internal --name=hot --homehost=any /dev/$M1 /dev/$M2
settle
check "$P2 below mpathb: mq-deadline" vm_wait_for 20 sched_is $P2 mq-deadline
check "$M2 below md1: nr_requests 48" vm_wait_for 20 attr_is $M2 nr_requests 48
for n in $P1 $P2; do check_eq "$n below mpathb" "$WANT_P" "$(nqs $n)"; done
for n in $M1 $M2; do check_eq "$n below md1" "$WANT_M" "$(nqs $n)"; done

# QMP: hpB leaves with a path of mpathb and a member of md1; blkmqd forgets
# both, the path and the member left keep their stacks' keys.
check "host: device_del hpB" vm_hotplug unplug
check "$P2 and $M2 gone" vm_wait_for 30 sh -c "[ ! -e /sys/block/$P2 ] && [ ! -e /sys/block/$M2 ]"
mdadm /dev/md1 --fail detached >/dev/null 2>&1
mdadm /dev/md1 --remove detached >/dev/null 2>&1 || mdadm /dev/md1 --remove failed >/dev/null 2>&1
check_eq "md1 degraded, one member left" "1 $M1" "$(cat /sys/block/md1/md/degraded) $(ls /sys/block/md1/slaves)"
settle
check "blkmqd forgot $P2 and $M2" vm_wait_for 20 sh -c "! blkmqctl --no-legend devices | grep -qE '^($P2|$M2) '"
sleep 3
check_eq "$P1, the path left" "$WANT_P" "$(nqs $P1)"
check_eq "$M1, the member left" "$WANT_M" "$(nqs $M1)"

# QMP: hpB back; its disks arrive after their stacks, with their own values
# until the path is added to the map and the member re-added.
check "host: device_add hpB" vm_hotplug replug
check "hpB's disks back" vm_wait_for 30 hp_disks
settle
echo "# after replug: paths $P1 $P2, md1's disks $M1 $M2"
check_eq "$M2 (replugged) not in md1 yet: its own values" "$BOOT_M" "$(nqs $M2)"
check "mdadm --re-add $M2" mdadm /dev/md1 --re-add /dev/$M2
settle
check "$M2 back in md1: nr_requests 48" vm_wait_for 20 attr_is $M2 nr_requests 48
check_eq "$M2 back in md1" "$WANT_M" "$(nqs $M2)"
check_eq "$P2 (replugged) not in mpathb yet: its own values" "$BOOT_P" "$(nqs $P2)"
check "dmsetup reload mpathb with $P2 added, resume" sh -c \
        "dmsetup reload mpathb --table '$(mp_table '2 queue_mode bio' $P1 $P2)' && dmsetup resume mpathb"
settle
check "$P2 added to mpathb: mq-deadline" vm_wait_for 20 sched_is $P2 mq-deadline
check_eq "$P2 in mpathb" "$WANT_P" "$(nqs $P2)"

# Both stacks gone: every path and disk back to its boot values.
check "dmsetup remove mpathb" dmsetup remove mpathb
check "mdadm --stop md1" mdadm --stop /dev/md1
settle
check "$P1 back (mpathb removed)" vm_wait_for 20 sh -c "! grep -q '\[mq-deadline\]' /sys/block/$P1/queue/scheduler"
check "$M1 back (md1 stopped)" vm_wait_for 20 sh -c "[ \"\$(cat /sys/block/$M1/queue/nr_requests)\" != 48 ]"
for n in $P1 $P2; do check_eq "$n: boot values (mpathb removed)" "$BOOT_P" "$(nqs $n)"; done
for n in $M1 $M2; do check_eq "$n: boot values (md1 stopped)" "$BOOT_M" "$(nqs $n)"; done
echo "# multipath and QMP hotplug: $(awk -v a=$HP_T0 -v b=$(vm_uptime) 'BEGIN { printf "%.1f", b - a }') s"

# kill -9 while tuned: the values stay; a restart adopts the recorded
# originals; a stop puts every member's boot values back.
kill -KILL $DPID
vm_wait_for 10 test -s $BLKMQD_RC
check_eq "$N1 still tuned after kill -9" "$WANT1" "$(nq $N1)"
start "restart"
tuned "restart"
rc=$(daemon_stop)
check_eq "blkmqd exit code" 0 "$rc"
for n in $N1 $N2 $N3 $N4 $N5; do check_eq "$n: boot values back at stop" "$(b $n)" "$(nq $n)"; done
for n in $P1 $P2; do check_eq "$n: boot values at stop" "$BOOT_P" "$(nqs $n)"; done
for n in $M1 $M2; do check_eq "$n: boot values at stop" "$BOOT_M" "$(nqs $n)"; done
check_eq "$LV read_ahead_kb back" "$RA_LV" "$(qattr $LV read_ahead_kb)"
grep -q '<[0-3]>' $BLKMQD_LOG && log_show
vm_summary
