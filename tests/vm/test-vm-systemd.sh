#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# vm-systemd: the Debian package's whole life on a Debian guest booted with
# systemd as PID 1 (QEMU TCG, --subsys --conventional: a conventional and a
# ZNS NVMe namespace, QMP hotplug). The suite: VM_SYSTEMD_SUITE, trixie
# (systemd 257) where VM_KERNEL_SET is trixie or backports, else bookworm
# (systemd 252, the 6.1 cloud kernel); its own root file system and its own
# build of the packages. Meson runs the whole life on trixie (vm-systemd:
# trixie's 6.12 kernel) and the brief boot on bookworm (vm-systemd@bookworm).
# One disk image, four boots of it:
#   boot 1, guest/systemd-install.sh: apt-get install of this tree's .debs
#          (no network); nothing enabled or started, no queue attribute
#          changed.
#   boot "stop", guest/systemd-stop.sh: the README's quick start blocks
#          marked "<!-- quickstart-systemd: enable -->" and "off", taken
#          from README.md here; after `systemctl stop blkmqd.service`
#          nothing listens, and blkmqctl status (root, a user), bash's
#          completion and a profile timer's service start nothing and
#          change no attribute; with the socket started by hand, the
#          completion still starts nothing; a start tunes and listens
#          again, kill -9 restarts the service and its socket; the off
#          switch leaves nothing listening or timed. Ends disabled, every
#          attribute restored.
#   boot 2, guest/systemd-running.sh: the same attributes after the reboot;
#          enable --now (ActiveState, StatusText, sysfs, start job -> READY,
#          the journal's fields); SCHED_RR only on the event loop;
#          systemd-analyze security; a sealed zone; reload (a broken drop-in
#          refused, file:line in the journal); watchdog (SIGSTOP) and
#          SIGKILL restarts keep the originals and the zone records; a disk
#          re-attached while down gets its own originals; socket activation
#          as an unprivileged user, mutating calls refused; hotplug while
#          running; an upgrade to a higher version; then stacks made
#          with lvm2 and mdadm under udev (guest/systemd-stack-lib.sh): an
#          LV striped over two namespaces of stk0, an md RAID1 over the
#          other two, a drop-in's MatchVolume= and MatchMDLevel= sections
#          by reload (sysfs on the LV and on every member, blkmqctl
#          explain), the LV deactivated and the array stopped give back
#          every member's own values, the LV active again; the drop-in
#          and the VG removed (boot 3 starts as before); left running.
#   boot 3, guest/systemd-reboot.sh: boot 2's poweroff in the journal (the
#          instance left running, after boot 2's last entry: its restore
#          entries, for every device it changed, before "Deactivated
#          successfully"); boot -> READY;
#          hotplug stopped-but-enabled (the udev rule starts it) and disabled
#          (nothing starts); apt-get remove restores, purge leaves nothing.
# Or one boot alone, "brief" (guest/systemd-brief.sh): boot 1's install and
#          checks, then enable --now, a hotplug while running, kill -9 and
#          the restart with the originals adopted, remove and purge.
# Every boot checks and prints first its kernel (uname -r), systemd's
# version (252 on bookworm, 257 on trixie) and the root file system's suite.
# The packages: tools/deb-build.sh, SUITE's build (VM_SYSTEMD_DEB_SUITE
# another's: bookworm's installs on trixie amd64 through the t64 packages'
# Provides:), once per tree content in BUILD_ROOT/deb/debs-SUITE; the
# upgrade is the same blkmqd .deb repacked with dpkg-deb at version
# VERSION+vmtest1. The root file system: rootfs.sh, SUITE's, built once
# beside the debootstrap tarballs ($DEB_CHROOT_CACHE, default
# tests/package/cache).
# Usage: test-vm-systemd.sh   (root; exit 0 pass, 1 fail, 77 skip; 1 when CI=true)
#        VM_SYSTEMD_BOOTS="install stop" runs those boots only (in this
#        order; default: install stop running reboot; or brief)
set -uo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"
SRC=$(cd "$VM_DIR/../.." && pwd)
. "$SRC/tools/deb-build.sh"

t0=$(date +%s.%N)
[ "$(id -u)" = 0 ] || vm_skip "vm: vm-systemd needs root (debootstrap and chroot for the build, mkfs.ext4 -d of a root file system)"
# the packages are built inside a build chroot of the suite
# (tools/deb-build.sh): the host needs no debhelper or lintian, only
# dpkg-parsechangelog for the version
for t in dpkg-parsechangelog:dpkg-dev debootstrap:debootstrap git:git mkfs.ext4:e2fsprogs; do
        command -v "${t%%:*}" >/dev/null || vm_skip "vm: ${t%%:*} missing (apt-get install ${t#*:}; tools/install-deps has it)"
done
case ${VM_KERNEL_SET:-bookworm} in
trixie | backports) suite=${VM_SYSTEMD_SUITE:-trixie} ;;
*) suite=${VM_SYSTEMD_SUITE:-bookworm} ;;
esac
# systemd's major version in each suite's root file system (the guest checks it)
case $suite in
bookworm) sd_version=252 ;;
trixie) sd_version=257 ;;
*) echo "FAIL: VM_SYSTEMD_SUITE=$suite: not bookworm or trixie"; exit 1 ;;
esac
deb_suite=${VM_SYSTEMD_DEB_SUITE:-$suite}
echo "=== vm-systemd: root file system $suite (systemd $sd_version), packages built for $deb_suite, kernel set ${VM_KERNEL_SET:-bookworm}"
vm_prepare

out=${DEB_BUILD_DIR:-${MESON_BUILD_ROOT:-$SRC/build}/deb}
mkdir -p "$out"
deb_build "$SRC" "$out" "$deb_suite" || { echo "FAIL: building the $deb_suite packages"; exit 1; }
echo "=== packages: $DEB_DIR, version $DEB_VERSION"
t1=$(date +%s.%N)

work=$(mktemp -d /tmp/blkmqd-vm-systemd.XXXXXX)
trap 'rm -rf --one-file-system "$work"' EXIT
mkdir -p "$work/debs/upgrade"
cp "$DEB_DIR"/blkmqd_*.deb "$DEB_DIR"/libblkmq0_*.deb "$work/debs/"
# The upgrade: the same files at a higher version (dpkg-deb -R, the
# control file's Version bumped, dpkg-deb -b).
v2=$DEB_VERSION+vmtest1
dpkg-deb -R "$DEB_DIR/blkmqd_${DEB_VERSION}_amd64.deb" "$work/repack"
sed -i "s/^Version: .*/Version: $v2/" "$work/repack/DEBIAN/control"
dpkg-deb -b "$work/repack" "$work/debs/upgrade/blkmqd_${v2}_amd64.deb" >/dev/null ||
        { echo "FAIL: repacking blkmqd at $v2"; exit 1; }
rm -rf "$work/repack"
vm_rootfs_image "$work/root.img" "$work/debs" "$suite" || { echo "FAIL: making the disk image"; exit 1; }
t2=$(date +%s.%N)
echo "$DEB_VERSION" > "$work/deb-version"
echo "$v2" > "$work/deb-version2"

# The README's quick start under systemd, as the README has it: the fenced
# block after each mark (the way test-deb-chroot.sh takes the others).
for b in enable off; do
        awk -v mark="<!-- quickstart-systemd: $b -->" '
                $0 == mark { want = 1; next }
                want && !inside && /^```/ { inside = 1; next }
                inside && /^```/ { exit }
                inside { print }' "$SRC/README.md" > "$work/quickstart-$b.sh"
        [ -s "$work/quickstart-$b.sh" ] ||
                { echo "FAIL: README.md has no block marked <!-- quickstart-systemd: $b -->"; exit 1; }
done

# The stacks (guest/systemd-stack-lib.sh): the dm and md modules kmod loads
# on demand, laid over the guest's modules tree, and a controller of four
# namespaces (serial stk0) behind a root port of its own (the controllers'
# names change from boot to boot: systemd-lib.sh's dkey).
vm_module_tree "$work/kmod" "dm-mod md-mod raid1" || { echo "FAIL: the guest's dm and md modules: $VM_MODULE_ERR"; exit 1; }
stk=(--qemu-arg=-device --qemu-arg="pcie-root-port,id=rp5,bus=pcie.0,chassis=5,slot=5"
     --qemu-arg=-device --qemu-arg="nvme,id=stk,serial=stk0,bus=rp5")
for i in 1 2 3 4; do
        truncate -s 256M "$work/stk$i.img"
        stk+=(--qemu-arg=-drive --qemu-arg="file=$work/stk$i.img,id=stk$i,format=raw,if=none"
              --qemu-arg=-device --qemu-arg="nvme-ns,drive=stk$i,bus=stk,nsid=$i")
done

common=(--rootfs "$work/root.img" --subsys --conventional "${VM_MODULE_ARGS[@]}" "${stk[@]}"
        --hotplug-script "$VM_GUEST/systemd-hotplug.actions"
        --file "$VM_GUEST/daemon-lib.sh:/vm/daemon-lib.sh"
        --file "$VM_GUEST/systemd-lib.sh:/vm/systemd-lib.sh"
        --file "$VM_GUEST/systemd-stack-lib.sh:/vm/systemd-stack-lib.sh"
        --file "$work/deb-version:/vm/deb-version" --file "$work/deb-version2:/vm/deb-version2"
        --file "$work/quickstart-enable.sh:/vm/quickstart-enable.sh"
        --file "$work/quickstart-off.sh:/vm/quickstart-off.sh"
        --env VM_SYSTEMD_SUITE="$suite" --env VM_SYSTEMD_VERSION="$sd_version")
boots=" ${VM_SYSTEMD_BOOTS:-install stop running reboot} "
want() { case $boots in *" $1 "*) ;; *) return 1 ;; esac; }
# Boots 2 and 3 need the installation of boot 1; boot 3 runs after a failed
# boot 2 too (it reads boot 2's poweroff, and its own checks stand alone).
# Boot 3 took 387 s from QEMU's start to its result at load 9 (two cores).
# The stop boot runs between them and leaves blkmqd disabled, stopped,
# every attribute restored, as boot 2 expects.
# brief: boot 1, then enable, hotplug, kill -9 and remove in the same boot.
want brief && vm_boot vm-systemd-brief 900 "${common[@]}" \
        --file "$VM_GUEST/systemd-install.sh:/vm/systemd-install.sh" --script "$VM_GUEST/systemd-brief.sh"
if want install && vm_boot vm-systemd-install 300 "${common[@]}" --script "$VM_GUEST/systemd-install.sh"; then
        want stop && vm_boot vm-systemd-stop 600 "${common[@]}" --script "$VM_GUEST/systemd-stop.sh"
        want running && vm_boot vm-systemd-running 600 "${common[@]}" --script "$VM_GUEST/systemd-running.sh"
        want reboot && vm_boot vm-systemd-reboot 500 "${common[@]}" --script "$VM_GUEST/systemd-reboot.sh"
fi
t3=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" -v d="$t3" 'BEGIN {
        printf "=== timing: packages %.1fs, disk image %.1fs, boots %.1fs, total %.1fs\n", b-a, c-b, d-c, d-a }'
vm_finish vm-systemd
