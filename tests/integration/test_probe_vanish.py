#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A probe that races a detach is not an I/O error of a disk that is there.

Loop devices probed every 10 ms are detached and attached again, over and
over, while the probes run: a probe that fails because its device went
away (sysfs gone, or a detached loop device's size 0) is said once at
debug level, never as a warning. A real read error on a device that is
still there stays a warning: a loop device over a file whose blocks fail
is not set up here (no dm-error on this host), so that half is covered by
the probe unit paths only.

Needs root, loop devices, udevd; $BLKMQD."""

import re
import time

from blkmqtest import Env, Runner, log, main_guard, need_all, udevd

ROUNDS = 40


def main():
    need_all()
    r = Runner("integration/probe-vanish")
    with udevd(), Env("probe-vanish") as env:
        cfg = env.config(f"""\
[Device probed]
MatchBackingFile={env.glob('*.img')}
ProbeIntervalSec=0.01
""")
        d = env.daemon(["--config", cfg, "--varlink-address", env.tmp + "/io.blkmqd", "--log-level", "debug"])
        d.start(timeout=15)
        loops = [env.attach(prefix=f"v{i}", size=8 << 20) for i in range(3)]
        time.sleep(0.5)                 # probes running on all three
        with r.case(f"{ROUNDS} detaches and re-attaches under 10 ms probes", env):
            for i in range(ROUNDS):
                l = loops[i % len(loops)]
                env.detach(l, wait=False)
                loops[i % len(loops)] = env.attach(prefix=f"v{i % len(loops)}", size=8 << 20)
            time.sleep(1)               # the last probes and remove events in
            text = d.log_text()
            warn = [l for l in text.splitlines() if re.match(r"<[0-4]>", l) and "probe read failed" in l]
            gone = [l for l in text.splitlines() if "the device is gone" in l]
            r.eq(warn, [], "no probe failure logged as a warning or worse")
            log(f"# {len(gone)} probe(s) raced a detach and were said at debug level")
            r.ok(d.alive(), "the daemon runs on")
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
