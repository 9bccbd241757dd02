# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of tests/vm/capture-stacks.sh: builds the stacks blkmqd's stack
# resolver (src/policy/stack.c) is tested on, over the four namespaces of
# the NVMe controller with serial "stk0", and prints their sysfs trees and
# udev properties on the console, one "@ST@ path<TAB>mode<TAB>value" line
# each (the format: tests/fixtures/sysfs/README.md, stacks):
#   vgdata/striped  an LV striped over namespaces 1 and 2 (lvm2)
#   vgdata/cryptlv  a linear LV, and "secret": dm-crypt (plain) on it
#   md0             md RAID1 over partition 1 of namespaces 3 and 4
#   md1             md RAID0 over partition 2 of the same two disks
#   mpatha          a request-based dm-multipath map over namespace 5, its
#                   DM_UUID "mpath-" and the namespace's WWID, as multipathd names it
# The modules come from the cached kernel package (--file), the tools from
# the host (--bin), the dm/lvm/md udev rules too.

echo "# kernel $(uname -r), uptime $(vm_uptime)s"
. /vm/stacks-lib.sh
stack_setup 5

check "pvcreate" lvm_ pvcreate -q /dev/$N1 /dev/$N2
check "vgcreate vgdata" lvm_ vgcreate -q vgdata /dev/$N1 /dev/$N2
check "lvcreate striped" lvm_ lvcreate -q -y -i 2 -I 64k -L 64M -n striped vgdata
check "lvcreate cryptlv" lvm_ lvcreate -q -y -L 32M -n cryptlv vgdata
settle
dd if=/dev/urandom of=/tmp/key bs=64 count=1 2>/dev/null
check "cryptsetup open (plain)" cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 256 \
        --key-file /tmp/key /dev/vgdata/cryptlv secret
settle

for n in $N3 $N4; do
        printf 'label: gpt\n,48M\n,48M\n' | sfdisk -q /dev/$n >/dev/null 2>&1
done
settle
check "partitions of $N3" [ -e /sys/block/$N3/${N3}p2 ]
check "mdadm RAID1 md0" mdadm --create /dev/md0 --run --quiet --assume-clean --level=1 --raid-devices=2 \
        --metadata=1.2 --name=mirror --homehost=any /dev/${N3}p1 /dev/${N4}p1
check "mdadm RAID0 md1" mdadm --create /dev/md1 --run --quiet --level=0 --raid-devices=2 \
        --metadata=1.2 --name=stripe --homehost=any /dev/${N3}p2 /dev/${N4}p2
settle

SZ=$(cat /sys/block/$N5/size); DV=$(cat /sys/block/$N5/dev)
WWID=$(cat /sys/block/$N5/wwid)
check "dmsetup create mpatha (multipath)" dmsetup create mpatha --uuid "mpath-$WWID" \
        --table "0 $SZ multipath 0 0 1 1 round-robin 0 1 1 $DV 1000"
settle

# st DEV: the attributes of /sys/block/DEV (files of DEV, queue/,
# queue/iosched/, dm/, md/; slaves/ and holders/ as links), its partitions,
# and its udev properties
link_target() {
        _t=$(readlink -f "$1")
        if [ -f "$_t/partition" ]; then _p=${_t%/*}; echo "block/${_p##*/}/${_t##*/}"
        else echo "block/${_t##*/}"; fi
}
st_files() {
        for f in "$@"; do
                [ -f "$f" ] && [ ! -L "$f" ] || continue
                _m=$(stat -c %a "$f")
                _v=$(cat "$f" 2>/dev/null | tr '\n' '\034')
                _v=${_v%$(printf "\034")}
                printf '@ST@ block/%s\t%s\t%s\n' "$f" "$_m" "$_v"
        done
}
st_links() {
        for l in "$@"; do
                [ -L "$l" ] || continue
                printf '@ST@ block/%s\tlink\t%s\n' "$l" "$(link_target /sys/block/$l)"
        done
}
st() {
        cd /sys/block
        st_files $1/* $1/queue/* $1/queue/iosched/* $1/dm/* $1/md/*
        st_links $1/slaves/* $1/holders/*
        for p in $1/$1*; do
                [ -f $p/partition ] || continue
                st_files $p/*
                st_links $p/holders/*
        done
        udevadm info --query=property --path=/sys/block/$1 2>/dev/null | while read -r kv; do
                printf '@ST@ udev/%s\tprop\t%s\n' "$1" "$kv"
        done
        cd /tmp
}
for d in $N1 $N2 $N3 $N4 $N5; do st $d; done
for d in /sys/block/dm-* /sys/block/md*; do [ -e $d ] && st ${d##*/}; done
for d in /sys/block/dm-*; do echo "# ${d##*/} = $(cat $d/dm/name) uuid $(cat $d/dm/uuid) slaves: $(ls $d/slaves)"; done
for d in /sys/block/md*; do echo "# ${d##*/} level $(cat $d/md/level) slaves: $(ls $d/slaves)"; done
check "LV striped: two slaves" [ "$(ls /sys/block/$(basename $(readlink -f /dev/vgdata/striped))/slaves | wc -l)" = 2 ]
check "md0 over two partitions" [ "$(ls /sys/block/md0/slaves | wc -l)" = 2 ]
check "udev knows DM_VG_NAME" sh -c "udevadm info -q property /dev/vgdata/striped | grep -q DM_VG_NAME=vgdata"
vm_summary
