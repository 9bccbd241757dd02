#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""nr_requests, which a scheduler switch resets as a side effect.

(1) Re-applying with the scheduler still wanted leaves the kernel's
nr_requests alone (the value from before the switch is no policy value: the
6.1 guest showed a reload writing it back under mq-deadline). (2) When a
reload drops Scheduler=, the scheduler goes back and so does the nr_requests
the device had before blkmqd first switched it, not that scheduler's
default."""

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import Env, Runner, need_all, udevd, main_guard


def main():
    need_all()
    r = Runner("integration/implied")
    with udevd(), Env("implied") as env:
        a = env.attach(prefix="a")
        a.set("scheduler", "none")
        a.set("nr_requests", "100")   # not the default of any scheduler here
        cfg_text = f"""\
[Device a]
MatchBackingFile={env.glob('a-*.img')}
Scheduler=kyber
"""
        cfg = env.config(cfg_text)
        d = env.daemon(["--config", cfg, "--log-level", "debug"])

        with r.case("the switch changes nr_requests as a side effect", env):
            d.start(timeout=15)
            r.eq(a.scheduler(), "kyber", "scheduler switched to kyber", d)
            switched = a.attr("nr_requests")
            r.ok(switched != "100", f"kyber set its own nr_requests ({switched})")

        with r.case("a reload with the scheduler still wanted keeps it", env):
            d.reload(timeout=15)
            r.eq(a.scheduler(), "kyber", "still kyber", d)
            r.eq(a.attr("nr_requests"), switched, "nr_requests not written back to 100", d)

        with r.case("a reload without Scheduler= restores scheduler and nr_requests", env):
            env.config(f"""\
[Device a]
MatchBackingFile={env.glob('a-*.img')}
ReadAheadKB=512
""")
            d.reload(timeout=15)
            r.eq(a.scheduler(), "none", "scheduler back to none", d)
            r.eq(a.attr("nr_requests"), "100", "nr_requests back to 100, not none's default", d)

        with r.case("stop", env):
            r.eq(d.stop(timeout=15), 0, "exit code 0", d)
            r.eq(a.attr("nr_requests"), "100", "nr_requests still 100", d)
            r.ok(not d.error_lines(), "no error-level log lines", d.error_lines())
    r.finish()


if __name__ == "__main__":
    main_guard(main)
