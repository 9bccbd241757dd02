#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# prepare.sh [CACHE_DIR] -- fetch what the vm test suite needs, idempotently.
#
#  * installs qemu-system-x86, busybox-static and cpio with apt-get if missing;
#  * downloads a Debian cloud kernel, found with apt, never hard-coded, and
#    busybox-static into CACHE_DIR/debs (default: tests/vm/cache, gitignored).
#    VM_KERNEL_SET picks the kernel (default bookworm):
#      bookworm   the newest linux-image-6.1.*-cloud-amd64-unsigned of the
#                 host's apt (the host is bookworm);
#      trixie     the newest linux-image-6.12.*-cloud-amd64-unsigned of trixie;
#      backports  the kernel linux-image-cloud-amd64 of trixie-backports
#                 depends on (7.x: its image, modules and base files are three
#                 packages, linux-binary-unsigned-*, linux-modules-*,
#                 linux-base-*, as its linux-image-* Depends: says);
#    trixie and backports come from a private apt configuration in
#    CACHE_DIR/apt-trixie (the host's Debian mirror, suites trixie and
#    trixie-backports, component main): the host's apt sources stay as they are;
#  * extracts vmlinuz, busybox, and the module subtrees the tests need
#    (kernel/drivers/block, kernel/fs/configfs, kernel/block for kyber/bfq,
#    kernel/drivers/virtio for the --data-disk virtio-blk), decompressing any
#    .ko.xz/.ko.zst so that busybox insmod can load them, and runs depmod on
#    that subset (the .deb ships no modules.dep: its postinst makes one), so
#    that busybox modprobe works in the guest;
#  * writes CACHE_DIR/vm.env (bookworm), vm-trixie.env or vm-backports.env
#    (VM_KPKG, VM_KVER, VM_KERNEL, VM_MODULES, VM_BUSYBOX), which
#    run-guest.py reads (the same VM_KERNEL_SET, or its --kernel-set).
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
VM_KERNEL_SET=${VM_KERNEL_SET:-bookworm}
case $VM_KERNEL_SET in
bookworm) ENVFILE=$CACHE/vm.env ;;
trixie | backports) ENVFILE=$CACHE/vm-$VM_KERNEL_SET.env ;;
*) echo "prepare: VM_KERNEL_SET=$VM_KERNEL_SET: not bookworm, trixie or backports" >&2; exit 1 ;;
esac

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

# 2. The kernel packages (KPKGS) and the kernel release (KVER).
# apt for trixie and trixie-backports, private to the cache: the host's
# Debian mirror (its sources' first .../debian URI), its keyring.
APT_T=$CACHE/apt-trixie
APT_T_OPTS=(-o "Dir::Etc::SourceList=$APT_T/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State=$APT_T/state" -o "Dir::Cache=$APT_T/cache"
            -o Dir::State::status=/var/lib/dpkg/status)
trixie_apt_setup() {
        local url
        url=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
                grep -v '^ *#' | grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | grep -v -- '-security' | head -n1 | tr -d ' ' || true)
        url=${url:-http://deb.debian.org/debian}
        mkdir -p "$APT_T/state/lists/partial" "$APT_T/cache/archives/partial"
        printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s %s main\n' \
                "${url%/}" trixie "${url%/}" trixie-backports >"$APT_T/sources.list"
}
TAPT_UPDATED=
tapt_update() {
        [ -n "$TAPT_UPDATED" ] && return 0
        TAPT_UPDATED=1
        trixie_apt_setup
        log "apt-get update (trixie, trixie-backports: $APT_T)"
        apt-get "${APT_T_OPTS[@]}" update -qq >&2 || log "apt-get update (trixie) failed"
}
# apt_cmd apt-get|apt-cache ARGS...: the host's apt for bookworm, the private one else.
apt_cmd() {
        local c=$1
        shift
        if [ "$VM_KERNEL_SET" = bookworm ]; then
                "$c" "$@"
        else
                "$c" "${APT_T_OPTS[@]}" "$@"
        fi
}
apt_refresh() { if [ "$VM_KERNEL_SET" = bookworm ]; then apt_update; else tapt_update; fi; }

# pick_kernel: prints KVER then the packages to extract, one a line.
pick_kernel() {
        local re pkg ver img abi d
        case $VM_KERNEL_SET in
        bookworm | trixie)
                re='^linux-image-6\.1\.[0-9]+-[0-9]+-cloud-amd64-unsigned$'
                [ "$VM_KERNEL_SET" = trixie ] && re='^linux-image-6\.12\.[0-9]+[^ ]*-cloud-amd64-unsigned$'
                pkg=$(apt_cmd apt-cache search linux-image 2>/dev/null | awk '{print $1}' |
                        grep -E "$re" | sort -V | tail -n1 || true)
                [ -n "$pkg" ] || return 0
                abi=${pkg#linux-image-}
                echo "${abi%-unsigned}"
                echo "$pkg"
                ;;
        backports)
                # The newest version of the meta package in trixie-backports,
                # the linux-image-ABI it depends on, and what that depends on.
                ver=$(apt_cmd apt-cache madison linux-image-cloud-amd64 2>/dev/null |
                        awk -F'|' '$3 ~ /trixie-backports/ { gsub(/ /, "", $2); print $2 }' | sort -V | tail -n1 || true)
                [ -n "$ver" ] || return 0
                img=$(apt_cmd apt-cache show "linux-image-cloud-amd64=$ver" 2>/dev/null | sed -n 's/^Depends: //p' |
                        tr ',' '\n' | awk '{print $1}' | grep -E '^linux-image-[0-9]' | head -n1 || true)
                [ -n "$img" ] || return 0
                abi=${img#linux-image-}
                echo "$abi"
                if apt_cmd apt-cache show "linux-image-$abi-unsigned" >/dev/null 2>&1; then
                        echo "linux-image-$abi-unsigned"  # the 6.x layout: one package
                        return 0
                fi
                apt_cmd apt-cache show "$img=$ver" 2>/dev/null | sed -n 's/^Depends: //p' | tr ',' '\n' |
                        awk '{print $1}' | grep '^linux-' | grep -F -- "-$abi" | while read -r d; do
                        case $d in
                        linux-binary-"$abi")
                                # the signed image; the unsigned one boots as well under QEMU
                                if apt_cmd apt-cache show "linux-binary-unsigned-$abi" >/dev/null 2>&1; then
                                        echo "linux-binary-unsigned-$abi"
                                else
                                        echo "$d"
                                fi ;;
                        *) echo "$d" ;;
                        esac
                done || true
                ;;
        esac
}
[ "$VM_KERNEL_SET" = bookworm ] || [ -s "$APT_T/sources.list" ] || tapt_update
PICK=$(pick_kernel)
if [ -z "$PICK" ] || [ "$(echo "$PICK" | wc -l)" -lt 2 ]; then
        apt_refresh
        PICK=$(pick_kernel)
fi
[ "$(echo "$PICK" | wc -l)" -ge 2 ] || vm_skip "vm: apt finds no cloud kernel for VM_KERNEL_SET=$VM_KERNEL_SET"
KVER=$(echo "$PICK" | head -n1)
KPKGS=$(echo "$PICK" | tail -n +2 | paste -sd ' ')
KPKG=${KPKGS%% *}
log "kernel set $VM_KERNEL_SET: $KPKGS (kernel $KVER)"

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
        if ! (cd "$dl" && apt_cmd apt-get download -qq "$pkg" >&2); then
                apt_refresh
                (cd "$dl" && apt_cmd apt-get download -qq "$pkg" >&2) || rc=1
        fi
        [ $rc = 0 ] && mv "$dl"/*.deb "$DEBS"/ 2>/dev/null || rc=1
        rm -rf "$dl"
        [ $rc = 0 ] && [ -n "$(deb_of "$pkg")" ]
}
for p in $KPKGS; do
        download "$p" || vm_skip "vm: apt-get download $p failed"
done
VM_KERNEL_SET=bookworm download busybox-static || vm_skip "vm: apt-get download busybox-static failed"

# 3. Extract into a fresh directory, then switch vm.env over atomically.
KDIR=$CACHE/kernel-$KVER
BB=$CACHE/busybox/busybox
if [ ! -s "$KDIR/vmlinuz" ] || [ ! -s "$KDIR/lib/modules/$KVER/modules.dep" ]; then
        tmp=$(mktemp -d "$CACHE/.extract.XXXXXX")
        trap 'rm -rf "$tmp"' EXIT
        for p in $KPKGS; do
                log "extracting $(basename "$(deb_of "$p")")"
                dpkg-deb -x "$(deb_of "$p")" "$tmp/root"
        done
        src=$tmp/root/lib/modules/$KVER
        [ -d "$src" ] || src=$tmp/root/usr/lib/modules/$KVER
        [ -d "$src" ] || vm_skip "vm: $KPKGS: no lib/modules/$KVER"
        mkdir -p "$tmp/out/lib/modules/$KVER"
        # 6.x: /boot/vmlinuz-KVER; 7.x: /usr/lib/modules/KVER/vmlinuz.unsigned
        for k in "$tmp/root/boot/vmlinuz-$KVER" "$src/vmlinuz.unsigned" "$src/vmlinuz"; do
                [ -s "$k" ] && { cp "$k" "$tmp/out/vmlinuz"; break; }
        done
        [ -s "$tmp/out/vmlinuz" ] || vm_skip "vm: $KPKGS: no kernel image"
        for c in "$tmp/root/boot/config-$KVER" "$src/config"; do
                [ -s "$c" ] && { cp "$c" "$tmp/out/config"; break; }
        done
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
# written by tests/vm/prepare.sh (VM_KERNEL_SET=$VM_KERNEL_SET) from $KPKGS
VM_KPKG=$KPKG
VM_KPKGS="$KPKGS"
VM_KVER=$KVER
VM_KERNEL=$KDIR/vmlinuz
VM_MODULES=$KDIR/lib/modules/$KVER
VM_BUSYBOX=$BB
EOF
mv "$ENVFILE.new" "$ENVFILE"
# After a VM_REFRESH that found a newer kernel: drop the kernels and
# packages no vm*.env of the cache names any more (each set has its own).
keep=$(cat "$CACHE"/vm*.env | sed -n 's/^VM_KVER=//p; s/^VM_KPKG=//p; s/^VM_KPKGS="\(.*\)"/\1/p' | tr ' ' '\n' | sort -u)
for d in "$CACHE"/kernel-*; do
        [ -e "$d" ] || continue
        grep -qxF "${d##*/kernel-}" <<<"$keep" || rm -rf "$d"
done
for f in "$DEBS"/linux-*.deb; do
        [ -e "$f" ] || continue
        b=$(basename "$f")
        grep -qxF "${b%%_*}" <<<"$keep" || rm -f "$f"
done
log "ready: $ENVFILE (kernel $KVER, $(cat "$KDIR/compressed-modules") compressed modules decompressed)"
