#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The journal entries of blkmqd carry their MESSAGE_ID and fields beside
MESSAGE. PID 1 here is not systemd and no journald runs, so the test is the
journal: in a private mount namespace (unshare --mount) a tmpfs hides
/run/systemd, and the test binds /run/systemd/journal/socket itself and
reads the datagrams sd-journal sends (the native protocol: KEY=VALUE lines,
or KEY, a 64-bit length and the bytes; a memfd passed for a large one). As
journald does, it takes _PID and _UID from the sender's credentials
(SO_PASSCRED, SCM_CREDENTIALS), never from the datagram.

Every MESSAGE_ID of src/basic/message-id.h is caused for real and read
back, with each field its comment there and its catalog entry
(@BLKMQD_…@) name, and the _PID of the daemon that sent it:

- a change applied (4c924cfe…): queue/scheduler none → kyber;
- originals adopted after a kill -9 (0854cebe…): BLKMQD_PID of the first
  instance, sent by the second;
- the restore at stop (7bbaaee7…): old and new the other way round;
- a trial decision (bcd174fd…): blkmqctl trial on a second disk (0.25 s
  epochs), its verdict and reason;
- an object damaged (b2016f31…): a byte of a sealed object flipped in
  the emulated zones' file, then zones verify: the SHA-256 recorded and the
  one read;
- a zone failed (a34415b2…): a lease sealed with the SHA-256 of other
  bytes than it holds;
- a restore refused (14f9f4f6…): nr_requests 1024 under mq-deadline is
  the original; the scheduler set to none behind blkmqd's back, the stop's
  restore of 1024 is refused by the kernel;
- drift (545a9ec0…): read_ahead_kb written behind blkmqd's back, found by
  the drift check (DriftCheckSec=0.2), with DriftPolicy= report;
- an entry without a MESSAGE_ID still has MESSAGE, PRIORITY, CODE_LINE;
- the catalog (systemd/blkmqd.catalog) has an entry for every MESSAGE_ID of
  message-id.h and none other, each with Subject:, Defined-By: and
  Documentation:; and no MESSAGE_ID of message-id.h goes without a case
  here that reads it back.

journalctl MESSAGE_ID=… against a real journald is in the systemd guest
suite. Needs root, loop devices, udev, unshare."""

import array
import mmap
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))

from blkmqtest import (Ctl, Env, Runner, ctl_path, main_guard, need_all, need_root, sha, show, skip,  # noqa: E402
                       udevd, wait_for)

MIB = 1 << 20
UCRED = struct.Struct("iII")    # struct ucred: pid, uid, gid


def reexec_in_namespace():
    """Runs this test again in a private mount namespace (once)."""
    if os.environ.get("BLKMQD_TEST_JOURNAL_NS") == "1":
        return
    need_root()
    if not shutil.which("unshare"):
        skip("unshare (util-linux) missing")
    env = dict(os.environ, BLKMQD_TEST_JOURNAL_NS="1")
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable] + sys.argv, env=env)
    sys.exit(p.returncode)


def parse_entry(b):
    """One native-protocol datagram: {KEY: value}."""
    e = {}
    i = 0
    while i < len(b):
        nl = b.find(b"\n", i)
        if nl < 0:
            break
        line = b[i:nl]
        if b"=" in line:
            k, _, v = line.partition(b"=")
            e[k.decode()] = v.decode(errors="replace")
            i = nl + 1
        else:
            (n,) = struct.unpack("<Q", b[nl + 1:nl + 9])
            e[line.decode()] = b[nl + 9:nl + 9 + n].decode(errors="replace")
            i = nl + 9 + n + 1
    return e


class Journal:
    def __init__(self):
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run/systemd"], check=True)
        os.makedirs("/run/systemd/journal")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("/run/systemd/journal/socket")
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        # As journald: the kernel attaches the sender's pid, uid and gid.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.2)
        self.entries = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def receive(self):
        b, anc, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(UCRED.size) + socket.CMSG_SPACE(16 * 4))
        cred, fds = None, array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                cred = UCRED.unpack(data[:UCRED.size])
            elif level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
        for fd in fds:      # an entry too large for a datagram: a sealed memfd
            try:
                size = os.fstat(fd).st_size
                if not b and size:
                    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as m:
                        b = bytes(m)
            finally:
                os.close(fd)
        e = parse_entry(b)
        if cred:
            e["_PID"], e["_UID"] = str(cred[0]), str(cred[1])
        return e

    def run(self):
        while not self.stop:
            try:
                e = self.receive()
            except socket.timeout:
                continue
            with self.lock:
                self.entries.append(e)

    def find(self, **want):
        with self.lock:
            return [e for e in self.entries if all(e.get(k) == v for k, v in want.items())]


def message_ids():
    """{name: (MESSAGE_ID, the BLKMQD_ fields its comment in message-id.h names)}."""
    with open(os.path.join(SRC, "src", "basic", "message-id.h")) as f:
        text = f.read()
    ids = {}
    for m in re.finditer(r'/\*((?:(?!\*/).)*)\*/\s*#define (BLKMQD_MESSAGE_\w+) "([0-9a-f]{32})"', text, re.S):
        ids[m.group(2)] = (m.group(3), set(re.findall(r"\bBLKMQD_(?!MESSAGE_)[A-Z0-9_]+\b", m.group(1))))
    defined = re.findall(r"#define (BLKMQD_MESSAGE_\w+)", text)
    return ids, defined


def catalog_blocks():
    with open(os.path.join(SRC, "systemd", "blkmqd.catalog")) as f:
        text = f.read()
    return {m.group(1): m.group(2) for m in re.finditer(r"^-- ([0-9a-f]{32})\n(.*?)(?=^-- |\Z)", text, re.M | re.S)}


def corrupt(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xff]))


def main():
    need_all()
    ctl_bin = ctl_path()
    r = Runner("integration/journal")
    ids, defined = message_ids()
    blocks = catalog_blocks()
    # The fields an entry must carry: those message-id.h's comment and the
    # catalog's text name.
    documented = {name: fields | set(re.findall(r"@(BLKMQD_\w+)@", blocks.get(mid, "")))
                  for name, (mid, fields) in ids.items()}

    with r.case("the catalog explains every MESSAGE_ID", None):
        r.ok(ids and sorted(ids) == sorted(defined),
             f"message-id.h: {len(ids)} MESSAGE_IDs, each with a comment naming its fields",
             f"without a comment right above: {sorted(set(defined) - set(ids))}")
        for name, (mid, _) in sorted(ids.items()):
            b = blocks.get(mid, "")
            r.ok(re.search(r"^Subject: .+", b, re.M) and re.search(r"^Defined-By: blkmqd$", b, re.M) and
                 re.search(r"^Documentation: man:blkmqd\(8\)", b, re.M) and len(b.split("\n\n", 1)[-1]) > 80,
                 f"{name} ({mid}): Subject:, Defined-By: blkmqd, Documentation:, an explanation", b or "(none)")
        stray = set(blocks) - {mid for mid, _ in ids.values()}
        r.ok(not stray, "the catalog has no entry for an ID message-id.h does not define", sorted(stray))
        # journalctl's own parser, in a root of our own (never the host's database).
        if shutil.which("journalctl"):
            root = tempfile.mkdtemp(prefix="blkmqd-catalog-")
            try:
                os.makedirs(os.path.join(root, "usr/lib/systemd/catalog"))
                os.makedirs(os.path.join(root, "var/lib/systemd/catalog"))
                shutil.copy(os.path.join(SRC, "systemd", "blkmqd.catalog"), os.path.join(root, "usr/lib/systemd/catalog"))
                u = subprocess.run(["journalctl", f"--root={root}", "--update-catalog"], capture_output=True, text=True)
                ls = subprocess.run(["journalctl", f"--root={root}", "--list-catalog"], capture_output=True, text=True)
                listed = {l.split()[0] for l in ls.stdout.splitlines() if l.strip()}
                r.ok(u.returncode == 0 and listed == {mid for mid, _ in ids.values()},
                     f"journalctl --update-catalog takes it: --list-catalog has the {len(ids)}",
                     u.stderr + ls.stdout + ls.stderr)
            finally:
                shutil.rmtree(root, ignore_errors=True)

    j = Journal()
    read_back = set()

    def entry(name, pid, what, **want):
        """Waits for the entry of message-id.h's NAME with the fields WANT;
        every documented field must be there, and _PID must be PID."""
        read_back.add(name)
        mid = ids[name][0] if name in ids else None
        es = wait_for(lambda: j.find(MESSAGE_ID=mid, **want), 10)
        e = es[0] if es else {}
        missing = sorted(f for f in documented.get(name, ()) if not e.get(f))
        r.ok(es and not missing,
             f"{name} ({(mid or '?')[:8]}…) {what}: " + ", ".join(sorted(documented.get(name, ()))),
             f"missing {missing}: {e}" if es else
             [x for x in j.entries if x.get("MESSAGE_ID") == mid] or j.entries[-8:])
        if es:
            r.eq(e.get("_PID"), str(pid), f"  sent by the daemon: _PID (SCM_CREDENTIALS) {pid}")
        return e

    with udevd(), Env("journal") as env:
        a = env.attach(prefix="j")
        cfg = env.config(f"[Device j]\nMatchBackingFile={env.glob('j-*.img')}\nScheduler=kyber\nNrRequests=64\n")
        sock = os.path.join(env.tmp, "io.blkmqd")

        def daemon(n, config=cfg):
            return env.daemon(["--config", config, "--log-target=journal", "--varlink-address", sock],
                              name=f"blkmqd-{n}").start(timeout=15)

        with r.case("a change applied: its MESSAGE_ID and fields", env):
            d1 = daemon(1)
            pid1 = d1.pid()
            entry("BLKMQD_MESSAGE_CHANGE_APPLIED", pid1, "queue/scheduler none → kyber", BLKMQD_DEVICE=a.name,
                  BLKMQD_KNOB="queue/scheduler", BLKMQD_OLD="none", BLKMQD_NEW="kyber", BLKMQD_SECTION="Device j")
            ch = wait_for(lambda: j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_CHANGE_APPLIED"][0],
                                         BLKMQD_KNOB="queue/nr_requests", BLKMQD_NEW="64"), 5)
            r.ok(ch and "→" in ch[0].get("MESSAGE", "") and ch[0].get("PRIORITY") == "6" and
                 ch[0].get("CODE_FILE", "").endswith("managed-device.c") and ch[0].get("_PID") == str(pid1),
                 "nr_requests → 64: with MESSAGE, PRIORITY=6, CODE_FILE, from the daemon's pid",
                 [e for e in j.entries if e.get("BLKMQD_DEVICE") == a.name])
            plain = [e for e in j.find(_PID=str(pid1)) if "MESSAGE_ID" not in e and "starting" in e.get("MESSAGE", "")]
            r.ok(plain and plain[0].get("PRIORITY") == "6" and plain[0].get("CODE_LINE"),
                 "an entry without a MESSAGE_ID: MESSAGE, PRIORITY, CODE_LINE", j.entries[:5])

        with r.case("kill -9 and start again: originals adopted, with the earlier pid", env):
            d1.proc.send_signal(signal.SIGKILL)
            d1.proc.wait()
            d1.close()
            d2 = daemon(2)
            ad = entry("BLKMQD_MESSAGE_ORIGINALS_ADOPTED", d2.pid(), "BLKMQD_PID of the first instance",
                       BLKMQD_DEVICE=a.name, BLKMQD_PID=str(pid1))
            r.ok(ad.get("BLKMQD_RECORD", "").endswith(f"/{a.name}.json") and ad.get("PRIORITY") == "5",
                 "  BLKMQD_RECORD is the device's record, PRIORITY=5", ad)

        with r.case("the restore at stop: its MESSAGE_ID, old and new the other way round", env):
            pid2 = d2.pid()
            d2.stop(timeout=15)
            entry("BLKMQD_MESSAGE_RESTORE", pid2, "queue/scheduler kyber → none", BLKMQD_DEVICE=a.name,
                  BLKMQD_KNOB="queue/scheduler", BLKMQD_OLD="kyber", BLKMQD_NEW="none")
            r.ok(a.scheduler() == "none", "and the disk is back at none", a.scheduler())

        # A daemon for the rest: a disk whose original nr_requests the
        # kernel will refuse, a disk for a trial, emulated zones.
        rd = env.attach(prefix="r")
        td = env.attach(prefix="t")
        img = os.path.join(env.tmp, "zones.img")
        rd.set("scheduler", "mq-deadline")
        rd.set("nr_requests", "1024")       # above the loop device's depth: mq-deadline only
        cfg3 = env.config(f"""\
[Device refused]
MatchBackingFile={env.glob('r-*.img')}
NrRequests=64

[Device trial]
MatchBackingFile={env.glob('t-*.img')}
AutoScheduler=none mq-deadline
AutoEpochSec=0.25
AutoRounds=3

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=4
Database={os.path.join(env.tmp, 'zones.db')}
""", name="blkmqd-3.conf")
        d3 = daemon(3, cfg3)
        pid3 = d3.pid()
        ctl = Ctl(ctl_bin, sock)
        dev = "emu:" + img

        with r.case("a trial decided: its verdict and reason", env):
            p = ctl("trial", td.name, timeout=60)
            r.ok(p.returncode == 0, f"blkmqctl trial {td.name}", show(p), daemon=d3)
            e = entry("BLKMQD_MESSAGE_TRIAL_DECISION", pid3, f"on {td.name}", BLKMQD_DEVICE=td.name)
            v = e.get("BLKMQD_VERDICT", "")
            r.ok(v in ("change", "keep-best", "keep-noise", "keep-hysteresis", "keep-idle", "keep-no-data", "aborted")
                 and (v == "change") == (e.get("BLKMQD_OLD") != e.get("BLKMQD_NEW")) and v in p.stdout,
                 f"  BLKMQD_VERDICT {v}, as blkmqctl trial says; BLKMQD_NEW differs from BLKMQD_OLD only "
                 "for a change", e)

        with r.case("an object damaged: a byte flipped in the emulated zones' file, zones verify", env):
            data = os.urandom(MIB + 333)
            payload = os.path.join(env.tmp, "object.bin")
            with open(payload, "wb") as f:
                f.write(data)
            p, o = ctl.json("stage", payload, "--label", "damaged-one")
            r.ok(p.returncode == 0 and o, "stage damaged-one", show(p), daemon=d3)
            off = 4096 + 11
            corrupt(img, o["zone"]["start"] + off)
            bad = bytearray(data)
            bad[off] ^= 0xff
            p = ctl("zones", "verify")
            r.ok(p.returncode == 9 and "mismatch" in p.stdout, "zones verify: exit 9, mismatch", show(p))
            entry("BLKMQD_MESSAGE_OBJECT_DAMAGED", pid3, "the SHA-256 recorded and the one read", BLKMQD_DEVICE=dev,
                  BLKMQD_ZONE=str(o["zone"]["zoneIndex"]), BLKMQD_LEASE=o["lease"], BLKMQD_LABEL="damaged-one",
                  BLKMQD_SHA256=sha(data), BLKMQD_SHA256_READ=sha(bytes(bad)))

        with r.case("a zone failed: sealed with the SHA-256 of other bytes", env):
            p, al = ctl.json("zones", "alloc", f"--size={len(data)}", "--label=failed-one")
            r.ok(p.returncode == 0 and al, "zones alloc failed-one", show(p), daemon=d3)
            p = ctl("zones", "append", al["lease"], payload)
            r.eq(p.returncode, 0, "zones append")
            other = sha(bytes(bad))
            p = ctl("zones", "seal", al["lease"], other)
            r.ok(p.returncode == 9 and "checksum mismatch" in p.stderr, "zones seal: exit 9, checksum mismatch",
                 show(p))
            entry("BLKMQD_MESSAGE_ZONE_FAILED", pid3, "its lease and label", BLKMQD_DEVICE=dev,
                  BLKMQD_ZONE=str(al["zone"]["zoneIndex"]), BLKMQD_LEASE=al["lease"], BLKMQD_LABEL="failed-one",
                  BLKMQD_SHA256=other, BLKMQD_SHA256_READ=sha(data))

        with r.case("a restore refused: nr_requests 1024 with the scheduler none", env):
            r.ok(wait_for(lambda: rd.attr("nr_requests") == "64", 5),
                 f"{rd.name}: nr_requests 1024 → 64 under mq-deadline", rd.attr("nr_requests"))
            rd.set("scheduler", "none")     # behind blkmqd's back: nr_requests is the depth now
            d3.stop(timeout=15)
            e = entry("BLKMQD_MESSAGE_RESTORE_REFUSED", pid3, "the original the kernel refused",
                      BLKMQD_DEVICE=rd.name, BLKMQD_KNOB="queue/nr_requests", BLKMQD_NEW="1024")
            r.ok(e.get("PRIORITY") == "3" and e.get("ERRNO") == str(22),
                 "  PRIORITY=3, ERRNO=22 (EINVAL)", e)

        with r.case("drift: a setting written behind blkmqd's back, DriftPolicy=report", env):
            cfg4 = env.config(f"[Daemon]\nDriftCheckSec=0.2\n\n[Device j]\nMatchBackingFile={env.glob('j-*.img')}\n"
                              "ReadAheadKB=512\n", name="blkmqd-4.conf")
            d4 = daemon(4, cfg4)
            a.set("read_ahead_kb", "2048")
            entry("BLKMQD_MESSAGE_DRIFT", d4.pid(), "queue/read_ahead_kb 512, now 2048", BLKMQD_DEVICE=a.name,
                  BLKMQD_KNOB="queue/read_ahead_kb", BLKMQD_OLD="512", BLKMQD_NEW="2048", BLKMQD_POLICY="report")
            d4.stop(timeout=15)

        with r.case("every MESSAGE_ID of message-id.h is read back here", None):
            r.eq(sorted(set(ids) - read_back), [], f"the {len(ids)} MESSAGE_IDs each caused and read back")
    j.stop = True
    r.finish()


if __name__ == "__main__":
    reexec_in_namespace()
    main_guard(main)
