#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A mutating call waits only for the tuning jobs it started.

Device A's jobs are held up (BLKMQD_TEST_JOB_DELAY=A:MSEC, a test hook in the
daemon's job runner) while device B is tuned normally:
- Apply A and, while it runs, Apply B: B's reply comes first (before the fix
  every call waited until no job at all was in flight, A's included);
- with CallTimeoutSec=1, Apply A ends with io.blkmqd.Manager.Timeout naming
  A (blkmqctl exit 6), and A's tuning still completes afterwards;
- Apply of every device waits for A too, and replies once it is back;
- a trial of A whose apply is held past CallTimeoutSec= ends (aborted,
  naming A and the limit), where it waited for ever; A is back at the
  setting before the trial once its jobs ran, and the next trial starts.

Needs root, loop devices, udevd; $BLKMQD and $BLKMQCTL."""

import json
import os
import subprocess
import threading
import time

from blkmqtest import Env, Runner, main_guard, need_all, udevd, wait_for

HOLD_MS = 2500


def main():
    need_all()
    ctl_bin = os.environ.get("BLKMQCTL")
    r = Runner("integration/call-wait")
    with udevd(), Env("call-wait") as env:
        a = env.attach(prefix="a")
        b = env.attach(prefix="b")
        conf = """\
[Daemon]
CallTimeoutSec={timeout}

[Device all]
MatchBackingFile={glob}
ReadAheadKB={ra}
"""
        cfg = env.config(conf.format(timeout=30, glob=env.glob("*.img"), ra=1024))
        sock = os.path.join(env.tmp, "io.blkmqd")
        os.environ["BLKMQD_TEST_JOB_DELAY"] = f"{a.name}:{HOLD_MS}"
        try:
            d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "debug"])
            d.start(timeout=20)
        finally:
            del os.environ["BLKMQD_TEST_JOB_DELAY"]
        e = dict(os.environ, BLKMQD_ADDRESS=sock)

        def ctl(*args):
            t0 = time.monotonic()
            p = subprocess.run([ctl_bin] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=e, timeout=120)
            return p, time.monotonic()

        with r.case("a call about B does not wait for A's job", env):
            done = {}

            def apply(dev):
                done[dev] = ctl("apply", dev)
            mark = len(d.log_text())
            ta = threading.Thread(target=apply, args=(a.name,))
            ta.start()
            time.sleep(0.3)             # A's job (a fresh read-compare-write pass) is held up now
            apply(b.name)
            log_then = d.log_text()[mark:]
            ta.join(60)
            r.ok(f"{b.name}: applied" in log_then and f"{a.name}: applied" not in log_then,
                 f"when Apply {b.name} replied, {b.name}'s job was back and {a.name}'s was not", log_then[-2000:])
            pa, t_a = done[a.name]
            pb, t_b = done[b.name]
            r.ok(pa.returncode == 0 and pb.returncode == 0, "both applies succeed", (pa.stderr, pb.stderr))
            r.ok(t_b < t_a, f"Apply {b.name} replied before Apply {a.name} (whose job is held {HOLD_MS} ms)",
                 f"B at {t_b:.3f}, A at {t_a:.3f}")
            r.eq((a.attr("read_ahead_kb"), b.attr("read_ahead_kb")), ("1024", "1024"), "both tuned")

        with r.case("CallTimeoutSec=1: a call whose own job is held up gets Timeout; the tuning goes on", env):
            env.config(conf.format(timeout=1, glob=env.glob("*.img"), ra=256))
            p, _ = ctl("reload")
            r.ok(p.returncode == 6 and "still being tuned" in p.stderr and a.name in p.stderr,
                 f"reload (every device): exit 6, Timeout naming {a.name}", p.stderr)
            r.ok(wait_for(lambda: a.attr("read_ahead_kb") == "256", 10), "A's tuning completed anyway")
            r.eq(b.attr("read_ahead_kb"), "256", "B tuned")
            p, _ = ctl("apply", a.name)
            r.ok(p.returncode == 6 and a.name in p.stderr, f"Apply {a.name}: exit 6, Timeout", p.stderr)
            p, _ = ctl("apply", b.name)
            r.eq(p.returncode, 0, f"Apply {b.name}: exit 0 meanwhile")
            r.ok(any("gets Timeout" in l for l in d.log_text().splitlines()), "logged as a warning")

        with r.case("a trial's apply held past CallTimeoutSec= ends the trial, naming the device", env):
            # A's jobs wait HOLD_MS (2.5 s) each, the limit is 1 s
            env.config(conf.format(timeout=1, glob=env.glob("*.img"), ra=256) +
                       f"\n[Device trial]\nMatchBackingFile={a.backing_file()}\nAutoTune=yes\n"
                       "AutoScheduler=none mq-deadline\nAutoEpochSec=0.25\nAutoRounds=3\n")
            p, _ = ctl("reload")
            r.ok(p.returncode == 6 and "still being tuned" in p.stderr, "reloaded (exit 6: A's job is held)",
                 p.stderr)
            time.sleep(HOLD_MS / 1000 + 0.5)
            before = a.scheduler()
            p, t_end = ctl("--json", "trial", a.name)
            try:
                t = json.loads(p.stdout.strip().splitlines()[-1])["trial"]
            except (ValueError, IndexError, KeyError):
                t = {}
            reason = t.get("abortReason", "")
            r.ok(t.get("state") == "aborted" and a.name in reason and "did not come back within 1 s" in reason,
                 f"the trial aborted: '{reason}'", (p.returncode, p.stdout[-800:], p.stderr))
            r.ok(any("the trial ends" in l and a.name in l for l in d.log_text().splitlines()),
                 "logged as a warning")
            r.ok(wait_for(lambda: a.scheduler() == before, 3 * HOLD_MS / 1000 + 5),
                 f"{a.name} back at the setting before the trial ({before}) once its jobs ran", a.scheduler())
            p, _ = ctl("--json", "trial", a.name)
            r.ok("a trial is running" not in p.stderr + p.stdout,
                 "no trial left running: the next one starts", p.stderr[-400:])
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
