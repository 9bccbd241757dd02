#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Hotplug through udevd: a loop device attached while blkmqd runs is tuned;
detaching devices mid-run (also while an apply may be in flight, and a real
'remove' of the loop node) causes no error storm and the daemon keeps serving
later attaches.

Covers: (2) device attached while running is tuned (sysfs polled, <= 10 s),
(6) detach mid-run: at most a couple of error-level lines, later attaches
still tuned."""

import errno
import os
import re
import time

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import Env, Runner, need_all, udevd, main_guard, wait_for, diag

WANT = {"scheduler": "kyber", "nr_requests": "64", "read_ahead_kb": "1024",
        "wbt_lat_usec": "4000"}


def main():
    need_all()
    r = Runner("integration/hotplug")
    with udevd(), Env("hotplug") as env:
        cfg = env.config(f"""\
[Device hot]
MatchBackingFile={env.glob('*.img')}
Scheduler=kyber
NrRequests=64
ReadAheadKB=1024
WbtLatUsec=4000
""")
        d = env.daemon(["--config", cfg, "--log-level", "debug"])

        with r.case("device attached while running is tuned", env):
            d.start(timeout=15)
            t0 = time.monotonic()
            c = env.attach(prefix="c")
            ok = wait_for(lambda: c.matches(WANT), 10, interval=0.002)
            dt = time.monotonic() - t0
            r.ok(ok, f"{c.name} tuned after attach ({dt * 1000:.0f} ms)", c.mismatches(WANT), d)

        with r.case("several devices attached at once are all tuned", env):
            many = [env.attach(prefix="m") for _ in range(6)]
            ok = wait_for(lambda: all(l.matches(WANT) for l in many), 10)
            r.ok(ok, f"{len(many)} devices attached back to back all tuned",
                 [m for l in many for m in l.mismatches(WANT)], d)
            for l in many:
                env.detach(l)

        with r.case("detach mid-run: no error storm", env):
            # Attach and detach at once: the daemon may be between reading the
            # device and writing its knobs when it goes away.
            for _ in range(3):
                x = env.attach(prefix="x")
                env.detach(x, wait=False)
            # A tuned device detached (its values are put back meanwhile).
            e = env.attach(prefix="e")
            wait_for(lambda: e.matches(WANT), 10)
            env.detach(e)
            time.sleep(1.0)
            r.ok(d.alive(), "daemon alive after detaches", daemon=d)
            errs = d.error_lines()
            r.ok(len(errs) <= 2, f"at most 2 error-level lines ({len(errs)})", errs)

        nerr_removals = 0
        with r.case("loop node removed right after detach: forgotten quietly", env):
            # LOOP_CTL_REMOVE after the detach: a real 'remove' uevent, which
            # may land while the daemon still puts the values back.
            nerr = len(d.error_lines())
            removed = []
            for i in range(3):
                v = env.attach(prefix="v")
                wait_for(lambda: v.matches(WANT), 10)
                env.detach(v, wait=False)
                t0 = time.monotonic()
                while True:
                    rm = env.remove_node(v)
                    if rm != -errno.EBUSY or time.monotonic() - t0 > 3:
                        break
                    time.sleep(0.002)
                if rm == 0:
                    removed.append(v.name)
                else:
                    diag(f"LOOP_CTL_REMOVE {v.name}: {os.strerror(-rm)}")
            time.sleep(1.0)
            r.ok(d.alive(), f"daemon alive after removing {removed}", daemon=d)
            errs = d.error_lines()[nerr:]
            per_dev = {n: sum(1 for e in errs if re.search(rf"\b{n}\b", e)) for n in removed}
            r.ok(len(errs) <= len(removed) and all(k <= 1 for k in per_dev.values()),
                 f"at most one error-level line per vanished device ({len(errs)} for "
                 f"{len(removed)}: {per_dev})", errs)
            nerr_removals = len(d.error_lines())
            gone = [n for n in removed
                    if re.search(rf"{n}: removed", d.log_text()) is None]
            r.ok(not gone, "daemon logged each removal", gone)

        with r.case("later attaches still served", env):
            # After the remove, losetup -f creates a fresh node: 'add' + 'change'.
            f = env.attach(prefix="f")
            ok = wait_for(lambda: f.matches(WANT), 10, interval=0.002)
            r.ok(ok, f"{f.name} attached after the detaches is tuned", f.mismatches(WANT), d)
            g = env.attach(prefix="g")
            ok = wait_for(lambda: g.matches(WANT), 10, interval=0.002)
            r.ok(ok, f"{g.name} attached next is tuned", g.mismatches(WANT), d)

        with r.case("one loop device re-used: every attach handled", env):
            # Alternate a matching (h-*) and a non-matching (o-*) backing file
            # on what is usually the same loopN: the daemon must tune each
            # matching attach and put back the values when the next backing
            # file does not match (a loop queue outlives its attachment).
            env.config(f"""\
[Device hot]
MatchBackingFile={env.glob('[cefgmxh]-*.img')}
Scheduler=kyber
NrRequests=64
ReadAheadKB=1024
WbtLatUsec=4000
""")
            d.reload(timeout=15)
            missed, leaked = [], []
            for i in range(20):
                match = i % 2 == 0
                l = env.attach(prefix="h" if match else "o")
                if match:
                    if not wait_for(lambda: l.matches(WANT), 5):
                        missed.append(f"attach {i}: {l}: " + "; ".join(l.mismatches(WANT)))
                else:
                    if not wait_for(lambda: l.scheduler() == "none", 5):
                        leaked.append(f"attach {i}: {l}: scheduler {l.scheduler()}")
                env.detach(l)
            r.ok(not missed, f"10 matching attaches tuned ({10 - len(missed)}/10)", missed,
                 d if missed else None)
            r.ok(not leaked, f"10 non-matching attaches do not keep the previous "
                 f"attachment's scheduler ({10 - len(leaked)}/10)", leaked)

        with r.case("stop after hotplug", env):
            rc = d.stop(timeout=15)
            r.eq(rc, 0, "exit code 0 after SIGTERM", d)
            errs = d.error_lines()[nerr_removals:]
            r.ok(not errs, f"no error-level line after the removals, the stop included ({len(errs)})", errs)
            # Each loopN's state before the daemon first touched it. (Not
            # read_ahead_kb: a loop attach itself resets it.)
            for l in (c, f, g):
                now = l.snapshot()
                diffs = [f"{k}: {now.get(k)!r}, was {v!r}" for k, v in l.pristine.items()
                         if k != "read_ahead_kb" and now.get(k) != v]
                r.ok(not diffs, f"{l.name} restored on stop", diffs)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
