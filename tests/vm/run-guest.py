#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Run a busybox sh script inside a QEMU (TCG) guest running Debian's 6.1
cloud kernel, with emulated NVMe (ZNS, conventional, subsystem for hotplug),
and return the script's result as this process's exit code.

    run-guest.py --script guest.sh [--bin PATH[:DEST]]... [--file SRC:DEST]...
                 [--zns] [--conventional] [--subsys] [--qmp SOCK]
                 [--hotplug-script FILE] [--data-disk IMG] [--timeout 300]

Exit code: 0 pass, 1 fail (script failed, a check printed "not ok", guest
crashed, timeout), 77 skip (no QEMU/kernel, or the guest script exited 77);
with CI=true a skip is a failure (skip.sh).  See README.md.
Python standard library only.
"""
import argparse
import glob
import json
import os
import queue
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

VM_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, VM_DIR)

MARK_BOOTED = "BLKMQD-VM-BOOTED"
MARK_RESULT = "BLKMQD-VM-RESULT"
MARK_HOTPLUG = "BLKMQD-VM-HOTPLUG"
MARK_ACK = "BLKMQD-VM-ACK"
MARK_READY = "BLKMQD-VM-READY"  # --rootfs: the test unit started (systemd up)
ANSI = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|[c()][0-9A-Za-z]?)")

# Fixed device ids the guest scripts and hotplug files can rely on.
ZNS_CTRL = "nvme0"        # --zns without --subsys
CONV_CTRL = "nvme1"       # --conventional
SUBSYS_CTRL = "nvmeA"     # --subsys: the ZNS controller, on root port rp1
SUBSYS_ID = "subsys0"
SUBSYS_NQN = "nqn.2024-01.io.blkmqd:zns"
SUBSYS_SERIAL = "znsA"
N_ROOT_PORTS = 4          # rp1..rp4 (rp1 taken by --subsys); spare ones for device_add


def log(msg):
    print("run-guest: " + msg, flush=True)


def skip(reason):
    """The project's skip policy, implemented once in skip.sh: exit 77, or 1
    when CI=true. Never returns."""
    sys.stdout.flush()
    sys.exit(subprocess.run(["sh", os.path.join(VM_DIR, "skip.sh"), reason]).returncode)


# --------------------------------------------------------------------------
# initramfs: an in-memory tree written as a newc cpio archive (no root, no
# mknod and no cpio binary needed; dev/console must exist before /init runs).

class Tree:
    def __init__(self):
        self.entries = {}  # path (no leading /) -> (mode, data bytes | src path, rdev)

    def _parents(self, path):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self.entries:
                self.entries[d] = (stat.S_IFDIR | 0o755, b"", None)

    def _norm(self, dest):
        dest = os.path.normpath("/" + dest).lstrip("/")
        if not dest:
            raise ValueError("empty destination")
        return dest

    def mkdir(self, dest, mode=0o755):
        dest = self._norm(dest)
        self._parents(dest)
        self.entries[dest] = (stat.S_IFDIR | mode, b"", None)

    def data(self, dest, content, mode=0o644):
        dest = self._norm(dest)
        self._parents(dest)
        if isinstance(content, str):
            content = content.encode()
        self.entries[dest] = (stat.S_IFREG | mode, content, None)

    def file(self, dest, src, mode=None):
        """Copy a host file (following symlinks)."""
        dest = self._norm(dest)
        self._parents(dest)
        st = os.stat(src)
        self.entries[dest] = (stat.S_IFREG | (mode if mode is not None else st.st_mode & 0o7777),
                              os.path.realpath(src), None)

    def tree(self, dest, src):
        """Copy a host directory recursively (symlinks kept as symlinks)."""
        dest = self._norm(dest)
        self.mkdir(dest)
        for root, dirs, files in os.walk(src):
            rel = os.path.relpath(root, src)
            base = dest if rel == "." else dest + "/" + rel
            for d in dirs:
                p = os.path.join(root, d)
                if os.path.islink(p):
                    self.symlink(base + "/" + d, os.readlink(p))
                else:
                    self.mkdir(base + "/" + d)
            for f in files:
                p = os.path.join(root, f)
                if os.path.islink(p):
                    self.symlink(base + "/" + f, os.readlink(p))
                else:
                    self.file(base + "/" + f, p)

    def symlink(self, dest, target):
        dest = self._norm(dest)
        self._parents(dest)
        self.entries[dest] = (stat.S_IFLNK | 0o777, target.encode(), None)

    def chardev(self, dest, major, minor, mode=0o600):
        dest = self._norm(dest)
        self._parents(dest)
        self.entries[dest] = (stat.S_IFCHR | mode, b"", (major, minor))

    def has(self, dest):
        return self._norm(dest) in self.entries

    def write_cpio(self, out):
        now = int(time.time())
        ino = 1
        with open(out, "wb") as f:
            def put(name, mode, data, rdev):
                nonlocal ino
                nb = name.encode() + b"\0"
                rmaj, rmin = rdev or (0, 0)
                nlink = 2 if stat.S_ISDIR(mode) else 1
                hdr = "070701" + "".join("%08X" % v for v in (
                    ino, mode, 0, 0, nlink, now, len(data), 0, 0, rmaj, rmin, len(nb), 0))
                ino += 1
                f.write(hdr.encode() + nb)
                f.write(b"\0" * ((4 - (110 + len(nb)) % 4) % 4))
                f.write(data)
                f.write(b"\0" * ((4 - len(data) % 4) % 4))
            for name in sorted(self.entries):  # parents sort before children
                mode, content, rdev = self.entries[name]
                if isinstance(content, str):
                    with open(content, "rb") as src:
                        content = src.read()
                put(name, mode, content, rdev)
            put("TRAILER!!!", 0, b"", None)


def add_binary(tree, spec, seen_libs):
    """--bin PATH[:DEST]: the binary at its own absolute path (so $ORIGIN
    RUNPATHs into the build tree still resolve), a link in /usr/local/bin
    (or DEST), and every library ldd lists plus the loader, at their paths."""
    src, _, dest = spec.partition(":")
    src = os.path.abspath(src)
    if not os.path.isfile(src):
        raise SystemExit("run-guest: --bin %s: no such file" % src)
    tree.file(src, src)
    link = dest or "/usr/local/bin/" + os.path.basename(src)
    if os.path.normpath(link) != src:
        tree.symlink(link, src)
    with open(src, "rb") as f:
        if f.read(4) != b"\x7fELF":
            return  # a script: its interpreter must be in the guest already
    try:
        out = subprocess.run(["ldd", src], capture_output=True, text=True,
                             env=dict(os.environ, LC_ALL="C")).stdout
    except FileNotFoundError:
        raise SystemExit("run-guest: ldd not found (libc-bin) to bundle %s" % src)
    for line in out.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => (/\S+) \(0x", line) or re.match(r"^(/\S+) \(0x", line)
        if not m:
            if "=> not found" in line:
                raise SystemExit("run-guest: %s: library not found on the host: %s" % (src, line))
            continue  # linux-vdso, "statically linked", "not a dynamic executable"
        lib = m.group(m.lastindex)
        if lib in seen_libs:
            continue
        seen_libs.add(lib)
        tree.file(lib, lib)


UDEV_RULES = ("50-udev-default.rules", "60-block.rules", "60-persistent-storage.rules",
              "80-drivers.rules", "99-systemd.rules")


def add_udev(tree, seen_libs):
    udevd = next((p for p in ("/lib/systemd/systemd-udevd", "/usr/lib/systemd/systemd-udevd")
                  if os.path.exists(p)), None)
    udevadm = shutil.which("udevadm")
    if not udevd or not udevadm:
        skip("vm: --udev: systemd-udevd/udevadm not installed on the host (package udev)")
    # systemd-udevd is a link to udevadm, which picks its role from argv[0]:
    # both become regular files at their paths.
    add_binary(tree, udevd + ":" + "/lib/systemd/systemd-udevd", seen_libs)
    add_binary(tree, udevadm + ":" + "/usr/bin/udevadm", seen_libs)
    for rdir in ("/usr/lib/udev/rules.d", "/lib/udev/rules.d"):
        for r in UDEV_RULES:
            if os.path.exists(os.path.join(rdir, r)) and not tree.has("usr/lib/udev/rules.d/" + r):
                tree.file("usr/lib/udev/rules.d/" + r, os.path.join(rdir, r))


# --------------------------------------------------------------------------
# /init and the guest-side library.

INIT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /run /tmp /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=755 tmpfs /run
# No tmpfs over /tmp: the initramfs is writable already, and bundled
# binaries keep their host paths, which may be below /tmp (a CI clone).
chmod 1777 /tmp
grep -qw configfs /proc/filesystems && mount -t configfs configfs /sys/kernel/config
grep -qw debugfs /proc/filesystems && mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ln -sf /proc/self/fd /dev/fd 2>/dev/null
ln -sf /proc/mounts /etc/mtab 2>/dev/null
hostname blkmqd-vm
# Host->guest replies (hotplug acks) arrive on the console's input: no echo.
stty -F /dev/ttyS0 -echo 2>/dev/null
echo "@BOOTED@ uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"
[ -f /vm/env ] && . /vm/env
# What runs here, before any test's output: a log then says what ran where.
echo "# guest: kernel $(uname -r) (kernel set $VM_KERNEL_SET); root file system: $VM_ROOTFS; $(busybox 2>&1 | head -n1)"
if [ "$VM_DATA_DISK" = 1 ]; then
    { modprobe virtio_pci || [ -d /sys/bus/pci/drivers/virtio-pci ]; } && modprobe virtio_blk
    i=0
    while [ $i -lt 100 ]; do
        for d in /sys/block/vd*; do
            [ "$(cat $d/serial 2>/dev/null)" = blkmqd-data ] && VM_DATA_DEV=/dev/${d##*/}
        done
        [ -n "$VM_DATA_DEV" ] && [ -b "$VM_DATA_DEV" ] && break
        i=$((i + 1)); sleep 0.1
    done
    [ -n "$VM_DATA_DEV" ] || echo "init: data disk did not appear"
    export VM_DATA_DEV
fi
if [ "$VM_UDEV" = 1 ]; then
    # systemd-udevd from the host (bundled by --udev): coldplug, then settle,
    # so the script starts with /dev/disk/by-id and udev properties in place.
    mkdir -p /run/udev
    /lib/systemd/systemd-udevd --daemon
    udevadm trigger --type=subsystems --action=add
    udevadm trigger --type=devices --action=add
    udevadm settle -t 30 || echo "init: udevadm settle timed out"
fi
: > /run/vm-checks
# The kernel the host meant to boot (a wrong cache would test another one).
[ "$(uname -r)" = "$VM_KVER" ] ||
    echo "not ok 0 - the guest runs kernel $(uname -r), the host booted $VM_KVER ($VM_KERNEL_SET)" | tee -a /run/vm-checks
cd /tmp
/bin/sh -c '. /vm/lib.sh; . /vm/script.sh' vm-script </dev/null
rc=$?
nfail=$(grep -c '^not ok' /run/vm-checks)
if [ "$rc" = 0 ] && [ "$nfail" -gt 0 ]; then
    echo "init: script exited 0 but $nfail check(s) failed"
    rc=1
fi
sync
echo "@RESULT@ rc=$rc token=@TOKEN@ uptime=$(cut -d' ' -f1 /proc/uptime)"
poweroff -f
"""

GUEST_LIB = r"""# Guest-side helpers, sourced before the test script (busybox sh).
# ok/not ok lines are counted by /init: any "not ok" fails the run.
_vm_check() {
    _vm_n=$(( $(wc -l < /run/vm-checks) + 1 ))
    echo "$1 $_vm_n - $2" | tee -a /run/vm-checks
}
ok()     { _vm_check ok "$*"; }
not_ok() { _vm_check "not ok" "$*"; }
# check DESC CMD [ARGS...]: ok if CMD succeeds
check() { _d=$1; shift; if "$@"; then ok "$_d"; else not_ok "$_d"; fi; }
# check_eq DESC EXPECTED ACTUAL
check_eq() {
    if [ "$2" = "$3" ]; then ok "$1 ($3)"; else not_ok "$1: expected '$2', got '$3'"; fi
}
# check_match DESC PATTERN ACTUAL (shell glob)
check_match() {
    case "$3" in $2) ok "$1 ($3)";; *) not_ok "$1: '$3' does not match '$2'";; esac
}
vm_failures() { grep -c '^not ok' /run/vm-checks; }
# vm_summary: "N passed, N failed"; returns 1 if any failed
vm_summary() {
    _p=$(grep -c '^ok' /run/vm-checks); _f=$(vm_failures)
    echo "# guest: $_p passed, $_f failed"
    [ "$_f" = 0 ]
}
vm_skip() { echo "SKIP (guest): $*"; exit 77; }
# vm_uptime: seconds since boot, 2 decimals (busybox date has no %N)
vm_uptime() { cut -d' ' -f1 /proc/uptime; }
# vm_kernel_ge MAJOR MINOR: the guest's kernel is MAJOR.MINOR or later
vm_kernel_ge() {
    _r=$(uname -r); _ma=${_r%%.*}; _r=${_r#*.}; _mi=${_r%%[!0-9]*}
    [ "$_ma" -gt "$1" ] || { [ "$_ma" -eq "$1" ] && [ "$_mi" -ge "$2" ]; }
}
# vm_wait_for TIMEOUT_S CMD [ARGS...]: poll every 0.05 s until CMD succeeds
vm_wait_for() {
    _t=$1; shift
    _end=$(awk -v u="$(vm_uptime)" -v t="$_t" 'BEGIN{print u+t}')
    while ! "$@" 2>/dev/null; do
        awk -v u="$(vm_uptime)" -v e="$_end" 'BEGIN{exit !(u>=e)}' && return 1
        sleep 0.05
    done
}
# vm_hotplug ACTION [ARGS]: ask the host to run hotplug ACTION (a [section]
# of --hotplug-script, or an inline QMP command: device_del {"id":"nvmeA"})
# and wait for its ack. Returns the host's rc (0 ok).
vm_hotplug() {
    _vm_hp=$(( ${_vm_hp:-0} + 1 ))
    echo "@HOTPLUG@ $_vm_hp $*"
    _end=$(( $(cut -d. -f1 /proc/uptime) + ${VM_HOTPLUG_TIMEOUT:-120} ))
    while [ "$(cut -d. -f1 /proc/uptime)" -lt "$_end" ]; do
        if read -t 5 _l < /dev/ttyS0; then
            case "$_l" in
            "@ACK@ $_vm_hp rc="*) _rc=${_l##*rc=}; return "${_rc%%[!0-9]*}";;
            esac
        fi
    done
    echo "vm_hotplug: no ack from the host for '$*'"
    return 1
}
# vm_modprobe NAME [PARAMS]: modprobe from the bundled modules tree
vm_modprobe() { modprobe "$@"; }
# vm_zoned_disks [MODEL]: host-managed disks (sysfs names), hidden paths included
vm_zoned_disks() {
    for _q in /sys/block/*/queue/zoned; do
        [ "$(cat "$_q" 2>/dev/null)" = host-managed ] || continue
        _d=${_q%/queue/zoned}; echo "${_d##*/}"
    done
}
# vm_need_zoned: Z, DEV and Q (its queue/ dir) of the first host-managed
# disk, a check; without one the script ends there, failed.
vm_need_zoned() {
    Z=$(vm_zoned_disks | head -n1)
    check "a host-managed NVMe namespace" [ -n "$Z" ]
    [ -n "$Z" ] || { vm_summary; exit 1; }
    DEV=/dev/$Z
    Q=/sys/block/$Z/queue
}
# vm_flushes [DISK]: flush requests DISK (default $Z) completed, field 16 of
# its stat (Documentation/block/stat.rst): what reached the device as flushes.
vm_flushes() {
    awk '{ print $16 }' /sys/block/${1:-$Z}/stat
}
# vm_check_flush WHAT BEFORE: a check that at least one flush reached $Z
# since vm_flushes said BEFORE.
vm_check_flush() {
    _f=$(vm_flushes)
    check "$1: the device got a flush (stat flushes $2 -> $_f)" [ "$_f" -gt "$2" ]
}
# zoned_head: the first host-managed NVMe multipath head (nvmeXnY), or fail.
zoned_head() {
    for _d in /sys/block/nvme*n*; do
        _n=${_d##*/}
        case $_n in *c*) continue ;; esac
        [ "$(cat $_d/queue/zoned 2>/dev/null)" = host-managed ] && echo $_n && return 0
    done
    return 1
}
have_zoned_head() { zoned_head >/dev/null; }
# zoned_path: the first host-managed hidden path (nvmeXcYnZ), or fail.
zoned_path() {
    for _d in /sys/block/nvme*c*n*; do
        [ "$(cat $_d/queue/zoned 2>/dev/null)" = host-managed ] && echo ${_d##*/} && return 0
    done
    return 1
}
# path_ctrl PATH: the controller (nvmeY) behind hidden path nvmeXcYnZ.
path_ctrl() { _c=${1#nvme*c}; echo nvme${_c%%n*}; }
# vm_zbd_agrees WHEN WHO NZONES OURS "EMPTY IMP_OPEN EXP_OPEN CLOSED FULL" [ZBD ARGS]:
# checks that every zone of $DEV as zbd report (zbd-utils on libzbd: code
# that is not ours) shows it, one "start wp cond" line each with the
# conditions named as the fifth argument says, is the file OURS (WHO's
# report, in that form), and that there are NZONES. A full zone's write
# pointer is "-": the kernel reports an NVMe full zone at start + zone
# size, our code at start + capacity (nothing left to write).
vm_zbd_agrees() {
    _when=$1 _who=$2 _nz=$3 _ours=$4 _names=$5
    shift 5
    zbd report -csv "$@" $DEV 2> /tmp/zbd.err | awk -F', *' -v names="$_names" '
        BEGIN { split(names, nm, " ") }
        NR > 1 {
            c = $7
            n = "cond" c
            if (c == "0x1") n = nm[1]
            if (c == "0x2") n = nm[2]
            if (c == "0x3") n = nm[3]
            if (c == "0x4") n = nm[4]
            if (c == "0xe") n = nm[5]
            # %014llu: leading zeros, which busybox awk would read as octal
            o = $3; w = $6; sub(/^0+/, "", o); sub(/^0+/, "", w)
            print o + 0, (n == nm[5] ? "-" : w + 0), n }' > /tmp/zbd.view
    check_eq "zbd report ($_when): one line per zone" "$_nz" "$(wc -l < /tmp/zbd.view)"
    check "zbd report ($_when): zone starts, write pointers and conditions as $_who" \
        cmp -s /tmp/zbd.view $_ours
    cmp -s /tmp/zbd.view $_ours || diff /tmp/zbd.view $_ours | sed 's/^/# zbd vs ours| /'
    sed 's/^/# zbd| /' /tmp/zbd.err
    grep -v " ${_names%% *}$" /tmp/zbd.view | sed "s/^/# zbd ($_when), not empty| /"
}
"""


# --rootfs: the initramfs only finds the root disk (virtio-blk, serial
# blkmqd-root), copies /payload over it (the guest library, the script, the
# modules, --file files, the test unit) and hands over to systemd. The
# script runs as vm-test.service once multi-user.target is reached,
# its output on the serial console, and powers the guest off with systemctl.
ROOT_INIT = r"""#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /newroot /bin /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "@BOOTED@ uptime=$(cut -d' ' -f1 /proc/uptime) kernel=$(uname -r)"
{ modprobe virtio_pci || [ -d /sys/bus/pci/drivers/virtio-pci ]; } && modprobe virtio_blk
root=
i=0
while [ $i -lt 200 ] && [ -z "$root" ]; do
    for d in /sys/block/vd*; do
        [ "$(cat $d/serial 2>/dev/null)" = blkmqd-root ] && root=/dev/${d##*/}
    done
    [ -n "$root" ] && [ -b "$root" ] && break
    root=; i=$((i + 1)); sleep 0.05
done
if [ -z "$root" ] || ! mount -t ext4 -o rw "$root" /newroot; then
    echo "init: root disk not found or not mountable"
    echo "@RESULT@ rc=1 token=@TOKEN@ uptime=$(cut -d' ' -f1 /proc/uptime)"
    poweroff -f
fi
cp -a /payload/. /newroot/
echo "init: root $root, switching to systemd at uptime $(cut -d' ' -f1 /proc/uptime)"
umount /proc /sys /dev
exec switch_root /newroot /lib/systemd/systemd
"""

ROOT_RUNNER = r"""#!/vm/busybox sh
# Run by vm-test.service (systemd as PID 1), output on ttyS0.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb LC_ALL=C.UTF-8
stty -F /dev/ttyS0 -echo 2>/dev/null
[ -f /vm/env ] && . /vm/env
echo "@READY@ uptime=$(cut -d' ' -f1 /proc/uptime)"
: > /run/vm-checks
mkdir -p /tmp && cd /tmp
/vm/busybox sh -c '. /vm/lib.sh; . /vm/script.sh' vm-script </dev/null
rc=$?
nfail=$(grep -c '^not ok' /run/vm-checks)
if [ "$rc" = 0 ] && [ "$nfail" -gt 0 ]; then
    echo "runner: script exited 0 but $nfail check(s) failed"
    rc=1
fi
sync
echo "@RESULT@ rc=$rc token=@TOKEN@ uptime=$(cut -d' ' -f1 /proc/uptime)"
systemctl --no-block poweroff
"""

ROOT_UNIT = """[Unit]
Description=blkmqd VM test script (run-guest.py --rootfs)
After=multi-user.target

[Service]
Type=simple
ExecStart=/vm/busybox sh /vm/run.sh
StandardInput=null
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
"""


def build_rootfs_payload(tree, args, token, env, marks):
    """The initramfs of a --rootfs boot: busybox, virtio modules, /init, and
    /payload, copied over the root file system before systemd starts."""
    init, run, lib = ROOT_INIT, ROOT_RUNNER, GUEST_LIB
    for k, v in marks.items():
        init, run, lib = init.replace(k, v), run.replace(k, v), lib.replace(k, v)
    tree.data("init", init, 0o755)
    tree.chardev("dev/console", 5, 1)
    tree.chardev("dev/null", 1, 3, 0o666)
    tree.data("payload/vm/lib.sh", lib)
    tree.data("payload/vm/run.sh", run, 0o755)
    tree.file("payload/vm/script.sh", args.script, 0o755)
    tree.data("payload/vm/env", "".join("export %s=%s\n" % (k, shquote(v)) for k, v in env.items()))
    tree.data("payload/etc/systemd/system/vm-test.service", ROOT_UNIT)
    tree.symlink("payload/etc/systemd/system/multi-user.target.wants/vm-test.service",
                 "/etc/systemd/system/vm-test.service")


def build_guest_files(tree, args, token, env):
    marks = {"@BOOTED@": MARK_BOOTED, "@RESULT@": MARK_RESULT, "@TOKEN@": token,
             "@HOTPLUG@": MARK_HOTPLUG, "@ACK@": MARK_ACK, "@READY@": MARK_READY}
    if args.rootfs:
        return build_rootfs_payload(tree, args, token, env, marks)
    init, lib = INIT, GUEST_LIB
    for k, v in marks.items():
        init, lib = init.replace(k, v), lib.replace(k, v)
    tree.data("init", init, 0o755)
    tree.data("vm/lib.sh", lib)
    tree.file("vm/script.sh", args.script, 0o755)
    envtxt = "".join("export %s=%s\n" % (k, shquote(v)) for k, v in env.items())
    tree.data("vm/env", envtxt)
    tree.data("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
    tree.data("etc/group", "root:x:0:\ndisk:x:6:\n")
    tree.mkdir("root", 0o700)
    tree.chardev("dev/console", 5, 1)
    tree.chardev("dev/null", 1, 3, 0o666)
    tree.chardev("dev/ttyS0", 4, 64)


def shquote(s):
    return "'" + s.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------
# QMP

class QMPError(Exception):
    pass


class QMP:
    def __init__(self, path, timeout=30, alive=lambda: True):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        end = time.monotonic() + timeout
        while True:
            try:
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if not alive():
                    raise QMPError("QEMU exited before its QMP socket was up")
                if time.monotonic() > end:
                    raise QMPError("cannot connect to QMP socket " + path)
                time.sleep(0.05)
        self.file = self.sock.makefile("rb")
        self.events = []
        self.cond = threading.Condition()
        self.replies = {}
        self.next_id = 0
        greeting = json.loads(self.file.readline())
        if "QMP" not in greeting:
            raise QMPError("no QMP greeting: %r" % greeting)
        threading.Thread(target=self._reader, daemon=True).start()
        self.command("qmp_capabilities")

    def _reader(self):
        for line in self.file:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                if "event" in msg:
                    self.events.append(msg)
                elif "id" in msg:
                    self.replies[msg["id"]] = msg
                self.cond.notify_all()
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def command(self, name, arguments=None, timeout=30):
        with self.cond:
            self.next_id += 1
            cid = "c%d" % self.next_id
            mark = len(self.events)
        msg = {"execute": name, "id": cid}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        with self.cond:
            if not self.cond.wait_for(lambda: cid in self.replies or getattr(self, "closed", False),
                                      timeout):
                raise QMPError("%s: no reply in %ss" % (name, timeout))
            reply = self.replies.pop(cid, None)
        if reply is None:
            raise QMPError("%s: QMP connection closed" % name)
        if "error" in reply:
            raise QMPError("%s: %s" % (name, reply["error"].get("desc", reply["error"])))
        return reply.get("return"), mark

    def wait_event(self, name, since=0, match=None, timeout=30):
        def found():
            for ev in self.events[since:]:
                if ev["event"] == name and (match is None or match(ev.get("data", {}))):
                    return ev
            return None
        with self.cond:
            ev = self.cond.wait_for(found, timeout)
        if not ev:
            raise QMPError("no %s event within %ss" % (name, timeout))
        return ev

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def cpu_state(path):
    """Each vCPU's RIP and whether it is halted, by the diagnosis monitor:
    where a guest that never reached /init is stuck."""
    try:
        mon = QMP(path, timeout=5)
    except (QMPError, OSError) as e:
        return "unknown (%s)" % e
    try:
        cpus, _ = mon.command("human-monitor-command", {"command-line": "info cpus"}, timeout=5)
        regs, _ = mon.command("human-monitor-command", {"command-line": "info registers -a"}, timeout=5)
    except (QMPError, OSError) as e:
        return "unknown (%s)" % e
    finally:
        mon.close()
    rips = re.findall(r"RIP=([0-9a-f]+)", regs or "")
    halted = re.findall(r"CPU #(\d+):.*?(\(halted\))?$", cpus or "", re.M)
    return ", ".join("cpu%s RIP=%s%s" % (c, rips[i] if i < len(rips) else "?", " halted" if h else "")
                     for i, (c, h) in enumerate(halted)) or (cpus or "").strip()


def parse_hotplug_script(path):
    """Line-based action list:
        [ACTION]                      a named action the guest asks for
        device_del {"id": "nvmeA"}    any QMP command + JSON arguments
        image NAME SIZE               create sparse @TMPDIR@/NAME.img
        sleep SECONDS
        wait_event EVENT [SECONDS]
    '#' starts a comment; @TMPDIR@ expands to the run's temp dir."""
    actions, cur = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^\[([^\]]+)\]$", line)
            if m:
                cur = actions.setdefault(m.group(1).strip(), [])
                continue
            if cur is None:
                raise SystemExit("run-guest: %s:%d: command before any [action]" % (path, n))
            cur.append((n, line))
    return actions


def run_hotplug_lines(qmp, lines, tmpdir):
    for n, line in lines:
        line = line.replace("@TMPDIR@", tmpdir)
        cmd, _, rest = line.partition(" ")
        rest = rest.strip()
        if cmd == "sleep":
            time.sleep(float(rest))
            continue
        if cmd == "image":
            name, size = rest.split()
            img = os.path.join(tmpdir, name + ".img")
            with open(img, "wb") as f:
                f.truncate(parse_size(size))
            log("hotplug: created %s (%s)" % (img, size))
            continue
        if qmp is None:
            raise QMPError("no QMP socket (pass --qmp or --subsys)")
        if cmd == "wait_event":
            ev, _, secs = rest.partition(" ")
            qmp.wait_event(ev, 0, timeout=float(secs or 30))
            continue
        try:
            arguments = json.loads(rest) if rest else None
        except ValueError as e:
            raise QMPError("line %d: bad JSON arguments: %s" % (n, e))
        t = time.monotonic()
        ret, mark = qmp.command(cmd, arguments)
        if cmd == "device_del":
            dev = arguments.get("id")
            qmp.wait_event("DEVICE_DELETED", mark,
                           match=lambda d: d.get("device") == dev, timeout=60)
        log("hotplug: %s %s -> ok (%.2fs)" % (cmd, rest, time.monotonic() - t))


def parse_size(s):
    m = re.match(r"^(\d+)([KMGT]?)i?B?$", s.strip(), re.I)
    if not m:
        raise SystemExit("run-guest: bad size %r" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}[m.group(2).upper()]


# --------------------------------------------------------------------------

def read_env_file(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, _, v = line.partition("=")
                env[k] = v
    return env


KERNEL_SETS = {"bookworm": "vm.env", "trixie": "vm-trixie.env", "backports": "vm-backports.env"}


def prepare(cache, kernel_set):
    """The kernel of KERNEL_SET (prepare.sh's VM_KERNEL_SET: bookworm 6.1,
    trixie 6.12, backports the newest of trixie-backports), cached once."""
    prep = os.path.join(VM_DIR, "prepare.sh")
    rc = subprocess.run(["bash", prep, cache], env=dict(os.environ, VM_KERNEL_SET=kernel_set)).returncode
    if rc != 0:
        sys.exit(rc)  # prepare.sh already applied the skip policy and said why
    return read_env_file(os.path.join(cache, KERNEL_SETS[kernel_set]))


def initramfs_origin(cache):
    """What the initramfs's root file system is, for the guest's log: the
    busybox of busybox-static as prepare.sh took it with the host's apt
    (its version from the cached .deb, its suite the host's), the same on
    every kernel set."""
    debs = sorted(glob.glob(os.path.join(cache, "debs", "busybox-static_*.deb")))
    ver = urllib.parse.unquote(os.path.basename(debs[-1]).split("_")[1]) if debs else "?"
    suite = "?"
    try:
        with open("/etc/os-release") as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k == "VERSION_CODENAME":
                    suite = v.strip('"') or "?"
    except OSError:
        pass
    return "initramfs of run-guest.py, busybox-static %s of Debian %s (the host's apt), no systemd" % (ver, suite)


def qemu_args(args, vm, tmp, initrd, qmp_path):
    zone = parse_size(args.zone_size)
    # thread=single: under QEMU 7.2's multi-threaded TCG (a host thread per
    # vCPU) one vCPU can run code that another is patching, and the kernel
    # patches its own text at run time (a static key: int3 on the first
    # byte, the rest, then the first byte). CI met it once: "Oops: int3" at
    # get_random_u64+0x2a in vm-zones-crash@6.12, as the CRNG became ready
    # after /init, then a panic. Two getrandom(GRND_INSECURE) spinners through
    # that moment on trixie's 6.12: 3 boots of 28 oopsed (crng_make_state+0x21
    # after /init, twice sched_clock_cpu+0x9 before it), all 3 while another
    # guest ran beside; with one thread for both vCPUs, 0 of 28, and 0 of 10
    # on the backports kernel, at the same boot times.
    a = ["qemu-system-x86_64", "-accel", "tcg,thread=single", "-m", str(args.memory), "-smp", str(args.smp),
         "-nographic", "-no-reboot", "-machine", "q35", "-nic", "none",
         "-kernel", vm["VM_KERNEL"], "-initrd", initrd,
         "-append", "console=ttyS0 quiet panic=-1 nokaslr " +
         ("systemd.show_status=false " if args.rootfs else "") + args.append]
    if args.rootfs:
        a += ["-drive", "file=%s,id=root,format=raw,if=none" % os.path.abspath(args.rootfs),
              "-device", "virtio-blk-pci,drive=root,serial=blkmqd-root"]
    if qmp_path:
        a += ["-qmp", "unix:%s,server=on,wait=off" % qmp_path]
    if args.subsys or qmp_path:
        for i in range(1, N_ROOT_PORTS + 1):
            a += ["-device", "pcie-root-port,id=rp%d,bus=pcie.0,chassis=%d,slot=%d" % (i, i, i)]
    cache = ",cache=%s" % args.drive_cache if args.drive_cache else ""
    if args.zns:
        img = args.zns_image or os.path.join(tmp, "zns.img")
        if not args.zns_image:
            with open(img, "wb") as f:
                f.truncate(zone * args.zones)
        if args.subsys:
            a += ["-device", "nvme-subsys,id=%s,nqn=%s" % (SUBSYS_ID, SUBSYS_NQN),
                  "-device", "nvme,id=%s,serial=%s,subsys=%s,bus=rp1"
                  % (SUBSYS_CTRL, SUBSYS_SERIAL, SUBSYS_ID)]
            bus = SUBSYS_CTRL
        else:
            a += ["-device", "nvme,id=%s,serial=zns0" % ZNS_CTRL]
            bus = ZNS_CTRL
        a += ["-drive", "file=%s,id=zns,format=raw,if=none%s" % (img, cache),
              "-device", "nvme-ns,id=zns-ns,drive=zns,bus=%s,nsid=1,zoned=true,"
              "zoned.zone_size=%s,zoned.zone_capacity=%s,"
              "zoned.max_open=%d,zoned.max_active=%d,"
              "logical_block_size=%d,physical_block_size=%d"
              % (bus, args.zone_size, args.zone_cap, args.max_open, args.max_active,
                 args.block_size, args.block_size)]
    if args.conventional:
        img = args.conventional_image or os.path.join(tmp, "conv.img")
        if not args.conventional_image:
            with open(img, "wb") as f:
                f.truncate(parse_size(args.conventional_size))
        a += ["-device", "nvme,id=%s,serial=conv0" % CONV_CTRL,
              "-drive", "file=%s,id=conv,format=raw,if=none%s"
              % (img, ",cache=%s" % args.conventional_cache if args.conventional_cache else cache),
              "-device", "nvme-ns,id=conv-ns,drive=conv,bus=%s,nsid=1" % CONV_CTRL]
    if args.data_disk:
        if not os.path.exists(args.data_disk):
            with open(args.data_disk, "wb") as f:
                f.truncate(parse_size(args.data_size))
        a += ["-drive", "file=%s,id=data,format=raw,if=none" % os.path.abspath(args.data_disk),
              "-device", "virtio-blk-pci,drive=data,serial=blkmqd-data"]
    a += args.qemu_arg
    return a


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("guest contents")
    g.add_argument("--script", required=True, help="busybox sh script run by /init (lib.sh sourced first)")
    g.add_argument("--bin", action="append", default=[], metavar="PATH[:DEST]",
                   help="host binary + the libraries ldd lists (repeatable)")
    g.add_argument("--file", action="append", default=[], metavar="SRC:DEST",
                   help="extra host file or directory (repeatable)")
    g.add_argument("--rootfs", metavar="IMG",
                   help="boot this ext4 disk image (virtio, serial blkmqd-root) with systemd as "
                        "PID 1; the script runs as a unit after multi-user.target, --file "
                        "lands in the image, which keeps every change (several boots)")
    g.add_argument("--udev", action="store_true",
                   help="bundle the host's systemd-udevd, udevadm and its block rules; /init "
                        "starts udevd and coldplugs before the script")
    g.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="exported to the guest script (repeatable)")
    g = p.add_argument_group("devices")
    g.add_argument("--zns", action="store_true", help="NVMe ZNS namespace (host-managed)")
    g.add_argument("--zones", type=int, default=16, help="number of zones (default 16)")
    g.add_argument("--zone-size", default="64M")
    g.add_argument("--zone-cap", default="60M")
    g.add_argument("--max-open", type=int, default=None, help="default: min(16, --max-active)")
    g.add_argument("--max-active", type=int, default=16)
    g.add_argument("--block-size", type=int, default=512, choices=(512, 4096),
                   help="the ZNS namespace's logical (and physical) block size (default 512)")
    g.add_argument("--conventional", action="store_true", help="a second, conventional NVMe controller")
    g.add_argument("--conventional-size", default="256M")
    g.add_argument("--zns-image", metavar="FILE", help="the ZNS namespace's backing file (kept; its size "
                   "must be --zones x --zone-size), instead of a new sparse one")
    g.add_argument("--conventional-image", metavar="FILE", help="the conventional namespace's backing file "
                   "(kept), instead of a new sparse one")
    g.add_argument("--drive-cache", metavar="MODE", help="QEMU cache= of the NVMe drives (none: O_DIRECT, "
                   "a guest flush is an fdatasync of the file; default QEMU's writeback)")
    g.add_argument("--conventional-cache", metavar="MODE", help="QEMU cache= of the conventional drive "
                   "(default: --drive-cache's)")
    g.add_argument("--subsys", action="store_true",
                   help="put the ZNS controller (id nvmeA) in nvme-subsys subsys0 on root port rp1 "
                        "(implies --zns); rp2..rp4 are free for device_add")
    g.add_argument("--data-disk", metavar="IMG", help="raw disk (virtio, $VM_DATA_DEV in the guest); "
                   "created sparse if missing, kept afterwards")
    g.add_argument("--data-size", default="64M")
    g = p.add_argument_group("control")
    g.add_argument("--qmp", metavar="SOCK", help="QMP unix socket path (default: in the temp dir "
                   "when --subsys or --hotplug-script is given)")
    g.add_argument("--hotplug-script", metavar="FILE", help="actions the guest triggers with vm_hotplug")
    g.add_argument("--timeout", type=float, default=300, help="hard limit, seconds (default 300)")
    g.add_argument("--boot-timeout", type=float, default=None,
                   help="a guest with no /init after this long hung in its kernel's boot: booted again, "
                   "once (default 45 s, 90 s for the trixie and backports kernels; /init comes after 2-4 s "
                   "on 6.1, 10-35 s on those under load)")
    g.add_argument("--log", metavar="FILE", help="console log (default: $VM_LOG_DIR or cwd, "
                   "vm-<script>.console.log)")
    g.add_argument("--quiet-console", action="store_true", help="do not echo the console to stdout")
    g.add_argument("--cache", default=os.environ.get("VM_CACHE", os.path.join(VM_DIR, "cache")))
    g.add_argument("--kernel-set", choices=sorted(KERNEL_SETS),
                   default=os.environ.get("VM_KERNEL_SET") or "bookworm",
                   help="the guest kernel: bookworm (6.1, default), trixie (6.12), backports (the newest "
                   "of trixie-backports); default $VM_KERNEL_SET")
    g.add_argument("--memory", type=int, default=2048)
    g.add_argument("--smp", type=int, default=2)
    g.add_argument("--append", default="", help="extra kernel command line")
    g.add_argument("--qemu-arg", action="append", default=[], help="extra QEMU argument (repeatable)")
    g.add_argument("--keep", action="store_true", help="keep the temp dir (initrd, images)")
    args = p.parse_args()
    if args.subsys:
        args.zns = True
    if args.boot_timeout is None:
        args.boot_timeout = 45 if args.kernel_set == "bookworm" else 90
    if args.max_open is None:
        args.max_open = min(16, args.max_active) if args.max_active else 16

    t_start = time.monotonic()
    vm = prepare(os.path.abspath(args.cache), args.kernel_set)
    if not shutil.which("qemu-system-x86_64"):
        skip("vm: qemu-system-x86_64 not found")
    for k in ("VM_KERNEL", "VM_MODULES", "VM_BUSYBOX"):
        if not os.path.exists(vm.get(k, "")):
            skip("vm: %s missing from the cache (%s)" % (k, vm.get(k)))

    tmp = tempfile.mkdtemp(prefix="blkmqd-vm.")
    proc = None
    qmp = None
    logf = None

    def on_term(signum, frame):
        raise SystemExit("run-guest: killed by signal %d" % signum)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    try:
        token = secrets.token_hex(4)
        env = {"VM_KVER": vm["VM_KVER"], "VM_KERNEL_SET": args.kernel_set, "VM_ZNS": "1" if args.zns else "0",
               "VM_CONVENTIONAL": "1" if args.conventional else "0",
               "VM_SUBSYS": "1" if args.subsys else "0",
               "VM_DATA_DISK": "1" if args.data_disk else "0",
               "VM_UDEV": "1" if args.udev else "0",
               "VM_ZONES": str(args.zones), "VM_MAX_ACTIVE": str(args.max_active),
               "VM_MAX_OPEN": str(args.max_open), "VM_BLOCK_SIZE": str(args.block_size)}
        if not args.rootfs:
            # /init prints it beside `uname -r` (a --rootfs guest: its own /etc/os-release)
            env["VM_ROOTFS"] = initramfs_origin(os.path.abspath(args.cache))
        for e in args.env:
            k, sep, v = e.partition("=")
            if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                p.error("--env wants NAME=VALUE, got %r" % e)
            env[k] = v

        tree = Tree()
        tree.file("bin/busybox", vm["VM_BUSYBOX"], 0o755)
        tree.tree("lib/modules/" + vm["VM_KVER"], vm["VM_MODULES"])
        seen = set()
        # --rootfs: what the booted system gets goes below /payload (bookworm
        # has /lib -> usr/lib: the modules go to the real directory).
        payload = ""
        if args.rootfs:
            if args.bin or args.udev:
                p.error("--rootfs: install binaries and udev in the image, not with --bin/--udev")
            payload = "payload/"
            tree.file("payload/vm/busybox", vm["VM_BUSYBOX"], 0o755)
            tree.tree("payload/usr/lib/modules/" + vm["VM_KVER"], vm["VM_MODULES"])
        if args.udev:
            add_udev(tree, seen)
        for b in args.bin:
            add_binary(tree, b, seen)
        for spec in args.file:
            src, sep, dest = spec.partition(":")
            if not sep or not dest:
                p.error("--file wants SRC:DEST, got %r" % spec)
            if os.path.isdir(src):
                tree.tree(payload + dest, src)
            else:
                tree.file(payload + dest, src)
        build_guest_files(tree, args, token, env)
        initrd = os.path.join(tmp, "initrd.cpio")
        tree.write_cpio(initrd)  # uncompressed: no gunzip under TCG

        qmp_path = args.qmp or (os.path.join(tmp, "qmp.sock")
                                if (args.subsys or args.hotplug_script) else None)
        actions = parse_hotplug_script(args.hotplug_script) if args.hotplug_script else {}
        cmd = qemu_args(args, vm, tmp, initrd, qmp_path)
        # A second monitor, for the diagnosis of a guest that hangs before
        # /init (the CPUs' state); the hotplug QMP socket stays as it is.
        diag_path = os.path.join(tmp, "diag.sock")
        cmd += ["-qmp", "unix:%s,server=on,wait=off" % diag_path]

        logpath = args.log or os.path.join(
            os.environ.get("VM_LOG_DIR", os.getcwd()),
            "vm-%s.console.log" % os.path.splitext(os.path.basename(args.script))[0])
        os.makedirs(os.path.dirname(os.path.abspath(logpath)), exist_ok=True)
        logf = open(logpath, "w")
        log("kernel %s (kernel set %s), initrd %.1f MiB, console log %s"
            % (vm["VM_KVER"], args.kernel_set, os.path.getsize(initrd) / 2**20, logpath))
        log("qemu: " + " ".join(cmd))
        logf.write("# " + " ".join(cmd) + "\n")

        def start_qemu():
            lines = queue.Queue()
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)

            def reader():
                for raw in proc.stdout:
                    text = raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", "")
                    lines.put(ANSI.sub("", text))
                lines.put(None)
            threading.Thread(target=reader, daemon=True).start()
            return proc, lines

        def connect_qmp(proc, lines):
            """The hotplug QMP of that QEMU; None (said, with what QEMU
            printed) when it does not come up."""
            try:
                return QMP(qmp_path, alive=lambda: proc.poll() is None)
            except QMPError as e:
                time.sleep(0.2)
                while not lines.empty():
                    line = lines.get()
                    if line is not None:
                        logf.write(line + "\n")
                        print(line, flush=True)
                log("FAIL: QMP: %s" % e)
                return None

        t_qemu = time.monotonic()
        proc, lines = start_qemu()
        if qmp_path:
            qmp = connect_qmp(proc, lines)
            if not qmp:
                return 1

        deadline = t_qemu + args.timeout
        result = None
        t_booted = None
        guest_up = {}
        boot_retried = False
        early_panic = False
        oops = None
        # The kernel's own reports of a fault, not of a slow host: "BUG:
        # workqueue lockup" and "watchdog: BUG: soft lockup" are what a
        # TCG guest at load prints about its emulated CPUs' pace.
        re_oops = re.compile(r"\] (Oops: .*|BUG: (?!workqueue lockup).*|general protection fault.*|"
                             r"Kernel panic - not syncing: .*)$")
        re_result = re.compile(r"%s rc=(\d+) token=%s uptime=([\d.]+)" % (MARK_RESULT, token))
        re_booted = re.compile(r"%s uptime=([\d.]+)" % MARK_BOOTED)
        re_ready = re.compile(r"%s uptime=([\d.]+)" % MARK_READY)
        re_hotplug = re.compile(r"%s (\d+) (.+)$" % MARK_HOTPLUG)
        eof = False
        while not eof:
            if t_booted is None and not boot_retried and (
                    early_panic or time.monotonic() - t_qemu > args.boot_timeout):
                # The guest's kernel hung in its own boot (once in about
                # 150 TCG boots here: SeaBIOS, then nothing), or oopsed
                # there ("Oops: int3" while it patched its own text, under
                # multi-threaded TCG: see qemu_args): no test code has run,
                # so one boot again is a fair retry. Said here and in the
                # console log, with the CPUs' state.
                if early_panic:
                    log("the guest kernel panicked while booting, before any test code ran (see %s); "
                        "booting again, once" % logpath)
                    logf.write("# run-guest: kernel panic before /init; booting again\n")
                else:
                    state = cpu_state(diag_path)
                    log("no /init after %.0fs (it takes 2-4 s): the guest kernel hung while booting, before "
                        "any test code ran; vCPUs: %s; booting again, once" % (args.boot_timeout, state))
                    logf.write("# run-guest: no /init after %.0fs; vCPUs: %s; booting again\n"
                               % (args.boot_timeout, state))
                boot_retried = True
                oops = None
                if qmp:
                    qmp.close()
                    qmp = None
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
                for path in (qmp_path, diag_path):
                    if path and os.path.exists(path):
                        os.unlink(path)
                t_qemu = time.monotonic()
                deadline = t_qemu + args.timeout
                proc, lines = start_qemu()
                if qmp_path:
                    qmp = connect_qmp(proc, lines)
                    if not qmp:
                        return 1
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log("TIMEOUT after %.0fs: killing QEMU" % args.timeout)
                logf.write("# run-guest: timeout\n")
                return 1
            try:
                line = lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if line is None:
                eof = True
                break
            logf.write(line + "\n")
            logf.flush()
            if not args.quiet_console:
                print(line, flush=True)
            if t_booted is None and "Kernel panic - not syncing" in line:
                early_panic = True
            if oops is None:
                m = re_oops.search(line)
                if m:
                    oops = m.group(1)
            elif " at " not in oops:
                m = re.search(r"RIP: 0010:(\S+)", line)
                if m:
                    oops += " at " + m.group(1)
            m = re_booted.search(line)
            if m and t_booted is None:
                t_booted = time.monotonic()
                guest_up["init"] = float(m.group(1))
            m = re_ready.search(line)
            if m and "ready" not in guest_up:
                guest_up["ready"] = float(m.group(1))
                log("systemd booted: test unit started at guest uptime %.2fs, %.2fs after "
                    "QEMU started" % (guest_up["ready"], time.monotonic() - t_qemu))
            m = re_hotplug.search(line)
            if m:
                seq, action = m.group(1), m.group(2).strip()
                rc = 0
                try:
                    if action in actions:
                        run_hotplug_lines(qmp, actions[action], tmp)
                    else:
                        run_hotplug_lines(qmp, [(0, action)], tmp)
                except (QMPError, ValueError, KeyError, OSError) as e:
                    log("hotplug %s: FAILED: %s" % (action, e))
                    rc = 1
                try:
                    proc.stdin.write(("%s %s rc=%d\n" % (MARK_ACK, seq, rc)).encode())
                    proc.stdin.flush()
                except OSError:
                    pass
            m = re_result.search(line)
            if m:
                result = int(m.group(1))
                guest_up["result"] = float(m.group(2))
                t_result = time.monotonic()
                break
        if result is None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            log("FAIL: guest ended without a result line (QEMU rc=%s)%s: see %s"
                % (proc.poll(), ", its kernel said \"%s\"" % oops if oops else "", logpath))
            return 1
        # poweroff -f (or systemd's orderly poweroff with --rootfs): QEMU
        # should exit on its own; drain its last output.
        try:
            proc.wait(timeout=90 if args.rootfs else 15)
        except subprocess.TimeoutExpired:
            log("QEMU did not exit after poweroff; killing it")
        drain_end = time.monotonic() + 1
        while time.monotonic() < drain_end:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                break
            if line is None:
                break
            logf.write(line + "\n")
            if not args.quiet_console:
                print(line, flush=True)
        t_end = time.monotonic()
        log("timing: qemu start -> /init %.2fs, /init -> result %.2fs, boot-to-result %.2fs "
            "(guest uptime %.2fs); total run-guest %.2fs"
            % ((t_booted or t_result) - t_qemu, t_result - (t_booted or t_qemu),
               t_result - t_qemu, guest_up["result"], t_end - t_start))
        if oops:
            # A guest script can pass beside an oops that killed some other
            # process: the kernel under the test is not sound, so neither is
            # the pass.
            log("FAIL (guest script rc=%d, but its kernel said \"%s\"): see %s" % (result, oops, logpath))
            return 1
        if result == 0:
            log("PASS (guest script rc=0)")
            return 0
        if result == 77:
            skip("vm: the guest script skipped (rc=77), see %s" % logpath)
        log("FAIL (guest script rc=%d)" % result)
        return 1
    finally:
        if qmp:
            qmp.close()
        if proc and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        if logf:
            logf.close()
        if args.keep:
            log("kept %s" % tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
