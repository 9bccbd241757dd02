#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Faults: each gets a named error, loses nothing and half-applies nothing.

- the zone database is corrupt, or from a newer blkmqd: blkmqd refuses to
  start, naming the file and why, and leaves the file as it was;
- the emulation's state file is truncated: refused, named, not rewritten;
- Emulate= at a file made beforehand with truncate: taken over; at a file
  holding data: refused, saying what to do, the data untouched;
- the disk under the database fills up: Allocate answers a named error, a
  sealed object stays sealed (also across a restart), and Allocate works
  again when space returns;
- the flush of the write cache after a seal fails (BLKMQD_TEST_FAIL_FLUSH):
  the Seal answers FlushFailed naming the device, blkmqctl exits 10 saying
  so, the zone is failed and stays so (a second Seal: WrongState; after a
  restart: failed), it is no object; released, it is reset and free;
- blkmqctl stage whose seal fails as blkmqd goes away (FlushFailed, then
  blkmqd killed as it records the release): stage settles with the
  restarted blkmqd instead of exiting as if the lease were released;
- the flush after a reset fails: the zone is failed with no lease, label
  or owner; zones repair of a zone that is not failed, or that a lease
  holds, is refused naming it; a repair whose own flush fails leaves the
  zone failed and exits 10; one that works makes it free (and so it
  stays across a restart), and Allocate gets it;
- a drop-in becomes unreadable (a dangling link) at reload: the reload is
  refused naming the file, the old configuration stays in force;
- no log target (stderr closed, no journal): blkmqd runs and answers.

Needs root (a tmpfs for the full disk), $BLKMQD and $BLKMQCTL."""

import base64
import hashlib
import json
import os
import subprocess

from blkmqtest import Ctl, Env, Runner, ctl_path, main_guard, need_root, show, varlink_call, wait_for

MIB = 1 << 20


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_once(blkmqd, cfg, sock, timeout=10):
    """Starts blkmqd expecting it to refuse; returns (exit code, stderr)."""
    p = subprocess.run([blkmqd, "--config", cfg, "--varlink-address", sock], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    return p.returncode, p.stderr


def main():
    need_root()
    ctl_bin = ctl_path()
    r = Runner("integration/faults")
    with Env("faults") as env:
        img = os.path.join(env.tmp, "z.img")
        db = os.path.join(env.tmp, "z.db")
        sock = os.path.join(env.tmp, "io.blkmqd")

        def zones_conf(image=img, database=db, name="blkmqd.conf", extra=""):
            return env.config(f"""\
[Zones]
Emulate={image}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=4
Database={database}
{extra}""", name=name)

        with r.case("a corrupt zone database: refused, named, left as it was", env):
            cfg = zones_conf()
            with open(db, "wb") as f:
                f.write(os.urandom(8192))
            before = digest(db)
            rc, err = run_once(env.blkmqd, cfg, sock)
            r.ok(rc != 0 and db in err and "not a database" in err, "blkmqd refuses to start, naming the file",
                 err)
            r.eq(digest(db), before, "the file is untouched")
            os.unlink(db)

        with r.case("a zone database of a newer blkmqd: refused, named", env):
            cfg = zones_conf()
            d = env.daemon(["--config", cfg, "--varlink-address", sock])
            d.start(timeout=15)
            d.stop()
            import sqlite3
            c = sqlite3.connect(db)
            c.execute("PRAGMA user_version=99")
            c.commit()
            c.close()
            before = digest(db)
            rc, err = run_once(env.blkmqd, cfg, sock)
            r.ok(rc != 0 and db in err and "newer than this blkmqd" in err, "refused: schema version 99 is newer",
                 err)
            r.eq(digest(db), before, "the file is untouched")
            for p in (db, db + "-wal", db + "-shm"):
                if os.path.exists(p):
                    os.unlink(p)

        with r.case("a truncated emulation state file: refused, named, not rewritten", env):
            cfg = zones_conf()
            d = env.daemon(["--config", cfg, "--varlink-address", sock])
            d.start(timeout=15)
            d.stop()
            os.truncate(img + ".zones", 4096 + 64)
            before = digest(img + ".zones")
            rc, err = run_once(env.blkmqd, cfg, sock)
            r.ok(rc != 0 and "is truncated" in err and img + ".zones" in err, "refused: the state file is truncated",
                 err)
            r.eq(digest(img + ".zones"), before, "the state file is untouched")

        with r.case("Emulate= at a file made beforehand", env):
            fresh = os.path.join(env.tmp, "made.img")
            with open(fresh, "wb") as f:
                f.truncate(16 * MIB)
            cfg = zones_conf(image=fresh, database=os.path.join(env.tmp, "made.db"), name="made.conf")
            d = env.daemon(["--config", cfg, "--varlink-address", sock])
            d.start(timeout=15)
            r.ok(any("taking it over" in l for l in d.log_text().splitlines()), "an empty (sparse) file is taken over")
            d.stop()
            mine = os.path.join(env.tmp, "mine.img")
            with open(mine, "wb") as f:
                f.write(b"precious" * 1000)
            before = digest(mine)
            cfg = zones_conf(image=mine, database=os.path.join(env.tmp, "mine.db"), name="mine.conf")
            rc, err = run_once(env.blkmqd, cfg, sock)
            r.ok(rc != 0 and "it holds data" in err and "Emulate=" in err, "a file holding data: refused, saying why",
                 err)
            r.eq(digest(mine), before, "its data untouched")

        with r.case("the disk under the database fills up", env):
            mnt = os.path.join(env.tmp, "small")
            os.makedirs(mnt)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt], check=True)
            try:
                sdb = os.path.join(mnt, "z.db")
                cfg = zones_conf(image=os.path.join(env.tmp, "full.img"), database=sdb, name="full.conf",
                                 extra="ResetBatch=1\n")
                d = env.daemon(["--config", cfg, "--varlink-address", sock])
                d.start(timeout=15)
                ctl = Ctl(ctl_bin, sock)
                obj = os.path.join(env.tmp, "obj.bin")
                with open(obj, "wb") as f:
                    f.write(os.urandom(100000))
                p, o = ctl.json("stage", obj, "--label", "before")
                r.eq(p.returncode, 0, "an object staged while there is room")
                kept = o["lease"]
                # Fill the filesystem.
                filler = os.path.join(mnt, "filler")
                with open(filler, "wb") as f:
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                            f.flush()
                    except OSError:
                        pass
                failed = None
                for i in range(200):        # until the WAL needs a page it cannot get
                    rep = varlink_call(sock, "io.blkmqd.Zones.Allocate", {"size": 4096, "label": f"full-{i}"})
                    if "error" in rep:
                        failed = rep
                        break
                    varlink_call(sock, "io.blkmqd.Zones.Release", {"lease": rep["parameters"]["lease"]})
                r.ok(failed is not None and failed["error"] == "io.blkmqd.Zones.IOError" and
                     "durable" in failed["parameters"].get("message", ""),
                     "with the disk full an Allocate is answered IOError: the record could not be made durable",
                     failed)
                zs = varlink_call(sock, "io.blkmqd.Zones.ListZones", {"device": "emu:" + os.path.join(env.tmp, "full.img")})
                held = [z for z in zs["parameters"]["zones"] if z["state"] == "allocated"]
                r.eq(held, [], "the refused allocation is undone: no zone left allocated under a lease nobody got")
                os.unlink(filler)
                ok = wait_for(lambda: "error" not in varlink_call(sock, "io.blkmqd.Zones.Allocate",
                                                              {"size": 4096, "label": "after"}), 5)
                r.ok(ok, "with room again, Allocate works")
                rep = varlink_call(sock, "io.blkmqd.Zones.Get", {"lease": kept})
                r.ok(rep.get("parameters", {}).get("zone", {}).get("state") == "sealed",
                     "the object sealed before is still sealed", rep)
                d.stop()
                d2 = env.daemon(["--config", cfg, "--varlink-address", sock], name="full-2")
                d2.start(timeout=15)
                rep = varlink_call(sock, "io.blkmqd.Zones.Get", {"lease": kept})
                r.ok(rep.get("parameters", {}).get("zone", {}).get("state") == "sealed", "and after a restart", rep)
                d2.stop()
            finally:
                subprocess.run(["umount", "-l", mnt])

        with r.case("the seal's flush fails: FlushFailed, the zone failed for good, never sealed", env):
            fimg = os.path.join(env.tmp, "flush.img")
            cfg = zones_conf(image=fimg, database=os.path.join(env.tmp, "flush.db"), name="flush.conf",
                             extra="ResetBatch=1\n")
            fsock = os.path.join(env.tmp, "flush.sock")
            dev = "emu:" + fimg
            # Flush 1 is the one at attach (a device that cannot flush gets
            # no leases), flush 2 the first seal's.
            os.environ["BLKMQD_TEST_FAIL_FLUSH"] = "2"
            try:
                d = env.daemon(["--config", cfg, "--varlink-address", fsock], name="flush-1")
                d.start(timeout=15)
            finally:
                del os.environ["BLKMQD_TEST_FAIL_FLUSH"]
            ctl = Ctl(ctl_bin, fsock)
            data = os.urandom(10000)
            h = hashlib.sha256(data).hexdigest()
            lease = varlink_call(fsock, "io.blkmqd.Zones.Allocate", {"size": len(data)})["parameters"]["lease"]
            varlink_call(fsock, "io.blkmqd.Zones.Append", {"lease": lease, "data": base64.b64encode(data).decode()})
            p = ctl("zones", "seal", lease, h)
            r.ok(p.returncode == 10 and dev in p.stderr and "could not flush its write cache" in p.stderr,
                 "blkmqctl zones seal: exit 10, naming the device and the flush", show(p))
            z = varlink_call(fsock, "io.blkmqd.Zones.Get", {"lease": lease})["parameters"]["zone"]
            r.ok(z["state"] == "failed" and "flush" in z.get("note", "") and "sha256" not in z,
                 "the zone is failed, its note says the flush failed, no SHA-256 recorded", z)
            rep = varlink_call(fsock, "io.blkmqd.Zones.Seal", {"lease": lease, "sha256": h})
            r.ok(rep.get("error") == "io.blkmqd.Zones.WrongState" and rep["parameters"]["state"] == "failed",
                 "a second Seal (its flush would work now) answers WrongState: never sealed on a retry", rep)
            r.eq(varlink_call(fsock, "io.blkmqd.Zones.ListObjects", {})["parameters"]["objects"], [],
                 "no object")
            rep = varlink_call(fsock, "io.blkmqd.Zones.Allocate", {"size": len(data)})
            r.ok("error" not in rep, "the device still gives leases", rep)
            r.ok("FlushFailed" in d.log_text() or "flush after the seal failed" in d.log_text(),
                 "the log says so", daemon=d)
            d.stop()
            d = env.daemon(["--config", cfg, "--varlink-address", fsock], name="flush-2")
            d.start(timeout=15)
            z = varlink_call(fsock, "io.blkmqd.Zones.Get", {"lease": lease})["parameters"]["zone"]
            r.eq(z["state"], "failed", "after a restart: still failed (the record says so)")
            p = ctl("zones", "release", lease)
            r.eq(p.returncode, 0, "its holder releases it")
            idx = z["zoneIndex"]
            r.ok(wait_for(lambda: varlink_call(fsock, "io.blkmqd.Zones.ListZones", {"device": dev})
                          ["parameters"]["zones"][idx]["state"] == "free", 10),
                 "reset (and flushed): free again", daemon=d)
            d.stop()

        with r.case("a seal that fails as blkmqd goes away: blkmqctl stage settles with the restarted blkmqd", env):
            simg = os.path.join(env.tmp, "settle.img")
            cfg = zones_conf(image=simg, database=os.path.join(env.tmp, "settle.db"), name="settle.conf")
            ssock = os.path.join(env.tmp, "settle.sock")
            # The seal's flush fails (flush 2), and blkmqd dies with the
            # release after it recorded and unanswered: the stager had an
            # error for its seal and then no blkmqd to release with.
            d = env.daemon(["--config", cfg, "--varlink-address", ssock], name="settle-1",
                           environ={"BLKMQD_TEST_FAIL_FLUSH": "2",
                                    "BLKMQD_TEST_KILL_AT": "durable:io.blkmqd.Zones.Release"})
            d.start(timeout=15)
            fw = os.path.join(env.tmp, "settle-fw.bin")
            data = os.urandom(70000)
            with open(fw, "wb") as f:
                f.write(data)
            ctl = Ctl(ctl_bin, ssock)
            st = subprocess.Popen([ctl_bin, "--address", ssock, "--json", "stage", fw, "--label", "fw-settle",
                                   "--settle-timeout=60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            r.ok(wait_for(lambda: not d.alive(), 20), "blkmqd dies at the release after the failed seal", daemon=d)
            d.wait_exit(5)
            d = env.daemon(["--config", cfg, "--varlink-address", ssock], name="settle-2")
            d.start(timeout=15)
            out, err = st.communicate(timeout=90)
            o = json.loads(out) if st.returncode == 0 and out.strip() else {}
            r.ok(st.returncode == 0 and "the seal of lease" in err and "asking what became of it once blkmqd is back" in err
                 and "staging again" in err and o.get("sha256") == hashlib.sha256(data).hexdigest(),
                 "blkmqctl stage waits for blkmqd, finds the lease dropped and stages again: exit 0, the file's SHA-256",
                 f"exit {st.returncode}\nstdout: {out}\nstderr: {err}")
            objs = varlink_call(ssock, "io.blkmqd.Zones.ListObjects", {})["parameters"]["objects"]
            r.eq([(x.get("label"), x.get("sha256")) for x in objs], [("fw-settle", hashlib.sha256(data).hexdigest())],
                 "one object, the file, under its label: nothing leaked")
            d.stop()

        with r.case("the flush after a reset fails: the zone failed, then repaired by zones repair", env):
            rimg = os.path.join(env.tmp, "repair.img")
            cfg = zones_conf(image=rimg, database=os.path.join(env.tmp, "repair.db"), name="repair.conf",
                             extra="ResetBatch=1\n")
            rsock = os.path.join(env.tmp, "repair.sock")
            dev = "emu:" + rimg
            ctl = Ctl(ctl_bin, rsock)

            def zone(i):
                return varlink_call(rsock, "io.blkmqd.Zones.Get", {"device": dev, "zoneIndex": i})["parameters"]["zone"]

            # Flush 1: at attach; 2: the seal's; 3: the one after the reset.
            d = env.daemon(["--config", cfg, "--varlink-address", rsock], name="repair-1",
                           environ={"BLKMQD_TEST_FAIL_FLUSH": "3"})
            d.start(timeout=15)
            data = os.urandom(5000)
            lease = varlink_call(rsock, "io.blkmqd.Zones.Allocate",
                                 {"size": len(data), "label": "fw-repair"})["parameters"]["lease"]
            varlink_call(rsock, "io.blkmqd.Zones.Append", {"lease": lease, "data": base64.b64encode(data).decode()})
            z = varlink_call(rsock, "io.blkmqd.Zones.Seal",
                             {"lease": lease, "sha256": hashlib.sha256(data).hexdigest()})["parameters"]["zone"]
            idx = z["zoneIndex"]
            r.eq(ctl("zones", "release", lease).returncode, 0, "the sealed zone is released")
            r.ok(wait_for(lambda: zone(idx)["state"] == "failed", 10),
                 "its reset's flush fails: the zone is failed", zone(idx), daemon=d)
            z = zone(idx)
            r.ok("lease" not in z and "label" not in z and "ownerUid" not in z
                 and "flush after the reset failed" in z.get("note", ""),
                 "no lease, label or owner; the note says why", z)
            other = (idx + 1) % 4
            p = ctl("zones", "repair", rimg, str(other))
            r.ok(p.returncode == 11 and f"zone {other} is free, not failed" in p.stderr,
                 "zones repair of a free zone: exit 11, saying it is not failed", show(p))
            p = ctl("zones", "repair", rimg, "9")
            r.ok(p.returncode != 0 and "zoneIndex" in p.stderr, "an index past the end: refused, naming zoneIndex",
                 show(p))
            d.stop()

            # The repair's own flush fails (flush 2, after the one at attach).
            d = env.daemon(["--config", cfg, "--varlink-address", rsock], name="repair-2",
                           environ={"BLKMQD_TEST_FAIL_FLUSH": "2"})
            d.start(timeout=15)
            r.eq(zone(idx)["state"], "failed", "after a restart: still failed")
            p = ctl("zones", "repair", rimg)
            r.ok(p.returncode == 10 and f"zone {idx}: still failed: repair: the flush after the reset failed"
                 in p.stdout and "1 of 1 zones stay failed" in p.stderr,
                 "a repair whose flush fails: the zone stays failed, exit 10, saying why", show(p))
            r.eq(zone(idx)["state"], "failed", "and it is failed")
            d.stop()

            d = env.daemon(["--config", cfg, "--varlink-address", rsock], name="repair-3")
            d.start(timeout=15)
            p = ctl("zones", "repair", rimg)
            r.ok(p.returncode == 0 and f"zone {idx}: reset and flushed, free again" in p.stdout,
                 "zones repair: reset, flushed, free again", show(p))
            z = zone(idx)
            r.ok(z["state"] == "free" and "note" not in z and z["bytesWritten"] == 0, "the zone is free and empty", z)
            p = ctl("zones", "repair", rimg)
            r.ok(p.returncode == 0 and "nothing to repair" in p.stdout, "a second repair: nothing to repair",
                 show(p))
            # Every zone can be leased again, the repaired one too.
            got = set()
            for _ in range(4):
                rep = varlink_call(rsock, "io.blkmqd.Zones.Allocate", {"size": 4096})
                if "error" in rep:
                    break
                got.add(rep["parameters"]["zone"]["zoneIndex"])
            r.ok(idx in got, f"Allocate hands out the repaired zone {idx}", sorted(got))
            lease2 = varlink_call(rsock, "io.blkmqd.Zones.Get", {"device": dev, "zoneIndex": idx})["parameters"]["zone"]["lease"]
            varlink_call(rsock, "io.blkmqd.Zones.Append", {"lease": lease2, "data": base64.b64encode(b"x" * 10).decode()})
            rep = varlink_call(rsock, "io.blkmqd.Zones.Seal", {"lease": lease2, "sha256": "0" * 64})
            r.eq(rep.get("error"), "io.blkmqd.Zones.ChecksumMismatch", "a mismatched seal fails the zone, with its lease")
            p = ctl("zones", "repair", rimg, str(idx))
            r.ok(p.returncode == 11 and f"held by lease {lease2}" in p.stderr and "zones release" in p.stderr,
                 "zones repair of a failed zone with a lease: exit 11, naming the lease and saying to release it",
                 show(p))
            d.stop()
            d = env.daemon(["--config", cfg, "--varlink-address", rsock], name="repair-4")
            d.start(timeout=15)
            r.eq(zone(idx)["state"], "failed", "after a restart the mismatched zone is failed, as recorded")
            d.stop()

        with r.case("an unreadable drop-in at reload: refused, named, the old configuration kept", env):
            cfg = env.config("[Daemon]\nProbeIntervalSec=0\n", name="reload.conf")
            d = env.daemon(["--config", cfg, "--varlink-address", sock], name="reload")
            d.start(timeout=15)
            os.makedirs(cfg + ".d", exist_ok=True)
            os.symlink("/nonexistent/blkmqd-drop-in", cfg + ".d/20-gone.conf")
            ctl = Ctl(ctl_bin, sock)
            p = ctl("reload")
            r.ok(p.returncode == 5 and "20-gone.conf" in p.stderr and "cannot read" in p.stderr,
                 "reload refused, exit 5, naming the drop-in", show(p))
            p, st = ctl.json("status")
            r.ok(p.returncode == 0 and st.get("state") == "running", "blkmqd runs on with the old configuration",
                 show(p))
            d.stop()

        with r.case("no log target: stderr closed, no journal", env):
            cfg = env.config("[Daemon]\nProbeIntervalSec=0\n", name="nolog.conf")
            sock = os.path.join(env.tmp, "nolog.sock")
            d = env.daemon(["--config", cfg, "--varlink-address", sock], name="nolog", close_stderr=True)
            d.start(wait_ready=False)

            def answers():
                try:
                    return "error" not in varlink_call(sock, "io.blkmqd.Manager.GetStatus", {})
                except OSError:
                    return False
            ok = wait_for(answers, 10)
            r.ok(ok and d.alive(), "blkmqd starts and answers with nowhere to log")
            r.eq(d.stop(timeout=15), 0, "and stops cleanly")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
