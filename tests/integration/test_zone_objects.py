#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The stager's whole workflow over emulated zones, every result checked
without blkmqd (the emulation file read with python, hashlib):

- the README's round trip: stage fw-1.2, find it by label, list the objects,
  fetch it back verified (zones cat -o FILE and to a pipe), release it, and
  see the zone reset later in a batch (ResetBatch=2), with no label and no
  owner left on the freed zone;
- labels unique per device: a second stage of fw-1.2 is LabelExists (exit
  11); with UniqueLabels=no it is allowed, and find then says
  LabelNotUnique; an unknown label is LabelNotFound (exit 3);
- Read into a pipe whose reader went away: an error for that call only, the
  daemon serves on;
- a corrupted zone: zones cat -o FILE exits 9 and FILE is never created;
  zones verify exits 9 and the SCRUB column says mismatch; zones DEV shows
  sealed!mismatch; zones says the device has a damaged object; the error is
  logged once and raised once as objectDamaged on io.blkmqd.Metrics.Monitor;
  the background scrub
  (ScrubIntervalSec=1) finds a second corruption without being asked;
- the device as a person types it: emu:PATH, an absolute PATH, a relative
  one.

Needs root, $BLKMQD and $BLKMQCTL (or argv[1], argv[2])."""

import json
import os
import socket
import subprocess
import time

from blkmqtest import (Ctl, Env, Runner, VarlinkStream, ctl_path, main_guard, need_root, read_img, sha, show,
                       varlink_call, wait_for)

MIB = 1 << 20


def corrupt(img, offset):
    with open(img, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xff]))


def read_into_closed_pipe(sock, label):
    """Read(label) into a pipe whose read end is closed before the call."""
    rfd, wfd = os.pipe()
    os.close(rfd)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(sock)
        socket.send_fds(s, [json.dumps({"method": "io.blkmqd.Zones.Read",
                                        "parameters": {"label": label, "fd": 0}}).encode() + b"\0"], [wfd])
        os.close(wfd)
        buf = b""
        while not buf.endswith(b"\0"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf.rstrip(b"\0")) if buf else None


def main():
    need_root()
    ctl_bin = ctl_path()
    r = Runner("zone-objects")
    with Env("zone-objects") as env:
        img = os.path.join(env.tmp, "zones.img")
        conf = """\
[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=8
ResetBatch=2
ScrubIntervalSec={scrub}
Database={db}
{extra}"""

        def config(extra="", scrub=0):
            return env.config(conf.format(img=img, db=os.path.join(env.tmp, "zones.db"), extra=extra, scrub=scrub))
        cfg = config()
        sock = os.path.join(env.tmp, "io.blkmqd")
        d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "debug"])
        d.start(timeout=15)
        ctl = Ctl(ctl_bin, sock)
        dev = "emu:" + img

        def make(name, size):
            path = os.path.join(env.tmp, name)
            data = os.urandom(size)
            with open(path, "wb") as f:
                f.write(data)
            return path, data

        fw, fw_data = make("fw-1.2.bin", 2 * MIB + 333)
        state = {}

        with r.case("the round trip: stage, find, list, fetch verified, release, reset in a batch", env):
            p, o = ctl.json("stage", fw, "--label", "fw-1.2")
            r.ok(p.returncode == 0 and o, "stage fw-1.2: exit 0", show(p), daemon=None if p.returncode == 0 else d)
            state["lease"], state["zone"] = o["lease"], o["zone"]
            p, f = ctl.json("zones", "find", "fw-1.2")
            r.ok(p.returncode == 0 and f and f["label"] == "fw-1.2" and f["sha256"] == sha(fw_data) and
                 f["size"] == len(fw_data) and f["lease"] == state["lease"] and f["deviceId"] == dev and
                 f["zoneIndex"] == o["zone"]["zoneIndex"] and f["sealedUsec"] > 0,
                 "zones find fw-1.2 --json: label, size, SHA-256, lease, device, zone, seal time", show(p))
            p, objs = ctl.json("zones", "objects")
            r.ok(p.returncode == 0 and [x["label"] for x in objs] == ["fw-1.2"], "zones objects: fw-1.2", show(p))
            p = ctl("zones", "objects")
            r.ok(p.returncode == 0 and "fw-1.2" in p.stdout and sha(fw_data) in p.stdout and state["lease"] in p.stdout,
                 "zones objects (table, piped): label, whole SHA-256 and lease", show(p))
            out = os.path.join(env.tmp, "fetched.bin")
            p = ctl("zones", "cat", "fw-1.2", "-o", out)
            r.ok(p.returncode == 0 and open(out, "rb").read() == fw_data and "verified" in p.stderr,
                 "zones cat fw-1.2 -o FILE: the same bytes, said verified", show(p))
            p = subprocess.run([ctl_bin, "zones", "cat", state["lease"]], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=ctl.env())
            r.ok(p.returncode == 0 and p.stdout == fw_data, "zones cat LEASE | ...: the same bytes on a pipe",
                 p.stderr.decode())
            p = ctl("zones", "release", "fw-1.2")
            r.eq(p.returncode, 0, "zones release fw-1.2 (by label)")
            z = ctl.json("zones", "get", dev, state["zone"]["zoneIndex"])[1]["zone"]
            r.ok(z["state"] == "releasing" and "label" not in z and "ownerUid" not in z and "lease" not in z,
                 "the released zone: releasing, no label, no owner, no lease (ResetBatch=2: it waits)", z)
            p, o2 = ctl.json("stage", fw, "--label", "fw-1.2")
            r.eq(p.returncode, 0, "the label is free again once released: stage fw-1.2 again")
            p = ctl("zones", "release", o2["lease"])
            r.ok(wait_for(lambda: ctl.json("zones", "get", dev, state["zone"]["zoneIndex"])[1]["zone"]["state"] ==
                          "free", 10), "the second release starts the batch: the first zone is reset and free")
            r.eq(read_img(img, state["zone"]["start"], 4096), bytes(4096), "its data is gone from the file")

        with r.case("labels: unique per device, or not, by the policy", env):
            p, o = ctl.json("stage", fw, "--label", "fw-1.3")
            r.eq(p.returncode, 0, "stage fw-1.3")
            p = ctl("stage", fw, "--label", "fw-1.3")
            r.ok(p.returncode == 11 and "label already used" in p.stderr and o["lease"] in p.stderr,
                 "a second fw-1.3: LabelExists, exit 11, naming the lease that has it", show(p))
            r.eq(len(ctl.json("zones", "objects")[1]), 1, "and nothing more was staged")
            p = ctl("zones", "find", "fw-9")
            r.ok(p.returncode == 3 and "no sealed object" in p.stderr, "an unknown label: exit 3", show(p))
            env.config(conf.format(img=img, db=os.path.join(env.tmp, "zones.db"), extra="UniqueLabels=no", scrub=0))
            d.reload()
            p, o2 = ctl.json("stage", fw, "--label", "fw-1.3")
            r.eq(p.returncode, 0, "UniqueLabels=no: a second fw-1.3 is staged")
            p = ctl("zones", "find", "fw-1.3")
            r.ok(p.returncode == 11 and "2 sealed objects" in p.stderr, "find fw-1.3: LabelNotUnique, exit 11",
                 show(p))
            p = ctl("zones", "cat", o2["lease"], "-o", os.path.join(env.tmp, "second.bin"))
            r.eq(p.returncode, 0, "cat by lease still works")
            for lease in (o["lease"], o2["lease"]):
                ctl("zones", "release", lease)
            config()
            d.reload()

        with r.case("Read into a pipe whose reader is gone: that call fails, blkmqd serves on", env):
            p, o = ctl.json("stage", fw, "--label", "pipe")
            rep = read_into_closed_pipe(sock, "pipe")
            r.ok(rep and rep.get("error") == "io.blkmqd.Zones.IOError", "Read: IOError", rep)
            r.ok(d.alive(), "the daemon is alive (SIGPIPE ignored)")
            r.eq(ctl("zones", "objects").returncode, 0, "and answers")
            ctl("zones", "release", o["lease"])

        with r.case("a corrupted object: never handed out, never repaired, reported", env):
            mon = VarlinkStream(sock, "io.blkmqd.Metrics.Monitor")
            mon.wait(lambda e: e.get("event") == "subscribed", 10)
            p, o = ctl.json("stage", fw, "--label", "bad")
            start = o["zone"]["start"]
            corrupt(img, start + MIB + 7)
            out = os.path.join(env.tmp, "bad.bin")
            p = ctl("zones", "cat", "bad", "-o", out)
            r.ok(p.returncode == 9 and "checksum mismatch" in p.stderr and not os.path.exists(out),
                 "zones cat -o FILE: exit 9, FILE not created", show(p))
            p = subprocess.run([ctl_bin, "zones", "cat", "bad"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=ctl.env())
            r.ok(p.returncode == 9 and p.stdout == b"", "zones cat to a pipe: exit 9, not one byte written",
                 p.stderr.decode())
            p = ctl("zones", "verify")
            r.ok(p.returncode == 9 and "mismatch!" in p.stdout and "1 of 1" in p.stderr,
                 "zones verify: exit 9, SCRUB mismatch!", show(p))
            p = ctl("zones", "verify", "bad", "--io-class=best-effort")
            r.ok(p.returncode == 9 and "mismatch!" in p.stdout, "zones verify LABEL --io-class=best-effort: the same",
                 show(p))
            p = ctl("zones", "verify", "--io-class=rt")
            r.ok(p.returncode == 1 and "--io-class=rt: idle or best-effort" in p.stderr,
                 "zones verify --io-class=rt: a usage error that names the option", show(p))
            rep = varlink_call(sock, "io.blkmqd.Zones.Verify", {"ioClass": "realtime"})
            r.ok(rep.get("error") == "org.varlink.service.InvalidParameter" and
                 rep.get("parameters", {}).get("parameter") == "ioClass",
                 "Verify(ioClass: realtime): InvalidParameter naming ioClass", rep)
            rows = [l.split() for l in ctl("--no-legend", "zones", dev).stdout.splitlines()]
            r.ok(any(row[0] == str(o["zone"]["zoneIndex"]) and row[4] == "sealed!mismatch" for row in rows),
                 "zones DEV: STATE sealed!mismatch", rows)
            z = ctl.json("zones", "get", o["lease"])[1]["zone"]
            r.ok(z["state"] == "sealed" and z["scrub"]["result"] == "mismatch" and "mismatch" in z.get("note", ""),
                 "zones get: still sealed (not repaired), scrub mismatch, a note in the record", z)
            p = ctl("zones")
            r.ok(p.returncode == 0 and "1 sealed object no longer reads back to its SHA-256" in p.stderr,
                 "zones: the device's damaged object is said (stderr, the table stays as it is)", show(p))
            devs = ctl.json("zones")[1]
            r.eq([x.get("damaged") for x in devs], [1], "zones --json: damaged 1")
            errs = [l for l in d.error_lines() if "no longer matches its SHA-256" in l]
            r.eq(len(errs), 1, "logged at error level once, though found three times")
            mon.wait(lambda e: e.get("event") == "objectDamaged", 10)
            events = [mon.params(i) for i in range(len(mon.events))]
            alerts = [e for e in events if e.get("event") == "objectDamaged"]
            r.ok(len(alerts) == 1 and alerts[0].get("device") == dev and o["lease"] in alerts[0].get("detail", ""),
                 "an objectDamaged alert on io.blkmqd.Metrics.Monitor, once, naming device and lease", events)
            mon.close()

        with r.case("the background scrub finds a corruption by itself, paced", env):
            # Damage in the object's last byte: its third 1 MiB read, which
            # at ScrubRateMBps=1 cannot start before 2 s into the scrub.
            config(scrub=1, extra="ScrubRateMBps=1")
            d.reload()
            p, o = ctl.json("stage", fw, "--label", "quiet")
            corrupt(img, o["zone"]["start"] + len(fw_data) - 1)
            # The pool's own test (test-uring-pool: test_ioprio) shows that a
            # request's priority reaches the kernel; here, that the scrub asks.
            started = "scrubbing zone %d (quiet), %d bytes, through the io_uring pool at idle I/O priority, " \
                      "1024 KiB/s" % (o["zone"]["zoneIndex"], len(fw_data))
            r.ok(wait_for(lambda: started in d.log_text(), 20, interval=0.02),
                 "it reads through the io_uring pool at idle I/O priority, 1 MiB/s at most", started)
            t0 = time.monotonic()
            r.ok(wait_for(lambda: ctl.json("zones", "get", o["lease"])[1]["zone"].get("scrub", {}).get("result") ==
                          "mismatch", 20, interval=0.02), "within the interval the scrub marks it mismatch",
                 ctl.json("zones", "get", o["lease"])[1])
            r.ok(time.monotonic() - t0 >= 1.5, "not before its pace allows (the third MiB, 2 s in)",
                 f"{time.monotonic() - t0:.2f} s")
            r.ok(any("zone %d (quiet" % o["zone"]["zoneIndex"] in l for l in d.error_lines()),
                 "and logs it at error level")

        with r.case("the device as a person types it", env):
            for form in (img, "emu:" + img):
                p = ctl("zones", form)
                r.ok(p.returncode == 0 and "INDEX" in p.stdout, f"zones {form}", show(p))
            p = subprocess.run([ctl_bin, "zones", "zones.img"], cwd=env.tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=ctl.env(), text=True)
            r.ok(p.returncode == 0 and "INDEX" in p.stdout, "zones zones.img (relative, from its folder)", p.stderr)
            p = ctl("zones")
            r.ok(p.returncode == 0 and any(l.split()[0] == img and l.split()[1] == dev for l in p.stdout.splitlines()[1:]
                                           if l.split()), "zones: DEVICE is the file, ID whole", show(p))
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
