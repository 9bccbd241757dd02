# SPDX-License-Identifier: LGPL-2.1-or-later
# Builds this tree's Debian packages (debian/) once per tree content; shared
# by the package test (tests/package/test-deb-chroot.sh) and the systemd
# guest (tests/vm/test-vm-systemd.sh). Source it; needs dpkg-buildpackage,
# debhelper and git.
#
#   deb_build SRC OUT     every file git knows in SRC (tracked or new, not
#                         ignored) that exists is hashed; unless OUT/debs
#                         holds the packages of that hash already, they are
#                         built there with dpkg-buildpackage -us -uc -b
#                         (DEB_BUILD_OPTIONS=nocheck: CI runs the unit suite
#                         in its own passes). Sets DEB_DIR (OUT/debs),
#                         DEB_VERSION (debian/changelog) and DEB_TREE (the
#                         hash). Returns 1 with the log's tail on a failure.
#                         Holds OUT/.lock meanwhile: two tests sharing OUT
#                         (deb-chroot, vm-systemd) build one after the other.

deb_build() { # SRC OUT
        local lock r
        mkdir -p "$2"
        exec {lock}>"$2/.lock"
        flock "$lock"
        _deb_build_locked "$@"
        r=$?
        exec {lock}>&-
        return $r
}

_deb_build_locked() {
        local src=$1 out=$2 files hash t
        DEB_VERSION=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version) || return 1
        DEB_DIR=$out/debs
        files=$(mktemp)
        (cd "$src" && git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do
                [ -f "$f" ] && printf '%s\0' "$f"
        done) > "$files"
        hash=$(cd "$src" && xargs -0 sha256sum < "$files" | sha256sum | cut -c1-16)
        DEB_TREE=$hash
        if [ "$(cat "$DEB_DIR/tree" 2>/dev/null)" = "$hash" ] && ls "$DEB_DIR"/*.changes >/dev/null 2>&1; then
                echo "deb-build: packages of this tree ($hash) already built: $DEB_DIR"
                rm -f "$files"
                return 0
        fi
        t=$(date +%s)
        rm -rf "$DEB_DIR"
        mkdir -p "$DEB_DIR/blkmqd-$DEB_VERSION"
        (cd "$src" && tar -cf - --null -T "$files") | tar -xf - -C "$DEB_DIR/blkmqd-$DEB_VERSION"
        rm -f "$files"
        echo "deb-build: dpkg-buildpackage -us -uc -b (tree $hash)"
        if ! (cd "$DEB_DIR/blkmqd-$DEB_VERSION" &&
              DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" dpkg-buildpackage -us -uc -b) > "$DEB_DIR/build.log" 2>&1; then
                tail -n 40 "$DEB_DIR/build.log"
                echo "deb-build: dpkg-buildpackage failed (log: $DEB_DIR/build.log)"
                return 1
        fi
        rm -rf "$DEB_DIR/blkmqd-$DEB_VERSION"
        echo "$hash" > "$DEB_DIR/tree"
        echo "deb-build: built in $(( $(date +%s) - t )) s: $(cd "$DEB_DIR" && echo *.deb)"
}
