# SPDX-License-Identifier: LGPL-2.1-or-later
# Guest helpers shared by the guest scripts that run blkmqd (daemon-*.sh,
# zones-*.sh; copied to /vm/daemon-lib.sh). busybox sh; /vm/lib.sh is
# sourced.

BLKMQD_LOG=/tmp/blkmqd.log
BLKMQD_RC=/tmp/blkmqd.rc
# Explicit -c: the built-in search path follows the build prefix
# (/usr/local/etc by default), the test wants the copy at /etc.
BLKMQD_CONF=/etc/blkmqd/blkmqd.conf
DROPIN=$BLKMQD_CONF.d
DPID=

# sched DEV: the active scheduler ("none" for a bio-based queue).
sched() {
        _s=$(cat /sys/block/$1/queue/scheduler 2>/dev/null)
        case $_s in
        *\[*) _s=${_s#*\[}; echo "${_s%%\]*}" ;;
        *) echo "$_s" ;;
        esac
}
qattr() { cat /sys/block/$1/queue/$2 2>/dev/null; }
# qstate DEV: the three values the tests tune, one line.
qstate() { echo "sched=$(sched $1) nr=$(qattr $1 nr_requests) ra=$(qattr $1 read_ahead_kb)"; }
# qsnap DEV: every readable queue/ attribute (iosched/ included), sorted;
# of queue/scheduler only the active one (the list grows as modules load).
qsnap() {
        grep -r . /sys/block/$1/queue/ 2>/dev/null | sed -e "s|^/sys/block/$1/||" \
                -e 's|^\(queue/scheduler:\).*\[\(.*\)\].*|\1\2|' | sort
}
attr_is() { [ "$(qattr $1 $2)" = "$3" ]; }
sched_is() { [ "$(sched $1)" = "$2" ]; }

# write_limits_agree WHAT JSON DISK: the writeLimits in JSON (blkmqctl
# --json show's device, or zones' device) are what /sys/block/DISK/queue/
# has, each absent ("-") where the kernel has no such attribute (before
# 6.11 none; write streams from 6.16). A check, with both in its line.
write_limits_agree() {
        _wl_want= _wl_got=
        for _wl_a in maxWriteStreams:max_write_streams writeStreamGranularity:write_stream_granularity \
                atomicWriteMaxBytes:atomic_write_max_bytes atomicWriteUnitMinBytes:atomic_write_unit_min_bytes \
                atomicWriteUnitMaxBytes:atomic_write_unit_max_bytes atomicWriteBoundaryBytes:atomic_write_boundary_bytes; do
                _wl_k=${_wl_a%%:*} _wl_f=/sys/block/$3/queue/${_wl_a#*:}
                _wl_v=-
                [ -f $_wl_f ] && _wl_v=$(cat $_wl_f)
                _wl_g=$(printf '%s\n' "$2" | tr ',{}' '\n\n\n' | sed -n "s/.*\"$_wl_k\": *\([0-9]*\).*/\1/p" | head -n1)
                _wl_want="$_wl_want $_wl_k=$_wl_v" _wl_got="$_wl_got $_wl_k=${_wl_g:--}"
        done
        check_eq "$1: writeLimits as /sys/block/$3/queue has them (- absent)" "$_wl_want" "$_wl_got"
}
log_has() { grep -q -- "$1" $BLKMQD_LOG; }
log_count() { grep -c -- "$1" $BLKMQD_LOG; }
log_count_gt() { [ "$(log_count "$1")" -gt "$2" ]; }
# log_show: the daemon's log on the console, for the record.
log_show() { sed 's/^/# blkmqd| /' $BLKMQD_LOG; }

# daemon_start ARGS...: blkmqd in the background, its exit code to $BLKMQD_RC.
daemon_start() {
        rm -f $BLKMQD_RC
        : > $BLKMQD_LOG
        ( blkmqd "$@" >>$BLKMQD_LOG 2>&1; echo $? >$BLKMQD_RC ) &
        vm_wait_for 5 pidof blkmqd >/dev/null
        DPID=$(pidof blkmqd)
}
daemon_alive() { [ ! -e $BLKMQD_RC ] && [ -n "$DPID" ] && kill -0 $DPID 2>/dev/null; }
# daemon_reload: SIGHUP, wait for "Configuration reloaded and applied."
daemon_reload() {
        _n=$(log_count "Configuration reloaded and applied")
        kill -HUP $DPID && vm_wait_for 20 log_count_gt "Configuration reloaded and applied" $_n
}
# daemon_stop: SIGTERM, wait for the exit; prints the exit code (or "hung").
daemon_stop() {
        kill -TERM $DPID 2>/dev/null
        if vm_wait_for 30 test -s $BLKMQD_RC; then cat $BLKMQD_RC; else echo hung; fi
}
# same_snap DEV FILE: qsnap DEV equals FILE
same_snap() { qsnap $1 | cmp -s - $2; }

# zoned_head, zoned_path, path_ctrl, vm_need_zoned: in /vm/lib.sh (every guest).
# nvme_namespaces: C and Z, the conventional and the host-managed NVMe
# namespace of a --zns --conventional guest (by queue/zoned: names follow
# probe order); says which, checks both are there, fails without them.
nvme_namespaces() {
        C= Z=
        for _d in /sys/block/nvme*; do
                case $(cat $_d/queue/zoned) in
                host-managed) Z=${_d##*/} ;;
                none) C=${_d##*/} ;;
                esac
        done
        echo "# ZNS namespace: ${Z:-none}, conventional namespace: ${C:-none}"
        check "a host-managed NVMe namespace" [ -n "$Z" ]
        check "a conventional NVMe namespace" [ -n "$C" ]
        [ -n "$Z" ] && [ -n "$C" ]
}
# mixed_load DEV: vm-autotune's workload on a conventional namespace of
# 256 MiB, in the background (its PIDs in WL; kill $WL ends it): three
# readers of 4 KiB direct reads at scattered offsets of the first 192 MiB
# (16 a dd), one writer of 128 KiB direct writes in the last 64 MiB (8 a
# dd). Offsets step by a prime through the range: no $RANDOM needed.
mixed_load() {
        WL=
        _ml_reader 1 $1 & WL="$WL $!"
        _ml_reader 20000 $1 & WL="$WL $!"
        _ml_reader 40000 $1 & WL="$WL $!"
        _ml_writer $1 & WL="$WL $!"
}
_ml_reader() {
        _i=$1
        while :; do
                _i=$(( (_i + 7919) % 49000 ))
                dd if=/dev/$2 of=/dev/null bs=4k count=16 skip=$_i iflag=direct 2>/dev/null
        done
}
_ml_writer() {
        _i=0
        while :; do
                _i=$(( (_i + 97) % 500 ))
                dd if=/dev/zero of=/dev/$1 bs=128k count=8 seek=$((1536 + _i)) oflag=direct conv=notrunc 2>/dev/null
        done
}
# gone DEV: its /sys/block entry is gone.
gone() { ! test -e /sys/block/$1; }
# fld FILE NAME: the value of "NAME: value" in blkmqctl's field output.
fld() { sed -n "s/^ *$2: //p" "$1" | head -n1; }

# zones_conf FILE DATABASE [DEVICE LINES [ZONES LINES]]: a config at FILE that
# gives every host-managed disk to the zone allocator, its records in
# DATABASE; the optional lines (newline-separated) go into [Device zns] and
# [Zones].
zones_conf() {
        printf '[Device zns]\nMatchZoned=host-managed\nZoneAllocator=yes\n%s\n\n[Zones]\nDatabase=%s\n%s\n' \
                "${3:-}" "$2" "${4:-}" > $1
}
# zone_listed [DEV]: blkmqctl zones lists DEV (default $Z) for leases. One
# call at most 10 s (blkmqctl waits up to 120 s for a reply): a vm_wait_for
# of it ends near its own limit even when blkmqd does not answer.
zone_listed() { timeout 10 blkmqctl --no-legend zones 2>/dev/null | grep -q "^${1:-$Z} "; }

# replug_zoned: the host's [replug] (device_add of the ZNS controller under
# another id on another root port), then the zoned head back; sets H2, P2,
# C2, A2 and checks that A2 is another PCI function than A1 (the caller's,
# from before the unplug: C1=$(path_ctrl $P); A1=.../nvme/$C1/address).
replug_zoned() {
        check "host: device_add under nvmeB on rp2" vm_hotplug replug
        check "zoned head back" vm_wait_for 20 have_zoned_head
        H2=$(zoned_head); P2=$(zoned_path)
        C2=$(path_ctrl $P2)
        A2=$(cat /sys/class/nvme/$C2/address 2>/dev/null)
        echo "# after replug: head ${H2:-none}, path ${P2:-none}, controller $C1 at $A1 -> $C2 at $A2"
        check "replugged behind another PCI function" [ -n "$A2" -a "$A1" != "$A2" ]
}
