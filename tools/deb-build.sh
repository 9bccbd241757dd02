#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Builds this tree's Debian packages (debian/) for one Debian suite, in a
# build chroot of that suite, once per tree content; shared by the package
# test (tests/package/test-deb-chroot.sh) and the systemd guest
# (tests/vm/test-vm-systemd.sh). Source it; needs root, debootstrap and git
# (tools/chroot-lib.sh is sourced from beside this file).
#
#   deb_build SRC OUT [SUITE]
#       SUITE: bookworm (the default) or trixie. Every file git knows in SRC
#       (tracked or new, not ignored) that exists, but those of
#       tests/package, is hashed; unless
#       OUT/debs-SUITE holds the packages of that hash already, they are
#       built there: the tree is copied into a fresh build chroot of SUITE,
#       its debian/changelog (the copy's only) gets an entry of its own for
#       SUITE, VERSION~deb12u1 for bookworm and VERSION~deb13u1 for trixie
#       (as backports do: bookworm's sorts lower, so an upgrade to trixie
#       upgrades the packages), and dpkg-buildpackage -us -uc -b runs
#       (DEB_BUILD_OPTIONS=nocheck: CI runs the unit suite in its own
#       passes). Then SUITE's own lintian (--pedantic --display-experimental
#       --info) checks them in the same chroot: its output is
#       OUT/debs-SUITE/lintian.log, its exit status lintian.rc, its version
#       lintian.version; the caller judges them. Sets DEB_DIR
#       (OUT/debs-SUITE), DEB_VERSION (SUITE's full version, e.g.
#       0.1.0~deb13u1), DEB_SUITE and DEB_TREE (the hash). Returns 1 with the
#       log's tail on a failure. Holds OUT/.lock-SUITE meanwhile: tests sharing
#       OUT (deb-chroot, vm-systemd) build a suite one after the other.
#
# The build chroot: debootstrap --variant=buildd SUITE, apt-get update,
# lintian and the Build-Depends of debian/control (apt-get build-dep),
# cached as a tarball in DEB_CHROOT_CACHE (default SRC/tests/package/cache)
# named SUITE-build-HASH.tar, HASH that of debian/control: a change of the
# Build-Depends makes a new one. Made the first time (a few minutes, needs
# Debian's mirror, DEBIAN_MIRROR overrides it), unpacked afresh for each
# build.

. "$(dirname "${BASH_SOURCE[0]}")/chroot-lib.sh"

deb_build() { # SRC OUT [SUITE]
        local lock r
        case ${3:-bookworm} in
        bookworm | trixie) ;;
        *) echo "deb-build: suite ${3}: not bookworm or trixie"; return 1 ;;
        esac
        mkdir -p "$2"
        exec {lock}>"$2/.lock-${3:-bookworm}"
        flock "$lock"
        _deb_build_locked "$1" "$2" "${3:-bookworm}"
        r=$?
        exec {lock}>&-
        return $r
}

# The suite's changelog entry, on top of the build copy's debian/changelog.
_deb_changelog_entry() { # DIR SUITE VERSION DATE
        local cl=$1/debian/changelog maint n
        maint=$(dpkg-parsechangelog -l "$cl" -S Maintainer) || return 1
        case $2 in bookworm) n=12 ;; trixie) n=13 ;; esac
        { printf 'blkmqd (%s) %s; urgency=medium\n\n' "$3" "$2"
          printf '  * Built for Debian %s "%s" (tools/deb-build.sh).\n\n' "$n" "$2"
          printf ' -- %s  %s\n\n' "$maint" "$4"
          cat "$cl"; } > "$cl.new" && mv "$cl.new" "$cl"
}

_deb_build_locked() {
        local src=$1 out=$2 suite=$3 files hash t base suffix date
        base=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version) || return 1
        case $suite in bookworm) suffix=deb12u1 ;; trixie) suffix=deb13u1 ;; esac
        DEB_VERSION=$base~$suffix
        DEB_SUITE=$suite
        DEB_DIR=$out/debs-$suite
        files=$(mktemp)
        (cd "$src" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
                [ -f "$f" ] && printf '%s\0' "$f"
        done) > "$files"
        # tests/package/ (the package test) puts nothing into the packages:
        # a change there builds nothing again.
        hash=$(cd "$src" && grep -zv '^tests/package/' < "$files" | xargs -0 sha256sum | sha256sum | cut -c1-16)
        DEB_TREE=$hash
        if [ "$(cat "$DEB_DIR/tree" 2>/dev/null)" = "$hash" ] && ls "$DEB_DIR"/*.changes >/dev/null 2>&1; then
                echo "deb-build: $suite packages of this tree ($hash) already built: $DEB_DIR"
                rm -f "$files"
                return 0
        fi
        t=$(date +%s)
        rm -rf "$DEB_DIR"
        mkdir -p "$DEB_DIR"
        # The entry's date: the last commit's (later than the changelog's
        # own top entry; the same tree builds the same packages).
        date=$(git -C "$src" log -1 --format=%cD 2>/dev/null) || date=$(date -R)
        if ! (_deb_build_in_chroot "$src" "$suite" "$files" "$date"); then
                rm -f "$files"
                echo "deb-build: building the $suite packages failed (log: $DEB_DIR/build.log)"
                return 1
        fi
        rm -f "$files"
        echo "$hash" > "$DEB_DIR/tree"
        echo "deb-build: $suite packages built in $(( $(date +%s) - t )) s: $(cd "$DEB_DIR" && echo *.deb)"
}

# In a subshell (its own EXIT trap): the chroot unpacked, the build, lintian.
_deb_build_in_chroot() { # SRC SUITE FILES DATE; DEB_DIR, DEB_VERSION set
        local src=$1 suite=$2 files=$3 date=$4 cache setup chash tar root b rc
        set -o pipefail
        cache=${DEB_CHROOT_CACHE:-$src/tests/package/cache}
        mkdir -p "$cache"
        chash=$(sha256sum < "$src/debian/control" | cut -c1-12)
        tar=$cache/$suite-build-$chash.tar
        setup="set -e; mkdir -p /tmp/bd/debian
                printf '%s' $(printf %q "$(cat "$src/debian/control")") > /tmp/bd/debian/control
                printf '%s' $(printf %q "$(cat "$src/debian/changelog")") > /tmp/bd/debian/changelog
                apt-get install -y -q --no-install-recommends lintian
                apt-get build-dep -y -q /tmp/bd
                rm -rf /tmp/bd; apt-get clean"
        root=$DEB_DIR/chroot
        # $root expanded now: at the subshell's exit this function's locals
        # are gone, and a caller under set -u would stop at "$root" there.
        trap "chroot_umount_all; rm -rf --one-file-system $(printf %q "$root")" EXIT
        echo "deb-build: $suite build chroot ($tar)"
        chroot_from_tarball "$tar" "$root" "$suite" buildd "$setup" || return 1
        # Tarballs of an older debian/control: not needed any more.
        for b in "$cache/$suite"-build-*.tar; do
                [ "$b" = "$tar" ] || rm -f "$b" "$b.setup.log"
        done
        chroot_mount "$root"
        b=$root/build/blkmqd-$DEB_VERSION
        mkdir -p "$b"
        (cd "$src" && tar -cf - --null -T "$files") | tar -xf - -C "$b" || return 1
        _deb_changelog_entry "$b" "$suite" "$DEB_VERSION" "$date" || return 1
        echo "deb-build: dpkg-buildpackage -us -uc -b in the $suite chroot ($DEB_VERSION)"
        if ! chroot_run "$root" "cd /build/blkmqd-$DEB_VERSION &&
                DEB_BUILD_OPTIONS='nocheck parallel=$(nproc)' dpkg-buildpackage -us -uc -b" > "$DEB_DIR/build.log" 2>&1; then
                tail -n 40 "$DEB_DIR/build.log"
                return 1
        fi
        cp "$root"/build/*.deb "$root"/build/*.changes "$root"/build/*.buildinfo "$DEB_DIR/" || return 1
        rc=0
        chroot_run "$root" "lintian --pedantic --display-experimental --info /build/*.changes" \
                > "$DEB_DIR/lintian.log" 2>&1 || rc=$?
        echo "$rc" > "$DEB_DIR/lintian.rc"
        chroot_run "$root" "dpkg-query -W -f='\${Version}\n' lintian" > "$DEB_DIR/lintian.version"
}

# Run as a program: tools/deb-build.sh [SUITE [OUT]] builds SUITE's
# packages (bookworm by default) into OUT/debs-SUITE (OUT: build/deb).
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
        set -uo pipefail
        case ${1:-} in -h | --help) sed -n '3,/^$/p' "$0"; exit 0 ;; esac
        [ "$(id -u)" = 0 ] || { echo "deb-build: needs root (debootstrap, chroot): sudo $0 $*" >&2; exit 1; }
        top=$(cd "$(dirname "$0")/.." && pwd)
        deb_build "$top" "${2:-$top/build/deb}" "${1:-bookworm}" || exit 1
        echo "deb-build: $DEB_DIR: $DEB_VERSION for $DEB_SUITE"
fi
