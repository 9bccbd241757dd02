# SPDX-License-Identifier: LGPL-2.1-or-later
# Host-side shell helpers for tests/vm. Source it: . "$(dirname "$0")/lib.sh"
# A test script: vm_binaries "$@" (if the guest runs blkmqd), vm_prepare,
# then one vm_boot per boot, then vm_finish (or exit with vm_boot's status).
VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)}
VM_GUEST=$VM_DIR/guest
VM_RESULTS=()

# vm_skip REASON...: the project's skip policy (exit 77, or 1 when CI=true),
# implemented once in skip.sh (run-guest.py calls it too).
vm_skip() {
        sh "$VM_DIR/skip.sh" "$*"
        exit $?
}

# vm_binaries [BLKMQD [BLKMQCTL]]: sets BLKMQD and BLKMQCTL to absolute paths
# (run-guest.py --bin needs them so): the arguments, else $BLKMQD/$BLKMQCTL,
# else build/src/. A missing binary fails the test, it is not a skip. Sets
# VM_DAEMON_ARGS, the run-guest.py arguments of a guest that runs blkmqd:
# both binaries and guest/daemon-lib.sh as /vm/daemon-lib.sh.
vm_binaries() {
        local src
        src=$(cd "$VM_DIR/../.." && pwd)
        BLKMQD=${1:-${BLKMQD:-$src/build/src/blkmqd}}
        BLKMQCTL=${2:-${BLKMQCTL:-$src/build/src/blkmqctl}}
        [ -x "$BLKMQD" ] || { echo "FAIL: blkmqd binary not found: $BLKMQD (pass it as the first argument)"; exit 1; }
        [ -x "$BLKMQCTL" ] || { echo "FAIL: blkmqctl binary not found: $BLKMQCTL (pass it as the second argument)"; exit 1; }
        BLKMQD=$(cd "$(dirname "$BLKMQD")" && pwd)/$(basename "$BLKMQD")
        BLKMQCTL=$(cd "$(dirname "$BLKMQCTL")" && pwd)/$(basename "$BLKMQCTL")
        VM_DAEMON_ARGS=(--bin "$BLKMQD" --bin "$BLKMQCTL" --file "$VM_GUEST/daemon-lib.sh:/vm/daemon-lib.sh")
}

# vm_prepare: python3, and the guest kernel and QEMU (prepare.sh fetches and
# verifies the cache once, up front, and applies the skip policy itself);
# exports VM_LOG_DIR (the console logs), default meson's build dir.
vm_prepare() {
        command -v python3 >/dev/null || vm_skip "vm: python3 not found"
        "$VM_DIR/prepare.sh" || exit $?
        export VM_LOG_DIR=${VM_LOG_DIR:-${MESON_BUILD_ROOT:-$PWD}}
}

# vm_boot NAME TIMEOUT RUN-GUEST-ARGS...: one guest boot (run-guest.py
# --timeout TIMEOUT, console log $VM_LOG_DIR/NAME.console.log); prints
# "=== NAME: rc=RC (SECONDS s)", adds NAME=RC to VM_RESULTS, returns RC
# (0 pass, 1 fail, 77 skip). The kernel is VM_KERNEL_SET's (prepare.sh;
# default bookworm); another set's boots are named NAME@SET.
vm_boot() {
        local name=$1 timeout=$2 s e rc
        shift 2
        [ "${VM_KERNEL_SET:-bookworm}" = bookworm ] || name=$name@$VM_KERNEL_SET
        # VM_TIMEOUT_FACTOR (meson's kernel matrix: 2): the newer kernels
        # boot slower under TCG (6.12: /init 14-20 s after start at load 8,
        # 6.1: 3-6 s)
        timeout=$(awk -v t="$timeout" -v f="${VM_TIMEOUT_FACTOR:-1}" 'BEGIN { printf "%d", t * f }')
        s=$(date +%s.%N)
        echo "=== $name: run-guest.py $*"
        python3 "$VM_DIR/run-guest.py" --timeout "$timeout" --log "$VM_LOG_DIR/$name.console.log" "$@"
        rc=$?
        e=$(date +%s.%N)
        echo "=== $name: rc=$rc ($(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", b-a }')s)"
        VM_RESULTS+=("$name=$rc")
        return $rc
}

# vm_finish TEST: the verdict over every vm_boot so far ("TEST: N passed, N
# failed, N skipped"): exit 1 if a boot failed, the skip policy if every
# boot skipped, else 0.
vm_finish() {
        local r pass=0 fail=0 skipped=0
        echo "=== results: ${VM_RESULTS[*]}"
        for r in "${VM_RESULTS[@]}"; do
                case ${r##*=} in
                0) pass=$((pass + 1)) ;;
                77) skipped=$((skipped + 1)) ;;
                *) fail=$((fail + 1)) ;;
                esac
        done
        echo "$1: $pass passed, $fail failed, $skipped skipped"
        [ $fail -eq 0 ] || exit 1
        [ $pass -gt 0 ] || vm_skip "vm: every boot skipped"
        exit 0
}

# vm_stack_guest TMP N MODULES TOOLS RULES: what a busybox guest needs to
# build device-mapper and md stacks (vm-stacks, vm-stack-trial,
# capture-stacks.sh): the kernel modules MODULES (names without .ko, from
# VM_KVER's cached kernel package: prepare.sh caches drivers/block only),
# the host's TOOLS (bundled with their libraries) and udev RULES, and an
# NVMe controller (serial stk0) of N namespaces of 256 MiB in TMP. Sets
# VM_STACK_ARGS (run-guest.py's arguments; the modules in /vm/mods), or
# returns 1 with VM_STACK_ERR saying what is missing. VM_STACK_IMAGES (N
# files, in namespace order) backs the namespaces by those files instead
# (bench/pgbench --stack: tools/modeldisk's), VM_STACK_DRIVE_OPTS is added
# to each -drive (",cache=none": O_DIRECT, no host page cache between).
vm_stack_guest() {
        local tmp=$1 n=$2 cache deb m f b p r d i
        cache=${VM_CACHE:-$VM_DIR/cache}
        VM_STACK_ARGS=()
        # shellcheck disable=SC1090
        . "$cache/$( [ "$VM_KERNEL_SET" = bookworm ] && echo vm.env || echo "vm-$VM_KERNEL_SET.env")"
        deb=$(ls "$cache"/debs/linux-{image,modules}-"$VM_KVER"*.deb 2>/dev/null | head -n1 || true)
        [ -n "$deb" ] || { VM_STACK_ERR="no kernel package of $VM_KVER in $cache/debs"; return 1; }
        mkdir -p "$tmp/x" "$tmp/mods"
        # a module the package lacks is left out here, and its absence shows in the guest
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/kernel/drivers/md/*' '*/kernel/crypto/xts.ko*' 2>/dev/null || true
        for m in $3; do
                f=$(find "$tmp/x" -name "$m.ko*" | head -n1)
                [ -n "$f" ] || continue
                case $f in
                *.xz) xz -dc "$f" >"$tmp/mods/$m.ko" ;;
                *.zst) zstd -qdc "$f" >"$tmp/mods/$m.ko" ;;
                *) cp "$f" "$tmp/mods/$m.ko" ;;
                esac
        done
        rm -rf "$tmp/x"
        VM_STACK_ARGS+=(--file "$tmp/mods:/vm/mods" --file "$VM_GUEST/stacks-lib.sh:/vm/stacks-lib.sh")
        for b in $4; do
                p=$(command -v "$b" || true)
                [ -n "$p" ] || { VM_STACK_ERR="$b not installed on the host (tools/install-deps)"; return 1; }
                VM_STACK_ARGS+=(--bin "$p:/sbin/$b")
        done
        for r in $5; do
                for d in /usr/lib/udev/rules.d /lib/udev/rules.d; do
                        [ -f "$d/$r" ] && { VM_STACK_ARGS+=(--file "$d/$r:/usr/lib/udev/rules.d/$r"); break; }
                done
        done
        VM_STACK_ARGS+=(--qemu-arg=-device --qemu-arg="nvme,id=stk,serial=stk0")
        local imgs=(${VM_STACK_IMAGES:-})
        for i in $(seq 1 "$n"); do
                f=${imgs[i - 1]:-$tmp/stk$i.img}
                [ -n "${imgs[i - 1]:-}" ] || truncate -s 256M "$f"
                VM_STACK_ARGS+=(--qemu-arg=-drive --qemu-arg="file=$f,id=stk$i,format=raw,if=none${VM_STACK_DRIVE_OPTS:-}"
                                --qemu-arg=-device --qemu-arg="nvme-ns,drive=stk$i,bus=stk,nsid=$i")
        done
}

# vm_rootfs_image IMG DIR [SUITE]: a fresh ext4 disk image IMG (2 GiB,
# sparse) for run-guest.py --rootfs, holding the cached SUITE (bookworm, the
# default, or trixie) + systemd root file system (rootfs.sh, built once into
# $DEB_CHROOT_CACHE or tests/package/cache) with the .debs of DIR in
# /root/debs, whose dependencies it has. mkfs.ext4 -d: no loop device, no
# mount. Root.
vm_rootfs_image() {
        local img=$1 debs=$2 suite=${3:-bookworm} cache tar tree
        cache=${DEB_CHROOT_CACHE:-$(cd "$VM_DIR/../.." && pwd)/tests/package/cache}
        command -v mkfs.ext4 >/dev/null || vm_skip "vm: mkfs.ext4 missing (e2fsprogs)"
        command -v debootstrap >/dev/null || vm_skip "vm: debootstrap missing (tools/install-deps has it)"
        tar=$("$VM_DIR/rootfs.sh" "$cache" "$suite" "$debs"/blkmqd_*.deb "$debs"/libblkmq0_*.deb) ||
                vm_skip "vm: no $suite root file system (debootstrap or Debian's mirror failed, see above)"
        tree=$(mktemp -d "${img%/*}/rootfs.XXXXXX")
        tar -C "$tree" -xf "$tar"
        mkdir -p "$tree/root"
        cp -r "$debs" "$tree/root/debs"
        rm -f "$img"
        truncate -s 2G "$img"
        mkfs.ext4 -q -F -L blkmqd-root -d "$tree" "$img" || { rm -rf --one-file-system "$tree"; return 1; }
        rm -rf --one-file-system "$tree"
}

# vm_module_tree TMP MODULES: the guest's modules tree (prepare.sh's
# cached subset) with the modules MODULES added (names without .ko, from
# VM_KVER's cached kernel package, uncompressed) and its indexes made
# again by depmod, so that kmod in a --rootfs guest loads them on demand
# (modprobe, and /dev/mapper/control's static node from modules.devname).
# Sets VM_MODULE_ARGS (run-guest.py --file TMP/...:/usr/lib/modules/KVER,
# laid over the cached tree in the payload), or returns 1 with
# VM_MODULE_ERR saying what is missing.
vm_module_tree() {
        local tmp=$1 cache env deb m f n=0 dir
        cache=${VM_CACHE:-$VM_DIR/cache}
        VM_MODULE_ARGS=()
        env=vm-${VM_KERNEL_SET:-bookworm}.env
        [ "${VM_KERNEL_SET:-bookworm}" = bookworm ] && env=vm.env
        # shellcheck disable=SC1090
        . "$cache/$env"
        deb=$(ls "$cache"/debs/linux-{image,modules}-"$VM_KVER"*.deb 2>/dev/null | head -n1 || true)
        [ -n "$deb" ] || { VM_MODULE_ERR="no kernel package of $VM_KVER in $cache/debs"; return 1; }
        command -v depmod >/dev/null || { VM_MODULE_ERR="depmod (kmod) not installed"; return 1; }
        dir=$tmp/root/lib/modules/$VM_KVER
        mkdir -p "$tmp/x" "$dir"
        cp -a "$VM_MODULES/." "$dir/"
        dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp/x" --wildcards '*/kernel/drivers/md/*' 2>/dev/null || true
        mkdir -p "$dir/kernel/drivers/md"
        for m in $2; do
                f=$(find "$tmp/x" -name "$m.ko*" | head -n1)
                [ -n "$f" ] || { VM_MODULE_ERR="$m.ko not in $(basename "$deb")"; rm -rf "$tmp/x"; return 1; }
                case $f in
                *.xz) xz -dc "$f" >"$dir/kernel/drivers/md/$m.ko" ;;
                *.zst) zstd -qdc "$f" >"$dir/kernel/drivers/md/$m.ko" ;;
                *) cp "$f" "$dir/kernel/drivers/md/$m.ko" ;;
                esac
                n=$((n + 1))
        done
        rm -rf "$tmp/x"
        depmod -b "$tmp/root" "$VM_KVER" || { VM_MODULE_ERR="depmod failed on $dir"; return 1; }
        VM_MODULE_ARGS=(--file "$dir:/usr/lib/modules/$VM_KVER")
}
