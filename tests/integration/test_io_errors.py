#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Real I/O errors from below: blkmqd over a disk that fails a flush or a
read for real, and each failure ends in the state the man pages give, with
nothing acknowledged that the media does not hold.

The disks: two tools/powerdisk files, each under a loop device with
--direct-io=on and ext4 on it (as test_power_cut's); one holds the
emulated zones (Emulate=, its data file written O_DIRECT|O_DSYNC and its
zone state file), the other the SQLite database and its WAL. An fdatasync
of a file there reaches the powerdisk as the loop device's flush, and
powerdisk's fail-fsync fails it with EIO as a disk would; its fail-read
fails the reads of a byte range (a medium error). The ext4 has no journal:
then each fsync is one flush of the disk, sent and answered in the
caller's thread, and nothing else flushes (a journal commits on a thread
of its own, and a failed commit turns the file system read-only: a test
of ext4, not of blkmqd).

Which flush of an operation fails: a seal and a batch of resets end with
the emulation's flush, an fdatasync of its data file and one of its state
file, the last two fsyncs of the zone disk in the operation. A first run
of the same operation counts its fsyncs (F); the test then arms
"fail-fsync 1 F-2": the flush's first fdatasync fails, nothing before it.

Cases:
  - a Seal's flush fails: FlushFailed (deviceId, errno 5), blkmqctl exit
    10; the zone failed, its note and record say the flush, no SHA-256, no
    object; a second Seal: WrongState; a restart: still failed; released,
    it is reset and free;
  - blkmqctl stage whose seal's flush fails, blkmqd killed as it records
    the release after it (BLKMQD_TEST_KILL_AT): stage settles with the
    restarted blkmqd, finds the lease dropped and stages again, nothing
    leaked;
  - a reset batch's flush fails: the released zone is failed (not free),
    with no lease, label or owner; the disk's durable image (powerdisk
    state none) still holds the object under the file system's own map,
    while the live file reads zeros: the reset was not durable; zones
    repair whose flush fails leaves it failed (exit 10), one that works
    makes it free and empty;
  - the database's fsync fails in the middle of a Release: IOError, the
    lease kept, the zone sealed with its data (Read verifies), every later
    write refused until blkmqd is started again; the database's durable
    image holds the zone sealed under the lease (what the reply said);
    after a kill -9 and a restart the zone is sealed with its data or
    released, never failed or lost;
  - read errors under the seal's verification: the reads behind the
    appends fail (the log says the seal reads it all), the Seal's
    read-back fails: IOError, the zone still being written under its
    lease, no SHA-256; readable again, Seal seals it;
  - a read error under Verify: the object's scrub result ioError, blkmqctl
    exit 9, the zone still sealed (never repaired), counted damaged; when
    the range reads again, Verify says ok;
  - a read error under the scrub: the same, found by the scrub alone, and
    kept in the zone's record note.

Needs root, loop devices, /dev/fuse, mkfs.ext4, filefrag; $POWERDISK,
$BLKMQD, $BLKMQCTL. Exit 0 pass, 1 fail, 77 skip."""

import base64
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess

from blkmqtest import (Ctl, Env, FuseDisk, Runner, ctl_path, log, main_guard, need_powerdisk, read_img, run, sha, show,
                       skip, wait_for)
from test_power_cut import BLOCK, extents
from test_zone_crash import Service

DISK = 96 << 20
SIZE = (1 << 20) + 4096 * 3     # whole blocks: no padded tail block at the seal


class Disk:
    """A powerdisk, its loop device and ext4 (no journal) mounted on
    env.tmp/NAME-fs."""

    def __init__(self, env, powerdisk, name):
        self.env = env
        self.pd = FuseDisk(env, powerdisk, [f"--size={DISK}"], name)
        self.loop = env.attach(path=self.pd.file, direct_io=True)
        run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-b", str(BLOCK), "-E", "lazy_itable_init=0",
             self.loop.dev])
        self.mnt = os.path.join(env.tmp, name + "-fs")
        os.makedirs(self.mnt)
        run(["mount", "-t", "ext4", self.loop.dev, self.mnt])

    def fsyncs(self):
        s = self.pd.stats()
        return int(s["fsyncs"]) + int(s["failed-fsyncs"])

    def failed_fsyncs(self):
        return int(self.pd.stats()["failed-fsyncs"])

    def durable(self, name):
        """The durable image (what a power cut now would leave), mounted
        read-only; returns (mount point, cleanup)."""
        img = os.path.join(self.env.tmp, name + ".img")
        self.pd.ctl(f"state {img} none")
        loop = self.env.attach(path=img)
        mnt = os.path.join(self.env.tmp, name)
        os.makedirs(mnt, exist_ok=True)
        run(["mount", "-o", "ro", "-t", "ext4", loop.dev, mnt])

        def cleanup():
            subprocess.run(["umount", mnt], capture_output=True)
            self.env.detach(loop)
            os.unlink(img)
        return mnt, cleanup

    def close(self):
        if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0 and os.path.ismount(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        self.env.detach(self.loop)
        self.pd.close()


def service(env, zdisk, ddisk, name, extra="", reset_batch=1):
    """test_zone_crash's Service, its zones on zdisk and its database on ddisk."""
    svc = Service(env, name, data_dir=zdisk.mnt)
    svc.db = os.path.join(ddisk.mnt, name + ".db")
    svc.write_config(reset_batch, extra)
    return svc


def stage(svc, data, label=None):
    """Allocate and Append (no Seal): the lease."""
    args = {"size": len(data)}
    if label:
        args["label"] = label
    lease = svc.call("Allocate", args)["parameters"]["lease"]
    for off in range(0, len(data), 1 << 20):
        rep = svc.call("Append", {"lease": lease, "data": base64.b64encode(data[off:off + (1 << 20)]).decode()})
        if "error" in rep:
            raise RuntimeError(f"Append: {rep}")
    return lease


def seal(svc, lease, data):
    return svc.call("Seal", {"lease": lease, "sha256": hashlib.sha256(data).hexdigest()})


def get(svc, lease=None, index=None):
    args = {"lease": lease} if lease else {"device": svc.dev, "zoneIndex": index}
    return svc.call("Get", args)["parameters"]["zone"]


def record(svc, index):
    """The zone's row in a copy of the database (with its WAL), as a
    restart would read it: a dict, or None."""
    tmp = os.path.join(svc.env.tmp, "dbcopy")
    os.makedirs(tmp, exist_ok=True)
    for suffix in ("", "-wal"):
        if os.path.exists(svc.db + suffix):
            shutil.copyfile(svc.db + suffix, os.path.join(tmp, "z.db" + suffix))
    try:
        con = sqlite3.connect(os.path.join(tmp, "z.db"))
        con.row_factory = sqlite3.Row
        row = con.execute("SELECT * FROM zones WHERE device_id = ? AND zone_index = ?", (svc.dev, index)).fetchone()
        con.close()
        return dict(row) if row else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def zone_range(svc, z, length):
    """The powerdisk byte ranges under [start, start + length) of the
    emulation's data file, as "OFF+LEN,..." (filefrag)."""
    lo, hi = z["start"] // BLOCK, (z["start"] + length + BLOCK - 1) // BLOCK
    out = []
    for first, phys, n in extents(svc.img):
        a, b = max(lo, first), min(hi, first + n)
        if a < b:
            out.append(f"{(phys + a - first) * BLOCK}+{(b - a) * BLOCK}")
    return ",".join(out)


def seal_flush_case(r, env, zdisk, ddisk, ctl_bin):
    svc = service(env, zdisk, ddisk, "seal")
    d = svc.start()
    ctl = Ctl(ctl_bin, svc.sock)
    # The same seal once, working: how many fsyncs it makes.
    data = os.urandom(SIZE)
    lease = stage(svc, data)
    before = zdisk.fsyncs()
    rep = seal(svc, lease, data)
    f = zdisk.fsyncs() - before
    r.ok("error" not in rep and f >= 2, f"a seal that works: sealed, {f} fsyncs of the zone disk", rep)

    data = os.urandom(SIZE)
    lease = stage(svc, data, "flush-fails")
    zdisk.pd.ctl(f"fail-fsync 1 {f - 2}")
    failed = zdisk.failed_fsyncs()
    p = ctl("zones", "seal", lease, hashlib.sha256(data).hexdigest())
    zdisk.pd.ctl("fail-fsync 0")
    r.eq(zdisk.failed_fsyncs() - failed, 1, "the seal's flush failed on the disk (one fsync failed)")
    r.ok(p.returncode == 10 and svc.dev in p.stderr and "could not flush its write cache" in p.stderr,
         "blkmqctl zones seal: exit 10, naming the device and the flush, no seal", show(p))
    z = get(svc, lease)
    r.ok(z["state"] == "failed" and z.get("lease") == lease and "sha256" not in z
         and "the flush after the seal failed" in z.get("note", ""),
         "the zone is failed under its lease, its note says the flush, no SHA-256", z)
    rec = record(svc, z["zoneIndex"])
    r.ok(rec and rec["state"] == "failed" and not rec["sha256"] and "flush" in (rec["note"] or ""),
         "its record says failed, no SHA-256", rec)
    r.ok(all(o.get("lease") != lease for o in svc.call("ListObjects", {})["parameters"]["objects"]), "no object")
    rep = seal(svc, lease, data)
    r.ok(rep.get("error") == "io.blkmqd.Zones.WrongState" and rep["parameters"].get("state") == "failed",
         "a second Seal, whose flush would work: WrongState, never sealed on a retry", rep)
    # The FlushFailed reply itself, on a third object.
    data = os.urandom(SIZE)
    lease3 = stage(svc, data)
    zdisk.pd.ctl(f"fail-fsync 1 {f - 2}")
    rep = seal(svc, lease3, data)
    zdisk.pd.ctl("fail-fsync 0")
    r.ok(rep.get("error") == "io.blkmqd.Zones.FlushFailed" and rep["parameters"].get("deviceId") == svc.dev
         and rep["parameters"].get("errno") == 5, "the reply: FlushFailed(deviceId, errno 5)", rep)
    svc.stop()
    d = svc.start()
    z = get(svc, lease)
    r.eq(z["state"], "failed", "after a restart: still failed")
    r.eq(ctl("zones", "release", lease).returncode, 0, "its holder releases it")
    r.ok(wait_for(lambda: get(svc, index=z["zoneIndex"])["state"] == "free", 10), "reset and flushed: free",
         daemon=d)
    svc.stop()


def stage_settle_case(r, env, zdisk, ddisk, ctl_bin):
    """blkmqctl stage whose seal's flush fails for real, and blkmqd dies as
    it records the release after it: stage settles with the restarted
    blkmqd (the lease dropped: staged again), nothing leaked."""
    svc = service(env, zdisk, ddisk, "settle")
    svc.start(BLKMQD_TEST_KILL_AT="durable:io.blkmqd.Zones.Release")
    ctl = Ctl(ctl_bin, svc.sock)
    fw = os.path.join(env.tmp, "settle.bin")
    data = os.urandom(70000)        # a partial last block: the seal writes it first
    with open(fw, "wb") as f:
        f.write(data)
    before = zdisk.fsyncs()
    p, _ = ctl.json("stage", fw, "--label", "fw-first")
    f = zdisk.fsyncs() - before
    if p.returncode != 0 or f < 2:
        raise RuntimeError(f"a stage that works: {f} fsyncs of the zone disk; {show(p)}")
    log(f"# a stage that works: {f} fsyncs of the zone disk")
    zdisk.pd.ctl(f"fail-fsync 1 {f - 2}")
    st = subprocess.Popen([ctl_bin, "--address", svc.sock, "--json", "stage", fw, "--label", "fw-settle",
                           "--settle-timeout=60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        died = svc.died(20)
    finally:
        zdisk.pd.ctl("fail-fsync 0")
    r.ok(died, "the seal's flush fails, and blkmqd dies at the release after it", daemon=svc.d)
    d = svc.start()
    out, err = st.communicate(timeout=90)
    o = json.loads(out) if st.returncode == 0 and out.strip() else {}
    r.ok(st.returncode == 0 and "the seal of lease" in err and "FlushFailed" in err
         and "asking what became of it once blkmqd is back" in err and "staging again" in err
         and o.get("sha256") == hashlib.sha256(data).hexdigest(),
         "blkmqctl stage waits for blkmqd, finds the lease dropped and stages again: exit 0, the file's SHA-256",
         f"exit {st.returncode}\nstdout: {out}\nstderr: {err}")
    objs = svc.call("ListObjects", {})["parameters"]["objects"]
    r.eq(sorted((x.get("label"), x.get("sha256")) for x in objs),
         [("fw-first", sha(data)), ("fw-settle", sha(data))], "two objects, the file twice: nothing leaked", daemon=d)
    svc.stop()


def reset_flush_case(r, env, zdisk, ddisk, ctl_bin):
    svc = service(env, zdisk, ddisk, "reset")
    d = svc.start()
    ctl = Ctl(ctl_bin, svc.sock)

    def release_and_settle(lease, idx):
        before = zdisk.fsyncs()
        p = ctl("zones", "release", lease)
        wait_for(lambda: get(svc, index=idx)["state"] not in ("releasing", "sealed"), 10)
        return p, zdisk.fsyncs() - before

    data = os.urandom(SIZE)
    lease = stage(svc, data)
    idx = seal(svc, lease, data)["parameters"]["zone"]["zoneIndex"]
    p, f = release_and_settle(lease, idx)
    r.ok(p.returncode == 0 and get(svc, index=idx)["state"] == "free" and f >= 2,
         f"a release that works: reset, flushed, free; {f} fsyncs of the zone disk", show(p))

    data = os.urandom(SIZE)
    lease = stage(svc, data, "reset-flush")
    z = seal(svc, lease, data)["parameters"]["zone"]
    idx = z["zoneIndex"]
    zdisk.pd.ctl(f"fail-fsync 1 {f - 2}")
    failed = zdisk.failed_fsyncs()
    p, _ = release_and_settle(lease, idx)
    zdisk.pd.ctl("fail-fsync 0")
    r.eq(zdisk.failed_fsyncs() - failed, 1, "the reset batch's flush failed on the disk (one fsync failed)")
    z = get(svc, index=idx)
    r.ok(p.returncode == 0 and z["state"] == "failed" and "lease" not in z and "label" not in z
         and "ownerUid" not in z and "the flush after the reset failed" in z.get("note", ""),
         "released, then failed (not free): no lease, label or owner, the note says the flush", z)
    rec = record(svc, idx)
    r.ok(rec and rec["state"] == "failed" and not rec["lease"], "its record says failed", rec)
    r.eq(read_img(svc.img, z["start"], 4096), bytes(4096), "the live file reads zeros there (the reset was done)")
    mnt, cleanup = zdisk.durable("reset-durable")
    try:
        kept = read_img(os.path.join(mnt, os.path.basename(svc.img)), z["start"], len(data))
    finally:
        cleanup()
    r.ok(sha(kept) == sha(data) and rec and rec["state"] != "free",
         "the disk's durable image still holds the object there (the reset is not durable), and the record does "
         "not call the zone free", f"{sha(kept)} {rec}")
    r.ok(all(x["state"] != "free" or x["zoneIndex"] != idx for x in svc.zones()), "not listed free")

    # Repair: its flush fails (the zone's reset is recorded already: the
    # flush is the first fsync), then it works.
    zdisk.pd.ctl("fail-fsync 1")
    p = ctl("zones", "repair", svc.img)
    zdisk.pd.ctl("fail-fsync 0")
    r.ok(p.returncode == 10 and f"zone {idx}: still failed: repair: the flush after the reset failed" in p.stdout,
         "zones repair whose flush fails: still failed, exit 10, saying why", show(p))
    r.eq(get(svc, index=idx)["state"], "failed", "and it is failed")
    p = ctl("zones", "repair", svc.img)
    r.ok(p.returncode == 0 and f"zone {idx}: reset and flushed, free again" in p.stdout,
         "zones repair: reset, flushed, free again", show(p))
    z = get(svc, index=idx)
    r.ok(z["state"] == "free" and "note" not in z and z["bytesWritten"] == 0 and z["writePointer"] == z["start"],
         "the zone is free and empty", z, daemon=d)
    svc.stop()


def release_db_case(r, env, zdisk, ddisk, ctl_bin):
    svc = service(env, zdisk, ddisk, "release")
    d = svc.start()
    data = os.urandom(SIZE)
    lease = stage(svc, data, "kept")
    z = seal(svc, lease, data)["parameters"]["zone"]
    idx = z["zoneIndex"]
    ddisk.pd.ctl("fail-fsync 1")
    failed = ddisk.failed_fsyncs()
    rep = svc.call("Release", {"lease": lease})
    answered = "error" not in rep
    r.eq(ddisk.failed_fsyncs() - failed, 1, "the Release's commit: its fsync failed on the database's disk")
    r.ok(rep.get("error") == "io.blkmqd.Zones.IOError" and "lease is kept" in str(rep.get("parameters")),
         "Release answers IOError: the lease is kept", rep)
    z = get(svc, index=idx)
    r.ok(z["state"] == "sealed" and z.get("lease") == lease and z.get("sha256") == hashlib.sha256(data).hexdigest(),
         "the zone is sealed under its lease, its SHA-256 as sealed", z)
    out = os.path.join(env.tmp, "kept.out")
    p = Ctl(ctl_bin, svc.sock)("zones", "cat", lease, "--output", out)
    r.ok(p.returncode == 0 and open(out, "rb").read() == data, "zones cat: the object reads back, verified", show(p))
    r.eq(read_img(svc.img, z["start"], len(data)), data, "its data is on the device (no reset ran)")
    rep = svc.call("Allocate", {"size": 4096})
    r.eq(rep.get("error"), "io.blkmqd.Zones.IOError", "a later Allocate: IOError (no write after a failed commit)")
    mnt, cleanup = ddisk.durable("db-durable")
    try:
        shutil.copyfile(os.path.join(mnt, os.path.basename(svc.db)), os.path.join(env.tmp, "durable.db"))
        for sfx in ("-wal",):
            src = os.path.join(mnt, os.path.basename(svc.db) + sfx)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(env.tmp, "durable.db" + sfx))
    finally:
        cleanup()
    con = sqlite3.connect(os.path.join(env.tmp, "durable.db"))
    row = con.execute("SELECT state, lease FROM zones WHERE device_id = ? AND zone_index = ?", (svc.dev, idx)).fetchone()
    con.close()
    r.eq(row, ("releasing", None) if answered else ("sealed", lease),
         "the database's durable image says what the reply said: sealed under the lease")
    # The failed commit's pages were written before the flush failed: a
    # restart may read them. Either way, nothing is lost or failed.
    svc.kill9()
    d = svc.start()
    z = get(svc, index=idx)
    kept = z["state"] == "sealed" and z.get("lease") == lease
    log(f"# after kill -9 and a restart the zone is {'sealed under the lease' if kept else z['state']}")
    if kept:
        r.eq(read_img(svc.img, z["start"], len(data)), data, "sealed under the lease: its data is there")
        r.eq(svc.call("Release", {"lease": lease}).get("error"), None, "and a Release works now")
    r.ok(wait_for(lambda: get(svc, index=idx)["state"] == "free", 10),
         "after kill -9 and a restart: sealed with its data, or released; then reset and free, never failed",
         get(svc, index=idx), daemon=d)
    svc.stop()


def read_error_case(r, env, zdisk, ddisk, ctl_bin):
    svc = service(env, zdisk, ddisk, "read")
    d = svc.start()
    ctl = Ctl(ctl_bin, svc.sock)
    data = os.urandom(SIZE)
    lease = stage(svc, data, "unreadable")
    z = seal(svc, lease, data)["parameters"]["zone"]
    rng = zone_range(svc, z, len(data))
    failed = int(zdisk.pd.stats()["failed-reads"])
    zdisk.pd.ctl("fail-read " + rng)
    p = ctl("zones", "verify", lease, "--io-class", "best-effort")
    zdisk.pd.ctl("fail-read none")
    r.ok(int(zdisk.pd.stats()["failed-reads"]) > failed, "Verify's reads failed on the disk")
    z = get(svc, lease)
    r.ok(p.returncode == 9 and z["state"] == "sealed" and z.get("scrub", {}).get("result") == "ioError",
         "Verify: exit 9, the object's scrub result ioError, the zone still sealed (never repaired)",
         f"{show(p)}\n{z}")
    dev = [x for x in svc.call("ListDevices", {})["parameters"]["devices"] if x.get("deviceId") == svc.dev]
    r.ok(dev and dev[0].get("damaged") == 1, "counted damaged", dev)
    r.ok("cannot be read back" in d.log_text(), "logged at error level", daemon=d)
    p = ctl("zones", "verify", lease, "--io-class", "best-effort")
    z = get(svc, lease)
    r.ok(p.returncode == 0 and z.get("scrub", {}).get("result") == "ok", "readable again: Verify says ok",
         f"{show(p)}\n{z}")
    svc.stop()

    # The scrub: every second, a read error kept in the record's note.
    svc.write_config(1, "ScrubIntervalSec=1\n")
    zdisk.pd.ctl("fail-read " + rng)
    d = svc.start()
    try:
        found = wait_for(lambda: get(svc, lease).get("scrub", {}).get("result") == "ioError", 20)
    finally:
        zdisk.pd.ctl("fail-read none")
    z = get(svc, lease)
    r.ok(found and z["state"] == "sealed", "the scrub finds the read error: ioError, the zone still sealed", z,
         daemon=d)
    rec = record(svc, z["zoneIndex"])
    r.ok(rec and rec["state"] == "sealed" and "scrub: read error" in (rec["note"] or ""),
         "its record keeps the read error in its note", rec)
    r.ok(wait_for(lambda: get(svc, lease).get("scrub", {}).get("result") == "ok", 20),
         "readable again: the next scrub says ok", get(svc, lease), daemon=d)
    svc.stop()


def seal_read_case(r, env, zdisk, ddisk, ctl_bin):
    svc = service(env, zdisk, ddisk, "sealread")
    d = svc.start()
    data = os.urandom(SIZE)
    lease = svc.call("Allocate", {"size": len(data)})["parameters"]["lease"]
    z = get(svc, lease)
    # The file's blocks are allocated as they are written: the range is
    # that of the first Append's, which every read-back of the zone covers.
    first = 1 << 19
    svc.call("Append", {"lease": lease, "data": base64.b64encode(data[:first]).decode()})
    rng = zone_range(svc, z, z["capacity"])
    zdisk.pd.ctl("fail-read " + rng)
    try:
        for off in range(first, len(data), 1 << 19):
            rep = svc.call("Append", {"lease": lease, "data": base64.b64encode(data[off:off + (1 << 19)]).decode()})
            if "error" in rep:
                raise RuntimeError(f"Append at {off} (fail-read fails no write): {rep}")
        while_writing = wait_for(lambda: "reading back what landed failed" in d.log_text(), 10)
        rep = seal(svc, lease, data)
    finally:
        zdisk.pd.ctl("fail-read none")
    r.ok(while_writing, "the verification behind the appends hit the read error and said the seal reads it all",
         daemon=d)
    r.ok(rep.get("error") == "io.blkmqd.Zones.IOError", "the Seal's read-back fails: IOError, no seal", rep)
    z = get(svc, lease)
    r.ok(z["state"] == "writing" and "sha256" not in z, "the zone is still being written under its lease", z)
    rep = seal(svc, lease, data)
    r.ok("error" not in rep and get(svc, lease).get("sha256") == hashlib.sha256(data).hexdigest(),
         "readable again: Seal seals it, its SHA-256 read back", rep)
    svc.stop()


def main():
    powerdisk = need_powerdisk()
    ctl_bin = ctl_path()
    r = Runner("io-errors")
    with Env("io-errors") as env:
        zdisk = Disk(env, powerdisk, "zonedisk")
        ddisk = Disk(env, powerdisk, "dbdisk")
        try:
            with r.case("a Seal's flush fails for real: FlushFailed, the zone failed, never sealed", env):
                seal_flush_case(r, env, zdisk, ddisk, ctl_bin)
            with r.case("blkmqctl stage whose seal's flush fails for real, blkmqd gone at the release: settled", env):
                stage_settle_case(r, env, zdisk, ddisk, ctl_bin)
            with r.case("a reset batch's flush fails for real: the zone failed, not free; repaired", env):
                reset_flush_case(r, env, zdisk, ddisk, ctl_bin)
            with r.case("the database's fsync fails in a Release: IOError, the lease kept, nothing lost", env):
                release_db_case(r, env, zdisk, ddisk, ctl_bin)
            with r.case("read errors under the seal's verification: IOError, the zone still being written", env):
                seal_read_case(r, env, zdisk, ddisk, ctl_bin)
            with r.case("read errors under Verify and the scrub: ioError kept with the zone, never repaired", env):
                read_error_case(r, env, zdisk, ddisk, ctl_bin)
        finally:
            zdisk.close()
            ddisk.close()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
