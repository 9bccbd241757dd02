# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest helpers of the systemd guest (test-vm-systemd.sh, guest/systemd-*.sh;
# copied to /vm/systemd-lib.sh). busybox sh under systemd as PID 1, Debian's
# tools in PATH; /vm/lib.sh and /vm/daemon-lib.sh are sourced first. Every
# check here reads what systemd (systemctl show, the journal) or the kernel
# (sysfs, /proc) reports, never what blkmqd says about itself.

# State kept from one boot to the next (the image persists).
ST=/var/lib/vmtest
mkdir -p $ST

# The journal's MESSAGE_IDs of blkmqd (src/basic/log.h, blkmqd.catalog).
MID_APPLIED=4c924cfe14914bf589305f00f0167f4d
MID_RESTORE=7bbaaee7e01f412da4e43d21077d090d
MID_RESTORE_REFUSED=14f9f4f6fa0f488c9ecc55b9b2cc7f72
MID_TRIAL=bcd174fd7dfb4993a8849ab106c38508
MID_DAMAGED=b2016f31101f4a079677cd1e35952e29
MID_ZONE_FAILED=a34415b27daa4b9e991e091d568ae920
MID_ADOPTED=0854cebe77424a898c8480628de28cc3

# prop UNIT PROPERTY: systemctl show's value
prop() { systemctl show -P "$2" "$1"; }
active_is() { [ "$(prop "$1" ActiveState)" = "$2" ]; }
mainpid() { prop blkmqd.service MainPID; }
# restarted_from PID: blkmqd.service active again under another main PID
restarted_from() { _p=$(mainpid); active_is blkmqd.service active && [ "$_p" != 0 ] && [ "$_p" != "$1" ]; }
# jcount [-b N] MATCH...: journal entries of this boot matching every FIELD=VALUE
jcount() {
        _b=-b
        [ "$1" = -b ] && { _b="-b $2"; shift 2; }
        journalctl $_b -q -o json "$@" 2>/dev/null | grep -c '^{'
}
jhas() { [ "$(jcount "$@")" -gt 0 ]; }
# jshow MATCH...: those entries, short form, on the console
jshow() { journalctl -b -q -o short-monotonic "$@" 2>/dev/null | sed 's/^/# journal| /'; }
# usec_ms A B: (B - A) microseconds in ms, 1 decimal
usec_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }
usec_s() { awk -v a="$1" 'BEGIN { printf "%.2f", a / 1000000 }'; }
# disks_boot: the whole disks present at boot (virtio root, the conventional
# namespace, the ZNS controller's hidden path): C, Z (head), P (path), R.
disks_boot() {
        R=vda C= Z= P=
        for _d in /sys/block/nvme*; do
                _n=${_d##*/}
                case $(cat $_d/queue/zoned) in
                host-managed) case $_n in *c*) P=$_n ;; *) Z=$_n ;; esac ;;
                none) C=$_n ;;
                esac
        done
        echo "# disks: root $R, conventional ${C:-none}, ZNS head ${Z:-none} path ${P:-none}"
}
# snap_all DIR: qsnap of every disk present into DIR/NAME
snap_all() {
        mkdir -p $1
        for _d in /sys/block/*; do
                [ -e $_d/queue/scheduler ] || continue
                qsnap ${_d##*/} > $1/${_d##*/}
        done
}
# same_as DIR DEV: DEV's queue attributes now are DIR/DEV (diff on the console if not)
same_as() {
        qsnap $2 | cmp -s - $1/$2 && return 0
        qsnap $2 | diff $1/$2 - | sed "s/^/# $2 then vs now| /"
        return 1
}
# blkmqd_procs: PIDs of processes running /usr/sbin/blkmqd
blkmqd_procs() {
        for _p in /proc/[0-9]*; do
                [ "$(readlink $_p/exe 2>/dev/null)" = /usr/sbin/blkmqd ] && echo ${_p#/proc/}
        done
}
no_blkmqd() { [ -z "$(blkmqd_procs)" ]; }
# tuned_conv DEV: the shipped [Device nvme] policy, as sysfs shows it
tuned_conv() { [ "$(qstate $1)" = "sched=kyber nr=256 ra=${2:-4096}" ]; }
# by_serial SERIAL: the NVMe namespace (nvmeXnY) whose controller has SERIAL
by_serial() {
        for _d in /sys/block/nvme*n*; do
                case ${_d##*/} in *c*) continue ;; esac
                [ "$(cat $_d/device/serial 2>/dev/null | tr -d ' ')" = "$1" ] && echo ${_d##*/} && return 0
        done
        return 1
}
# hotplug_conv ACTION SERIAL: the host's ACTION, then H = the new disk
hotplug_conv() {
        H=
        check "host: $1" vm_hotplug $1
        vm_wait_for 20 by_serial $2 >/dev/null
        H=$(by_serial $2)
        check "$1: disk with serial $2 appeared (${H:-none})" [ -n "$H" ]
}
# zone_cond DEV LBA: the zone condition blkzone reports for the zone at LBA
zone_cond() { blkzone report -o $2 -c 1 /dev/$1 2>/dev/null | sed -n 's/.*zcond: *[0-9]*(\([a-z]*\)).*/\1/p'; }
# readback DEV LBA SIZE: sha256 of SIZE bytes at LBA (512-byte sectors)
readback() {
        dd if=/dev/$1 bs=512 skip=$2 count=$((($3 + 511) / 512)) iflag=direct 2>/dev/null | head -c $3 |
                sha256sum | cut -d' ' -f1
}
# adopted DEV: blkmqctl show DEV says its originals came from an earlier instance
adopted() { blkmqctl show $1 2>/dev/null | grep -qiE 'adopt|earlier instance|previous instance'; }
