#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# rootfs.sh CACHE [SUITE] DEB...: makes CACHE/rootfs-systemd-SUITE.tar, a
# Debian root file system of SUITE (bookworm, the default: systemd 252;
# trixie: systemd 257) that boots with systemd as PID 1
# (tests/vm/test-vm-systemd.sh), unless it is there already for the same
# package list. Prints its path. Each suite's is built once and kept.
#
# Built from SUITE's debootstrap tarball (tools/chroot-lib.sh,
# CACHE/SUITE-minbase.tar, made first if missing; bookworm's is the package
# test's) plus systemd, systemd-sysv, udev, kmod, nvme-cli, zbd-utils,
# lvm2, mdadm, cryptsetup-bin, multipath-tools and every dependency the
# given .debs declare (SUITE's own build, or on trixie bookworm's, whose
# libssl3 and libnvme1 trixie's t64 packages provide), so that
# `apt-get install ./blkmqd_*.deb` works in the guest with no network. The
# list is kept in CACHE/rootfs-systemd-SUITE.list: a .deb that depends on
# something new makes the next run build it again.
# Set up for the tests: a persistent journal, a fixed machine id, the user
# `tester` (uid 1000), no getty, no logind, no apt/fstrim/e2scrub timers
# (nothing runs that the checks did not start), none of the boot-time units
# of lvm2, mdadm and multipath-tools (a test that wants multipathd or
# dmeventd unmasks and starts it), no fstab entry to wait for. ~60 s with a
# warm apt cache.
# Needs root and, the first time, Debian's mirror.
set -euo pipefail

src=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
. "$src/tools/chroot-lib.sh"
cache=$1
shift
suite=bookworm
case ${1:-} in
bookworm | trixie) suite=$1; shift ;;
esac
name=rootfs-systemd-$suite
tar=$cache/$name.tar

# lvm2, mdadm, cryptsetup-bin and multipath-tools: the stacked devices
# (device mapper, md, dm-crypt, dm-multipath) the guest tests build on the
# NVMe namespaces; their boot-time units are masked below.
base="systemd systemd-sysv udev kmod nvme-cli zbd-utils util-linux procps
      lvm2 mdadm cryptsetup-bin multipath-tools"
deps=$(for d in "$@"; do dpkg-deb -f "$d" Depends; done | tr ',' '\n' |
        sed -e 's/([^)]*)//g' -e 's/|.*//' -e 's/[[:space:]]//g' | grep -v '^$' |
        grep -vxE 'blkmqd|libblkmq0|libblkmq-dev' || true)
list=$(printf '%s\n' $base $deps | sort -u | tr '\n' ' ')
# The stamp: the list and the setup below (bump setup-N when that changes).
stamp="setup-4 $list"

# Each suite's .debs in an apt cache of their own: the two suites' builds
# may run at once, and apt locks its cache directory.
archives=$cache/apt-archives-$suite
[ $suite = bookworm ] && archives=$cache/apt-archives
mkdir -p "$archives/partial"
exec 9>"$cache/$name.lock"
flock 9
# The one of before the suites (rootfs-systemd.tar): bookworm's, now named.
rm -f "$cache/rootfs-systemd.tar" "$cache/rootfs-systemd.list" "$cache/rootfs-systemd.log"
if [ -s "$tar" ] && [ "$(cat "$cache/$name.list" 2>/dev/null)" = "$stamp" ]; then
        echo "$tar"
        exit 0
fi

dir=$cache/$name.tmpdir
cleanup() {
        chroot_umount_all
        rm -rf --one-file-system "$dir"
}
trap cleanup EXIT
t=$(date +%s)
echo "rootfs: building $tar: $list" >&2
chroot_from_tarball "$cache/$suite-minbase.tar" "$dir" $suite minbase >&2
grep -qx "VERSION_CODENAME=$suite" "$dir/etc/os-release" || {
        echo "rootfs: $cache/$suite-minbase.tar is not $suite: $(grep CODENAME "$dir/etc/os-release")" >&2
        exit 1
}
chroot_mount "$dir" "$archives:/var/cache/apt/archives"
chroot_run "$dir" "apt-get install -y -q --no-install-recommends $list" > "$cache/$name.log" 2>&1 || {
        tail -n 20 "$cache/$name.log" >&2
        echo "rootfs: apt-get install failed (log: $cache/$name.log)" >&2
        exit 1
}
chroot_run "$dir" "
        set -e
        rm -f /etc/machine-id && systemd-machine-id-setup >/dev/null 2>&1
        mkdir -p /var/log/journal
        echo blkmqd-vm > /etc/hostname
        # No fstab entry for / (the initramfs mounts it read-write): with one,
        # systemd waits ~10 s under TCG for dev-vda.device before going on.
        echo '# / is mounted read-write by run-guest.py --rootfs' > /etc/fstab
        useradd -m -u 1000 -s /bin/sh tester
        for u in serial-getty@ttyS0.service getty@tty1.service console-getty.service \
                 apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer nvmf-autoconnect.service \
                 e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-timesyncd.service \
                 systemd-logind.service \
                 lvm2-monitor.service lvm2-lvmpolld.socket dm-event.socket blk-availability.service \
                 mdmonitor.service mdmonitor-oneshot.timer mdcheck_start.timer mdcheck_continue.timer \
                 multipathd.service multipathd.socket; do
                systemctl mask \$u >/dev/null 2>&1
        done
        apt-get clean
        rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
" >> "$cache/$name.log" 2>&1 || { tail -n 20 "$cache/$name.log" >&2; exit 1; }
chroot_umount_all
rm -f "$dir/etc/resolv.conf"
tar -C "$dir" -cf "$tar.part" . && mv "$tar.part" "$tar"
echo "$stamp" > "$cache/$name.list"
echo "rootfs: built in $(( $(date +%s) - t )) s, $(du -sm "$tar" | cut -f1) MiB" >&2
echo "$tar"
