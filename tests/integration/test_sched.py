#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""blkmqd started as blkmqd.service starts it: only the event loop realtime.

Also: the descriptor table is sized for every connection at start, before
there are threads (growing it later waits for an RCU grace period).

The unit runs blkmqd round-robin realtime (CPUSchedulingPolicy=rr), so that
its event loop gets a CPU at once on a saturated machine. Every thread but
the loop must leave realtime as it starts: the apply and udev-read threads
SCHED_BATCH and 10 nice levels lower, the io_uring (probe) and zone
database threads the normal policy, the zone verifier SCHED_IDLE. A worker
left realtime would compete with the loop at its priority (sqlite, sysfs
writes that wait for an RCU grace period), and io_uring's io-wq helpers
copy the policy of the thread that made the ring.

The daemon is started with the unit's Nice= and CPUScheduling*= settings,
in its own session (tests/lib: Daemon(as_unit=True)), with a probed loop
device and emulated zones so that every kind of thread is there.

Needs root (realtime), loop devices, udevd; $BLKMQD."""

import os
import time

from blkmqtest import Env, Runner, main_guard, need_all, skip, udevd, unit_settings

POLICY = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE"}


def threads(pid):
    """[(tid, comm, policy, nice)] from /proc/PID/task/*/stat."""
    out = []
    for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                st = f.read()
        except FileNotFoundError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        rest = st[st.rindex(")") + 2:].split()     # field 3 (state) first
        out.append((int(tid), comm, int(rest[41 - 3]), int(rest[19 - 3])))
    return out


def main():
    need_all()
    u = unit_settings()
    if u.get("CPUSchedulingPolicy") not in ("rr", "fifo"):
        skip("blkmqd.service sets no realtime policy")
    try:
        os.sched_setscheduler(0, os.SCHED_RR, os.sched_param(1))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except PermissionError:
        skip("realtime scheduling is not allowed here (CAP_SYS_NICE)")
    r = Runner("integration/sched")
    with udevd(), Env("sched") as env:
        cfg = env.config(f"""\
[Device probed]
MatchBackingFile={env.glob('*.img')}
ReadAheadKB=256
ProbeIntervalSec=0.05

[Zones]
Emulate={env.tmp}/zones.zimg
ZoneSizeMB=1
ZoneCount=16
Database={env.tmp}/zones.db
""")
        env.attach(prefix="p", size=16 << 20)
        d = env.daemon(["--config", cfg, "--varlink-address", env.tmp + "/io.blkmqd"], as_unit=True)
        d.start(timeout=15)
        pid = d.pid()
        time.sleep(0.5)                 # probes and their io_uring helpers running
        with r.case("only the event loop runs realtime", env):
            ts = threads(pid)
            loop = [t for t in ts if t[0] == pid]
            others = [t for t in ts if t[0] != pid]
            r.eq([POLICY.get(t[2], t[2]) for t in loop], ["SCHED_FIFO" if u["CPUSchedulingPolicy"] == "fifo"
                                                          else "SCHED_RR"], "the event loop thread")
            rt = [t for t in others if t[2] in (1, 2)]
            r.eq(rt, [], "no other thread (apply, udev, io_uring, io-wq, zone database, verifier) realtime")
            batch = [t for t in others if t[2] == 3]
            # ApplyThreads (16) + the udev-read thread + the zone service's work threads.
            r.ok(len(batch) >= 17, f"{len(batch)} threads SCHED_BATCH (apply, udev-read, zones)")
            loop_nice = loop[0][3]
            r.eq(sorted({t[3] for t in batch}), [min(19, loop_nice + 10)], "they run 10 nice levels below the loop")
            r.ok(any(t[2] == 5 for t in others), "the zone verifier runs SCHED_IDLE")
            r.ok(d.alive(), "the daemon runs")
        with r.case("the descriptor table is sized before the threads start", env):
            # Grown later, in a process with threads, it waits for an RCU
            # grace period inside accept() or open() on the event loop.
            with open(f"/proc/{pid}/status") as f:
                fdsize = int(next(l for l in f if l.startswith("FDSize:")).split()[1])
            with open(f"/proc/{pid}/limits") as f:
                soft = next(l for l in f if l.startswith("Max open files")).split()[3]
            want = 8192 if soft == "unlimited" else min(8192, int(soft))
            r.ok(fdsize >= want, f"FDSize {fdsize} >= {want} (open files limit {soft})")
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
