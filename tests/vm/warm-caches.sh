#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# warm-caches.sh BUILD_ROOT: builds ahead what the package and systemd
# guest tests build the first time, so that tools/check's host lane does
# it while the vm lane boots other guests: for bookworm and trixie, the
# .debs of this tree (tools/deb-build.sh, into BUILD_ROOT/deb, as
# deb-chroot and vm-systemd take them) and the systemd root file system
# (rootfs.sh, into tests/package/cache, with those .debs' dependencies).
# Each is built once, under the same locks and keys as the tests use: a
# test that comes first builds it itself, one that comes later finds it.
# Cold, about 500 s in CI (packages 320 s, root file systems 175 s, as
# vm-systemd measured them); warm, a few seconds. Root; Debian's mirror the
# first time. A failure here is reported and left to the tests to show.
set -uo pipefail

src=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
out=${1:?usage: warm-caches.sh BUILD_ROOT}/deb
cache=${DEB_CHROOT_CACHE:-$src/tests/package/cache}
. "$src/tools/deb-build.sh"

[ "$(id -u)" = 0 ] || { echo "warm-caches: not root, nothing done"; exit 0; }
mkdir -p "$out" "$cache"
rc=0
for suite in bookworm trixie; do
        s=$(date +%s)
        if ! deb_build "$src" "$out" "$suite"; then
                echo "warm-caches: the $suite packages failed (the tests that need them will say why)"
                rc=1
                continue
        fi
        "$src/tests/vm/rootfs.sh" "$cache" "$suite" "$DEB_DIR"/blkmqd_*.deb "$DEB_DIR"/libblkmq0_*.deb >/dev/null ||
                { echo "warm-caches: the $suite root file system failed"; rc=1; }
        echo "warm-caches: $suite: packages $DEB_VERSION and its root file system, $(($(date +%s) - s)) s"
done
exit $rc
