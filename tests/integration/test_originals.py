#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The original values survive a crash of blkmqd (issue 21, the host side of
"watchdog and crashes"), as blkmqd.service's Restart=on-failure or the
watchdog would restart it, here without systemd:

- a loop device at none/128 tuned to kyber/64; kill -9; start again; stop:
  the disk is back at none/128, and blkmqctl show (and GetDevice) said the
  originals came from the first instance (its pid);
- kill -9 right after the first sysfs write (BLKMQD_TEST_KILL_AT=
  tune-changed): the original was on record before the write;
- a loop device attached to another file while blkmqd was down: the record
  is discarded with a line naming the device and why; a stop puts back
  the new disk's own values, not the earlier disk's;
- a disk gone while blkmqd was down: its record is dropped;
- a corrupt record file: refused, named, the daemon runs;
- a second blkmqd started while the first runs adopts and drops none of
  the first one's records;
- zone leases and sealed objects (emulated zones) intact across the
  kill -9 and restart.

Needs root, loop devices, udev."""

import json
import os
import signal

from blkmqtest import (Ctl, Env, Runner, ctl_path, main_guard, need_all, read_img, sha, show, udevd,
                       varlink_call, wait_for)

MIB = 1 << 20


def main():
    need_all()
    ctl_bin = ctl_path()
    r = Runner("integration/originals")
    with udevd(), Env("originals") as env:
        os.makedirs(env.originals_dir, exist_ok=True)
        img = os.path.join(env.tmp, "zones.img")
        sock = os.path.join(env.tmp, "io.blkmqd")
        cfg = env.config(f"""\
[Device t]
MatchBackingFile={env.glob('t-*.img')}
Scheduler=kyber
NrRequests=64

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=4
Database={os.path.join(env.tmp, "zones.db")}
""")
        ctl = Ctl(ctl_bin, sock)
        n = [0]

        def daemon(**environ):
            n[0] += 1
            d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "debug"],
                           name=f"blkmqd-{n[0]}", environ=environ)
            d.start(wait_ready=not environ, timeout=15)
            return d

        def kill9(d):
            d.proc.send_signal(signal.SIGKILL)
            d.proc.wait()
            d.close()

        def record(loop):
            return os.path.join(env.originals_dir, loop.name + ".json")

        ORIG = {"scheduler": "none", "nr_requests": "128"}
        TUNED = {"scheduler": "kyber", "nr_requests": "64"}

        with r.case("kill -9, start again, stop: the disk is back at none/128", env):
            a = env.attach(prefix="t")
            r.ok(a.matches(ORIG), "the new loop device is at none/128", a.mismatches(ORIG))
            d1 = daemon()
            r.ok(a.matches(TUNED), "tuned to kyber/64", a.mismatches(TUNED), d1)
            r.ok(os.path.exists(record(a)), f"its originals are on record in {record(a)}",
                 os.listdir(env.originals_dir), d1)
            rec = json.load(open(record(a)))
            vals = {o["attribute"]: o["value"] for o in rec["originals"]}
            r.ok(vals.get("queue/scheduler") == "none" and vals.get("queue/nr_requests") == "128" and
                 rec["pid"] == d1.pid() and rec["diskseq"] > 0 and rec["backingFile"] == a.backing,
                 "the record: scheduler none, nr_requests 128, the pid, diskseq and backing file", rec)
            pid1 = d1.pid()
            kill9(d1)
            r.ok(a.matches(TUNED), "after kill -9 the disk stays tuned", a.mismatches(TUNED))
            d2 = daemon()
            r.ok(a.matches(TUNED), "the second instance keeps it tuned", a.mismatches(TUNED), d2)
            p = ctl("show", a.name)
            r.ok(p.returncode == 0 and f"blkmqd[{pid1}]" in p.stdout and "earlier instance" in p.stdout,
                 f"blkmqctl show {a.name}: the originals came from blkmqd[{pid1}]", show(p), d2)
            p, o = ctl.json("show", a.name)
            o = (o or {}).get("device")
            adopted = {x["attribute"]: x for x in (o or {}).get("originalsAdopted", [])}
            knobs = {k["attribute"]: k for k in (o or {}).get("knobs", [])}
            r.ok(adopted.get("queue/scheduler", {}).get("pid") == pid1 and
                 adopted["queue/scheduler"]["value"] == "none" and adopted["queue/scheduler"]["recordedUsec"] > 0 and
                 knobs.get("queue/scheduler", {}).get("original") == "none" and
                 knobs["queue/scheduler"].get("originalFrom", {}).get("pid") == pid1,
                 "GetDevice: originalsAdopted and the knob's originalFrom name the first instance", show(p))
            r.ok(f"adopting" in d2.log_text() and "0854cebe77424a898c8480628de28cc3" in d2.log_text(),
                 "the adoption is logged with its MESSAGE_ID", d2.log_text()[-2000:])
            rc = d2.stop(timeout=15)
            r.ok(rc == 0 and a.matches(ORIG), "stop: back at none/128 (the values from before the first start)",
                 a.mismatches(ORIG), d2)
            r.ok(not os.path.exists(record(a)), "the record went with the restore", os.listdir(env.originals_dir))

        with r.case("kill -9 right after the first sysfs write: the original was on record before it", env):
            d = daemon(BLKMQD_TEST_KILL_AT="tune-changed")
            r.ok(wait_for(lambda: not d.alive(), 15), "killed at tune-changed", daemon=d)
            d.close()
            r.ok(not a.matches(ORIG), "a value was changed before the kill", a.snapshot())
            d = daemon()
            d.stop(timeout=15)
            r.ok(a.matches(ORIG), "the restart's stop puts none/128 back", a.mismatches(ORIG), d)

        with r.case("a loop device attached to another file while blkmqd was down: not the earlier disk's originals",
                    env):
            d = daemon()
            r.ok(a.matches(TUNED), "tuned", a.mismatches(TUNED), d)
            kill9(d)
            env.detach(a)
            b = env.attach(prefix="t", node=a.dev)
            # The loop queue outlives its attachment: make the new disk's own
            # settings differ from the first disk's originals.
            b.set("scheduler", "mq-deadline")
            b.set("nr_requests", "100")
            OWN = {"scheduler": "mq-deadline", "nr_requests": "100"}
            d = daemon()
            r.ok(b.matches(TUNED), "the new disk is tuned", b.mismatches(TUNED), d)
            text = d.log_text()
            r.ok(f"{b.name}: discarding the original values" in text and "diskseq" in text,
                 "the record is discarded, naming the device and why (diskseq)", text[-3000:])
            p, o = ctl.json("show", b.name)
            r.ok(p.returncode == 0 and o and not o["device"].get("originalsAdopted"), "show: nothing adopted", show(p))
            d.stop(timeout=15)
            r.ok(b.matches(OWN), "stop: the new disk's own mq-deadline/100, not none/128", b.mismatches(OWN), d)
            a = b

        with r.case("a disk gone while blkmqd was down: its record is dropped; a corrupt record is refused", env):
            c = env.attach(prefix="t")
            d = daemon()
            r.ok(os.path.exists(record(c)), "on record", os.listdir(env.originals_dir), d)
            kill9(d)
            env.detach(c)
            env.remove_node(c)
            bad = os.path.join(env.originals_dir, "loop999999.json")
            with open(bad, "w") as f:
                f.write('{"version": 1, "device": "loop999999", "originals": [tru')
            d = daemon()
            text = d.log_text()
            r.ok(f"{c.name}: the disk whose original values" in text and not os.path.exists(record(c)),
                 "the gone disk's record is dropped, with a line", text[-3000:])
            r.ok(f"{bad}: not a record of original values, refused" in text and d.alive(),
                 "the corrupt file is refused, named; the daemon runs", text[-3000:])
            d.stop(timeout=15)
            os.unlink(bad)

        with r.case("a second blkmqd that starts while the first runs leaves the first one's records alone", env):
            d1 = daemon()
            r.ok(a.matches(TUNED) and os.path.exists(record(a)), "tuned, on record", a.mismatches(TUNED), d1)
            other = env.config("[Device none]\nMatchBackingFile=/nonexistent/*\n", name="none.conf")
            d2 = env.daemon(["--config", other, "--varlink-address", os.path.join(env.tmp, "other.sock")],
                            name="blkmqd-other").start(timeout=15)
            r.ok(f"by blkmqd[{d1.pid()}], which still runs" in d2.log_text(), "the second says whose they are",
                 d2.log_text()[-2000:])
            d2.stop(timeout=15)
            r.ok(a.matches(TUNED) and os.path.exists(record(a)), "its stop put nothing back, the record stays",
                 a.mismatches(TUNED) + os.listdir(env.originals_dir), d2)
            d1.stop(timeout=15)
            r.ok(not os.path.exists(record(a)), "the first one's stop restores and removes it",
                 os.listdir(env.originals_dir), d1)

        with r.case("zone leases and sealed objects intact across kill -9 and restart", env):
            d = daemon()
            fw = os.path.join(env.tmp, "fw.bin")
            data = os.urandom(MIB + 17)
            with open(fw, "wb") as f:
                f.write(data)
            p, o = ctl.json("stage", fw, "--label", "fw")
            r.ok(p.returncode == 0 and o, "staged fw", show(p), d)
            lease, zone = o["lease"], o["zone"]
            kill9(d)
            d = daemon()
            p, f = ctl.json("zones", "find", "fw")
            r.ok(p.returncode == 0 and f and f["lease"] == lease and f["sha256"] == sha(data) and
                 f["zoneIndex"] == zone["zoneIndex"], "the object: same lease, zone and SHA-256", show(p), d)
            z = ctl.json("zones", "get", "emu:" + img, zone["zoneIndex"])[1]["zone"]
            r.ok(z["state"] == "sealed" and z.get("lease") == lease, "its zone: sealed, held by the lease", z)
            r.eq(read_img(img, zone["start"], len(data)), data, "the emulation file holds the bytes")
            rep = varlink_call(sock, "io.blkmqd.Zones.ListZones", {"device": "emu:" + img})
            held = [x for x in rep["parameters"]["zones"] if x.get("lease")]
            r.ok(len(held) == 1, "one zone held, by one lease", held)
            d.stop(timeout=15)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
