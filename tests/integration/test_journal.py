#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The journal entries of blkmqd carry their MESSAGE_ID and fields beside
MESSAGE (issue 21, "The journal"). PID 1 here is not systemd and no
journald runs, so the test is the journal: in a private mount namespace
(unshare --mount) a tmpfs hides /run/systemd, and the test binds
/run/systemd/journal/socket itself and reads the datagrams sd-journal sends
(the native protocol: KEY=VALUE lines, or KEY, a 64-bit length and the
bytes). The daemon runs with --log-target=journal:

- a change applied: MESSAGE_ID=4c924cfe…, BLKMQD_DEVICE, BLKMQD_KNOB,
  BLKMQD_OLD, BLKMQD_NEW;
- the restore at stop: MESSAGE_ID=7bbaaee7…, the same fields, old and new
  the other way round;
- originals adopted after a kill -9: MESSAGE_ID=0854cebe…, BLKMQD_PID of
  the first instance;
- an entry without a MESSAGE_ID still has MESSAGE, PRIORITY, CODE_FILE;
- the catalog (systemd/blkmqd.catalog) has an entry for every MESSAGE_ID of
  message-id.h, each with Subject:, Defined-By: and Documentation:.

journalctl MESSAGE_ID=… against a real journald is in the systemd guest
suite. Needs root, loop devices, udev."""

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reexec_in_namespace():
    """Runs this test again in a private mount namespace (once)."""
    if os.environ.get("BLKMQD_TEST_JOURNAL_NS") == "1":
        return
    if os.geteuid() != 0:
        print("1..0 # SKIP needs root (a mount namespace)")
        sys.exit(77)
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
        self.sock.settimeout(0.2)
        self.entries = []
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                b = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            with self.lock:
                self.entries.append(parse_entry(b))

    def find(self, **want):
        with self.lock:
            return [e for e in self.entries if all(e.get(k) == v for k, v in want.items())]


def catalog_ids():
    with open(os.path.join(SRC, "src", "basic", "message-id.h")) as f:
        return dict(re.findall(r'#define (BLKMQD_MESSAGE_\w+) "([0-9a-f]{32})"', f.read()))


def main():
    from blkmqtest import Env, Runner, need_all, udevd, wait_for
    need_all()
    r = Runner("integration/journal")
    ids = catalog_ids()

    with r.case("the catalog explains every MESSAGE_ID", None):
        text = open(os.path.join(SRC, "systemd", "blkmqd.catalog")).read()
        blocks = {m.group(1): m.group(2) for m in re.finditer(r"^-- ([0-9a-f]{32})\n(.*?)(?=^-- |\Z)", text, re.M | re.S)}
        for name, mid in sorted(ids.items()):
            b = blocks.get(mid, "")
            r.ok(re.search(r"^Subject: .+", b, re.M) and re.search(r"^Defined-By: blkmqd$", b, re.M) and
                 re.search(r"^Documentation: man:blkmqd\(8\)", b, re.M) and len(b.split("\n\n", 1)[-1]) > 80,
                 f"{name} ({mid}): Subject:, Defined-By: blkmqd, Documentation:, an explanation", b or "(none)")
        r.eq(len(ids), 7, "seven MESSAGE_IDs", ids)
        # journalctl's own parser, in a root of our own (never the host's database).
        import shutil
        import tempfile
        if shutil.which("journalctl"):
            root = tempfile.mkdtemp(prefix="blkmqd-catalog-")
            try:
                os.makedirs(os.path.join(root, "usr/lib/systemd/catalog"))
                os.makedirs(os.path.join(root, "var/lib/systemd/catalog"))
                shutil.copy(os.path.join(SRC, "systemd", "blkmqd.catalog"), os.path.join(root, "usr/lib/systemd/catalog"))
                u = subprocess.run(["journalctl", f"--root={root}", "--update-catalog"], capture_output=True, text=True)
                ls = subprocess.run(["journalctl", f"--root={root}", "--list-catalog"], capture_output=True, text=True)
                listed = {l.split()[0] for l in ls.stdout.splitlines() if l.strip()}
                r.ok(u.returncode == 0 and listed == set(ids.values()),
                     "journalctl --update-catalog takes it: --list-catalog has the seven",
                     u.stderr + ls.stdout + ls.stderr)
            finally:
                shutil.rmtree(root, ignore_errors=True)

    j = Journal()
    with udevd(), Env("journal") as env:
        a = env.attach(prefix="j")
        cfg = env.config(f"[Device j]\nMatchBackingFile={env.glob('j-*.img')}\nScheduler=kyber\nNrRequests=64\n")
        sock = os.path.join(env.tmp, "io.blkmqd")

        def daemon(n):
            return env.daemon(["--config", cfg, "--log-target=journal", "--varlink-address", sock],
                              name=f"blkmqd-{n}").start(timeout=15)

        with r.case("a change applied: its MESSAGE_ID and fields", env):
            d1 = daemon(1)
            pid1 = str(d1.pid())
            r.ok(wait_for(lambda: j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_CHANGE_APPLIED"], BLKMQD_DEVICE=a.name,
                                         BLKMQD_KNOB="queue/scheduler", BLKMQD_OLD="none", BLKMQD_NEW="kyber"), 5),
                 "queue/scheduler none → kyber: BLKMQD_DEVICE, BLKMQD_KNOB, BLKMQD_OLD, BLKMQD_NEW",
                 [e for e in j.entries if e.get("BLKMQD_DEVICE") == a.name] or j.entries[-10:])
            wait_for(lambda: j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_CHANGE_APPLIED"], BLKMQD_KNOB="queue/nr_requests"), 5)
            ch = j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_CHANGE_APPLIED"], BLKMQD_KNOB="queue/nr_requests",
                        BLKMQD_NEW="64")
            r.ok(ch and "→" in ch[0].get("MESSAGE", "") and ch[0].get("PRIORITY") == "6" and
                 ch[0].get("CODE_FILE", "").endswith("managed-device.c") and ch[0].get("_PID", pid1) == pid1,
                 "nr_requests → 64: with MESSAGE, PRIORITY=6 and CODE_FILE",
                 [e for e in j.entries if e.get("BLKMQD_DEVICE") == a.name])
            plain = [e for e in j.entries if "MESSAGE_ID" not in e and "starting" in e.get("MESSAGE", "")]
            r.ok(plain and plain[0].get("PRIORITY") == "6" and plain[0].get("CODE_LINE"),
                 "an entry without a MESSAGE_ID: MESSAGE, PRIORITY, CODE_LINE", j.entries[:5])

        with r.case("kill -9 and start again: originals adopted, with the earlier pid", env):
            d1.proc.send_signal(signal.SIGKILL)
            d1.proc.wait()
            d1.close()
            d2 = daemon(2)
            ad = j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_ORIGINALS_ADOPTED"], BLKMQD_DEVICE=a.name, BLKMQD_PID=pid1)
            r.ok(ad and ad[0].get("BLKMQD_RECORD", "").endswith(f"/{a.name}.json") and ad[0].get("PRIORITY") == "5",
                 "MESSAGE_ID=0854cebe…, BLKMQD_DEVICE, BLKMQD_PID of the first instance, BLKMQD_RECORD",
                 [e for e in j.entries if e.get("BLKMQD_DEVICE") == a.name])

        with r.case("the restore at stop: its MESSAGE_ID, old and new the other way round", env):
            d2.stop(timeout=15)
            rs = j.find(MESSAGE_ID=ids["BLKMQD_MESSAGE_RESTORE"], BLKMQD_DEVICE=a.name, BLKMQD_KNOB="queue/scheduler",
                        BLKMQD_OLD="kyber", BLKMQD_NEW="none")
            r.ok(rs, "queue/scheduler kyber → none: MESSAGE_ID=7bbaaee7…",
                 [e for e in j.entries if e.get("BLKMQD_DEVICE") == a.name][-6:])
            r.ok(a.scheduler() == "none", "and the disk is back at none", a.scheduler())
    j.stop = True
    r.finish()


if __name__ == "__main__":
    reexec_in_namespace()
    sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
    from blkmqtest import main_guard
    main_guard(main)
