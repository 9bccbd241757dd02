# SPDX-License-Identifier: LGPL-2.1-or-later
# Fresh Debian bookworm chroots, shared by tools/fresh-chroot-check and the
# package test (tests/package/test-deb-chroot.sh). Source it; needs root.
#
#   chroot_bootstrap DIR            debootstrap --variant=minbase bookworm DIR
#                                   (unless DIR has apt already)
#   chroot_from_tarball TAR DIR     DIR from TAR; TAR made once (debootstrap,
#                                   then apt-get update inside) when missing
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

chroot_bootstrap() { # DIR
        local dir=$1
        [ -x "$dir/usr/bin/apt-get" ] && return 0
        chroot_need_debootstrap || return 1
        rm -rf --one-file-system "$dir"
        mkdir -p "$(dirname "$dir")"
        chroot_say "debootstrap --variant=minbase bookworm $dir"
        if ! debootstrap --variant=minbase bookworm "$dir" "$CHROOT_MIRROR" > "$dir.debootstrap.log" 2>&1; then
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

chroot_from_tarball() { # TAR DIR
        local tar=$1 dir=$2
        if [ ! -s "$tar" ]; then
                local tmp=$tar.tmpdir
                chroot_bootstrap "$tmp" || return 1
                chroot_mount "$tmp"
                chroot_say "apt-get update in the new chroot"
                if ! chroot_run "$tmp" "apt-get update -q" >/dev/null; then
                        chroot_umount_all
                        return 1
                fi
                chroot_umount_all
                tar -C "$tmp" -cf "$tar.part" . && mv "$tar.part" "$tar"
                rm -rf --one-file-system "$tmp" "$tmp.debootstrap.log"
        fi
        rm -rf --one-file-system "$dir"
        mkdir -p "$dir"
        tar -C "$dir" -xf "$tar"
}
