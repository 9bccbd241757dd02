#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A short scenario under valgrind: start with one device, hotplug another,
SIGHUP with an edited config, SIGTERM. Definite/indirect leaks or memory
errors make valgrind exit 99.

Covers: (12) leak-free under valgrind (skipped, or failed under CI=true, when
valgrind is missing)."""

import re
import shutil

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import Env, Runner, need_all, udevd, main_guard, wait_for, skip, sysfs_read


def main():
    need_all()
    if not shutil.which("valgrind"):
        skip("valgrind not installed (apt-get install valgrind)")
    r = Runner("integration/valgrind")
    with udevd(), Env("valgrind") as env:
        a = env.attach(prefix="a")
        match = f"MatchBackingFile={env.glob('*.img')}"
        cfg = env.config(f"""\
[Daemon]
ApplyThreads=2

[Device t]
{match}
Scheduler=kyber
NrRequests=64
ReadAheadKB=1024
ReadLatNsec=2500000
""")
        d = env.daemon(["--config", cfg, "--log-level", "debug"], name="vg", valgrind=True)
        want = {"scheduler": "kyber", "nr_requests": "64", "read_ahead_kb": "1024"}

        with r.case("valgrind: start, hotplug, SIGHUP, SIGTERM", env):
            d.start(timeout=6)              # x10 under valgrind
            r.ok(a.matches(want), "start: applied", a.mismatches(want), d)
            b = env.attach(prefix="b")
            ok = wait_for(lambda: b.matches(want), 30)
            r.ok(ok, "hotplug: applied", b.mismatches(want), d)
            env.config(f"[Device t]\n{match}\nScheduler=mq-deadline\nReadAheadKB=512\n")
            d.reload(timeout=6)
            want2 = {"scheduler": "mq-deadline", "read_ahead_kb": "512"}
            r.ok(a.matches(want2) and b.matches(want2), "reload: applied",
                 a.mismatches(want2) + b.mismatches(want2), d)
            env.detach(b)
            rc = d.stop(timeout=6)
            vg = sysfs_read(d.vgpath, "")
            summary = [l for l in vg.splitlines()
                       if re.search(r"ERROR SUMMARY|definitely lost|indirectly lost", l)]
            r.ok(rc != 99, f"valgrind exit code {rc} (99 = leaks or memory errors)",
                 summary, d if rc == 99 else None)
            r.eq(rc, 0, "daemon exit code 0 under valgrind", d if rc not in (0, 99) else None)
            for l in summary:
                print("# " + l.split("== ", 1)[-1])
    r.finish()


if __name__ == "__main__":
    main_guard(main)
