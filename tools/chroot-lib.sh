# SPDX-License-Identifier: LGPL-2.1-or-later
# Fresh Debian chroots (bookworm unless a SUITE is given: trixie), shared by
# tools/fresh-chroot-check, the package build (tools/deb-build.sh) and the
# package test (tests/package/test-deb-chroot.sh). Source it; needs root.
#
#   chroot_bootstrap DIR [SUITE [VARIANT]]
#                                   debootstrap --variant=VARIANT (minbase)
#                                   SUITE DIR (unless DIR has apt already);
#                                   the host's debootstrap knows trixie
#   chroot_from_tarball TAR DIR [SUITE [VARIANT [SETUP]]]
#                                   DIR from TAR; TAR made once when missing
#                                   (debootstrap, apt-get update inside, then
#                                   the shell command SETUP inside), under
#                                   the lock TAR.lock
#   chroot_mount DIR [EXTRA...]     bind /proc /sys /dev /dev/pts (+ EXTRA,
#                                   "SRC:DST" pairs), resolv.conf; undone by
#                                   chroot_umount_all (callers trap it)
#   chroot_run DIR CMD              bash -c CMD in DIR with a clean environment
#
# DEBIAN_MIRROR overrides http://deb.debian.org/debian.

CHROOT_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CHROOT_MOUNTED=()

chroot_say() { echo "chroot: $*" >&2; }

chroot_need_debootstrap() {
        command -v debootstrap >/dev/null && return 0
        chroot_say "installing debootstrap on this host (for the chroot only)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
}

chroot_bootstrap() { # DIR [SUITE [VARIANT]]
        local dir=$1 suite=${2:-bookworm} variant=${3:-minbase}
        [ -x "$dir/usr/bin/apt-get" ] && return 0
        chroot_need_debootstrap || return 1
        rm -rf --one-file-system "$dir"
        mkdir -p "$(dirname "$dir")"
        chroot_say "debootstrap --variant=$variant $suite $dir"
        if ! debootstrap --variant="$variant" "$suite" "$dir" "$CHROOT_MIRROR" > "$dir.debootstrap.log" 2>&1; then
                tail -n 20 "$dir.debootstrap.log" >&2
                return 1
        fi
}

chroot_mount() { # DIR [SRC:DST...]
        local dir=$1 m
        shift
        for m in proc sys dev dev/pts "$@"; do
                local src=/$m dst=$m
                case $m in *:*) src=${m%%:*}; dst=${m#*:} ;; esac
                mkdir -p "$dir/$dst"
                mount --bind "$src" "$dir/$dst"
                CHROOT_MOUNTED+=("$dir/$dst")
        done
        cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
}

chroot_umount_all() {
        local i
        for ((i = ${#CHROOT_MOUNTED[@]} - 1; i >= 0; i--)); do
                umount -l "${CHROOT_MOUNTED[$i]}" 2>/dev/null || true
        done
        CHROOT_MOUNTED=()
}

chroot_run() { # DIR CMD
        chroot "$1" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
                DEBIAN_FRONTEND=noninteractive bash -c "$2"
}

chroot_from_tarball() { # TAR DIR [SUITE [VARIANT [SETUP]]]
        local tar=$1 dir=$2 suite=${3:-bookworm} variant=${4:-minbase} setup=${5:-} lock r=0
        exec {lock}>"$tar.lock"
        flock "$lock"
        if [ ! -s "$tar" ]; then
                local tmp=$tar.tmpdir
                rm -rf --one-file-system "$tmp"
                chroot_bootstrap "$tmp" "$suite" "$variant" || r=1
                [ $r = 0 ] && chroot_mount "$tmp"
                [ $r = 0 ] && chroot_say "apt-get update in the new $suite chroot"
                [ $r = 0 ] && { chroot_run "$tmp" "apt-get update -q" >/dev/null || r=1; }
                if [ $r = 0 ] && [ -n "$setup" ]; then
                        chroot_say "setting the new $suite chroot up (log: $tar.setup.log)"
                        chroot_run "$tmp" "$setup" > "$tar.setup.log" 2>&1 || { tail -n 20 "$tar.setup.log" >&2; r=1; }
                fi
                chroot_umount_all
                [ $r = 0 ] && { tar -C "$tmp" -cf "$tar.part" . && mv "$tar.part" "$tar" || r=1; }
                rm -rf --one-file-system "$tmp" "$tmp.debootstrap.log"
        fi
        exec {lock}>&-
        [ $r = 0 ] || return 1
        rm -rf --one-file-system "$dir"
        mkdir -p "$dir"
        tar -C "$dir" -xf "$tar"
}
