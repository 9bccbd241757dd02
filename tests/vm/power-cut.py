#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""vm-power-cut: power cuts below QEMU's NVMe ZNS drive.

Both drives of the guest are backed by files on tools/powerdisk: the NVMe
ZNS namespace blkmqd leases zones of (QEMU cache=none: O_DIRECT; the guest's
Flush becomes QEMU's fdatasync on the file, which the powerdisk takes as its
flush), and a virtio-blk disk with ext4 for blkmqd's database and WAL (QEMU's
default cache=writeback, on a file that powerdisk serves with direct_io: a
volatile write cache that only the guest's flushes empty; virtio-blk has no
FUA, so the guest's kernel flushes after a write that wants FUA, which QEMU's
NVMe would have taken as a plain write). Each cut:
  - a boot (guest/power-cut.sh, POWER_WORK=1) restores the zone state the
    drive kept, checks the previous cut's state, and runs two stagers that
    say on the console what blkmqd told them;
  - at a random moment after they start (most often with the ZNS drive's
    Nth write from then: powerdisk's cut-after), QEMU is stopped, both
    powerdisks are cut and QEMU is killed with SIGKILL;
  - STATES crash states of the two disks are built (none: nothing after the
    last flush kept; random:SEED: a random subset); one, at random, is the
    next boot's disk (its check is that boot's first half), each other one is
    checked by a boot of its own (POWER_WORK=0);
  - the last state is checked by a last boot.
QEMU keeps no zone state across a restart; the drive's is rebuilt as a
drive would keep it: each zone's data reaches as far as the crash state has
non-zero sectors, and a zone is finished if QEMU's trace
(pci_nvme_finish_zone, pci_nvme_reset_zone) finished it after its last
reset.

The run asserts its own strength: at least one cut with acknowledged seals
held (each cut waits for one), at least one crash state that dropped writes
of the ZNS drive that were never flushed (powerdisk's "last-state KEPT
DROPPED TORN"; the first cut always comes with a ZNS write, cut-after), and
the database drive holding writes for a flush (more writes than flushes
reached it; the guest checks that both drives report queue/write_cache
"write back").

--negative-control (tests vm-power-cut-nc-seal-noflush and
vm-power-cut-nc-record-unsynced, with the test builds of those names as
BLKMQD): one cut, the instant the first acknowledged seal is on the console
(the stagers never release there, POWER_RELEASE=0: no reset has flushed
the ZNS drive since blkmqd started, and no release in flight excuses a seal
the crash state lost), and the crash state "none", booted. Passes only if that state lost
an acknowledged seal; with the correct blkmqd it fails.

Usage: power-cut.py [--cuts N] [--states K] [--seed S] [--negative-control] BLKMQD BLKMQCTL
  (POWERDISK: the tools/powerdisk binary). Exit 0 pass, 1 fail, 77 skip
  (1 when CI=true). Prints "# power cuts: ..." with the counts."""

import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

VM_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(VM_DIR, "..", "lib"))
from blkmqtest import Env, FuseDisk  # noqa: E402

ZONES = 16
ZONE = 8 << 20
CONV = 64 << 20
SECTOR = 512


def skip(reason):
    sys.exit(subprocess.run(["sh", os.path.join(VM_DIR, "skip.sh"), reason]).returncode)


def zone_state(img, finished):
    """'INDEX SECTORS FINISHED' per zone: SECTORS up to the zone's last
    non-zero sector in IMG."""
    out = []
    with open(img, "rb") as f:
        for i in range(ZONES):
            f.seek(i * ZONE)
            data = f.read(ZONE).rstrip(b"\0")
            out.append(f"{i} {(len(data) + SECTOR - 1) // SECTOR} {int(finished[i])}")
    return "\n".join(out) + "\n"


class Book:
    """What the guest's stagers were told, from the console."""

    def __init__(self):
        self.acked = {}      # lease -> "K LEASE SHA LBA SIZE"
        self.rel = {}        # K -> lease
        self.seen = set()    # labels of stages begun

    def feed(self, line):
        f = line.split()
        if f[0] == "POWER-ACK" and len(f) == 6:
            self.acked[f[2]] = " ".join(f[1:])
        elif f[0] == "POWER-REL" and len(f) == 3:
            self.rel[f[1]] = f[2]
        elif f[0] == "POWER-RELD" and len(f) == 3:
            self.acked.pop(f[2], None)
            self.rel.pop(f[1], None)
        elif f[0] == "POWER-STAGING" and len(f) == 2:
            self.seen.add(f[1])

    def text(self):
        return "".join([f"ack {v}\n" for v in self.acked.values()] + [f"rel {k} {v}\n" for k, v in self.rel.items()] +
                       [f"seen {x}\n" for x in sorted(self.seen)])

    def copy(self):
        b = Book()
        b.acked, b.rel, b.seen = dict(self.acked), dict(self.rel), set(self.seen)
        return b


class Rounds:
    def __init__(self, a, env):
        self.a, self.env = a, env
        self.rnd = random.Random(a.seed)
        self.finished = [False] * ZONES
        self.boot_no = 0
        self.failed = []
        self.states = 0
        self.max_acked = 0
        self.lost = 0
        self.cuts_acked = 0      # cuts with acknowledged seals held
        self.cuts_dropped = 0    # cuts with a crash state that dropped unflushed ZNS writes
        self.db_writes = self.db_flushes = 0

    def boot(self, zns, conv, book, work, on_armed=None, on_ack=None):
        """One guest boot; returns (its console lines, run-guest's exit)."""
        self.boot_no += 1
        tmp = self.env.tmp
        with open(os.path.join(tmp, "zones.state"), "w") as f:
            f.write(zone_state(zns if not work else self.base_zns, self.finished))
        with open(os.path.join(tmp, "book"), "w") as f:
            f.write(book.text())
        pidfile = os.path.join(tmp, "qemu.pid")
        if os.path.exists(pidfile):
            os.unlink(pidfile)
        cmd = [sys.executable, os.path.join(VM_DIR, "run-guest.py"), "--zns", "--zones", str(ZONES),
               "--zone-size", "8M", "--zone-cap", "6M", "--zns-image", zns, "--drive-cache", "none",
               "--data-disk", conv,
               "--bin", self.a.blkmqd + ":/usr/local/bin/blkmqd", "--bin", self.a.blkmqctl,
               "--bin", shutil.which("blkzone"),
               "--file", os.path.join(VM_DIR, "guest", "daemon-lib.sh") + ":/vm/daemon-lib.sh",
               "--file", os.path.join(VM_DIR, "guest", "zones-crash-lib.sh") + ":/vm/zones-crash-lib.sh",
               "--file", os.path.join(tmp, "zones.state") + ":/vm/zones.state",
               "--file", os.path.join(tmp, "book") + ":/vm/book",
               "--env", f"POWER_ROUND={self.boot_no}", "--env", f"POWER_WORK={int(work)}",
               # The negative control: no journal commit of ext4's own (every
               # 5 s by default) while a record waits unsynced.
               "--env", "POWER_MOUNT_OPTS=" + ("commit=600" if self.a.negative_control else "defaults"),
               # ... and no release: one begun before the cut (the console is
               # read a moment late) excuses the seal it names, and its reset
               # flushes the ZNS drive (a CI run's negative control passed
               # the record-unsynced build so, 0 seals lost).
               "--env", f"POWER_RELEASE={0 if self.a.negative_control else 1}",
               "--qemu-arg=-pidfile", "--qemu-arg=" + pidfile,
               "--qemu-arg=-trace", "--qemu-arg=enable=pci_nvme_finish_zone",
               "--qemu-arg=-trace", "--qemu-arg=enable=pci_nvme_reset_zone",
               "--timeout", "900", "--log", os.path.join(self.a.log_dir, f"vm-power-cut-{self.boot_no}.console.log"),
               "--script", os.path.join(VM_DIR, "guest", "power-cut.sh")]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            return self.watch(p, book, work, pidfile, on_armed, on_ack)
        finally:
            if p.poll() is None:
                p.terminate()       # run-guest stops QEMU
                p.wait()

    def watch(self, p, book, work, pidfile, on_armed, on_ack):
        lines = []
        armed = False
        re_trace = re.compile(r"(?:\d+@[\d.]+:)?pci_nvme_(finish|reset)_zone .*idx=(\d+), all=(\d+)")
        cut_short = ""
        for line in p.stdout:
            line = line.rstrip("\n")
            m = re_trace.search(line)
            if m:
                # QEMU's trace (stderr) and the console share the stream: a
                # trace line can land inside a console line, whose rest then
                # comes as the next line. Put it back together.
                idx = [int(m.group(2))] if m.group(3) == "0" else range(ZONES)
                for i in idx:
                    self.finished[i] = m.group(1) == "finish"
                lines.append(line[m.start():])
                cut_short += line[:m.start()]
                continue
            line, cut_short = cut_short + line, ""
            lines.append(line)
            if line.startswith("POWER-") and work:
                book.feed(line)
                if on_ack and line.startswith("POWER-ACK") and book.acked:
                    on_ack(pidfile)
                    on_ack = None
            if line.startswith("POWER-ARMED") and on_armed and not armed:
                armed = True
                threading.Thread(target=on_armed, args=(pidfile,), daemon=True).start()
            if line.startswith(("not ok", "# round", "# zone state", "# book", "# write cache")) or \
                    "acknowledged seal" in line:
                print(f"[boot {self.boot_no}] {line}", flush=True)
        rc = p.wait()
        return lines, rc

    def judge(self, what, lines, rc, work):
        bad = [x for x in lines if x.startswith("not ok")]
        self.lost += sum(1 for x in lines if "acknowledged seal" in x and ("lost" in x or "read back" in x))
        checked = any(x.startswith("ok ") and "round" in x for x in lines)
        if bad or not checked or (not work and rc != 0):
            self.failed.append(what)
            print(f"not ok - {what}: " + ("; ".join(bad) if bad else f"run-guest exit {rc}, checked: {checked}"),
                  flush=True)
            for x in lines[-40:]:
                print(f"#   | {x}")
        else:
            print(f"ok - {what}", flush=True)

    def run(self):
        tmp = self.env.tmp
        self.base_zns = os.path.join(tmp, "zns.img")
        base_conv = os.path.join(tmp, "conv.img")
        with open(self.base_zns, "wb") as f:
            f.truncate(ZONES * ZONE)
        with open(base_conv, "wb") as f:
            f.truncate(CONV)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "4096", "-E", "lazy_itable_init=0,lazy_journal_init=0",
                        base_conv], check=True)
        book = Book()
        t0 = time.monotonic()
        for i in range(1, self.a.cuts + 1):
            pz = FuseDisk(self.env, self.a.powerdisk, ["--image=" + self.base_zns], "pz")
            pc = FuseDisk(self.env, self.a.powerdisk, ["--image=" + base_conv], "pc")
            delay = self.rnd.uniform(0.0, 8.0)
            # The first cut always with a ZNS write, one of the next 4 (a
            # tail to drop; the cut waits up to 60 s for it).
            after = self.rnd.randint(1, 30 if i > 1 else 4) if self.rnd.random() < 0.8 or i == 1 else 0
            cut_at = {}
            cut_lock = threading.Lock()

            def qemu_pid(pidfile):
                try:
                    with open(pidfile) as f:
                        return int(f.read().strip())
                except (OSError, ValueError) as e:
                    print(f"# cut {i}: no QEMU pid: {e}")
                    return None

            def cut_now(pid):
                with cut_lock:
                    if cut_at:
                        return
                    os.kill(pid, signal.SIGSTOP)
                    pz.ctl("cut")
                    pc.ctl("cut")
                    cut_at["done"] = True
                    os.kill(pid, signal.SIGKILL)

            def cut_at_ack(pidfile):
                # The negative control: the instant the first seal is
                # acknowledged (read here from the console as it comes).
                pid = qemu_pid(pidfile)
                if pid:
                    cut_now(pid)

            def no_ack(pidfile):
                # No seal acknowledged in 240 s: cut all the same (and lose
                # nothing, so the negative control fails, as it must).
                time.sleep(240)
                pid = qemu_pid(pidfile)
                if pid:
                    cut_now(pid)

            def cut(pidfile):
                # Most cuts come with the ZNS drive's Nth write from then
                # (inside the I/O: between an append and the seal's flush),
                # some at a random instant. QEMU is stopped in that instant
                # (by the powerdisk itself, or here), so both drives lose
                # power together: nothing more reaches the database's drive.
                pid = qemu_pid(pidfile)
                if not pid:
                    return
                # Every cut finds a seal acknowledged: what blkmqd promised
                # is at stake (the book carries them across cuts).
                # The stagers release seals too: one acknowledged before the
                # delay may be released by its end, so the wait comes after
                # it again (a smoke run's one cut held none without this).
                deadline = time.monotonic() + 120
                while not book.acked and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(delay)
                while not book.acked and time.monotonic() < deadline + 120:
                    time.sleep(0.05)
                if after:
                    pz.ctl(f"cut-after {after} {pid}")
                    deadline = time.monotonic() + (10 if i > 1 else 60)
                    while pz.stats()["cut"] != "1" and time.monotonic() < deadline:
                        time.sleep(0.005)
                cut_now(pid)
            try:
                if self.a.negative_control:
                    lines, rc = self.boot(pz.file, pc.file, book, True, on_armed=no_ack, on_ack=cut_at_ack)
                else:
                    lines, rc = self.boot(pz.file, pc.file, book, True, on_armed=cut)
                states = []
                if cut_at:
                    # Every line the guest printed before QEMU died: what
                    # the stagers were told before the cut (after it,
                    # nothing blkmqd does reaches the disks, so a reply sent
                    # then promises nothing new).
                    at_cut = book.copy()
                    s = self.rnd.randrange(1 << 30)
                    dropped = 0
                    for k, spec in enumerate(["none", f"random:{s}", f"random:{s + 7}"][:self.a.states]):
                        z, c = os.path.join(tmp, f"zns-{k}.img"), os.path.join(tmp, f"conv-{k}.img")
                        pz.ctl(f"state {z} {spec}")
                        dropped = max(dropped, int(pz.stats()["last-state"].split()[1]))
                        pc.ctl(f"state {c} {spec if spec == 'none' else f'random:{s + 100 + k}'}")
                        states.append((spec, z, c))
                    st, sc = pz.stats(), pc.stats()
                    self.cuts_acked += bool(at_cut.acked)
                    self.cuts_dropped += bool(dropped)
                    self.db_writes += int(sc["writes"])
                    self.db_flushes += int(sc["fsyncs"])
                    when = "at the first acknowledged seal" if self.a.negative_control else \
                        f"after {delay:.1f} s" + (f" and {after} ZNS writes" if after else "")
                    print(f"# cut {i}: {when}" +
                          f", {len(at_cut.acked)} acknowledged seals held, {len(at_cut.rel)} releases in flight; "
                          "ZNS disk: "
                          f"{st.get('tail')} writes after the last of {st.get('fsyncs')} flushes; database disk: "
                          f"{sc.get('tail')} writes after the last of {sc.get('fsyncs')} flushes, {sc.get('fua')} FUA "
                          f"({sc.get('writes')} writes); {sum(self.finished)} zones finished; ZNS writes dropped "
                          f"by the crash states: up to {dropped}", flush=True)
                    self.max_acked = max(self.max_acked, len(at_cut.acked))
            finally:
                pz.close()
                pc.close()
            self.judge(f"cut {i}: boot {self.boot_no} (the previous state checked, then stagers until the cut)",
                       lines, rc, True)
            if states and self.a.negative_control and not at_cut.acked:
                self.failed.append(f"cut {i}: no seal held")
                print(f"not ok - cut {i}: the negative control's cut held no acknowledged seal: the run proves "
                      "nothing", flush=True)
                break
            if states and self.a.negative_control and at_cut.rel:
                # Cannot happen with POWER_RELEASE=0; were it to, the run
                # could not tell a lost seal from a released one.
                self.failed.append(f"cut {i}: a release in flight")
                print(f"not ok - cut {i}: the negative control's cut came with {len(at_cut.rel)} releases in "
                      "flight (the stagers must not release): the run proves nothing", flush=True)
                break
            if states and self.a.negative_control:
                spec, z, c = states[0]
                lines, rc = self.boot(z, c, at_cut.copy(), False)
                self.states += 1
                self.judge(f"cut {i}: crash state {spec} (the negative control: must lose a seal)", lines, rc, False)
                break
            if not states:
                self.failed.append(f"cut {i}: never armed")
                print(f"not ok - cut {i}: the stagers never started")
                for x in lines[-40:]:
                    print(f"#   | {x}")
                break
            first = self.rnd.randrange(len(states))
            for k, (spec, z, c) in enumerate(states):
                if k == first:
                    continue
                lines, rc = self.boot(z, c, at_cut.copy(), False)
                self.states += 1
                self.judge(f"cut {i}: crash state {spec}", lines, rc, False)
                os.unlink(z)
                os.unlink(c)
            _, z, c = states[first]
            os.replace(z, self.base_zns)
            os.replace(c, base_conv)
            self.states += 1          # checked by the next boot
            self.check_book = at_cut
        if not self.failed and not self.a.negative_control:
            lines, rc = self.boot(self.base_zns, base_conv, self.check_book.copy(), False)
            self.judge("the last crash state", lines, rc, False)
        print(f"# power cuts: {self.a.cuts} cuts, {self.states} crash states checked in {self.boot_no} boots "
              f"({time.monotonic() - t0:.0f} s), up to {self.max_acked} acknowledged seals held at a cut, "
              f"{self.lost} acknowledged seals lost, {len(self.failed)} failed", flush=True)
        if self.a.negative_control:
            ok = self.lost > 0
            print(f"{'ok' if ok else 'not ok'} - negative control {os.path.basename(self.a.blkmqd)}: {self.lost} "
                  "acknowledged seals lost in the crash state none (must be > 0: the checks catch this build)",
                  flush=True)
            return ok
        # The run's strength: a gentler one fails here.
        strength = [
            (self.cuts_acked > 0, f"{self.cuts_acked} cuts with acknowledged seals held (must be > 0)"),
            (self.cuts_dropped > 0, f"{self.cuts_dropped} cuts whose crash states dropped unflushed ZNS writes "
                                    "(must be > 0)"),
            (self.db_writes > self.db_flushes > 0,
             f"the database drive: {self.db_writes} writes, {self.db_flushes} flushes (writes wait for a "
             "flush: more writes than flushes, and some flushes)"),
        ]
        for good, what in strength:
            print(f"{'ok' if good else 'not ok'} - strength: {what}", flush=True)
        return not self.failed and all(good for good, _ in strength)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("blkmqd")
    ap.add_argument("blkmqctl")
    ap.add_argument("--cuts", type=int, default=int(os.environ.get("POWER_CUTS", "1")))
    ap.add_argument("--states", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--negative-control", action="store_true",
                    help="one cut at the first acknowledged seal, state none: must lose it (a test build)")
    a = ap.parse_args()
    a.powerdisk = os.environ.get("POWERDISK", "")
    a.log_dir = os.environ.get("VM_LOG_DIR", os.getcwd())
    a.seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    a.blkmqd, a.blkmqctl = os.path.abspath(a.blkmqd), os.path.abspath(a.blkmqctl)
    os.environ["BLKMQD"], os.environ["BLKMQCTL"] = a.blkmqd, a.blkmqctl     # blkmqtest's Env
    if os.geteuid() != 0:
        skip("vm-power-cut: needs root (FUSE mounts)")
    if not os.access(a.powerdisk, os.X_OK):
        skip("vm-power-cut: set POWERDISK=/path/to/powerdisk (built with libfuse3-dev)")
    if not os.path.exists("/dev/fuse"):
        skip("vm-power-cut: no /dev/fuse")
    for tool in ("blkzone", "mkfs.ext4"):
        if not shutil.which(tool):
            skip(f"vm-power-cut: {tool} missing")
    rc = subprocess.run(["bash", os.path.join(VM_DIR, "prepare.sh")]).returncode
    if rc != 0:
        sys.exit(rc)
    if a.negative_control:
        a.cuts, a.states = 1, 1
    print(f"# vm-power-cut: {a.cuts} cuts, {a.states} crash states each, seed {a.seed}"
          + (f", negative control {a.blkmqd}" if a.negative_control else ""), flush=True)
    with Env("vm-power-cut") as env:
        ok = Rounds(a, env).run()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
