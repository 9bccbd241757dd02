#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Start-up tuning of pre-attached loop devices, section precedence, profiles,
kyber tunables after the scheduler switch, and exact restore on SIGTERM.

Covers: (1) knobs set after start, (5) SIGTERM restores originals exactly,
(10) later matching section wins, a [Profile] is not applied unless active,
several values in one match key match any, (11) kyber's read_lat_nsec lands
after Scheduler=kyber."""

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import (Env, Runner, need_all, udevd, main_guard, queue_snapshot,
                       snapshot_diff, parse_scheduler)


def main():
    need_all()
    r = Runner("integration/apply")
    with udevd(), Env("apply") as env:
        a = env.attach(prefix="a")
        b = env.attach(prefix="b")
        # b starts away from the kernel defaults, so "restore" cannot pass by
        # writing defaults: mq-deadline, a custom read-ahead and wbt.
        b.set("scheduler", "mq-deadline")
        b.set("read_ahead_kb", "512")
        b.set("wbt_lat_usec", "3000")
        orig = {l.name: l.snapshot() for l in (a, b)}
        host = {n: queue_snapshot(n) for n in ("vda", "zram0", "sda", "nvme0n1")}

        cfg = env.config(f"""\
# blkmqd integration test: only this test's loop devices match.
[Daemon]
RestoreOnExit=yes
ApplyThreads=2

[Device never]
MatchBackingFile=/nonexistent/*
Scheduler=bfq
NrRequests=8

[Device all]
MatchBackingFile={env.glob('*.img')}
Scheduler=kyber mq-deadline none
NrRequests=64
WbtLatUsec=4000
ReadAheadKB=1024
ReadLatNsec=3000000

[Device b-only]
MatchBackingFile={env.glob('b-*.img')}
NrRequests=32
ReadAheadKB=256

[Device any-of]
MatchBackingFile=/nonexistent/* {env.glob('a-*.img')}
MatchKernel={a.name} loop-none*
RqAffinity=2

[Profile turbo]
NrRequests=16
ReadAheadKB=4096
""")
        d = env.daemon(["--config", cfg, "--log-level", "debug"])

        with r.case("start applies the policy before READY=1", env):
            d.start(timeout=15)
            # No polling: READY=1 promises the initial apply is complete.
            r.ok(not a.mismatches({"scheduler": "kyber", "nr_requests": "64",
                                   "wbt_lat_usec": "4000", "read_ahead_kb": "1024"}),
                 "a: scheduler, nr_requests, wbt_lat_usec, read_ahead_kb applied at READY",
                 a.mismatches({"scheduler": "kyber", "nr_requests": "64",
                               "wbt_lat_usec": "4000", "read_ahead_kb": "1024"}), d)
            r.ok(any(s for s in d.statuses()), "STATUS= sent", d.messages)

        with r.case("precedence: later section wins, profile inactive", env):
            want_b = {"scheduler": "kyber", "nr_requests": "32", "read_ahead_kb": "256",
                      "wbt_lat_usec": "4000"}
            r.ok(not b.mismatches(want_b), "b: later section [b-only] overrides NrRequests and "
                 "ReadAheadKB of [all], keeps its other keys", b.mismatches(want_b), d)
            r.eq(a.attr("rq_affinity"), "2", "a: [any-of] matched through its second value")
            r.eq(b.attr("rq_affinity"), orig[b.name]["rq_affinity"],
                 "b: [any-of] does not match b, rq_affinity untouched")
            r.ok(a.attr("nr_requests") != "16" and a.attr("read_ahead_kb") != "4096",
                 "[Profile turbo] not applied while not activated")
            r.ok(a.scheduler() != "bfq", "[Device never] matched nothing")

        with r.case("kyber tunables after the scheduler switch", env):
            r.eq(a.attr("iosched/read_lat_nsec"), "3000000",
                 "a: iosched/read_lat_nsec applied after Scheduler=kyber", d)
            r.eq(b.attr("iosched/read_lat_nsec"), "3000000",
                 "b: iosched/read_lat_nsec applied (switched from mq-deadline)", d)

        with r.case("no other disk touched", env):
            after = {n: queue_snapshot(n) for n in host}
            diffs = [f"{n}: {x}" for n in host for x in snapshot_diff(host[n], after[n])]
            r.ok(not diffs, "host disks (vda, zram0, ...) unchanged", diffs)

        with r.case("SIGTERM restores originals exactly", env):
            rc = d.stop(timeout=15)
            r.eq(rc, 0, "exit code 0 after SIGTERM", d)
            for l in (a, b):
                diffs = snapshot_diff(orig[l.name], l.snapshot())
                r.ok(not diffs, f"{l.name}: every queue knob back to its original "
                     f"({parse_scheduler(orig[l.name]['scheduler'])}, "
                     f"nr_requests {orig[l.name]['nr_requests']}, "
                     f"read_ahead_kb {orig[l.name]['read_ahead_kb']}, "
                     f"wbt_lat_usec {orig[l.name]['wbt_lat_usec']})", diffs, d if diffs else None)
            errs = d.error_lines()
            r.ok(not errs, "no error-level log lines during the run", errs)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
