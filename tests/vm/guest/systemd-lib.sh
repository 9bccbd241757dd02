# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest helpers of the systemd guest (test-vm-systemd.sh, guest/systemd-*.sh;
# copied to /vm/systemd-lib.sh). busybox sh under systemd as PID 1, Debian's
# tools in PATH; /vm/lib.sh and /vm/daemon-lib.sh are sourced first. Every
# check here reads what systemd (systemctl show, the journal) or the kernel
# (sysfs, /proc) reports, never what blkmqd says about itself.

# State kept from one boot to the next (the image persists).
ST=/var/lib/vmtest
mkdir -p $ST

# What runs here, first in every boot's log: the kernel, systemd (PID 1)
# and the root file system's suite, each checked against what the host
# booted (VM_KVER, VM_SYSTEMD_VERSION, VM_SYSTEMD_SUITE: run-guest.py --env).
SD_VERSION=$(systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
SUITE=$(. /etc/os-release && echo "$VERSION_CODENAME")
echo "# guest: kernel $(uname -r); $(systemctl --version | head -n1); root file system Debian $(cat /etc/debian_version) ($SUITE)"
check_eq "guest kernel (uname -r)" "$VM_KVER" "$(uname -r)"
check_eq "systemd's version as PID 1 (systemctl --version)" "${VM_SYSTEMD_VERSION:-unset}" "$SD_VERSION"
check_eq "root file system's suite (/etc/os-release)" "${VM_SYSTEMD_SUITE:-unset}" "$SUITE"

# The ZNS path's scheduler under the shipped [Device zoned]
# (Scheduler=none mq-deadline): none from 6.10 on (the block layer plugs
# zone writes itself), mq-deadline before.
ZSCHED=mq-deadline
vm_kernel_ge 6 10 && ZSCHED=none

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
# (The namespaces of the controller stk0 are the stacks': systemd-stack-lib.sh.)
disks_boot() {
        R=vda C= Z= P=
        for _d in /sys/block/nvme*; do
                _n=${_d##*/}
                case $(cat $_d/queue/zoned) in
                host-managed) case $_n in *c*) P=$_n ;; *) Z=$_n ;; esac ;;
                none) [ "$(cat $_d/device/serial 2>/dev/null | tr -d ' ')" = stk0 ] || C=$_n ;;
                esac
        done
        echo "# disks: root $R, conventional ${C:-none}, ZNS head ${Z:-none} path ${P:-none}"
}
# dkey DEV: the name a disk's snapshot is kept under, the same in every
# boot: SERIAL-nNSID (-path for a multipath path) for an NVMe namespace,
# else DEV. The kernel names NVMe controllers and namespaces in the order
# their asynchronous probes run: with the stacks' controller stk0 beside
# the two others, the conventional disk was nvme0n1 at one boot and
# nvme2n1 at the next.
dkey() {
        _ks=$(cat /sys/block/$1/device/serial 2>/dev/null | tr -d ' ')
        _ki=$(cat /sys/block/$1/nsid 2>/dev/null)
        if [ -z "$_ks" ] || [ -z "$_ki" ]; then
                echo $1
                return
        fi
        case $1 in
        nvme*c*n*) echo "$_ks-n$_ki-path" ;;
        *) echo "$_ks-n$_ki" ;;
        esac
}
# snap_one DIR DEV: qsnap of DEV into DIR/$(dkey DEV)
snap_one() {
        mkdir -p $1
        qsnap $2 > $1/$(dkey $2)
}
# snap_all DIR: snap_one of every disk present (a bio-based disk too:
# 6.12's NVMe multipath head has no queue/scheduler at all)
snap_all() {
        for _d in /sys/block/*; do
                [ -d $_d/queue ] || continue
                snap_one $1 ${_d##*/}
        done
}
# same_as DIR DEV: DEV's queue attributes now are its snapshot in DIR
# (snap_one; diff on the console if not)
same_as() {
        _kf=$1/$(dkey $2)
        qsnap $2 | cmp -s - $_kf && return 0
        qsnap $2 | diff $_kf - | sed "s/^/# $2 then vs now| /"
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
# record_has DEV ATTR VALUE: blkmqd's record of DEV's originals (the unit's
# RuntimeDirectory=, /run/blkmqd/originals/DEV.json) is there, names DEV,
# and keeps VALUE as the original of ATTR (queue/read_ahead_kb)
record_has() {
        _f=/run/blkmqd/originals/$1.json
        [ -f "$_f" ] && [ -s "$_f" ] || return 1
        tr -d '\n' < "$_f" | grep -q "\"device\": *\"$1\"" || return 1
        # one original per line: they are flat objects
        tr -d '\n' < "$_f" | sed 's/}/}\n/g' | grep "\"attribute\": *\"$2\"" | grep -q "\"value\": *\"$3\""
}
# adopted DEV: blkmqctl show DEV says its originals came from an earlier instance
adopted() { blkmqctl show $1 2>/dev/null | grep -qiE 'adopt|earlier instance|previous instance'; }
# stop_window INV MARK OUT: the stop of blkmqd.service's invocation INV in
# the previous boot's journal, after the entry (SYSLOG_IDENTIFIER=vmtest)
# whose MESSAGE contains MARK: boot 2's last words, after which nothing but
# the poweroff stops blkmqd. Read in the journal's own order (journalctl's
# output of one system journal: its sequence numbers), positions are line
# numbers of that order, 0 for none. OUT gets shell assignments, sourced:
#   mark stopping deactivated stopped shutdown   the MARK entry, then the
#       first "Stopping"/"Deactivated successfully"/"Stopped" of
#       blkmqd.service after it, and the first of shutdown.target after it
#   nstopping   "Stopping" entries of blkmqd.service after MARK
#   nrestore rfirst rlast   MESSAGE_ID=restore entries of INV (journald's
#       _SYSTEMD_INVOCATION_ID, not a field blkmqd writes) after MARK and
#       before "Deactivated successfully": how many, the first, the last.
#       From MARK, not from "Stopping": systemd logs "Stopping" after it
#       sent SIGTERM, and blkmqd's first entries can come before it.
#   nbefore     how many of those came before "Stopping" (shown, not checked)
#   nafter      MESSAGE_ID=restore of INV after "Deactivated successfully"
#   nrefused    MESSAGE_ID=restore-refused of INV after MARK
#   nfailed     systemd's failure words for blkmqd.service from "Stopping"
#               to "Stopped"
#   applied restored   the devices INV changed (MESSAGE_ID=applied, before
#       MARK) and had not seen removed by then ("DEV: removed."), and those
#       it put back in the window
# The entries from MARK on go to OUT.log, one line each.
stop_window() {
        journalctl -b -1 -o json \
                --output-fields=MESSAGE,MESSAGE_ID,UNIT,_SYSTEMD_INVOCATION_ID,BLKMQD_DEVICE,BLKMQD_KNOB,BLKMQD_NEW,SYSLOG_IDENTIFIER \
                _SYSTEMD_INVOCATION_ID="$1" + UNIT=blkmqd.service + UNIT=shutdown.target + SYSLOG_IDENTIFIER=vmtest \
                > /tmp/stopwin.json 2>/dev/null
        awk -v inv="$1" -v mark="$2" -v out="$3" -v logf="$3.log" \
                -v mapplied=$MID_APPLIED -v mrestore=$MID_RESTORE -v mrefused=$MID_RESTORE_REFUSED '
        function f(name,   s) {
                if (!match($0, "\"" name "\" *: *\"")) return ""
                s = substr($0, RSTART + RLENGTH)
                match(s, /^([^"\\]|\\.)*/)
                return substr(s, 1, RLENGTH)
        }
        {
                msg = f("MESSAGE"); unit = f("UNIT"); id = f("MESSAGE_ID"); dev = f("BLKMQD_DEVICE")
                mine = inv != "" && f("_SYSTEMD_INVOCATION_ID") == inv
                if (f("SYSLOG_IDENTIFIER") == "vmtest" && index(msg, mark)) {
                        mark_at = NR; nstopping = stopping_at = deactivated_at = stopped_at = shutdown_at = 0
                        nrestore = rfirst = rlast = nbefore = nafter = nrefused = nfailed = 0
                        split("", rset)
                }
                if (mine && id == mapplied && !mark_at) aset[dev] = 1
                # a device gone before MARK (an LV removed) has nothing to put back
                if (mine && !mark_at && match(msg, /^[^ :]+: removed[.,]/)) { split(msg, p, ":"); delete aset[p[1]] }
                if (!mark_at) next
                print NR ": [" unit "] " (id == "" ? "" : id " " dev " " f("BLKMQD_KNOB") " -> " f("BLKMQD_NEW") " | ") msg > logf
                if (unit == "shutdown.target" && !shutdown_at) shutdown_at = NR
                if (unit == "blkmqd.service" && msg ~ /^Stopping /) { nstopping++; if (!stopping_at) stopping_at = NR }
                if (mine && id == mrestore) {
                        if (deactivated_at) nafter++
                        else { nrestore++; if (!rfirst) rfirst = NR; rlast = NR; rset[dev] = 1; if (!stopping_at) nbefore++ }
                }
                if (mine && id == mrefused) nrefused++
                if (!stopping_at) next
                if (unit == "blkmqd.service" && !stopped_at &&
                    msg ~ /Failed with result|Main process exited, code=|timed out|Killing process|Sent signal SIGKILL/) nfailed++
                if (unit == "blkmqd.service" && msg ~ /Deactivated successfully/ && !deactivated_at) deactivated_at = NR
                if (unit == "blkmqd.service" && msg ~ /^Stopped / && !stopped_at) stopped_at = NR
        }
        END {
                printf "mark=%d stopping=%d deactivated=%d stopped=%d shutdown=%d nstopping=%d\n",
                        mark_at, stopping_at, deactivated_at, stopped_at, shutdown_at, nstopping > out
                printf "nrestore=%d rfirst=%d rlast=%d nbefore=%d nafter=%d nrefused=%d nfailed=%d\n",
                        nrestore, rfirst, rlast, nbefore, nafter, nrefused, nfailed > out
                a = r = ""
                for (d in aset) a = a " " d
                for (d in rset) r = r " " d
                printf "applied=\"%s\"\nrestored=\"%s\"\n", a, r > out
        }' /tmp/stopwin.json
        . "$3"
        applied=$(echo $(printf '%s\n' $applied | sort))
        restored=$(echo $(printf '%s\n' $restored | sort))
}
# window_has LOG FROM TO TEXT: an entry of stop_window's LOG after position
# FROM and before TO has TEXT
window_has() {
        awk -F: -v a="$2" -v b="$3" -v w="$4" '$1 + 0 > a + 0 && $1 + 0 < b + 0 && index($0, w) { f = 1 } END { exit !f }' "$1"
}
# missing_from "A B C" "B C": the words of the first list the second lacks
missing_from() {
        _m=
        for _w in $1; do
                case " $2 " in *" $_w "*) ;; *) _m="$_m $_w" ;; esac
        done
        echo ${_m# }
}
# remove_and_purge [DEV...]: apt-get remove blkmqd restores (service
# inactive, no process, every queue attribute of the boot disks as at boot 1,
# each DEV, a disk hot-added since, back to none and 128), then apt-get purge
# of blkmqd and libblkmq0 leaves no packaged file, unit, file named blkmqd,
# state, configuration or runtime directory. An empty drop-in directory
# (/etc/blkmqd/blkmqd.conf.d, made by a test as an admin would) is removed
# in between.
remove_and_purge() {
        # dpkg-query, not dpkg: busybox sh runs its own dpkg applet, which
        # has no -L (the list came out empty, and no file was checked)
        dpkg-query -L blkmqd libblkmq0 > /tmp/files.txt
        check "dpkg-query -L: the packages' files listed ($(wc -l < /tmp/files.txt))" [ -s /tmp/files.txt ]
        apt-get remove -y -q blkmqd > /tmp/apt.log 2>&1
        check_eq "apt-get remove blkmqd" 0 $?
        tail -n 4 /tmp/apt.log | sed 's/^/# apt| /'
        check_eq "removed: blkmqd.service inactive" inactive "$(prop blkmqd.service ActiveState)"
        check "no blkmqd process" no_blkmqd
        for _d in $R $C $P $Z; do
                check "$_d: every queue attribute as at boot 1" same_as $ST/boot1 $_d
        done
        for _d in "$@"; do
                check_eq "$_d back to its defaults" "none 128" "$(sched $_d) $(qattr $_d read_ahead_kb)"
        done
        rmdir /etc/blkmqd/blkmqd.conf.d 2>/dev/null
        apt-get purge -y -q blkmqd libblkmq0 > /tmp/apt.log 2>&1
        check_eq "apt-get purge blkmqd libblkmq0" 0 $?
        systemctl daemon-reload
        check_eq "dpkg knows neither" "" "$(dpkg-query -W -f='${db:Status-Status} ' blkmqd libblkmq0 2>/dev/null | tr -d ' ' | sed 's/not-installed//g')"
        _left=
        # (directories are listed too, /lib among them: a symlink to usr/lib
        # on merged /usr, which stays)
        while read -r _f; do
                [ -d "$_f" ] && continue
                [ -f "$_f" ] || [ -L "$_f" ] && _left="$_left $_f"
        done < /tmp/files.txt
        check_eq "no packaged file left" "" "$_left"
        check_eq "no unit left (systemctl list-unit-files)" 0 "$(systemctl list-unit-files --no-legend 'blkmqd*' | wc -l)"
        check_eq "no file named blkmqd left" "" "$(find / -xdev -name '*blkmqd*' -not -path '/vm/*' -not -path '/root/debs/*' -not -path '/var/lib/vmtest/*' 2>/dev/null | tr '\n' ' ')"
        check_eq "no state, config or runtime directory" "" "$(ls -d /var/lib/blkmqd /etc/blkmqd /run/blkmqd 2>/dev/null)"
}
