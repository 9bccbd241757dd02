#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Crash consistency of the zone service, on zones emulated over a file.

Ordering (a zone's record first, then the device):
- kill -9 between the Release's commit and the reset, and between the reset
  and its commit (BLKMQD_TEST_KILL_AT=durable:io.blkmqd.Zones.Release,
  reset-done), with ResetBatch=1: after the restart the zone is released,
  reset and free, never failed;
- a slow database (BLKMQD_TEST_DB_DELAY_MS): while a Release waits for its
  record the zone stays sealed with its data, and an Allocate made meanwhile
  is not given it; a kill -9 then leaves it sealed, reading back to its
  SHA-256.

The stager's side: kill -9 when a Seal's record is durable but its reply
not sent (durable:io.blkmqd.Zones.Seal), and when an Allocate's is: blkmqctl
stage printed the lease at once, waits for blkmqd to come back, and settles
(staged, exit 0; or reclaimed, exit 2, nothing held).

A lease without data does not survive a restart: kill -9 after an
Allocate leaves its zone free with no label or owner (listed so, and so in
the records); kill -9 as a stage's first Append arrives (append-begin):
blkmqctl stage finds the lease gone and stages the file again.

A pipelined client (calls sent on one connection without waiting for the
replies): its Allocates' records share a transaction (group commit), the
replies come in call order, and after a kill -9 every Allocate and Release
it got a reply for is in the database (read from a copy, as a restart would).

Rounds (--rounds N, default 20; bench/zone-crash runs 500): several
blkmqctl stage/release clients at once, kill -9 at a random moment or at one
of the kill points above, restart, and check:
- no lease holds two zones;
- every acknowledged seal is still sealed, with its SHA-256, and the
  emulation file reads back to it;
- no zone failed, no zone left allocated or writing (interrupted leases are
  reclaimed), no sealed zone that no client knows of (nothing held for ever);
- at the end: every zone can be leased again.

Needs root (the daemon's own checks), $BLKMQD and $BLKMQCTL (or argv[1],
argv[2]). Exit 0 pass, 1 fail, 77 skip."""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import threading
import time

from blkmqtest import (Ctl, DaemonError, Env, Runner, ctl_path, log, main_guard, need_root, read_img, sha, show,
                       timeout_scale, varlink_call, wait_for)

ZONES = "io.blkmqd.Zones"
MIB = 1 << 20
ZONE_COUNT = 12
KILL_POINTS = ["durable:io.blkmqd.Zones.Release", "reset-done", "durable:io.blkmqd.Zones.Seal",
               "durable:io.blkmqd.Zones.Allocate"]


class Service:
    """blkmqd over emulated zones, started and killed as a round wants."""

    def __init__(self, env, name, reset_batch=1, extra="", data_dir=None):
        """data_dir: where the emulated zones and the database live (default
        the test's temp dir; a power-cut test puts them on its forgetting
        disk)."""
        self.env = env
        self.img = os.path.join(data_dir or env.tmp, f"{name}.img")
        self.db = os.path.join(data_dir or env.tmp, f"{name}.db")
        self.sock = os.path.join(env.tmp, f"{name}.sock")
        self.dev = "emu:" + self.img
        self.name = name
        self.n = 0
        self.d = None
        self.write_config(reset_batch, extra)

    def write_config(self, reset_batch, extra="", max_active=8):
        self.cfg = self.env.config(f"""\
[Zones]
Emulate={self.img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount={ZONE_COUNT}
MaxActive={max_active}
ResetBatch={reset_batch}
Database={self.db}
{extra}""", name=f"{self.name}.conf")

    def start(self, may_die=False, **environ):
        """may_die: a kill point may end the daemon during its start (a
        reset at the reconcile); then it returns None, as a kill there."""
        self.n += 1
        self.d = self.env.daemon(["--config", self.cfg, "--varlink-address", self.sock, "--log-level", "debug"],
                                 name=f"{self.name}-{self.n}", environ=environ)
        try:
            self.d.start(timeout=15)
        except DaemonError:
            if not (may_die and self.died(5)):
                raise
            return None
        return self.d

    def stop(self):
        """SIGTERM, and the harness's notify socket and files closed: 500
        rounds start 1000 daemons, and a notify socket past fd 1023 is out
        of select()'s reach (READY=1 would never be seen)."""
        rc = self.d.stop()
        self.d.close()
        return rc

    def kill9(self):
        if self.d and self.d.alive():
            self.d.proc.send_signal(signal.SIGKILL)
        if self.d:
            self.d.proc.wait()
            self.d.close()

    def died(self, timeout=10):
        """Waits for the daemon to end by itself (a kill point)."""
        try:
            self.d.proc.wait(timeout * timeout_scale())
        except subprocess.TimeoutExpired:
            return False
        self.d.close()
        return True

    def call(self, method, params, fds=()):
        return varlink_call(self.sock, f"{ZONES}.{method}", params, fds=fds)

    def zones(self):
        rep = self.call("ListZones", {"device": self.dev})
        return rep["parameters"]["zones"]

    def log_since(self, d, mark):
        return d.log_text()[mark:]


def make_file(env, name, size):
    path = os.path.join(env.tmp, name)
    data = os.urandom(size)
    with open(path, "wb") as f:
        f.write(data)
    return path, data


def stage_one(svc, ctl, env, label, size=MIB + 17):
    path, data = make_file(env, label + ".bin", size)
    p, o = ctl.json("stage", path, "--label", label)
    if p.returncode != 0 or not o:
        raise RuntimeError(f"stage {label}: {show(p)}")
    return o["lease"], o["zone"], data


def check_readback(r, svc, z, data, name):
    r.eq(sha(read_img(svc.img, z["start"], len(data))), sha(data), name)


def ordering_cases(r, env, ctl_bin):
    with r.case("kill -9 between the Release's commit and the reset (ResetBatch=1)", env):
        svc = Service(env, "rel-durable")
        svc.start(BLKMQD_TEST_KILL_AT="durable:io.blkmqd.Zones.Release")
        ctl = Ctl(ctl_bin, svc.sock)
        lease, z, _ = stage_one(svc, ctl, env, "a")
        p = ctl("zones", "release", lease)
        r.ok(p.returncode != 0 and svc.died(), "the daemon died at the kill point, the Release unanswered", show(p))
        d = svc.start()
        zs = svc.zones()
        mine = zs[z["zoneIndex"]]
        r.ok(mine["state"] in ("releasing", "free") and "lease" not in mine,
             "after the restart the zone is released (its record says so), not sealed or failed", mine)
        wait_for(lambda: svc.zones()[z["zoneIndex"]]["state"] == "free", 10)
        mine = svc.zones()[z["zoneIndex"]]
        r.ok(mine["state"] == "free" and mine["writePointer"] == mine["start"], "then reset and free", mine)
        r.eq([x["zoneIndex"] for x in svc.zones() if x["state"] == "failed"], [], "no zone failed", daemon=d)
        d.stop()

    with r.case("kill -9 between the reset and its commit (ResetBatch=1)", env):
        svc = Service(env, "reset-done")
        svc.start(BLKMQD_TEST_KILL_AT="reset-done")
        ctl = Ctl(ctl_bin, svc.sock)
        lease, z, _ = stage_one(svc, ctl, env, "b")
        p = ctl("zones", "release", lease)
        r.eq(p.returncode, 0, "Release answered: its record was durable first", daemon=None)
        r.ok(svc.died(), "the daemon died after the reset, before the reset's record")
        r.eq(sum(read_img(svc.img, z["start"], 4096)), 0, "the zone's data is gone from the device (reset)")
        d = svc.start()
        wait_for(lambda: svc.zones()[z["zoneIndex"]]["state"] == "free", 10)
        mine = svc.zones()[z["zoneIndex"]]
        r.ok(mine["state"] == "free" and "lease" not in mine, "after the restart: free, no lease", mine)
        r.eq([x["zoneIndex"] for x in svc.zones() if x["state"] == "failed"], [], "no zone failed", daemon=d)
        d.stop()

    with r.case("a slow database: the zone keeps its data until the release is durable", env):
        svc = Service(env, "slowdb", extra="")
        d = svc.start(BLKMQD_TEST_DB_DELAY_MS="1500")
        ctl = Ctl(ctl_bin, svc.sock)
        lease, z, data = stage_one(svc, ctl, env, "c")
        idx = z["zoneIndex"]
        result = {}

        def release():
            try:
                result["rep"] = svc.call("Release", {"lease": lease})
            except Exception as e:        # the kill below closes it
                result["err"] = e
        t = threading.Thread(target=release)
        t.start()
        time.sleep(0.3)
        zs = svc.zones()
        r.ok(zs[idx]["state"] == "sealed" and zs[idx].get("lease") == lease,
             "while the Release's record is not durable: still sealed under the lease", zs[idx])
        check_readback(r, svc, z, data, "and the data is still on the device")
        got = {}

        def allocate():
            try:
                got["rep"] = svc.call("Allocate", {"size": 4096})
            except Exception as e:
                got["err"] = e
        a = threading.Thread(target=allocate)
        a.start()
        a.join(10 * timeout_scale())
        new = got.get("rep", {}).get("parameters", {}).get("zone", {})
        r.ok(new.get("zoneIndex") not in (None, idx), "an Allocate meanwhile is given another zone", got)
        svc.kill9()
        t.join(10)
        d = svc.start()
        zs = svc.zones()
        r.ok(zs[idx]["state"] in ("sealed", "releasing", "free"), "after kill -9: sealed or released, not failed",
             zs[idx])
        if zs[idx]["state"] == "sealed":
            r.eq(zs[idx].get("sha256"), sha(data), "still sealed: its SHA-256 kept")
            check_readback(r, svc, z, data, "still sealed: the device reads back to it")
        r.eq([x["zoneIndex"] for x in zs if x["state"] == "failed"], [], "no zone failed", daemon=d)
        d.stop()

    for point, outcome in (("durable:io.blkmqd.Zones.Seal", "staged"), ("durable:io.blkmqd.Zones.Allocate",
                                                                       "reclaimed")):
        with r.case(f"kill -9 at {point}: blkmqctl stage settles ({outcome})", env):
            svc = Service(env, "settle-" + outcome)
            svc.start(BLKMQD_TEST_KILL_AT=point)
            ctl = Ctl(ctl_bin, svc.sock)
            path, data = make_file(env, outcome + ".bin", 2 * MIB + 5)
            proc = ctl.popen("stage", path, "--json", "--settle-timeout=30")
            r.ok(svc.died(), "the daemon died at the kill point")
            time.sleep(0.3)
            d = svc.start()
            out, err = proc.communicate(timeout=60 * timeout_scale())
            out, err = out.decode(), err.decode()
            detail = f"exit {proc.returncode}\n--- stdout:\n{out}\n--- stderr:\n{err}"
            lease = err.split("stage: lease ", 1)[1].split(":", 1)[0] if "stage: lease " in err else None
            zs = svc.zones()
            if outcome == "staged":
                r.ok(lease is not None, "stage printed the lease as soon as the zone was allocated", detail)
                r.ok(proc.returncode == 0 and sha(data) in out, "stage: exit 0 with the sealed zone", detail)
                mine = [x for x in zs if x.get("lease") == lease]
                r.ok(len(mine) == 1 and mine[0]["state"] == "sealed" and mine[0]["sha256"] == sha(data),
                     "the lease is sealed with the file's SHA-256", zs)
            else:
                # The allocation was durable, its reply never sent: no client
                # knows the lease, and the restart reclaims the empty zone.
                r.ok(proc.returncode == 2 and lease is None and "reclaims" in err,
                     "stage: exit 2, saying blkmqd reclaims the zone it did not hand out", detail)
                r.eq([x for x in zs if x.get("lease")], [], "no zone is held by a lease")
            d.stop()


def lost_lease_cases(r, env, ctl_bin):
    """A lease without data does not survive a restart (blkmqd(8), ZONES:
    WHAT EACH REPLY PROMISES): its zone is listed free with nothing of the
    lease left on it, and blkmqctl stage, which finds the lease gone, stages
    the file again."""
    with r.case("an allocation without data, kill -9: the zone is free again, without the lease's label "
                "or owner", env):
        svc = Service(env, "lost-alloc")
        d = svc.start()
        ctl = Ctl(ctl_bin, svc.sock)
        p, o = ctl.json("zones", "alloc", "--size=4096", "--label=fw-two")
        r.ok(p.returncode == 0 and o, "allocated", show(p))
        idx = o["zone"]["zoneIndex"]
        svc.kill9()
        d = svc.start()
        z = svc.zones()[idx]
        r.ok("did not survive the restart" in d.log_text(), "the log says the lease did not survive", daemon=d)
        r.ok(z["state"] == "free" and "lease" not in z and "label" not in z and "ownerUid" not in z,
             "listed free, with no lease, label or owner", z)
        p = ctl("zones", svc.dev)
        r.ok(p.returncode == 0 and "fw-two" not in p.stdout, "blkmqctl zones DEV shows no label fw-two", show(p))
        r.eq(ctl("zones", "get", o["lease"]).returncode, 3, "the lease is unknown (LeaseNotFound, exit 3)")
        # The records say the same: a plain restart reads them back.
        d.stop()
        svc.start()
        z = svc.zones()[idx]
        r.ok(z["state"] == "free" and "label" not in z and "ownerUid" not in z,
             "after another restart, from the records: free, no label, no owner", z)
        p, o = ctl.json("zones", "alloc", "--size=4096", "--label=fw-two")
        r.ok(p.returncode == 0 and o, "the label can be leased again", show(p))
        svc.stop()

    with r.case("kill -9 before the first append of a stage: blkmqctl stage stages the file again", env):
        svc = Service(env, "lost-stage")
        svc.start(BLKMQD_TEST_KILL_AT="append-begin")
        ctl = Ctl(ctl_bin, svc.sock)
        path, data = make_file(env, "again.bin", MIB + 333)
        proc = ctl.popen("stage", path, "--json", "--label=fw-three", "--settle-timeout=30")
        r.ok(svc.died(), "the daemon died at the kill point, the lease acknowledged, nothing written")
        time.sleep(0.3)
        d = svc.start()
        out, err = proc.communicate(timeout=60 * timeout_scale())
        out, err = out.decode(), err.decode()
        detail = f"exit {proc.returncode}\n--- stdout:\n{out}\n--- stderr:\n{err}"
        first = err.split("stage: lease ", 1)[1].split(":", 1)[0] if "stage: lease " in err else None
        r.ok(proc.returncode == 0 and sha(data) in out and "staging again" in err,
             "stage: exit 0, staged on its second attempt, saying why", detail)
        o = json.loads(out) if proc.returncode == 0 else {}
        zs = svc.zones()
        mine = [x for x in zs if x.get("lease")]
        r.ok(len(mine) == 1 and mine[0]["lease"] == o.get("lease") != first and mine[0]["state"] == "sealed" and
             mine[0]["sha256"] == sha(data) and mine[0].get("label") == "fw-three",
             "one zone is held: sealed under the new lease with the file's SHA-256 and the label", zs)
        if mine:
            check_readback(r, svc, mine[0], data, "the device reads back to it")
        r.eq([x["zoneIndex"] for x in zs if x.get("label") and not x.get("lease")], [],
             "no zone keeps a label without a lease", daemon=d)
        d.stop()


def pipelined(sock, calls, kill_after=None, on_kill=None):
    """Sends every (method, params) of calls on ONE connection without
    waiting, then reads the replies (in call order). With kill_after=k,
    on_kill() runs as soon as k replies are in, and the replies read by
    then are returned; otherwise all of them."""
    got = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30 * timeout_scale())
        s.connect(sock)
        s.sendall(b"".join(json.dumps({"method": f"{ZONES}.{m}", "parameters": p}).encode() + b"\0"
                           for m, p in calls))
        buf = b""
        while len(got) < len(calls):
            if kill_after is not None and len(got) >= kill_after:
                on_kill()
                return got
            msgs = buf.split(b"\0")
            if len(msgs) > 1:
                got.append(json.loads(msgs[0]))
                buf = b"\0".join(msgs[1:])
                continue
            chunk = s.recv(65536)
            if not chunk:
                return got
            buf += chunk
    return got


def db_copy(svc, env, name):
    """The zone records as a fresh process finds them after the crash: the
    database and its WAL copied (so the copy, not the service's file, is
    recovered), as {lease: row}."""
    d = os.path.join(env.tmp, name)
    os.makedirs(d, exist_ok=True)
    for suffix in ("", "-wal"):
        if os.path.exists(svc.db + suffix):
            shutil.copyfile(svc.db + suffix, os.path.join(d, "zones.db" + suffix))
    con = sqlite3.connect(os.path.join(d, "zones.db"))
    try:
        rows = con.execute("SELECT lease, zone_index, state FROM zones WHERE lease IS NOT NULL").fetchall()
    finally:
        con.close()
    return {lease: (z, state) for lease, z, state in rows}


def pipelined_cases(r, env):
    with r.case("pipelined Allocates on one connection share a transaction, replies in order", env):
        svc = Service(env, "pipe-batch")
        d = svc.start(BLKMQD_TEST_DB_DELAY_MS="300")
        reps = pipelined(svc.sock, [("Allocate", {"size": 4096, "label": f"p{i}"}) for i in range(4)])
        leases = [x.get("parameters", {}).get("lease") for x in reps]
        r.ok(len(reps) == 4 and all(leases) and len(set(leases)) == 4, "4 Allocates, 4 leases", reps)
        labels = {z.get("lease"): z.get("label") for z in svc.zones()}
        r.eq([labels.get(x) for x in leases], [f"p{i}" for i in range(4)], "each reply answers its own call")
        # Dispatched one after the other they could never share one: each
        # waits for the one before to be durable. With the store slowed,
        # the three behind the first are queued during its commit.
        multi = [int(m) for m in re.findall(r"zone-db: (\d+) writes committed in one transaction", d.log_text())]
        r.ok(any(n >= 2 for n in multi), "the records of pipelined calls went in one transaction", multi,
             daemon=d)
        rels = pipelined(svc.sock, [("Release", {"lease": x}) for x in leases])
        r.ok(all("error" not in x for x in rels), "4 pipelined Releases answered", rels)
        d.stop()

    with r.case("pipelined Allocates waiting for resets all get a zone, in order", env):
        svc = Service(env, "pipe-wait", reset_batch=4)
        svc.write_config(4, max_active=ZONE_COUNT)
        d = svc.start()
        held = pipelined(svc.sock, [("Allocate", {"size": 4096}) for _ in range(ZONE_COUNT)])
        leases = [x["parameters"]["lease"] for x in held]
        rels = pipelined(svc.sock, [("Release", {"lease": x}) for x in leases])
        r.ok(all("error" not in x for x in rels), f"all {ZONE_COUNT} zones leased and released", rels)
        # Every zone is releasing or being reset: each Allocate waits for a
        # reset; one batch frees some, the others wait for the next.
        got = pipelined(svc.sock, [("Allocate", {"size": 4096, "label": f"w{i}"}) for i in range(ZONE_COUNT)])
        r.ok(all("error" not in x for x in got), f"all {ZONE_COUNT} Allocates answered with a zone", got, daemon=d)
        r.eq(len({x.get("parameters", {}).get("lease") for x in got}), ZONE_COUNT, "each its own lease")
        d.stop()

    for batch in (1, 2):
        with r.case(f"kill -9 under a pipelined client (ResetBatch={batch}): every acknowledged Allocate and "
                    "Release is in the database", env):
            svc = Service(env, f"pipe-kill{batch}", reset_batch=batch, extra="")
            svc.write_config(batch, max_active=ZONE_COUNT)
            d = svc.start()
            # 4 sealed-free leases to release, then 8 Allocates, all in one go
            old = [svc.call("Allocate", {"size": 4096})["parameters"]["lease"] for _ in range(4)]
            calls = [("Release", {"lease": x}) for x in old] + \
                    [("Allocate", {"size": 4096, "label": f"k{batch}-{i}"}) for i in range(8)]
            got = pipelined(svc.sock, calls, kill_after=6, on_kill=svc.kill9)
            r.ok(len(got) >= 6 and all("error" not in x for x in got), "6 or more replies before the kill", got)
            recs = db_copy(svc, env, f"pipe-kill{batch}-copy")
            for (m, p), rep in zip(calls, got):
                if m == "Release":
                    r.ok(p["lease"] not in recs, f"acknowledged Release of {p['lease']}: its lease is gone",
                         recs.get(p["lease"]))
                else:
                    lease = rep["parameters"]["lease"]
                    r.ok(recs.get(lease, (None, None))[1] == "allocated",
                         f"acknowledged Allocate {lease}: recorded", recs.get(lease))
            d = svc.start()
            zs = svc.zones()
            r.eq([x["zoneIndex"] for x in zs if x["state"] in ("failed", "allocated", "writing")], [],
                 "after the restart: nothing failed or left allocated", daemon=d)
            d.stop()


class Stager(threading.Thread):
    """Stages files and releases some of its sealed leases until told to stop."""

    def __init__(self, k, svc, ctl, env, book, rnd, prefix=""):
        super().__init__(daemon=True)
        self.prefix = prefix          # labels are unique per device: one per round
        self.k, self.svc, self.ctl, self.env, self.book, self.rnd = k, svc, ctl, env, book, rnd
        self.stop = threading.Event()
        self.n = 0
        self.full = False

    def run(self):
        while not self.stop.is_set():
            self.n += 1
            if self.book.mine(self.k) and (self.full or self.rnd.random() < 0.4):
                self.full = False
                lease = self.rnd.choice(self.book.mine(self.k))
                self.book.releasing(lease)
                p = self.ctl("zones", "release", lease, timeout=60)
                self.book.released(lease, p.returncode == 0)
                continue
            size = self.rnd.choice([1, 4096, 100000, MIB + 1, 3 * MIB - 4096])
            label = f"{self.prefix}s{self.k}-{self.n}"
            path = os.path.join(self.env.tmp, f"{label}.bin")
            data = os.urandom(size)
            with open(path, "wb") as f:
                f.write(data)
            p, o = self.ctl.json("stage", path, "--label", label, "--settle-timeout=60", timeout=120)
            os.unlink(path)
            m = re.search(r"stage: lease ([^:\s]+):", p.stderr)
            if m:
                self.book.seen.add(m.group(1))
            if p.returncode == 0 and o:
                self.book.sealed(self.k, o["lease"], sha(data), len(data), o["zone"]["start"])
                if "asking what became of it once blkmqd is back" in p.stderr:
                    self.book.settled_after_error += 1
            elif "stage: lease " in p.stderr and "outcome of lease" in p.stderr:
                self.book.unsettled.append(p.stderr)
            elif p.returncode == 8:                  # no free zone: release one next
                self.full = True
            elif p.returncode not in (2, 3):         # blkmqd gone, or not up yet
                self.book.odd.append(show(p))


class Book:
    """What the clients were told: the truth the restart must keep."""

    def __init__(self):
        self.lock = threading.Lock()
        self.acked = {}              # lease -> (stager, sha, size, start)
        self.in_release = set()      # release sent, no answer yet
        self.unsettled = []
        self.odd = []
        self.seen = set()            # every lease a stager was given
        self.settled_after_error = 0 # seals answered with an error, then found sealed by blkmqctl stage

    def clone(self):
        """What the clients knew at one instant (a power cut), to check one
        of its crash states against."""
        c = Book()
        with self.lock:
            c.acked = dict(self.acked)
            c.in_release = set(self.in_release)
            c.seen = set(self.seen)
        return c

    def mine(self, k):
        with self.lock:
            return [l for l, v in self.acked.items() if v[0] == k and l not in self.in_release]

    def sealed(self, k, lease, h, size, start):
        with self.lock:
            self.acked[lease] = (k, h, size, start)

    def releasing(self, lease):
        with self.lock:
            self.in_release.add(lease)

    def released(self, lease, ok):
        with self.lock:
            if ok:
                self.acked.pop(lease, None)
                self.in_release.discard(lease)


def check_round(r, svc, book, i, quiet):
    zs = svc.zones()
    problems = []
    leases = [z["lease"] for z in zs if z.get("lease")]
    if len(leases) != len(set(leases)):
        problems.append(f"a lease holds two zones: {sorted(leases)}")
    by_lease = {z["lease"]: z for z in zs if z.get("lease")}
    for lease, (k, h, size, start) in list(book.acked.items()):
        z = by_lease.get(lease)
        if z is None and lease in book.in_release:
            book.acked.pop(lease)        # its release went through before the kill
            book.in_release.discard(lease)
            continue
        book.in_release.discard(lease)
        if z is None or z["state"] != "sealed" or z.get("sha256") != h or z["bytesWritten"] != size:
            problems.append(f"acknowledged seal {lease} lost: {z}")
        elif sha(read_img(svc.img, start, size)) != h:
            problems.append(f"acknowledged seal {lease}: the device does not read back to its SHA-256")
    states = {}
    for z in zs:
        states[z["state"]] = states.get(z["state"], 0) + 1
        if z["state"] in ("failed", "allocated", "writing"):
            problems.append(f"zone {z['zoneIndex']} {z['state']} after the restart: {z.get('note')}")
        if z["state"] == "sealed" and z.get("lease") not in book.acked:
            problems.append(f"zone {z['zoneIndex']} sealed under {z.get('lease')}, which no client knows of")
    if book.unsettled:
        problems.append("stage could not settle: " + book.unsettled[0])
    if book.odd:
        problems.append("unexpected client failure: " + book.odd[0])
    book.unsettled.clear()
    book.odd.clear()
    ok = not problems
    if not ok or not quiet:
        r.ok(ok, f"round {i}: {states}", "\n".join(problems), daemon=svc.d if not ok else None)
    else:
        r.passed += 1
    return ok


def rounds(r, env, ctl_bin, n, seed, stagers):
    rnd = random.Random(seed)
    log(f"# rounds: {n}, seed {seed}, {stagers} stagers")
    svc = Service(env, "rounds")
    ctl = Ctl(ctl_bin, svc.sock)
    book = Book()
    tally = {}
    failed = 0
    t0 = time.monotonic()
    for i in range(1, n + 1):
        batch = 1 if i % 2 else 2
        svc.write_config(batch)
        point = rnd.choice([None, None] + KILL_POINTS)
        if svc.start(may_die=True, BLKMQD_TEST_KILL_AT=point) is None:
            tally[point + " (at start)"] = tally.get(point + " (at start)", 0) + 1
            svc.start()
            if not check_round(r, svc, book, i, quiet=n > 50):
                failed += 1
            svc.stop()
            continue
        threads = [Stager(k, svc, ctl, env, book, random.Random(rnd.random()), f"r{i}-") for k in range(stagers)]
        for t in threads:
            t.start()
        delay = rnd.uniform(0.05, 1.5)
        if point is None or not svc.died(delay + 2):
            time.sleep(0 if point else delay)
            point = point or "timer"
            svc.kill9()
        tally[point] = tally.get(point, 0) + 1
        for t in threads:
            t.stop.set()
        time.sleep(rnd.uniform(0, 0.3))
        svc.start()
        for t in threads:
            t.join(180 * timeout_scale())
        if not check_round(r, svc, book, i, quiet=n > 50):
            failed += 1
        svc.stop()
    log(f"# {n} rounds in {time.monotonic() - t0:.0f} s, {failed} failed; kills: {tally}; "
        f"{len(book.acked)} sealed objects held at the end")

    with r.case("after the rounds: every zone can be leased again", env):
        svc.write_config(1, max_active=ZONE_COUNT)
        d = svc.start()
        for lease in list(book.acked):
            p = ctl("zones", "release", lease)
            r.ok(p.returncode == 0, f"release {lease}", show(p))
        n_ok = 0
        for k in range(ZONE_COUNT):
            lease = None
            for _ in range(50):
                rep = svc.call("Allocate", {"size": 4096})
                if "error" not in rep:
                    lease = rep["parameters"]["lease"]
                    break
                time.sleep(0.1)       # a batch of resets may be running
            if lease:
                n_ok += 1
        r.eq(n_ok, ZONE_COUNT, f"all {ZONE_COUNT} zones leased again", daemon=d)
        d.stop()
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("blkmqd", nargs="?")
    ap.add_argument("blkmqctl", nargs="?")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BLKMQD_CRASH_ROUNDS", "20")))
    ap.add_argument("--stagers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only-rounds", action="store_true")
    a = ap.parse_args()
    need_root()
    ctl_bin = ctl_path()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    r = Runner("zone-crash")
    with Env("zone-crash") as env:
        if not a.only_rounds:
            ordering_cases(r, env, ctl_bin)
            lost_lease_cases(r, env, ctl_bin)
            pipelined_cases(r, env)
        with r.case(f"{a.rounds} rounds of kill -9 with {a.stagers} stagers", env):
            rounds(r, env, ctl_bin, a.rounds, seed, a.stagers)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
