#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# prepare.sh [CACHE_DIR] -- fetch what the vm test suite needs, idempotently.
#
#  * installs qemu-system-x86, busybox-static and cpio with apt-get if missing;
#  * downloads the newest Debian 6.1 cloud kernel (linux-image-6.1.*-cloud-
#    amd64-unsigned, found with apt-cache search, never hard-coded) and
#    busybox-static into CACHE_DIR/debs (default: tests/vm/cache, gitignored);
#  * extracts vmlinuz, busybox, and the module subtrees the tests need
#    (kernel/drivers/block, kernel/fs/configfs, kernel/block for kyber/bfq,
#    kernel/drivers/virtio for the --data-disk virtio-blk), decompressing any
#    .ko.xz/.ko.zst so that busybox insmod can load them, and runs depmod on
#    that subset (the .deb ships no modules.dep: its postinst makes one), so
#    that busybox modprobe works in the guest;
#  * writes CACHE_DIR/vm.env (VM_KVER, VM_KERNEL, VM_MODULES, VM_BUSYBOX),
#    which run-guest.py reads.
#
# With everything cached it does nothing (no apt call) and returns at once.
# VM_REFRESH=1 re-checks apt for a newer kernel.
# Cannot get QEMU or the kernel -> exit 77 (exit 1 when CI=true), see skip.sh.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$VM_DIR/lib.sh"

CACHE=${1:-${VM_CACHE:-$VM_DIR/cache}}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
ENVFILE=$CACHE/vm.env

# Module subtrees (relative to lib/modules/KVER/) copied into the guest.
MODULE_SUBTREES="kernel/drivers/block kernel/fs/configfs kernel/block kernel/drivers/virtio"

log() { echo "prepare: $*" >&2; }

have_pkg() {
        [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

cache_ok() {
        [ -z "${VM_REFRESH:-}" ] || return 1
        [ -s "$ENVFILE" ] || return 1
        # shellcheck disable=SC1090
        ( . "$ENVFILE" && [ -s "$VM_KERNEL" ] && [ -x "$VM_BUSYBOX" ] &&
          [ -s "$VM_MODULES/modules.dep" ] ) || return 1
        command -v qemu-system-x86_64 >/dev/null && command -v cpio >/dev/null
}

# Fast path, without the lock: nothing to do.
if cache_ok; then
        exit 0
fi

exec 9>"$CACHE/.lock"
flock 9
cache_ok && exit 0

command -v apt-get >/dev/null || vm_skip "vm: no apt-get on this machine to fetch QEMU and the Debian kernel"

APT_UPDATED=
apt_update() {
        [ -n "$APT_UPDATED" ] && return 0
        APT_UPDATED=1
        log "apt-get update"
        apt-get update -qq >&2 || log "apt-get update failed"
}

# 1. Host packages.
missing=
for p in qemu-system-x86 busybox-static cpio; do
        have_pkg "$p" || missing="$missing $p"
done
if [ -n "$missing" ]; then
        [ "$(id -u)" = 0 ] || vm_skip "vm: packages missing ($missing ) and not root to install them"
        log "apt-get install$missing"
        # shellcheck disable=SC2086
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2; then
                apt_update
                # shellcheck disable=SC2086
                DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2 ||
                        vm_skip "vm: apt-get install$missing failed"
        fi
fi
command -v qemu-system-x86_64 >/dev/null || vm_skip "vm: qemu-system-x86_64 not available"
command -v cpio >/dev/null || vm_skip "vm: cpio not available"

# 2. The kernel package: newest 6.1.x cloud image apt knows about.
pick_kernel() {
        apt-cache search linux-image 2>/dev/null | grep cloud-amd64-unsigned | awk '{print $1}' |
                grep -E '^linux-image-6\.1\.[0-9]+-[0-9]+-cloud-amd64-unsigned$' | sort -V | tail -n1 || true
}
KPKG=$(pick_kernel)
if [ -z "$KPKG" ]; then
        apt_update
        KPKG=$(pick_kernel)
fi
[ -n "$KPKG" ] || vm_skip "vm: apt-cache search finds no linux-image-6.1.*-cloud-amd64-unsigned package"
KVER=${KPKG#linux-image-}
KVER=${KVER%-unsigned}
log "kernel package $KPKG (kernel $KVER)"

DEBS=$CACHE/debs
mkdir -p "$DEBS"

deb_of() { ls -1 "$DEBS"/"$1"_*.deb 2>/dev/null | sort -V | tail -n1 || true; }

download() {
        local pkg=$1
        [ -n "$(deb_of "$pkg")" ] && return 0
        local dl rc=0
        dl=$(mktemp -d /tmp/blkmqd-vm-dl.XXXXXX)
        chown _apt "$dl" 2>/dev/null || true  # apt's sandbox user downloads there
        log "apt-get download $pkg"
        if ! (cd "$dl" && apt-get download -qq "$pkg" >&2); then
                apt_update
                (cd "$dl" && apt-get download -qq "$pkg" >&2) || rc=1
        fi
        [ $rc = 0 ] && mv "$dl"/*.deb "$DEBS"/ 2>/dev/null || rc=1
        rm -rf "$dl"
        [ $rc = 0 ] && [ -n "$(deb_of "$pkg")" ]
}
download "$KPKG" || vm_skip "vm: apt-get download $KPKG failed"
download busybox-static || vm_skip "vm: apt-get download busybox-static failed"

# 3. Extract into a fresh directory, then switch vm.env over atomically.
KDIR=$CACHE/kernel-$KVER
BB=$CACHE/busybox/busybox
if [ ! -s "$KDIR/vmlinuz" ] || [ ! -s "$KDIR/lib/modules/$KVER/modules.dep" ]; then
        tmp=$(mktemp -d "$CACHE/.extract.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        log "extracting $(basename "$(deb_of "$KPKG")")"
        dpkg-deb -x "$(deb_of "$KPKG")" "$tmp/root"
        src=$tmp/root/lib/modules/$KVER
        [ -d "$src" ] || src=$tmp/root/usr/lib/modules/$KVER
        [ -d "$src" ] || vm_skip "vm: $KPKG has no lib/modules/$KVER"
        mkdir -p "$tmp/out/lib/modules/$KVER"
        cp "$tmp/root/boot/vmlinuz-$KVER" "$tmp/out/vmlinuz"
        cp "$tmp/root/boot/config-$KVER" "$tmp/out/config" 2>/dev/null || true
        for sub in $MODULE_SUBTREES; do
                [ -d "$src/$sub" ] || continue
                mkdir -p "$tmp/out/lib/modules/$KVER/$(dirname "$sub")"
                cp -a "$src/$sub" "$tmp/out/lib/modules/$KVER/$sub"
        done
        cp -a "$src"/modules.order "$src"/modules.builtin "$src"/modules.builtin.modinfo \
              "$tmp/out/lib/modules/$KVER/" 2>/dev/null || true
        # Compressed modules -> plain .ko (busybox insmod may lack xz/zstd
        # support; the kernel's in-kernel decompression needs finit_module
        # flags busybox does not pass). Record what we found.
        ncomp=0
        while IFS= read -r -d '' f; do
                ncomp=$((ncomp + 1))
                case $f in
                *.xz) python3 -c 'import lzma,sys; open(sys.argv[2],"wb").write(lzma.open(sys.argv[1]).read())' "$f" "${f%.xz}" ;;
                *.zst) zstd -q -d "$f" -o "${f%.zst}" ;;
                *.gz) gzip -dc "$f" >"${f%.gz}" ;;
                esac
                rm -f "$f"
        done < <(find "$tmp/out/lib/modules" \( -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz' \) -print0)
        echo "$ncomp" >"$tmp/out/compressed-modules"
        sed -i -e 's/\.ko\.\(xz\|zst\|gz\)$/.ko/' "$tmp/out/lib/modules/$KVER/modules.order" 2>/dev/null || true
        command -v depmod >/dev/null || PATH=$PATH:/sbin:/usr/sbin
        command -v depmod >/dev/null || vm_skip "vm: depmod (kmod) not available to index the guest's modules"
        depmod -b "$tmp/out" "$KVER" 2>/dev/null || vm_skip "vm: depmod failed on $KPKG's modules"
        [ -s "$tmp/out/lib/modules/$KVER/modules.dep" ] || vm_skip "vm: $KPKG has no modules.dep"
        rm -rf "$KDIR"
        mv "$tmp/out" "$KDIR"
        rm -rf "$tmp"
        trap - EXIT
fi

if [ ! -x "$BB" ]; then
        tmp=$(mktemp -d "$CACHE/.extract.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        dpkg-deb -x "$(deb_of busybox-static)" "$tmp/root"
        mkdir -p "$CACHE/busybox"
        install -m 755 "$tmp/root/bin/busybox" "$BB.new"
        mv "$BB.new" "$BB"
        rm -rf "$tmp"
        trap - EXIT
fi

cat >"$ENVFILE.new" <<EOF
# written by tests/vm/prepare.sh from $KPKG
VM_KPKG=$KPKG
VM_KVER=$KVER
VM_KERNEL=$KDIR/vmlinuz
VM_MODULES=$KDIR/lib/modules/$KVER
VM_BUSYBOX=$BB
EOF
mv "$ENVFILE.new" "$ENVFILE"
# After a VM_REFRESH that found a newer kernel: drop the old ones.
for d in "$CACHE"/kernel-*; do
        [ "$d" = "$KDIR" ] || rm -rf "$d"
done
for f in "$DEBS"/linux-image-*.deb; do
        case $(basename "$f") in "$KPKG"_*) ;; *) rm -f "$f" ;; esac
done
log "ready: $ENVFILE (kernel $KVER, $(cat "$KDIR/compressed-modules") compressed modules decompressed)"
