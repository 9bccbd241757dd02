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
- a drop-in becomes unreadable (a dangling link) at reload: the reload is
  refused naming the file, the old configuration stays in force;
- no log target (stderr closed, no journal): blkmqd runs and answers.

Needs root (a tmpfs for the full disk), $BLKMQD and $BLKMQCTL."""

import base64
import hashlib
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
