#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The Debian package of one suite, end to end:
#   test-deb-chroot.sh [SUITE]      SUITE: bookworm (the default) or trixie
# builds blkmqd, libblkmq0 and libblkmq-dev from this tree for SUITE in a
# build chroot of SUITE (tools/deb-build.sh: version VERSION~deb12u1 for
# bookworm, VERSION~deb13u1 for trixie), checks them with SUITE's own
# lintian (--pedantic --display-experimental --info: not one tag, every
# override in debian/*.lintian-overrides with its reason), prints their
# Depends and checks the library names of the suite (trixie's t64 names,
# libssl3t64 and libnvme1t64, on trixie; none on bookworm), installs them
# with apt-get into a fresh `debootstrap --variant=minbase SUITE` chroot,
# and there:
#   - nothing is enabled or started (no unit symlink under /etc/systemd; a
#     recording systemctl sees no start), yet once enabled, an upgrade
#     restarts blkmqd.service and a removal stops it,
#   - the README's quick start runs as written: the commands of each fenced
#     block marked "<!-- quickstart: NAME -->" in README.md (install,
#     dry-run, drop-in, check-config, undo), taken from the README itself
#     and run as root in the chroot (sudo is a no-op there; apt's
#     confirmation is answered yes); blkmqd --dry-run --once plans this
#     machine's disks (sysfs bound in), the drop-in is read and turns the
#     shipped [Device rotational] off. Blocks marked "quickstart-systemd"
#     (enable, show, verify, off) need systemd as PID 1 and are not run
#     here,
#   - blkmqctl and libblkmq0 load, the man pages, the conffile and the bash
#     completion are there,
#   - a purge leaves nothing behind.
#
# Costs, cached so a CI run pays little: the chroot is debootstrapped once
# into a tarball (DEB_CHROOT_CACHE, default tests/package/cache, gitignored,
# outliving build directories like tests/vm/cache: SUITE-minbase.tar) with
# apt's lists and the downloaded dependencies (apt-archives for bookworm,
# apt-archives-SUITE else); each run unpacks a fresh copy. The packages are
# built once per source tree content and suite (DEB_BUILD_DIR, default
# BUILD_ROOT/deb; the build chroot is a tarball in the same cache), without
# the unit suite (DEB_BUILD_OPTIONS=nocheck: CI runs it in its own passes).
#
# Needs root, dpkg-dev, debootstrap and git (all in tools/install-deps;
# debhelper, the Build-Depends and lintian are the build chroot's) and, the
# first time, Debian's mirror. Skips (77) without them; under CI=true a
# skip fails.
set -euo pipefail

src=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
. "$src/tools/chroot-lib.sh"
. "$src/tools/deb-build.sh"
suite=${1:-bookworm}
case $suite in
bookworm) name=deb-chroot; archives=apt-archives; t64=no ;;
trixie) name=deb-chroot@trixie; archives=apt-archives-trixie; t64=yes ;;
*) echo "usage: $0 [bookworm|trixie]" >&2; exit 2 ;;
esac
skip() { sh "$src/tests/vm/skip.sh" "package: $*"; exit $?; }
say() { echo "$name: $*"; }
fail() { echo "FAIL: $*"; exit 1; }

t0=$(date +%s)
[ "$(id -u)" = 0 ] || skip "needs root (chroot, bind mounts, apt-get in the chroot)"
for t in dpkg-parsechangelog:dpkg-dev debootstrap:debootstrap git:git; do
        command -v "${t%%:*}" >/dev/null || skip "${t%%:*} missing (apt-get install ${t#*:}; tools/install-deps has it)"
done

git -C "$src" rev-parse --git-dir >/dev/null 2>&1 ||
        fail "$src is not a git checkout: the package is built from the files git knows"

cache=${DEB_CHROOT_CACHE:-$src/tests/package/cache}
out=${DEB_BUILD_DIR:-${MESON_BUILD_ROOT:-$src/build}/deb}
root=$out/chroot-$suite
log=$out/log-$suite
mkdir -p "$cache/$archives/partial" "$out" "$log"
exec 9>"$cache/.lock"
flock 9

cleanup() {
        chroot_umount_all
        rm -rf --one-file-system "$root"
}
trap cleanup EXIT

# 1. Build, once per tree content and suite (tools/deb-build.sh), in a
#    build chroot of the suite; its lintian ran there too.
t=$(date +%s)
cl=$(sha256sum < "$src/debian/changelog")
deb_build "$src" "$out" "$suite" || fail "building the $suite packages failed"
debs=$DEB_DIR
version=$DEB_VERSION
cd "$src"
say "packages $version for $suite in $debs ($(( $(date +%s) - t )) s)"
base=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
case $suite in bookworm) want=$base~deb12u1 ;; trixie) want=$base~deb13u1 ;; esac
[ "$version" = "$want" ] || fail "the $suite packages are version $version, not $want"
dpkg --compare-versions "$base~deb12u1" lt "$base~deb13u1" ||
        fail "bookworm's version does not sort below trixie's: an upgrade to trixie would not upgrade the packages"
dist=$(sed -n 's/^Distribution: //p' "$debs"/*.changes)
[ "$dist" = "$suite" ] || fail "the .changes says Distribution: $dist, not $suite"
[ "$(sha256sum < "$src/debian/changelog")" = "$cl" ] ||
        fail "building changed the tree's debian/changelog: the suite's entry belongs to the build's copy only"
dpkg-parsechangelog -l "$src/debian/changelog" -S Version | grep -q '~deb1[0-9]u' &&
        fail "the tree's debian/changelog has a suite's version on top: it is one source for both suites"

# 2. lintian, the suite's own: not one tag (errors, warnings, info,
#    pedantic, experimental); an override in debian/ says why.
cat "$debs/lintian.log"
if [ "$(cat "$debs/lintian.rc")" != 0 ] || grep -qE '^[EWIPX]:' "$debs/lintian.log"; then
        fail "lintian $(cat "$debs/lintian.version") of $suite (--pedantic): tags above (exit $(cat "$debs/lintian.rc"))"
fi
say "lintian $(cat "$debs/lintian.version") of $suite --pedantic --display-experimental --info: clean (overrides in debian/*.lintian-overrides)"

# The runtime Depends as ${shlibs:Depends} made them in the suite: trixie
# renamed libssl3 and libnvme1 (64-bit time_t: libssl3t64, libnvme1t64).
for p in blkmqd libblkmq0; do
        say "Depends of $p: $(dpkg-deb -f "$debs/${p}_${version}_"*.deb Depends)"
done
deps=$(dpkg-deb -f "$debs/blkmqd_${version}_"*.deb Depends | tr ',' '\n' | sed -e 's/([^)]*)//g' -e 's/|.*//' -e 's/[[:space:]]//g')
if [ $t64 = yes ]; then
        for l in libssl3t64 libnvme1t64; do
                grep -qx "$l" <<< "$deps" || fail "the $suite build of blkmqd does not depend on $l (built outside $suite?)"
        done
        grep -xE 'libssl3|libnvme1' <<< "$deps" && fail "the $suite build of blkmqd depends on the pre-t64 names above"
else
        grep -E 't64$' <<< "$deps" && fail "the $suite build of blkmqd depends on t64 names (above): trixie's, not $suite's"
        grep -qx libssl3 <<< "$deps" || fail "the $suite build of blkmqd does not depend on libssl3"
fi

# 3. A fresh chroot, the packages installed with apt-get (dependencies from
#    their Depends only).
t=$(date +%s)
if ! chroot_from_tarball "$cache/$suite-minbase.tar" "$root" "$suite"; then
        rm -f "$cache/$suite-minbase.tar"
        skip "no $suite chroot (debootstrap or Debian's mirror failed, see above)"
fi
extra=("$cache/$archives:/var/cache/apt/archives")
[ -d /run/udev/data ] && extra+=("/run/udev:/run/udev")
chroot_mount "$root" "${extra[@]}"
mkdir -p "$root/tmp/debs"
cp "$debs"/*.deb "$root/tmp/debs/"
say "fresh $suite chroot ($(cat "$root/etc/debian_version")) in $(( $(date +%s) - t )) s"
chroot_run "$root" "command -v deb-systemd-helper >/dev/null && command -v deb-systemd-invoke >/dev/null" ||
        fail "the chroot has no deb-systemd-helper/-invoke: the not-enabled checks would prove nothing"

# A recording systemctl, so that the maintainer scripts take their
# "systemd is running" paths (/run/systemd/system exists) and every call is
# seen: is-enabled answers from the unit symlinks under /etc/systemd/system
# as systemctl would, is-active says inactive, start/restart/stop are logged.
mkdir -p "$root/run/systemd/system"
cat > "$root/usr/bin/systemctl" <<'SH'
#!/bin/sh
echo "systemctl $*" >> /var/log/systemctl.calls
unit=
for a in "$@"; do case $a in *.service|*.socket|*.timer) unit=$a ;; esac; done
case " $* " in
*" is-enabled "*)
        if ls /etc/systemd/system/*.wants/"$unit" >/dev/null 2>&1; then echo enabled; exit 0; fi
        echo disabled; exit 1 ;;
*" is-active "*) exit 3 ;;
esac
exit 0
SH
chmod 755 "$root/usr/bin/systemctl"

# The README's quick start, block by block, as the README says it: each
# block marked "<!-- quickstart: NAME -->" is the fenced block after the
# mark. A README without one of them fails: the test would check nothing.
quickstart_block() { # NAME
        awk -v mark="<!-- quickstart: $1 -->" '
                $0 == mark { want = 1; next }
                want && !inside && /^```/ { inside = 1; next }
                inside && /^```/ { exit }
                inside { print }' "$src/README.md"
}
for b in install dry-run drop-in check-config undo; do
        [ -n "$(quickstart_block "$b")" ] ||
                fail "README.md has no block marked <!-- quickstart: $b --> (the quick start this test runs)"
done
# Run as root in the chroot (no sudo there: a function that runs its
# arguments), from the directory that holds the packages, as the reader
# runs it from dpkg-buildpackage's output directory.
quickstart_run() { # NAME OUTFILE
        quickstart_block "$1" > "$root/tmp/quickstart-$1.sh"
        echo "$name: quick start, $1:" >&2
        sed 's/^/    /' "$root/tmp/quickstart-$1.sh" >&2
        chroot_run "$root" "sudo() { \"\$@\"; }; cd /tmp/debs && set -eo pipefail && . /tmp/quickstart-$1.sh" > "$2" 2>&1
}
# apt-get asks before it installs the dependencies: the reader says yes.
echo 'APT::Get::Assume-Yes "true";' > "$root/etc/apt/apt.conf.d/90quickstart-yes"

t=$(date +%s)
if ! quickstart_run install "$log/apt.log"; then
        tail -n 30 "$log/apt.log"
        fail "the quick start's install failed in the chroot"
fi
rm -f "$root/etc/apt/apt.conf.d/90quickstart-yes"
chroot_run "$root" "dpkg-query -W -f='\${Status}\n' blkmqd libblkmq0" | grep -c "install ok installed" | grep -qx 2 ||
        fail "the quick start's install left blkmqd or libblkmq0 not installed"
if ! chroot_run "$root" "apt-get install -y -q --no-install-recommends \
        /tmp/debs/libblkmq-dev_${version}_*.deb" >> "$log/apt.log" 2>&1; then
        tail -n 30 "$log/apt.log"
        fail "apt-get install of libblkmq-dev failed in the chroot"
fi
say "installed in $(( $(date +%s) - t )) s (the quick start's install, then libblkmq-dev)"

# 4. Installed, nothing enabled or started: the postinst asked whether
#    blkmqd.service is enabled (its start path ran) and started nothing.
enabled=$(chroot_run "$root" "find /etc/systemd /run/systemd -name 'blkmqd*' 2>/dev/null" || true)
[ -z "$enabled" ] || fail "installing enabled units: $enabled"
calls=$root/var/log/systemctl.calls
grep -q "is-enabled -- blkmqd.service" "$calls" ||
        fail "the postinst never asked systemctl about blkmqd.service: the check below would prove nothing"
if grep -E " (start|restart|try-restart|enable|reload-or-restart) .*blkmqd" "$calls"; then
        fail "installing started or enabled a blkmqd unit (above)"
fi
cp "$calls" "$log/systemctl-install.calls"
say "installation: $(grep -c blkmqd "$calls") systemctl calls about blkmqd units, none starting one"
for f in /usr/sbin/blkmqd /usr/bin/blkmqctl /etc/blkmqd/blkmqd.conf /lib/systemd/system/blkmqd.service \
         /lib/systemd/system/blkmqd.socket /lib/udev/rules.d/60-blkmqd.rules /usr/share/man/man8/blkmqd.8.gz \
         /usr/share/man/man5/blkmqd.conf.5.gz /usr/include/blkmq/varlink.h \
         /usr/share/bash-completion/completions/blkmqctl; do
        [ -e "$root$f" ] || fail "$f is not installed"
done
# Compressed by dh_compress once it is larger than 4 KiB.
[ -e "$root/usr/share/doc/blkmqd/README.Debian" ] || [ -e "$root/usr/share/doc/blkmqd/README.Debian.gz" ] ||
        fail "/usr/share/doc/blkmqd/README.Debian(.gz) is not installed"
chroot_run "$root" "bash -c '. /usr/share/bash-completion/completions/blkmqctl && complete -p blkmqctl'" |
        grep -qx "complete -F _blkmqctl blkmqctl" || fail "the bash completion does not register _blkmqctl"
chroot_run "$root" "dpkg-query -W -f='\${Conffiles}\n' blkmqd | grep -q /etc/blkmqd/blkmqd.conf" ||
        fail "/etc/blkmqd/blkmqd.conf is not a conffile"
for p in /proc/[0-9]*; do
        [ "$(readlink "$p/exe" 2>/dev/null)" = "$root/usr/sbin/blkmqd" ] &&
                fail "blkmqd runs (pid ${p#/proc/}) after the installation"
done

# 5. The daemon and the client run from the packages.
chroot_run "$root" "blkmqd --version" | tee "$log/version.txt"
grep -q "$base" "$log/version.txt" || fail "blkmqd --version does not say $base"
chroot_run "$root" "blkmqctl --help" > "$log/help.txt" || fail "blkmqctl --help failed"
say "blkmqctl --help: $(head -n1 "$log/help.txt")"
t=$(date +%s)
rc=0
quickstart_run dry-run "$log/dry-run.txt" || rc=$?
head -n 12 "$log/dry-run.txt"
[ $rc = 0 ] || fail "the quick start's dry run exited $rc in the chroot"
grep -q -- "--dry-run --once" "$root/tmp/quickstart-dry-run.sh" ||
        fail "the quick start's dry-run block runs no blkmqd --dry-run --once"
disks=$(ls /sys/block)
found=
for d in $disks; do
        grep -qw "$d" "$log/dry-run.txt" && { found=$d; break; }
done
[ -n "$found" ] || fail "the dry run names none of this machine's disks ($(echo $disks))"
say "blkmqd --dry-run --once: exit 0, plans $found among others ($(( $(date +%s) - t )) s)"

# The drop-in as the README writes it, checked as the README checks it:
# --check-config reads it, says the configuration is valid, and the shipped
# [Device rotational] it turns off matches no disk.
t=$(date +%s)
quickstart_run drop-in "$log/drop-in.txt" || { cat "$log/drop-in.txt"; fail "the quick start's drop-in block failed"; }
dropin=$(chroot_run "$root" "ls /etc/blkmqd/blkmqd.conf.d/*.conf")
[ -n "$dropin" ] || fail "the quick start's drop-in block wrote no /etc/blkmqd/blkmqd.conf.d/*.conf"
rc=0
quickstart_run check-config "$log/check-config.txt" || rc=$?
head -n 12 "$log/check-config.txt"
[ $rc = 0 ] || fail "the quick start's --check-config exited $rc on its own drop-in"
grep -q "^The configuration is valid: .*$(basename "$dropin")" "$log/check-config.txt" ||
        fail "--check-config does not name the drop-in $dropin as read"
chroot_run "$root" "blkmqd --dry-run --once" > "$log/dry-run-dropin.txt" 2>&1 ||
        fail "blkmqd --dry-run --once failed with the drop-in"
grep -q "\[Device rotational\] .* matches$" "$log/dry-run-dropin.txt" &&
        fail "the drop-in's turned-off [Device rotational] still matches a disk"
grep -q "(Device rotational," "$log/dry-run-dropin.txt" &&
        fail "the drop-in's turned-off [Device rotational] still plans a setting"
quickstart_run undo "$log/undo.txt" || { cat "$log/undo.txt"; fail "the quick start's undo block failed"; }
chroot_run "$root" "ls /etc/blkmqd/blkmqd.conf.d/*.conf" 2>/dev/null && fail "the quick start's undo left a drop-in"
say "quick start: drop-in written, --check-config valid, [Device rotational] off, drop-in removed ($(( $(date +%s) - t )) s)"

# 6. Once the admin enabled it, an upgrade (here: the same package again)
#    restarts blkmqd.service; removing the package stops it.
chroot_run "$root" "mkdir -p /etc/systemd/system/multi-user.target.wants &&
        ln -s /lib/systemd/system/blkmqd.service /etc/systemd/system/multi-user.target.wants/ &&
        : > /var/log/systemctl.calls &&
        dpkg -i /tmp/debs/blkmqd_${version}_*.deb" > "$log/upgrade.log" 2>&1 ||
        { tail -n 20 "$log/upgrade.log"; fail "reinstalling blkmqd failed"; }
grep -qE " restart .*blkmqd.service" "$calls" ||
        { cat "$calls"; fail "an upgrade did not restart the enabled blkmqd.service"; }
grep -qE " stop .*blkmqd.service" "$calls" &&
        { cat "$calls"; fail "an upgrade stopped blkmqd.service (and would not start it again)"; }
: > "$calls"
chroot_run "$root" "dpkg -r blkmqd" > "$log/remove.log" 2>&1 ||
        { tail -n 20 "$log/remove.log"; fail "removing blkmqd failed"; }
grep -qE " stop .*blkmqd.service" "$calls" || { cat "$calls"; fail "removing the package did not stop blkmqd.service"; }
cp "$calls" "$log/systemctl-remove.calls"
say "enabled: an upgrade restarts blkmqd.service, a removal stops it"

# 7. Purge: nothing left.
chroot_run "$root" "rm -f /etc/systemd/system/multi-user.target.wants/blkmqd.service &&
        apt-get purge -y -q blkmqd libblkmq-dev libblkmq0" > "$log/purge.log" 2>&1 ||
        { tail -n 20 "$log/purge.log"; fail "purge failed"; }
for f in /usr/sbin/blkmqd /etc/blkmqd /lib/udev/rules.d/60-blkmqd.rules /usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libblkmq.so.0; do
        [ -e "$root$f" ] && fail "$f is left after purge"
done

say "PASS in $(( $(date +%s) - t0 )) s"
