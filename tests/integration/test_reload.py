#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""SIGHUP: an edited config (main file and drop-ins) is re-applied with the
RELOADING=1/MONOTONIC_USEC/READY=1 handshake; a broken config keeps the old
one, logs file:line and the daemon stays up and READY.

Covers: (3) SIGHUP with an edited config re-applies, (4) SIGHUP with a broken
config keeps the old one."""

import os
import shutil
import signal
import time

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import Ctl, Env, Runner, ctl_path, need_all, show, udevd, unit_settings, main_guard, DaemonError


def main():
    need_all()
    r = Runner("integration/reload")
    with udevd(), Env("reload") as env:
        a = env.attach(prefix="a")
        orig = a.snapshot()
        match = f"MatchBackingFile={env.glob('*.img')}"
        v1 = f"""\
[Device t]
{match}
Scheduler=kyber
NrRequests=64
ReadAheadKB=1024
"""
        cfg = env.config(v1)
        d = env.daemon(["--config", cfg])
        V1 = {"scheduler": "kyber", "nr_requests": "64", "read_ahead_kb": "1024"}

        with r.case("initial config", env):
            d.start(timeout=15)
            r.ok(a.matches(V1), "v1 applied at READY", a.mismatches(V1), d)

        V2 = {"scheduler": "mq-deadline", "nr_requests": "48", "read_ahead_kb": "512",
              "iosched/read_expire": "200"}
        with r.case("SIGHUP with an edited config re-applies", env):
            env.config(f"""\
[Device t]
{match}
Scheduler=mq-deadline
NrRequests=48
ReadAheadKB=512
DeadlineReadExpireMSec=200
""")
            t0 = time.monotonic()
            reloading, ready = d.reload(timeout=15)
            dt = time.monotonic() - t0
            r.ok("MONOTONIC_USEC" in reloading and reloading["MONOTONIC_USEC"].isdigit(),
                 "RELOADING=1 carries MONOTONIC_USEC=", reloading)
            r.ok(a.matches(V2), f"v2 applied when READY=1 follows the reload ({dt * 1000:.0f} ms)",
                 a.mismatches(V2), d)

        V3 = dict(V2, read_ahead_kb="2048", nr_requests="40")
        with r.case("SIGHUP picks up drop-ins in lexical order", env):
            env.dropin(cfg, "20-later.conf", f"[Device dropin-b]\n{match}\nReadAheadKB=2048\n")
            env.dropin(cfg, "10-early.conf",
                       f"[Device dropin-a]\n{match}\nReadAheadKB=4096\nNrRequests=40\n")
            env.dropin(cfg, "README.txt", "not a .conf: ignored\n")
            d.reload(timeout=15)
            r.ok(a.matches(V3), "drop-ins applied, 20-later.conf wins over 10-early.conf",
                 a.mismatches(V3), d)

        broken = [
            ("unknown key in the main file", "blkmqd.conf", 4,
             f"[Device t]\n{match}\nScheduler=kyber\nNoSuchKey=1\n"),
            ("bad value in the main file", "blkmqd.conf", 3,
             f"[Device t]\n{match}\nNrRequests=lots\n"),
            ("duplicate section in one file", "blkmqd.conf", 4,
             f"[Device t]\n{match}\nScheduler=kyber\n[Device t]\n{match}\n"),
            ("unknown key in a drop-in", "blkmqd.conf.d/30-bad.conf", 3,
             f"[Device bad]\n{match}\nReadAheadKBB=8\n"),
        ]
        good_main = open(cfg).read()
        for what, fname, line, text in broken:
            with r.case(f"SIGHUP with a broken config: {what}", env):
                if fname == "blkmqd.conf":
                    env.config(text)
                else:
                    env.config(good_main)
                    env.write(fname, text)
                before = a.snapshot()
                nerr = len(d.error_lines())
                mark = d.mark()
                d.signal(signal.SIGHUP)
                # Stays (or comes back to) READY; a RELOADING=1 is optional here.
                try:
                    i = d.wait_notify("READY", "1", since=mark, timeout=10)
                    ready_again = True
                except DaemonError:
                    ready_again = False
                time.sleep(0.3)
                r.ok(d.alive(), f"{what}: daemon still running", daemon=d)
                r.ok(ready_again, f"{what}: READY=1 after the failed reload",
                     [m[2] for m in d.messages[mark:]])
                after = a.snapshot()
                r.ok(after == before and a.matches(V3),
                     f"{what}: old config still in force (values unchanged)",
                     [f"{k}: {before.get(k)} -> {after.get(k)}" for k in before
                      if before.get(k) != after.get(k)] + a.mismatches(V3), d)
                newerr = d.error_lines()[nerr:]
                path = os.path.join(env.tmp, fname)
                want = f"{path}:{line}"
                r.ok(any(want in l for l in newerr),
                     f"{what}: error-level log line names {fname}:{line}",
                     newerr or d.log_text().splitlines()[-10:], d if not newerr else None)
                if fname != "blkmqd.conf":
                    os.unlink(path)

        V4 = {"scheduler": "kyber", "nr_requests": "40", "read_ahead_kb": "2048"}
        with r.case("a fixed config is accepted again", env):
            env.config(f"[Device t]\n{match}\nScheduler=kyber\nNrRequests=100\n")
            d.reload(timeout=15)
            r.ok(a.matches(V4), "fixed config applied (drop-ins still override its NrRequests)",
                 a.mismatches(V4), d)

        with r.case("stop restores what was there before the daemon", env):
            rc = d.stop(timeout=15)
            r.eq(rc, 0, "exit code 0", d)
            after = a.snapshot()
            r.ok(after == orig, "originals from before the first apply restored, not v1..v4",
                 [f"{k}: {orig.get(k)} -> {after.get(k)}" for k in orig
                  if orig.get(k) != after.get(k)], d)

        with r.case("ExecReload=: blkmqctl reload, synchronous, fails on a broken config naming file:line", env):
            u = unit_settings()
            r.ok(u.get("ExecReload", "").split()[1:] == ["reload"] and
                 u["ExecReload"].split()[0].endswith("/blkmqctl"),
                 "blkmqd.service reloads with blkmqctl reload (not kill -HUP, which always succeeds)",
                 u.get("ExecReload"))
            sock = os.path.join(env.tmp, "io.blkmqd")
            shutil.rmtree(cfg + ".d", ignore_errors=True)
            env.config(v1)
            d = env.daemon(["--config", cfg, "--varlink-address", sock], name="blkmqd-ctl")
            d.start(timeout=15)
            ctl = Ctl(ctl_path(), sock)
            r.ok(a.matches(V1), "v1 applied", a.mismatches(V1), d)
            env.config(f"[Device t]\n{match}\nScheduler=mq-deadline\nNrRequests=lots\n")
            mark = d.mark()
            p = ctl("reload")
            want = f"{cfg}:4"
            r.ok(p.returncode == 5 and want in p.stderr, f"blkmqctl reload: exit 5, names {want}", show(p), d)
            r.ok(a.matches(V1), "the old policy stays", a.mismatches(V1), d)
            r.ok(any(want in l for l in d.error_lines()), f"the daemon's error line names {want}",
                 d.log_text()[-2000:], d)
            try:
                d.wait_notify("RELOADING", "1", since=mark, timeout=5)
                d.wait_notify("READY", "1", since=mark, timeout=5)
                notified = True
            except DaemonError:
                notified = False
            r.ok(notified, "RELOADING=1 then READY=1 around the refused reload",
                 [m[2] for m in d.messages[mark:]])
            env.config(f"[Device t]\n{match}\nScheduler=mq-deadline\nNrRequests=48\n")
            p = ctl("reload")
            V = {"scheduler": "mq-deadline", "nr_requests": "48"}
            r.ok(p.returncode == 0 and a.matches(V), "a good config: exit 0, applied when it returns",
                 show(p) + "\n" + "\n".join(a.mismatches(V)), d)
            d.stop(timeout=15)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
