#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""blkmqd's zone allocator (io.blkmqd.Zones) with zones emulated over a file,
driven by blkmqctl and by the PyPI varlink package, every result checked
independently of blkmqd:

- blkmqctl zones / zones DEV / zones free DEV list the emulated device;
- blkmqctl stage of 1 B, 4 KiB and 1 MiB+1: each sealed, and each zone read
  back from the emulation file with python (offset = zone start, length =
  file size) hashes as hashlib says;
- larger than the zone capacity: TooLarge (exit 8); MaxActive=3: the fourth
  lease is ZoneLimitReached (exit 8); a wrong checksum: ChecksumMismatch
  (exit 9, zone failed); appending to a sealed lease: WrongState (exit 11);
  an unknown lease: exit 3;
- ResetBatch=2: one released zone waits, the second starts the batch; both
  free with resetCount 1 and zeros in the file;
- the PyPI varlink client (no fd passing): Allocate + Append of inline base64
  chunks + Seal, read back; a chunk over 1 MiB is refused;
- ownership: with AdminGroup=nogroup, uid 65534 may allocate but not
  append/seal/release root's lease (PermissionDenied, exit 4); root may use
  uid 65534's lease; a uid outside the group may not allocate at all;
- kill -9 of the daemon in the middle of an append from a fifo: after the
  restart the zone is reconciled (writing -> releasing, logged), reset and
  free; sealed and failed zones survive the restart with their lease and
  sha256.

Runs in the venv of tests/interop/setup-venv.sh (for the varlink package):
re-executes itself with its interpreter, like tests/interop/test_interop.py;
without the venv (no PyPI) only that case skips. Needs root, $BLKMQD and
$BLKMQCTL (or argv[1], argv[2]). Exit 0 pass, 1 fail, 77 skip (a skip fails
under CI=true)."""

import base64
import json
import os
import re
import subprocess
import threading
import time

from blkmqtest import (CI, Ctl, Env, Runner, ctl_path, daemon_path, ensure_venv, log, main_guard,
                       need_root, read_img, sha, show, timeout_scale, varlink_call, wait_for)

ZONES = "io.blkmqd.Zones"
NOBODY = 65534          # in nogroup (65534) = AdminGroup=: may allocate
OUTSIDER = 65533        # in no admin group: may only read

MIB = 1 << 20
ZONE_SIZE = 4 * MIB
ZONE_CAP = 3 * MIB
ZONE_COUNT = 8
MAX_ACTIVE = 3


def main():
    no_venv = ensure_venv("varlink", optional=True)
    need_root()
    blkmqd = daemon_path()
    ctl_bin = ctl_path()
    r = Runner("zones")

    with Env("zones") as env:
        os.chmod(env.tmp, 0o755)       # uid 65534 reaches the socket
        img = os.path.join(env.tmp, "zones.img")
        db = os.path.join(env.tmp, "zones.db")
        cfg = env.config(f"""\
# test_zones: emulated zones only; nogroup may allocate
[Daemon]
AdminGroup=nogroup

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount={ZONE_COUNT}
MaxActive={MAX_ACTIVE}
ResetBatch=2
Database={db}
""")
        sock = os.path.join(env.tmp, "io.blkmqd")
        args = ["--config", cfg, "--varlink-address", sock, "--log-level", "debug"]
        d = env.daemon(args, name="blkmqd1")
        d.start(timeout=15)
        ctl = Ctl(ctl_bin, sock)
        dev = "emu:" + img
        state = {}              # what later cases build on

        def zone(index):
            p, z = ctl.json("zones", "get", dev, index)
            return z.get("zone") if p.returncode == 0 and z else None

        def zones():
            p, zs = ctl.json("zones", dev)
            return zs if p.returncode == 0 else None

        def make(name, size):
            path = os.path.join(env.tmp, name)
            data = os.urandom(size)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o644)
            return path, data

        with r.case("zones: the emulated device", env):
            p, devs = ctl.json("zones")
            r.eq(p.returncode, 0, "zones --json: exit 0", daemon=d if p.returncode else None)
            one = devs[0] if isinstance(devs, list) and len(devs) == 1 else {}
            r.eq((one.get("deviceId"), one.get("backend"), one.get("zones"), one.get("zoneSize"),
                  one.get("zoneCapacity"), one.get("maxActive"), one.get("free")),
                 (dev, "emulated", ZONE_COUNT, ZONE_SIZE, ZONE_CAP, MAX_ACTIVE, ZONE_COUNT),
                 "zones --json: one emulated device, 8 zones of 4 MiB, capacity 3 MiB, max active 3, all free")
            p = ctl("zones")
            lines = p.stdout.splitlines()
            r.ok(p.returncode == 0 and lines and lines[0].split() ==
                 ["DEVICE", "ID", "BACKEND", "ZONES", "SIZE", "CAP", "FREE", "ALLOC", "WRITING", "SEALED",
                  "RELEASING", "FAILED"] and any(dev in l and "emulated" in l for l in lines[1:]),
                 "zones: table header and the device's row", show(p))
            # The kernel's write limits: none for emulated zones (absent,
            # not 0), "-" in the second table; none without the legend.
            r.ok("writeLimits" not in one, "zones --json: no writeLimits for emulated zones", one)
            wi = next((i for i, l in enumerate(lines) if l.startswith("Write limits")), None)
            r.ok(wi is not None and wi + 2 < len(lines) and lines[wi + 1].split()[:2] == ["DEVICE", "STREAMS"]
                 and lines[wi + 2].split()[1:] == ["-"] * 6,
                 "zones: the write limits table, - in every column for emulated zones", show(p))
            p = ctl("zones", "--no-legend")
            r.ok(p.returncode == 0 and "Write limits" not in p.stdout and len(p.stdout.splitlines()) == 1,
                 "zones --no-legend: the device's row alone", show(p))
            zs = zones()
            r.ok(isinstance(zs, list) and len(zs) == ZONE_COUNT and
                 all(z["zoneIndex"] == i and z["start"] == i * ZONE_SIZE and z["startLba"] == i * ZONE_SIZE // 512
                     and z["state"] == "free" and z["condition"] == "empty" for i, z in enumerate(zs)),
                 "zones DEV --json: 8 free empty zones, start = index * 4 MiB, startLba in 512 B sectors", zs)
            p = ctl("zones", dev)
            rows = [l.split() for l in p.stdout.splitlines()]
            r.ok(p.returncode == 0 and rows[0] == ["INDEX", "START-LBA", "WP", "COND", "STATE", "LEASE", "LABEL",
                                                   "BYTES"] and rows[2][:5] == ["1", "8192", "8192", "empty", "free"],
                 "zones DEV: table (INDEX START-LBA WP COND STATE LEASE LABEL BYTES)", show(p))
            p = ctl("zones", "free", dev)
            r.ok(p.returncode == 0 and p.stdout == "0\n", "zones free DEV: prints 0 and nothing else", show(p))
            p, zs = ctl.json("zones", dev, "--state=sealed")
            r.ok(p.returncode == 0 and zs == [], "zones DEV --state=sealed: none yet", show(p))
            p = ctl("zones", "nosuchdev")
            r.ok(p.returncode == 3 and "no such zoned device" in p.stderr, "zones UNKNOWN: exit 3", show(p))

        with r.case("stage 1 B, 4 KiB, 1 MiB+1; read back from the emulation file", env):
            staged = []
            for name, size in (("one.bin", 1), ("4k.bin", 4096), ("1m1.bin", MIB + 1)):
                path, data = make(name, size)
                p, o = ctl.json("stage", path, "--label", name)
                if not r.ok(p.returncode == 0 and isinstance(o, dict), f"stage {name} ({size} B): exit 0",
                            show(p), daemon=d):
                    continue
                z = o.get("zone", {})
                r.eq((o.get("sha256"), o.get("size"), z.get("state"), z.get("condition"), z.get("bytesWritten"),
                      z.get("sha256"), z.get("label"), o.get("startLba") * 512 == z.get("start")),
                     (sha(data), size, "sealed", "full", size, sha(data), name, True),
                     f"stage {name}: sealed, full, sha256 and size as hashlib says")
                secs = o.get("seconds", {})
                r.ok(sorted(secs) == ["allocate", "append", "hash", "seal"] and
                     all(isinstance(v, float) and v >= 0 for v in secs.values()),
                     f"stage {name} --json: seconds of allocate, append, hash, seal", secs)
                back = read_img(img, z["start"], size)
                r.eq(sha(back), sha(data), f"{name}: zone {z['zoneIndex']} read back from {os.path.basename(img)} "
                     f"at {z['start']} hashes like the file")
                staged.append((name, size, data, o))
            state["staged"] = staged
            starts = sorted(o["startLba"] for _, _, _, o in staged)
            r.eq(len(set(starts)), len(staged), "each object in a zone of its own")
            if staged:
                lease = staged[-1][3]["lease"]
                p, g = ctl.json("zones", "get", lease)
                r.ok(p.returncode == 0 and g["zone"]["lease"] == lease and g["zone"]["state"] == "sealed",
                     "zones get LEASE: the sealed zone", show(p))
                p = ctl("zones", "get", lease)
                r.ok(p.returncode == 0 and re.search(r"^\s+State: sealed$", p.stdout, re.M) and
                     re.search(r"^\s+SHA256: " + staged[-1][3]["sha256"] + "$", p.stdout, re.M) and
                     re.search(r"^\s+Device: " + re.escape(dev) + r" \(emulated\)$", p.stdout, re.M),
                     "zones get LEASE: fields State, SHA256, Device (emulated, not gone)", show(p))
            path, data = make("text.bin", 5000)
            p = ctl("stage", path)
            fields = dict(re.findall(r"^\s*([A-Za-z0-9 ]+): (.*)$", p.stdout, re.M))
            r.ok(p.returncode == 0 and set(fields) == {"Device", "Zone", "Start LBA", "Start byte", "Size", "Lease", "SHA256",
                                                       "Time"}
                 and fields["SHA256"] == sha(data) and fields["Device"] == dev and
                 re.fullmatch(r"\d+\.\d{3} s: allocate \d+\.\d{3}, append \d+\.\d{3} \(hash \d+\.\d{3} alongside\), "
                              r"seal \d+\.\d{3}", fields["Time"]),
                 "stage (text): Device, Zone, Start LBA, Start byte, Size, Lease, SHA256, Time (the split)", show(p))
            free_lbas = [z["startLba"] for z in zones() or [] if z["state"] == "free" and z["condition"] == "empty"]
            p = ctl("zones", "free", dev)
            r.ok(p.returncode == 0 and free_lbas and p.stdout == f"{free_lbas[0]}\n",
                 f"zones free DEV: {free_lbas[:1]} (first free empty zone)", show(p))

        with r.case("errors: TooLarge, unknown lease, WrongState", env):
            p, e = ctl.json("zones", "alloc", f"--size={ZONE_CAP + 1}")
            r.ok(p.returncode == 8 and "do not fit" in p.stderr and e ==
                 {"error": ZONES + ".TooLarge", "parameters": {"size": ZONE_CAP + 1, "capacity": ZONE_CAP}},
                 "zones alloc --size=3 MiB+1: TooLarge, exit 8, the error as JSON", show(p))
            big = os.path.join(env.tmp, "big.bin")
            with open(big, "wb") as f:
                f.truncate(ZONE_CAP + 1)
            p = ctl("stage", big)
            r.ok(p.returncode == 8 and "do not fit" in p.stderr, "stage of 3 MiB+1: exit 8", show(p))
            p = ctl("zones", "get", "no-such-lease")
            r.ok(p.returncode == 3 and "no such lease" in p.stderr, "zones get UNKNOWN: exit 3", show(p))
            p = ctl("zones", "release", "no-such-lease")
            r.eq(p.returncode, 3, "zones release UNKNOWN: exit 3")
            if state.get("staged"):
                lease = state["staged"][-1][3]["lease"]
                p = ctl("zones", "append", lease, "--inline", "-", data=b"more")
                r.ok(p.returncode == 11 and "sealed" in p.stderr, "zones append to a sealed lease: WrongState, exit 11",
                     show(p))

        with r.case("MaxActive=3: the fourth lease is refused", env):
            leases = []
            for size in (1, 1, "3M"):      # 3 MiB: exactly the capacity
                p, o = ctl.json("zones", "alloc", f"--size={size}", "--label", f"active-{len(leases)}")
                r.ok(p.returncode == 0 and o and o["zone"]["state"] == "allocated",
                     f"zones alloc --size={size}: allocated", show(p))
                if o:
                    leases.append(o["lease"])
            p, e = ctl.json("zones", "alloc", "--size=1", "--device", dev)
            r.ok(p.returncode == 8 and "active zone limit" in p.stderr and e and
                 e.get("error") == ZONES + ".ZoneLimitReached" and e["parameters"].get("maxActive") == MAX_ACTIVE,
                 "4th zones alloc --device DEV: ZoneLimitReached (maxActive 3), exit 8", show(p))
            p = ctl("zones", "alloc", "--size=1")
            r.ok(p.returncode == 8 and "active zone limit" in p.stderr, "4th zones alloc (any device): exit 8", show(p))
            p, devs = ctl.json("zones")
            r.eq(devs[0]["allocated"] if p.returncode == 0 else None, 3, "zones: ALLOC 3")
            # Two go back (reset as a batch of 2), the 3 MiB one stays for the crash case.
            for lease in leases[:2]:
                p = ctl("zones", "release", lease)
                r.ok(p.returncode == 0 and re.search(r"^\s+State: (releasing|free)$", p.stdout, re.M),
                     "zones release: releasing", show(p))
            if len(leases) == 3:
                state["crash_lease"] = leases[2]
            # (Kept for the ChecksumMismatch case.)
            p, o = ctl.json("zones", "alloc", "--size=5", "--device", dev, "--label", "mismatch")
            r.ok(p.returncode == 0, "after two releases a lease is possible again", show(p))
            if p.returncode == 0:
                state["extra_lease"] = o["lease"]

        with r.case("ResetBatch=2: released zones reset in a batch, then free and zero", env):
            staged = state.get("staged", [])
            if len(staged) < 2:
                raise RuntimeError("needs the staged 1 B and 4 KiB zones")
            # The two released above were a batch of their own: nothing waits.
            ok = wait_for(lambda: all(z["state"] != "releasing" for z in zones() or []), 10)
            r.ok(ok, "the first batch (2 zones of the MaxActive case) is done: no zone waits",
                 zones(), daemon=None if ok else d)
            z0, z1 = staged[0][3]["zone"], staged[1][3]["zone"]
            r0 = zone(z0["zoneIndex"])["resetCount"]
            p = ctl("zones", "release", staged[0][3]["lease"])
            r.eq(p.returncode, 0, "zones release (1 B zone): exit 0")
            time.sleep(1.0)
            z = zone(z0["zoneIndex"])
            r.eq((z["state"], z["resetCount"], z.get("lease")), ("releasing", r0, None),
                 "one released zone waits for the batch (releasing, not reset, no lease) 1 s later")
            r.eq(sha(read_img(img, z0["start"], 1)), sha(staged[0][2]),
                 "its data is still in the file before the reset")
            p = ctl("zones", "release", staged[1][3]["lease"])
            r.eq(p.returncode, 0, "zones release (4 KiB zone): exit 0, the batch is complete")
            ok = wait_for(lambda: all(zone(z["zoneIndex"])["state"] == "free" for z in (z0, z1)), 10)
            got = [zone(z["zoneIndex"]) for z in (z0, z1)]
            r.ok(ok and all(g["resetCount"] == r0 + 1 and g["condition"] == "empty" and
                            g["writePointer"] == g["start"] and g["bytesWritten"] == 0 for g in got),
                 "both zones free, empty, wp at start, resetCount 1", got, daemon=None if ok else d)
            for z in (z0, z1):
                back = read_img(img, z["start"], ZONE_CAP)
                r.ok(back == bytes(ZONE_CAP), f"zone {z['zoneIndex']} reads back as zeros (whole capacity)")
            r.ok(re.search(r"resetting 2 released zones", d.log_text()) is not None, "logged: resetting 2 released zones")

        with r.case("ChecksumMismatch: exit 9, the zone is failed", env):
            lease = state.get("extra_lease")
            if not lease:
                raise RuntimeError("no lease left from the MaxActive case")
            p = ctl("zones", "append", lease, "-", data=b"hello")
            r.ok(p.returncode == 0 and re.search(r"^\s+Written: 5 B of 3.0 MiB$", p.stdout, re.M),
                 "zones append LEASE - (stdin, fd passed): 5 B", show(p))
            p, e = ctl.json("zones", "seal", lease, sha(b"world"))
            r.ok(p.returncode == 9 and "checksum mismatch" in p.stderr and e and
                 e["parameters"] == {"expected": sha(b"world"), "actual": sha(b"hello")},
                 "zones seal with the wrong sha256: ChecksumMismatch, exit 9", show(p))
            p, g = ctl.json("zones", "get", lease)
            r.eq(g["zone"]["state"] if g else None, "failed", "the zone is failed")
            state["failed"] = (lease, g["zone"]["zoneIndex"]) if g else None
            p = ctl("zones", "seal", lease, "xyz")
            r.eq(p.returncode, 1, "zones seal LEASE xyz: usage error before any call")

        with r.case("zones alloc + append --inline (two chunks) + seal", env):
            path, data = make("inline.bin", MIB + 5)
            p, o = ctl.json("zones", "alloc", f"--size={len(data)}", "--label", "inline")
            r.eq(p.returncode, 0, "zones alloc")
            lease = o["lease"]
            p, a = ctl.json("zones", "append", lease, "--inline", path)
            r.ok(p.returncode == 0 and a and a["bytesWritten"] == len(data) and a["zone"]["state"] == "writing",
                 "zones append --inline FILE: 1 MiB + 5 B in two calls", show(p))
            p = ctl("zones", "seal", lease, sha(data).upper())
            r.ok(p.returncode == 0 and re.search(r"^\s+State: sealed$", p.stdout, re.M),
                 "zones seal LEASE SHA256 (upper case accepted)", show(p))
            o = json.loads(ctl("zones", "get", lease, "--json").stdout)["zone"]
            r.eq(sha(read_img(img, o["start"], len(data))), sha(data), "read back: the same bytes")

        with r.case("PyPI varlink client: Allocate + inline base64 Append + Seal", env):
            if no_venv:
                why = no_venv
                if CI:
                    r.ok(False, f"PyPI varlink client: would skip, but CI=true: {why}")
                else:
                    log(f"ok - # SKIP PyPI varlink client: {why}")
            else:
                import varlink  # noqa: E402  (only inside the venv)
                client = varlink.Client.new_with_address("unix:" + sock)
                iface = client.get_interface(ZONES)
                methods = {n for n, m in iface.members.items() if type(m).__name__ == "_Method"}
                r.eq(methods, {"ListDevices", "ListZones", "Allocate", "Append", "Seal", "Release", "Get", "ListObjects",
                               "Find", "Read", "Verify", "Repair"},
                     "the package parses the io.blkmqd.Zones IDL")
                data = os.urandom(2 * MIB + 3)
                with client.open(ZONES) as zs:
                    a = zs.Allocate(size=len(data), label="pypi")
                    lease = a["lease"]
                    r.eq((a["zone"]["state"], a["zone"]["label"]), ("allocated", "pypi"), "Allocate: allocated, label")
                    total = 0
                    for off in range(0, len(data), MIB):
                        chunk = data[off:off + MIB]
                        ap = zs.Append(lease=lease, data=base64.b64encode(chunk).decode())
                        total += len(chunk)
                    r.eq(ap["zone"]["bytesWritten"], len(data), "Append x3 (1 MiB, 1 MiB, 3 B): bytesWritten")
                    try:
                        zs.Append(lease=lease, data=base64.b64encode(bytes(MIB + 1)).decode())
                        r.ok(False, "an inline chunk of 1 MiB+1 is refused")
                    except varlink.VarlinkError as e:
                        r.eq((e.error(), e.parameters()),
                             ("org.varlink.service.InvalidParameter", {"parameter": "data"}),
                             "an inline chunk of 1 MiB+1: InvalidParameter data")
                    s = zs.Seal(lease=lease, sha256=sha(data))
                    z = s["zone"]
                    r.eq((z["state"], z["sha256"], z["bytesWritten"]), ("sealed", sha(data), len(data)),
                         "Seal: sealed with the sha256")
                back = read_img(img, z["start"], len(data))
                r.eq(sha(back), sha(data), "read back from the emulation file: the same bytes")
                state["pypi"] = (lease, sha(data))

        with r.case("leases belong to their owner (and root)", env):
            p = ctl("zones", uid=OUTSIDER)
            r.eq(p.returncode, 0, f"uid {OUTSIDER} (no admin group) may list zones")
            p = ctl("zones", "alloc", "--size=1", uid=OUTSIDER)
            r.ok(p.returncode == 4 and "permission denied" in p.stderr,
                 f"uid {OUTSIDER} may not allocate (exit 4)", show(p))
            p, o = ctl.json("zones", "alloc", "--size=4096", "--label", "root-owned")
            r.eq(p.returncode, 0, "root allocates a lease")
            rl = o["lease"]
            payload = b"n" * 4096
            for cmd, data in ((("zones", "append", rl, "-"), payload),
                               (("zones", "append", rl, "--inline", "-"), payload),
                               (("zones", "seal", rl, sha(payload)), None),
                               (("zones", "release", rl), None)):
                p = ctl(*cmd, uid=NOBODY, data=data)
                r.ok(p.returncode == 4 and "belongs to another user" in p.stderr,
                     f"uid {NOBODY} (AdminGroup): {' '.join(cmd[:2])} of root's lease: PermissionDenied, exit 4",
                     show(p))
            p, g = ctl.json("zones", "get", rl, uid=NOBODY)
            r.eq((p.returncode, g["zone"]["state"] if g else None, g["zone"]["bytesWritten"] if g else None),
                 (0, "allocated", 0), f"root's lease untouched (uid {NOBODY} may read it)")
            # Room for one more active zone (the crash lease and the failed,
            # still open zone hold two of three).
            p = ctl("zones", "release", rl)
            r.eq(p.returncode, 0, "root releases its own lease")
            p, o = ctl.json("zones", "alloc", "--size=4096", "--label", "nobody-owned", uid=NOBODY)
            r.ok(p.returncode == 0 and o and o["zone"].get("ownerUid") == NOBODY,
                 f"uid {NOBODY} allocates its own lease (ownerUid {NOBODY})", show(p))
            nl = o["lease"]
            f, data = make("nobody.bin", 4096)
            p = ctl("zones", "append", nl, f)
            r.eq(p.returncode, 0, f"root appends to uid {NOBODY}'s lease (fd passed)")
            p, s = ctl.json("zones", "seal", nl, sha(data))
            r.ok(p.returncode == 0 and s["zone"]["state"] == "sealed" and s["zone"]["ownerUid"] == NOBODY,
                 f"root seals uid {NOBODY}'s lease; the owner stays {NOBODY}", show(p))
            state["nobody"] = (nl, sha(data))

        with r.case("kill -9 in the middle of an append; reconciled at restart", env):
            lease = state.get("crash_lease")
            if not lease:
                raise RuntimeError("no 3 MiB lease left from the MaxActive case")
            idx = json.loads(ctl("zones", "get", lease, "--json").stdout)["zone"]["zoneIndex"]
            before = {z["zoneIndex"]: z for z in zones()}
            resets0 = before[idx]["resetCount"]
            fifo = os.path.join(env.tmp, "slow.fifo")
            os.mkfifo(fifo)
            app = ctl.popen("zones", "append", lease, fifo)
            w = os.open(fifo, os.O_WRONLY)        # blkmqctl has it open now
            sent = [0]

            def writer():
                try:
                    for _ in range(6):   # 1.5 MiB, then silence (the fifo stays open)
                        sent[0] += os.write(w, os.urandom(256 * 1024))
                except OSError:
                    pass
            t = threading.Thread(target=writer, daemon=True)
            t.start()
            got = wait_for(lambda: (zone(idx) or {}).get("writePointer", 0) - before[idx]["start"] >= MIB, 15)
            z = zone(idx)
            r.ok(got and z["state"] == "writing", f"zone {idx} is being written (wp {z['writePointer'] - z['start']} B "
                 f"in, {sent[0]} B sent)", z, daemon=None if got else d)
            d.proc.kill()
            d.proc.wait()
            d.close()
            try:
                rc = app.wait(10 * timeout_scale())
                err = app.stderr.read().decode()
            except subprocess.TimeoutExpired:
                app.kill()
                rc, err = "hung", ""
            r.ok(rc == 2 and "closed the connection" in err,
                 "blkmqctl zones append: exit 2, blkmqd closed the connection", f"exit {rc}: {err}")
            t.join(2)
            os.close(w)

            d2 = env.daemon(args, name="blkmqd2")
            d2.start(timeout=15)
            ok = wait_for(lambda: (zone(idx) or {}).get("state") == "free", 10)
            z = zone(idx)
            r.ok(ok and z["resetCount"] == resets0 + 1 and z["condition"] == "empty" and z.get("lease") is None,
                 f"zone {idx}: free again, reset once more, no lease", z, daemon=None if ok else d2)
            text = d2.log_text()
            r.ok(re.search(rf"zone {idx}: writing (→|->) releasing", text) is not None,
                 f"logged: zone {idx}: writing → releasing", daemon=None)
            r.ok(re.search(rf"zone {idx} reset \(", text) is not None, f"logged: zone {idx} reset")
            r.ok(read_img(img, z["start"], ZONE_CAP) == bytes(ZONE_CAP), f"zone {idx} reads back as zeros")
            p = ctl("zones", "get", lease)
            r.eq(p.returncode, 3, "the crashed lease is gone (exit 3)")

            after = {z["zoneIndex"]: z for z in zones()}
            for k, b in before.items():
                if b["state"] not in ("sealed", "failed"):
                    continue
                a = after[k]
                # An open zone comes back closed, as after a power cycle: the
                # condition is compared for sealed (full) zones only.
                r.eq((a["state"], a.get("lease"), a.get("sha256"), a["bytesWritten"],
                      a["condition"] if b["state"] == "sealed" else None),
                     (b["state"], b.get("lease"), b.get("sha256"), b["bytesWritten"],
                      b["condition"] if b["state"] == "sealed" else None),
                     f"zone {k} ({b['state']}, {b.get('label')}) survives the restart: state, lease, sha256")
            for what in ("pypi", "nobody"):
                if state.get(what):
                    lease2, digest = state[what]
                    p, g = ctl.json("zones", "get", lease2)
                    r.eq((p.returncode, g["zone"]["state"] if g else None, g["zone"]["sha256"] if g else None),
                         (0, "sealed", digest), f"{what}: zones get LEASE after the restart: sealed, same sha256")
            for _, size, data, o in state.get("staged", [])[2:]:
                r.eq(sha(read_img(img, o["zone"]["start"], size)), sha(data),
                     f"{size} B object still reads back after the restart")
            r.eq(d2.error_lines(), [], "no error logged by the restarted daemon")

            # Fill the device: then there is no free zone to show or lease.
            n_free = sum(1 for z in zones() if z["state"] == "free")
            for i in range(n_free):
                path, _ = make(f"fill{i}.bin", 512)
                p = ctl("stage", path, "--label", f"fill{i}")
                r.eq(p.returncode, 0, f"stage fill{i} (one of the {n_free} free zones)")
            p = ctl("zones", "free", dev)
            r.ok(p.returncode == 3 and p.stdout == "" and "no free empty zone" in p.stderr,
                 "zones free DEV with every zone used: exit 3, nothing on stdout", show(p))
            p = ctl("stage", path)
            r.ok(p.returncode == 8 and "no free zone" in p.stderr, "stage with every zone used: NoFreeZone, exit 8",
                 show(p))
            d2.stop()

        with r.case("Append from an fd: mapped file, stream, offset, TooLarge up front; verify behind the "
                    "appends; AppendChunkKB= on reload", env):
            img3 = os.path.join(env.tmp, "zones3.img")
            sock3 = os.path.join(env.tmp, "io.blkmqd.3")
            conf3 = """\
[Zones]
Emulate={img}
ZoneSizeMB=16
ZoneCapacityMB=12
ZoneCount=5
Database={db}
{extra}"""
            cfg3 = env.config(conf3.format(img=img3, db=os.path.join(env.tmp, "zones3.db"), extra=""),
                              name="blkmqd3.conf")
            d3 = env.daemon(["--config", cfg3, "--varlink-address", sock3, "--log-level", "debug"],
                            name="blkmqd3")
            d3.start(timeout=15)
            ctl3 = Ctl(ctl_bin, sock3)
            dev3 = "emu:" + img3

            def alloc3(size, label):
                p, o = ctl3.json("zones", "alloc", f"--size={size}", "--label", label)
                if p.returncode != 0:
                    raise RuntimeError(f"zones alloc: {show(p)}")
                return o["lease"], o["zone"]

            def append_fd(lease, fd):
                return varlink_call(sock3, ZONES + ".Append", {"lease": lease, "fd": 0}, fds=[fd])

            # 1. A regular file at offset 0: mapped, verified while written.
            big = os.urandom(10 * MIB + 100)
            path, _ = make("big.bin", 0)
            with open(path, "wb") as f:
                f.write(big)
            mark = len(d3.log_text())
            p, o = ctl3.json("stage", path, "--label", "big")
            r.ok(p.returncode == 0 and o and o["zone"]["state"] == "sealed" and o["zone"]["sha256"] == sha(big),
                 "stage of 10 MiB+100 B: sealed, the file's sha256", show(p), daemon=None if p.returncode == 0 else d3)
            text = d3.log_text()[mark:]
            r.ok("appending from a mapped file, writes of" in text, "logged: appending from a mapped file")
            m = re.search(r"sealed, (\d+) bytes \((\d+) of them verified while written\)", text)
            r.ok(m is not None and int(m.group(1)) == len(big) and 0 < int(m.group(2)) < len(big),
                 "logged: part of the object was read back and hashed while it was being written",
                 m.group(0) if m else text[-2000:])
            if o:
                r.eq(sha(read_img(img3, o["zone"]["start"], len(big))), sha(big),
                     "10 MiB+100 B read back from the emulation file")

            # 2. Offsets and modes: an fd at an unaligned offset (copied) leaves
            # a partial block; a regular file after it (copied, as the carried
            # block comes first); a pipe; the file offsets move past the data.
            lease, z = alloc3(MIB, "modes")
            parts = [os.urandom(5000), os.urandom(3 * 4096 + 7), os.urandom(10)]
            fpath, _ = make("modes.bin", 0)
            with open(fpath, "wb") as f:
                f.write(os.urandom(1000) + parts[0])
            fd = os.open(fpath, os.O_RDONLY)
            os.lseek(fd, 1000, os.SEEK_SET)
            mark = len(d3.log_text())
            rep = append_fd(lease, fd)
            r.ok(rep.get("parameters", {}).get("bytesWritten") == 5000 and os.lseek(fd, 0, os.SEEK_CUR) == 6000,
                 "Append fd at offset 1000: 5000 B taken, the fd's offset moved to the end", rep)
            os.close(fd)
            gpath, _ = make("modes2.bin", 0)
            with open(gpath, "wb") as f:
                f.write(parts[1])
            fd = os.open(gpath, os.O_RDONLY)
            rep = append_fd(lease, fd)
            r.ok(rep.get("parameters", {}).get("bytesWritten") == 5000 + len(parts[1]) and
                 os.lseek(fd, 0, os.SEEK_CUR) == len(parts[1]), "Append of a file after a partial block", rep)
            os.close(fd)
            rfd, wfd = os.pipe()
            os.write(wfd, parts[2])
            os.close(wfd)
            rep = append_fd(lease, rfd)
            os.close(rfd)
            r.eq(rep.get("parameters", {}).get("bytesWritten"), 5000 + len(parts[1]) + 10, "Append from a pipe", rep)
            text = d3.log_text()[mark:]
            r.eq(text.count("appending from a stream (copied)"), 3,
                 "logged: all three copied (unaligned offset, a carried block, a pipe)")
            data = b"".join(parts)
            p, sl = ctl3.json("zones", "seal", lease, sha(data))
            r.ok(p.returncode == 0 and sl["zone"]["state"] == "sealed", "sealed with the sha256 of the three parts",
                 show(p))
            r.eq(sha(read_img(img3, z["start"], len(data))), sha(data), "the three parts read back in order")

            # 3. Whole blocks from a mapped file, then a mapped file with a
            # partial last block, then the seal pads it.
            lease, z = alloc3(MIB, "mapped")
            a, b = os.urandom(8192), os.urandom(5000)
            mark = len(d3.log_text())
            for i, part in enumerate((a, b)):
                path, _ = make(f"mapped{i}.bin", 0)
                with open(path, "wb") as f:
                    f.write(part)
                fd = os.open(path, os.O_RDONLY)
                rep = append_fd(lease, fd)
                r.ok("error" not in rep and os.lseek(fd, 0, os.SEEK_CUR) == len(part),
                     f"Append of a {len(part)} B file: taken whole, offset at the end", rep)
                os.close(fd)
            r.eq(d3.log_text()[mark:].count("appending from a mapped file"), 2, "logged: both mapped")
            p, sl = ctl3.json("zones", "seal", lease, sha(a + b))
            r.ok(p.returncode == 0 and sl["zone"]["bytesWritten"] == len(a + b), "sealed: 13192 B", show(p))
            r.eq(sha(read_img(img3, z["start"], len(a + b))), sha(a + b), "13192 B read back")

            # 4. A file larger than the zone's capacity is refused before a
            # byte is written: the lease stays allocated and empty.
            lease, z = alloc3(4096, "toolarge")
            path, _ = make("toolarge.bin", 0)
            with open(path, "wb") as f:
                f.truncate(12 * MIB + 1)
            fd = os.open(path, os.O_RDONLY)
            rep = append_fd(lease, fd)
            os.close(fd)
            r.eq((rep.get("error"), rep.get("parameters")),
                 (ZONES + ".TooLarge", {"size": 12 * MIB + 1, "capacity": 12 * MIB}),
                 "Append of 12 MiB+1 B to a 12 MiB zone: TooLarge with size and capacity", rep)
            p, g = ctl3.json("zones", "get", lease)
            r.ok(p.returncode == 0 and (g["zone"]["state"], g["zone"]["bytesWritten"], g["zone"]["writePointer"]) ==
                 ("allocated", 0, z["start"]), "nothing written: allocated, 0 B, write pointer at the start", g)

            # 5. AppendChunkKB= and VerifyWhileWriting= apply to the next
            # Append after a reload.
            env.config(conf3.format(img=img3, db=os.path.join(env.tmp, "zones3.db"),
                                    extra="AppendChunkKB=64\nVerifyWhileWriting=no\n"), name="blkmqd3.conf")
            d3.reload()
            path, _ = make("small.bin", 0)
            with open(path, "wb") as f:
                f.write(os.urandom(200000))
            mark = len(d3.log_text())
            fd = os.open(path, os.O_RDONLY)
            rep = append_fd(lease, fd)
            os.close(fd)
            r.ok("error" not in rep and "appending from a mapped file, writes of 64 KiB, up to 1 in flight"
                 in d3.log_text()[mark:], "after a reload with AppendChunkKB=64: writes of 64 KiB", rep)
            mark = len(d3.log_text())
            p, o = ctl3.json("stage", os.path.join(env.tmp, "big.bin"), "--label", "big2")
            m = re.search(r"sealed, (\d+) bytes \((\d+) of them verified while written\)", d3.log_text()[mark:])
            r.ok(p.returncode == 0 and m is not None and m.groups() == (str(len(big)), "0"),
                 "VerifyWhileWriting=no: the seal reads the whole object back (0 B verified while written)",
                 m.group(0) if m else show(p))
            r.eq(d3.error_lines(), [], "no error logged")
            d3.stop()

    r.finish()


if __name__ == "__main__":
    main_guard(main)
