# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest half of tests/vm/capture-fixtures.sh (--zns --conventional
# --data-disk): prints the /sys/block attribute sets of tests/fixtures/sysfs
# on the console, one "@FX@ NAME<TAB>path<TAB>octal mode<TAB>value" line per
# attribute (a newline inside a value as the byte 0x1c; the value's last
# newline dropped): the conventional and the ZNS NVMe namespace, null_blk
# zoned, the virtio disk, each as the kernel set it up at boot, and the
# virtio disk again on mq-deadline.

echo "# kernel $(uname -r), uptime $(vm_uptime)s"

# fx NAME DEV: the attributes of /sys/block/DEV (its files, queue/,
# queue/iosched/, mq/N/, bdi/, device/; no symbolic link, no directory)
fx() {
        _n=$1 _d=$2
        echo "@FX@ $_n	# /sys/block/$_d captured in a QEMU $(cat /sys/class/dmi/id/product_version 2>/dev/null | cut -c1-20) guest, kernel $(uname -r); path<TAB>octal mode<TAB>value (newlines as \\x1c)"
        cd /sys/block
        for f in $_d/* $_d/queue/* $_d/queue/iosched/* $_d/mq/*/* $_d/bdi/* $_d/device/*; do
                [ -f "$f" ] && [ ! -L "$f" ] || continue
                _m=$(stat -c %a "$f")
                _v=$(cat "$f" 2>/dev/null | tr '\n' '\034')
                _v=${_v%$(printf "\034")}
                printf '@FX@ %s\t%s\t%s\t%s\n' "$_n" "$f" "$_m" "$_v"
        done
        cd /tmp
        ok "captured $_d as $_n"
}

C= Z=
for d in /sys/block/nvme*n*; do
        n=${d##*/}
        case $(cat "$d/queue/zoned" 2>/dev/null) in
        host-managed) Z=$n ;;
        none) C=$n ;;
        esac
done
check "a conventional and a ZNS namespace" sh -c "[ -n '$C' ] && [ -n '$Z' ]"
fx nvme-conventional "$C"
fx nvme-zns "$Z"

M=/lib/modules/$(uname -r)/kernel
grep -qw configfs /proc/filesystems || insmod $M/fs/configfs/configfs.ko
check "insmod null_blk.ko zoned=1" insmod $M/drivers/block/null_blk/null_blk.ko \
        zoned=1 zone_size=64 zone_capacity=60 gb=1 nr_devices=1
vm_wait_for 5 test -e /sys/block/nullb0/queue/zoned
fx nullblk-zoned nullb0

V=${VM_DATA_DEV#/dev/}
check "the virtio disk ($V)" [ -n "$V" ]
fx virtio "$V"
# and on mq-deadline (its iosched/; the kernel loads the module)
echo mq-deadline > /sys/block/$V/queue/scheduler
check_match "$V on mq-deadline" "*\[mq-deadline\]*" "$(cat /sys/block/$V/queue/scheduler)"
fx virtio-mq-deadline "$V"
vm_summary
