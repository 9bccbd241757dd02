#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Power cuts on the host: what blkmqd acknowledged survives losing the
disk's volatile write cache, not only a kill -9.

The disk: tools/powerdisk (a FUSE file that keeps, after a cut, everything up
to its last completed flush and a chosen subset of the writes after it),
under a loop device with --direct-io=on, with ext4 on it. The emulated
backend's zone file, its zone state file, and the SQLite database with its
WAL all live on that ext4: their O_DSYNC writes and fsyncs reach the
powerdisk as the loop device's flushes, as they would reach a disk.

Each cut: blkmqd runs with three stagers (tests/integration/
test_zone_crash.py's Stager, Book and check_round, reused) across allocate,
append, seal, release and the batched reset; at a random moment blkmqd is
cut and blkmqd killed with SIGKILL at once (a cut loses only what was not
flushed; what blkmqd does after the cut fails with EIO, and the kill ends
it there). Then crash states:
  - none or prefix:K (the writes after the last flush dropped, or the first
    K kept), all, random:SEED, and torn:SEED limited to the blocks of the
    database's WAL (writes into the WAL kept at random and cut at a sector,
    everything else kept);
each state on its own loop device and mount, blkmqd started on it, and
check_round's checks: every acknowledged seal sealed and reading back to its
SHA-256, no lease on two zones, no zone failed, allocated or writing (the
interrupted leases settled), no sealed zone no client knows of; the database
and WAL pass PRAGMA integrity_check; an Allocate works. One state per cut,
chosen at random, is where the stagers' blkmqctl stage settles its outcome
(it waits for blkmqd to come back), and it carries the history on to the
next cut. The other states count a seal whose reply never arrived (its
lease printed by a stager, not acknowledged) as what the stager would settle.

A torn WAL: beside the states above, the WAL's last sector is overwritten in
a copy of the "all" state (a tear past the flush contract, so its records may
go): the database must still open, pass integrity_check and serve Allocate.

The run asserts its own strength, so that a gentler run cannot pass
unnoticed: at least one cut found acknowledged seals held, and at least one
crash state dropped writes that had not been flushed (powerdisk's
"last-state KEPT DROPPED TORN"). The first cut always comes with a write
(cut-after), and every cut waits for a first acknowledged seal.

--negative-control BLKMQD (test test_power_cut_nc, with the test build
blkmqd-nc-record-unsynced: its zone database at synchronous=OFF, so a record
is acknowledged before its commit is durable): one stager, and one cut in
the instant its first seal is acknowledged (made in the stager's thread, so
no other call reaches blkmqd in between; ext4 mounted with commit=600, so no
journal commit of its own comes in between either), and the crash state
"none" (nothing after the last flush). That state must lose an acknowledged
seal, and the test fails if it does not: with the correct blkmqd it fails. (The host cannot catch a seal
without its flush, blkmqd-nc-seal-noflush: the emulated backend writes
O_DIRECT|O_DSYNC, each write durable by itself; vm-power-cut-nc-seal-noflush
catches it below the guest.)

--cuts N (default 4, well under a minute; bench/power-cut runs 200).
Needs root, loop devices, /dev/fuse, mkfs.ext4; $POWERDISK, $BLKMQD,
$BLKMQCTL. Exit 0 pass, 1 fail, 77 skip."""

import argparse
import errno
import os
import random
import re
import shutil
import sqlite3
import subprocess
import threading
import time

from blkmqtest import (Ctl, Env, FuseDisk, Runner, ctl_path, log, main_guard, need_powerdisk, run, skip, timeout_scale,
                       wait_for)
from test_zone_crash import Book, Service, Stager, check_round

DISK = 160 << 20
TALLY = {"stages answered IOError": 0, "of them settled as staged by blkmqctl after the restart": 0}
BLOCK = 4096


def mkfs(path):
    with open(path, "wb") as f:
        f.truncate(DISK)
    run(["mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-E", "lazy_itable_init=0,lazy_journal_init=0", path])


def extents(path):
    """[(disk byte offset, length)] of PATH's blocks (filefrag -e), [] if
    it has none or is gone."""
    p = subprocess.run(["filefrag", "-e", "-b%d" % BLOCK, path], capture_output=True, text=True)
    out = []
    for m in re.finditer(r"^\s*\d+:\s*(\d+)\.\.\s*(\d+):\s*(\d+)\.\.\s*(\d+):", p.stdout, re.M):
        lo, hi, phys = int(m.group(1)), int(m.group(2)), int(m.group(3))
        out.append((lo, phys, hi - lo + 1))
    return out


class Rig:
    """The powerdisk, its loop device and the ext4 mount; and the crash
    states, each mounted in turn."""

    def __init__(self, env, powerdisk):
        self.env, self.powerdisk = env, powerdisk
        self.mnt = os.path.join(env.tmp, "fs")
        os.makedirs(self.mnt)
        self.pd = None
        self.loop = None

    def mount(self, image, live, opts=()):
        if live:
            self.pd = FuseDisk(self.env, self.powerdisk, ["--image=" + image], "powerdisk")
            self.loop = self.env.attach(path=self.pd.file, direct_io=True)
        else:
            self.loop = self.env.attach(path=image)
        run(["mount", "-t", "ext4"] + [f"-o{o}" for o in opts] + [self.loop.dev, self.mnt])

    def unmount(self):
        if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0 and os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if self.loop:
            self.env.detach(self.loop)
            self.loop = None
        if self.pd:
            self.pd.close()
            self.pd = None


def db_check(db, tmp):
    """PRAGMA integrity_check of a copy of the database and its WAL (so the
    copy, not the state, is recovered): 'ok' or the error."""
    os.makedirs(tmp, exist_ok=True)
    for suffix in ("", "-wal"):
        if os.path.exists(db + suffix):
            shutil.copyfile(db + suffix, os.path.join(tmp, "zones.db" + suffix))
    try:
        con = sqlite3.connect(os.path.join(tmp, "zones.db"))
        try:
            return con.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error as e:
        return f"{type(e).__name__}: {e}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def allocate_works(svc):
    """An Allocate is answered with a lease (released again), or, with every
    zone held, with the named error that says so."""
    rep = svc.call("Allocate", {"size": 4096})
    if "error" not in rep:
        svc.call("Release", {"lease": rep["parameters"]["lease"]})
        return True, "lease"
    held = all(z["state"] in ("sealed", "allocated", "writing") for z in svc.zones())
    return held, rep["error"]


def adopt_unreplied(svc, book, leases):
    """A seal made durable whose reply the cut took: its stager printed the
    lease and, started again, settles it as staged. Counted as acknowledged
    (and so read back) in the states where it is sealed. Returns how many."""
    n = 0
    for z in svc.zones():
        lease = z.get("lease")
        if z["state"] == "sealed" and lease not in book.acked and lease in leases:
            book.acked[lease] = (-1, z["sha256"], z["bytesWritten"], z["start"])
            n += 1
    return n


def check_state(r, rig, svc, book, tag, quiet, settle=None):
    """Starts blkmqd on the mounted state and checks it; settle: the stager
    threads waiting to settle against it."""
    problems = []
    ic = db_check(svc.db, os.path.join(rig.env.tmp, "dbcheck"))
    if ic != "ok":
        problems.append(f"{tag}: the database does not pass integrity_check: {ic}")
    try:
        svc.start()
    except Exception as e:
        r.ok(False, f"{tag}: blkmqd starts on the crash state", str(e), daemon=svc.d)
        return False
    if settle is not None:
        for t in settle:
            t.join(180)
        # Between the cut and the kill, a call whose write or commit failed
        # is answered with IOError: no acknowledgement, the right answer of a
        # daemon whose disk went away (before the cut the disk fails nothing).
        # But a commit whose fsync failed may have reached the media all the
        # same: the zone can come back sealed. blkmqctl stage, whose release
        # after the failed seal found blkmqd gone or refusing, settles that
        # itself (it asks until a blkmqd that can settle answers, as after a
        # lost connection): found sealed with its file, it exits 0 with the
        # object, and the book has it. A failed seal that could not be
        # released and was not settled would leak a sealed zone: a problem.
        failed = [o for o in book.odd if '"io.blkmqd.Zones.IOError"' in o or ".FlushFailed" in o]
        book.odd = [o for o in book.odd if o not in failed]
        for o in failed:
            # Told the truth: released; or never sealed (an append or an
            # allocation that failed: nothing of it is kept). A failed seal
            # that could not be released must have been settled.
            if "could not release" in o and "was never sealed" not in o:
                problems.append(f"{tag}: a stage whose seal failed neither released its lease nor settled it:\n{o}")
        TALLY["stages answered IOError"] += len(failed) + book.settled_after_error
        TALLY["of them settled as staged by blkmqctl after the restart"] += book.settled_after_error
        book.settled_after_error = 0
    else:
        adopt_unreplied(svc, book, book.seen)
    ok = check_round(r, svc, book, tag, quiet)
    works, what = allocate_works(svc)
    if not works:
        problems.append(f"{tag}: Allocate: {what}")
    if problems:
        ok = r.ok(False, f"{tag}: database and Allocate", "\n".join(problems), daemon=svc.d)
    svc.stop()
    return ok


def tear_wal(image, wal_ext, wal_size, rnd):
    """Overwrites the WAL's last 512-byte sector in IMAGE with noise."""
    off = wal_size - 512
    for lo, phys, n in wal_ext:
        if lo * BLOCK <= off < (lo + n) * BLOCK:
            with open(image, "r+b") as f:
                f.seek(phys * BLOCK + off - lo * BLOCK)
                f.write(rnd.randbytes(512))
            return True
    return False


def cuts(r, env, ctl_bin, powerdisk, n, seed, stagers):
    rig = Rig(env, powerdisk)
    try:
        return run_cuts(r, env, ctl_bin, rig, n, seed, stagers)
    finally:
        rig.unmount()       # whatever stopped the cuts


def run_cuts(r, env, ctl_bin, rig, n, seed, stagers):
    rnd = random.Random(seed)
    log(f"# power cuts: {n}, seed {seed}, {stagers} stagers")
    base = os.path.join(env.tmp, "base.img")
    mkfs(base)
    svc = Service(env, "zones", data_dir=rig.mnt)
    ctl = Ctl(ctl_bin, svc.sock)
    book = Book()
    tally = {"states": 0, "failed states": 0, "torn WAL states": 0, "cuts with WAL writes after the flush": 0,
             "tail writes": 0, "acknowledged seals": 0, "cuts with acknowledged seals": 0,
             "cuts with unflushed writes dropped": 0, "unflushed writes dropped": 0}
    t0 = time.monotonic()
    for i in range(1, n + 1):
        svc.write_config(1 if i % 2 else 2)
        rig.mount(base, live=True)
        try:
            svc.start()
            threads = [Stager(k, svc, ctl, env, book, random.Random(rnd.random()), f"c{i}-") for k in range(stagers)]
            for t in threads:
                t.start()
            # Every cut finds a seal acknowledged (the run's strength: what
            # blkmqd promised is at stake), then comes at a random moment.
            wait_for(lambda: book.clone().acked, 60)
            time.sleep(rnd.uniform(0.1, 1.5))
            # The cut, then SIGKILL at once: what blkmqd had not made
            # durable by then is the disk's to lose, and nothing it does
            # after the cut reaches the media (its I/O fails with EIO). Most
            # cuts come with a write (cut-after: inside the I/O, between a
            # write and its flush), some at a random instant.
            if rnd.random() < 0.8 or i == 1:      # the first always: a tail to drop
                # (the first within its next 4 writes, and waited for longer)
                rig.pd.ctl(f"cut-after {rnd.randint(1, 40 if i > 1 else 4)}")
                if not wait_for(lambda: rig.pd.stats()["cut"] == "1", 3 if i > 1 else 30):
                    rig.pd.ctl("cut")
            else:
                rig.pd.ctl("cut")
            svc.kill9()
            wal = svc.db + "-wal"
            wal_size = os.path.getsize(wal) if os.path.exists(wal) else 0
            wal_ext = extents(wal) if wal_size else []
            at_cut = book.clone()
            for t in threads:
                t.stop.set()
            tail = os.path.join(env.tmp, "tail.txt")
            rig.pd.ctl("log " + tail)
            with open(tail) as f:
                writes = [tuple(int(x) for x in line.split()[1:3]) for line in f]
            ranges = [(phys * BLOCK, k * BLOCK) for _, phys, k in wal_ext]
            into_wal = [w for w in writes if any(w[0] < o + ln and o < w[0] + w[1] for o, ln in ranges)]
            tally["tail writes"] += len(writes)
            tally["cuts with WAL writes after the flush"] += bool(into_wal)
            s = rnd.randrange(1 << 30)
            specs = ["none" if i % 2 else f"prefix:{rnd.randrange(len(writes) + 1)}", "all", f"random:{s}",
                     f"torn:{s + 1}" + ("@" + ",".join(f"{o}+{ln}" for o, ln in ranges) if ranges else "")]
            states = []
            dropped = 0
            for k, spec in enumerate(specs):
                path = os.path.join(env.tmp, f"state-{k}.img")
                rig.pd.ctl(f"state {path} {spec}")
                states.append((spec, path))
                dropped = max(dropped, int(rig.pd.stats()["last-state"].split()[1]))
        finally:
            rig.unmount()
        log(f"# cut {i}: {len(writes)} writes after the last flush ({len(into_wal)} into the WAL), "
            f"{len(at_cut.acked)} acknowledged seals held")
        tally["acknowledged seals"] = max(tally["acknowledged seals"], len(at_cut.acked))
        tally["cuts with acknowledged seals"] += bool(at_cut.acked)
        tally["cuts with unflushed writes dropped"] += bool(dropped)
        tally["unflushed writes dropped"] += dropped
        # The state the stagers settle against, and the next cut's disk.
        first = rnd.randrange(len(states))
        order = [first] + [k for k in range(len(states)) if k != first]
        for k in order:
            spec, path = states[k]
            rig.mount(path, live=False)
            try:
                if k == first:
                    ok = check_state(r, rig, svc, book, f"cut {i} state {spec} (settled)", n > 10, settle=threads)
                else:
                    b = at_cut.clone()
                    b.seen = set(book.seen)      # the in-flight leases, printed by now
                    ok = check_state(r, rig, svc, b, f"cut {i} state {spec}", n > 10)
            finally:
                rig.unmount()
            tally["states"] += 1
            tally["failed states"] += not ok
        # A WAL torn past the flush: it still opens.
        if wal_size >= 512 and wal_ext:
            torn = os.path.join(env.tmp, "torn-wal.img")
            shutil.copyfile(states[1][1], torn)
            if tear_wal(torn, wal_ext, wal_size, rnd):
                rig.mount(torn, live=False)
                try:
                    ic = db_check(svc.db, os.path.join(env.tmp, "dbcheck"))
                    svc.start()
                    works, what = allocate_works(svc)
                    ok = ic == "ok" and works
                    if not ok or n <= 10:
                        r.ok(ok, f"cut {i}: the WAL's last sector torn: the database opens (integrity {ic}), "
                             f"Allocate: {what}", daemon=svc.d if not ok else None)
                    else:
                        r.passed += 1
                    svc.stop()
                finally:
                    rig.unmount()
                tally["torn WAL states"] += 1
                tally["states"] += 1
                tally["failed states"] += not ok
            os.unlink(torn)
        os.replace(states[first][1], base)
        for _, path in states:
            if os.path.exists(path):
                os.unlink(path)
    tally.update(TALLY)
    log(f"# {n} power cuts in {time.monotonic() - t0:.0f} s: {tally}")
    return tally


class Findings:
    """A Runner that keeps what the checks found instead of failing: the
    negative control counts the losses they report."""

    def __init__(self):
        self.passed = self.failed = 0
        self.lines = []

    def ok(self, cond, name, detail=None, daemon=None):
        if not cond:
            self.failed += 1
            self.lines += [name] + (detail.splitlines() if isinstance(detail, str) else list(map(str, detail or [])))
        else:
            self.passed += 1
        return cond

    def lost(self):
        return [x for x in self.lines if re.search(r"acknowledged seal \S+( lost|: the device does not read back)", x)]


class CutBook(Book):
    """A Book that calls cut() in the stager's thread as it takes the
    acknowledgement of the WANTth seal, before the stager does anything else."""

    def __init__(self, want, cut):
        super().__init__()
        self.want, self.cut = want, cut

    def sealed(self, k, lease, h, size, start):
        super().sealed(k, lease, h, size, start)
        if self.cut and len(self.acked) >= self.want:
            cut, self.cut = self.cut, None
            cut()


def negative_control(r, env, ctl_bin, powerdisk, seed, want=1):
    """One stager; one cut in the instant its WANTth seal is acknowledged
    (nothing of blkmqd's runs between the reply and the cut: the stager, its
    only client, is the one cutting), crash state none: returns the lines of
    the checks that report an acknowledged seal lost."""
    rig = Rig(env, powerdisk)
    rnd = random.Random(seed)
    threads = []
    try:
        base = os.path.join(env.tmp, "base.img")
        mkfs(base)
        svc = Service(env, "zones", data_dir=rig.mnt)
        ctl = Ctl(ctl_bin, svc.sock)
        done = threading.Event()

        def cut():
            rig.pd.ctl("cut")
            svc.kill9()
            for t in threads:
                t.stop.set()
            done.set()

        book = CutBook(want, cut)
        svc.write_config(1)
        # No journal commit of ext4's own (every 5 s by default) while the
        # record waits unsynced: only blkmqd's I/O moves the disk.
        rig.mount(base, live=True, opts=["commit=600"])
        try:
            svc.start()
            threads = [Stager(0, svc, ctl, env, book, random.Random(rnd.random()), "nc-")]
            for t in threads:
                t.start()
            r.ok(done.wait(60 * timeout_scale()), f"a seal acknowledged ({want} wanted), then the cut")
            at_cut = book.clone()
            state = os.path.join(env.tmp, "state-none.img")
            rig.pd.ctl(f"state {state} none")
            st = rig.pd.stats()
        finally:
            rig.unmount()
        log(f"# negative control: cut at {len(at_cut.acked)} acknowledged seals, {st['tail']} writes after "
            f"the last of {st['fsyncs']} flushes; crash state none: last-state {st['last-state']} "
            "(kept dropped torn)")
        found = Findings()
        rig.mount(state, live=False)
        try:
            check_state(found, rig, svc, book, "negative control: crash state none", False, settle=threads)
        finally:
            rig.unmount()
        for x in found.lines:
            log(f"#   {x}")
        return found.lost()
    finally:
        for t in threads:
            t.stop.set()
        rig.unmount()


def disk_cases(r, env, powerdisk):
    """The powerdisk itself, on its file (no loop device): what a crash
    state keeps."""
    pd = FuseDisk(env, powerdisk, ["--size=1M"], "pd-self")
    blk = lambda c: bytes([c]) * 4096
    try:
        fd = os.open(pd.file, os.O_RDWR)
        os.pwrite(fd, blk(1), 0)
        os.fsync(fd)
        os.pwrite(fd, blk(2), 4096)                   # never flushed
        os.pwritev(fd, [blk(3)], 8192, os.RWF_DSYNC)  # FUA
        pd.ctl("fail-fsync 1")
        try:
            os.fsync(fd)
            failed = None
        except OSError as e:
            failed = e.errno
        r.eq(failed, errno.EIO, "fail-fsync 1: the next fsync fails with EIO")
        os.pwrite(fd, blk(4), 12288)
        r.eq(os.pread(fd, 4 * 4096, 0), blk(1) + blk(2) + blk(3) + blk(4), "reads see every write before the cut")
        os.close(fd)
        pd.ctl("cut")
        try:
            with open(pd.file, "rb") as f:
                f.read(1)
            after = None
        except OSError as e:
            after = e.errno
        r.eq(after, errno.EIO, "after the cut the disk answers EIO")
        got = {}
        for spec in ("none", "all", "prefix:1", "torn:1"):
            path = os.path.join(env.tmp, "pd-" + spec.replace(":", "-"))
            pd.ctl(f"state {path} {spec}")
            with open(path, "rb") as f:
                got[spec] = [f.read(4096)[:1] for _ in range(4)]
        z, b = b"\0", lambda c: bytes([c])
        r.eq(got["none"], [b(1), z, b(3), z], "none: the flushed write and the FUA write, not the others "
             "(the failed fsync made nothing durable)")
        r.eq(got["all"], [b(1), b(2), b(3), b(4)], "all: every write")
        r.eq(got["prefix:1"], [b(1), b(2), b(3), z], "prefix:1: the first write after the flush, and the FUA one")
        r.eq(pd.stats()["fua"], "1", "the RWF_DSYNC write counted as FUA")
    finally:
        pd.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuts", type=int, default=int(os.environ.get("BLKMQD_POWER_CUTS", "4")))
    ap.add_argument("--stagers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--negative-control", metavar="BLKMQD",
                    help="a test build that acknowledges a seal before its record is durable: must lose one")
    a = ap.parse_args()
    if a.negative_control:
        os.environ["BLKMQD"] = os.path.abspath(a.negative_control)
    powerdisk = need_powerdisk()
    ctl_bin = ctl_path()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    r = Runner("power-cut")
    if a.negative_control:
        with Env("power-cut-nc") as env:
            with r.case(f"negative control {os.path.basename(a.negative_control)}: one cut, crash state none", env):
                lost = negative_control(r, env, ctl_bin, powerdisk, seed)
                r.ok(lost, f"negative control: {len(lost)} acknowledged seals lost in the crash state none "
                     "(must be > 0: the checks catch this build)")
        r.finish()
        return
    with Env("power-cut") as env:
        with r.case("the disk that forgets: what a crash state keeps", env):
            disk_cases(r, env, powerdisk)
        with r.case(f"{a.cuts} power cuts, {a.stagers} stagers, several crash states each", env):
            tally = cuts(r, env, ctl_bin, powerdisk, a.cuts, seed, a.stagers)
            r.eq(tally["failed states"], 0, f"{a.cuts} power cuts, {tally['states']} crash states: none failed")
            # The run's strength: a gentler one fails here.
            r.ok(tally["cuts with acknowledged seals"] > 0,
                 f"{tally['cuts with acknowledged seals']} cuts with acknowledged seals held (must be > 0)")
            r.ok(tally["cuts with unflushed writes dropped"] > 0,
                 f"{tally['cuts with unflushed writes dropped']} cuts whose crash states dropped unflushed writes, "
                 f"{tally['unflushed writes dropped']} writes in all (must be > 0)")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
