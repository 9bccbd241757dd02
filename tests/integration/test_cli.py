#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Command-line modes: --dry-run (text, --json, watching), bad config at
start, --once, RestoreOnExit=no.

Covers: (7) --dry-run writes nothing and shows current -> wanted, --json
parses, (8) bad config at start -> exit 1 with file:line, (9) --once applies,
exits without restoring (exit 2 when a knob fails)."""

import json
import os
import re
import time

import os as _os
import sys as _sys
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "lib"))

from blkmqtest import (Env, Runner, need_all, udevd, main_guard, wait_for,
                       queue_snapshot, snapshot_diff, run_blkmqd, diag, restore_queue)

ARROW = re.compile(r"(\S+)\s*(?:→|->)\s*(\S+)")


def attr(entry):
    """Plan entries name the attribute "scheduler" or "queue/scheduler"."""
    a = entry.get("attribute") or ""
    return a[len("queue/"):] if a.startswith("queue/") else a


def section(entry):
    """... and the section "all" or "Device all"."""
    return re.sub(r"^(Device|Profile) ", "", entry.get("section") or "")


def dump_proc(p):
    diag(f"exit code {p.returncode}")
    diag("--- stdout:\n" + (p.stdout or "(empty)"))
    diag("--- stderr:\n" + (p.stderr or "(empty)"))


def main():
    need_all()
    r = Runner("integration/cli")
    with udevd(), Env("cli") as env:
        a = env.attach(prefix="a")
        b = env.attach(prefix="b")
        match = f"MatchBackingFile={env.glob('*.img')}"
        cfg = env.config(f"""\
[Device all]
{match}
Scheduler=kyber
NrRequests=64
ReadAheadKB=1024
WbtLatUsec=4000

[Device only-b]
MatchBackingFile={env.glob('b-*.img')}
ReadAheadKB=256
""")
        watched = [a.name, b.name, "vda", "zram0"]

        # ------------------------------------------------------------ (7)
        with r.case("--dry-run --once: plan printed, nothing written", env):
            f0 = r.failed
            before = {n: queue_snapshot(n) for n in watched}
            p = run_blkmqd(env, ["--config", cfg, "--dry-run", "--once"])
            after = {n: queue_snapshot(n) for n in watched}
            r.eq(p.returncode, 0, "--dry-run --once exits 0")
            diffs = [f"{n}: {x}" for n in watched for x in snapshot_diff(before[n], after[n])]
            r.ok(not diffs, "no queue attribute changed (a, b, vda, zram0)", diffs)
            text = p.stdout + p.stderr
            arrows = [m.groups() for m in ARROW.finditer(text)]
            ok = a.name in text and b.name in text and ("none", "kyber") in arrows
            r.ok(ok, "output names both devices and shows scheduler none -> kyber", text)
            ok = ("128", "64") in arrows and ("4000" in text)
            r.ok(ok, "output shows nr_requests 128 -> 64 and wbt_lat_usec -> 4000", text)
            r.ok("all" in text and "only-b" in text, "output names the matched sections", text)
            if r.failed > f0:
                dump_proc(p)

        with r.case("--dry-run --once --json", env):
            f0 = r.failed
            before = {n: queue_snapshot(n) for n in watched}
            p = run_blkmqd(env, ["--config", cfg, "--dry-run", "--once", "--json"])
            after = {n: queue_snapshot(n) for n in watched}
            r.eq(p.returncode, 0, "--dry-run --once --json exits 0")
            r.ok(before == after, "nothing written",
                 [f"{n}: {x}" for n in watched for x in snapshot_diff(before[n], after[n])])
            try:
                doc = json.loads(p.stdout)
            except ValueError as e:
                doc = None
                r.ok(False, f"stdout parses as JSON: {e}", p.stdout[:2000])
            if doc is not None:
                r.ok(True, "stdout parses as JSON")
                devs = {x.get("device"): x for x in doc.get("devices", [])}
                r.ok(a.name in devs and b.name in devs, "both loop devices listed",
                     sorted(devs))
                da, db = devs.get(a.name, {}), devs.get(b.name, {})
                r.eq(da.get("matched"), ["all"], f"{a.name}: matched == ['all']")
                r.eq(db.get("matched"), ["all", "only-b"],
                     f"{b.name}: matched == ['all', 'only-b'] in file order")
                plan = {attr(x): x for x in da.get("plan", [])}
                s = plan.get("scheduler", {})
                r.ok(s.get("current") == "none" and s.get("wanted") == "kyber"
                     and section(s) == "all",
                     f"{a.name}: plan scheduler none -> kyber from [all]", s)
                ra = {attr(x): x for x in db.get("plan", [])}.get("read_ahead_kb", {})
                r.ok(str(ra.get("wanted")) == "256" and section(ra) == "only-b",
                     f"{b.name}: plan read_ahead_kb -> 256 from [only-b]", ra)
                others = [n for n, x in devs.items()
                          if n not in (a.name, b.name) and x.get("plan")]
                r.ok(not others, "no plan for any other disk", others)
            if r.failed > f0:
                dump_proc(p)

        with r.case("--dry-run (watching): hotplugged device planned, not written", env):
            snap_a = a.snapshot()
            d = env.daemon(["--config", cfg, "--dry-run"], name="dryrun")
            # A dry run is not a service: READY=1 is not required. Wait for
            # the initial plans instead.
            d.start(wait_ready=False)
            first = wait_for(lambda: a.name in d.stdout_text() and b.name in d.stdout_text(), 10)
            r.ok(first, "initial plans printed", daemon=d)
            d.mark()
            diag(f"--dry-run sent READY=1: {d.find('READY', '1') is not None} (not required)")
            c = env.attach(prefix="c")
            snap_c = c.snapshot()
            def c_planned():
                out = d.stdout_text()
                i = out.find(c.name + " ", out.find(b.name) if b.name in out else 0)
                return i >= 0 and ARROW.search(out, i)
            seen = wait_for(c_planned, 10)
            time.sleep(0.3)
            r.ok(seen, f"plan (current -> wanted) for hotplugged {c.name} printed", daemon=d)
            r.ok(c.snapshot() == snap_c, f"{c.name} not written",
                 snapshot_diff(snap_c, c.snapshot()))
            rc = d.stop(timeout=10)
            r.eq(rc, 0, "--dry-run daemon exits 0 on SIGTERM", d)
            r.ok(a.snapshot() == snap_a and c.snapshot() == snap_c,
                 "still nothing written after stop (nothing to restore)",
                 snapshot_diff(snap_a, a.snapshot()) + snapshot_diff(snap_c, c.snapshot()))

        # ------------------------------------------------------------ (8)
        bad = [
            ("unknown key", "blkmqd.conf", 3, f"[Device x]\n{match}\nFrobnicate=yes\n"),
            ("bad integer", "blkmqd.conf", 4, f"[Device x]\n{match}\n\nNrRequests=-5x\n"),
            ("bad RqAffinity", "blkmqd.conf", 3, f"[Device x]\n{match}\nRqAffinity=7\n"),
            ("bad MatchSize", "blkmqd.conf", 2, "[Device x]\nMatchSize=1G-banana\n"),
            ("bad RestoreOnExit", "blkmqd.conf", 2, "[Daemon]\nRestoreOnExit=perhaps\n"),
            ("duplicate section", "blkmqd.conf", 5,
             f"[Device x]\n{match}\n\n# again\n[Device x]\n{match}\n"),
            ("unknown key in a drop-in", "blkmqd.conf.d/50-bad.conf", 2,
             "[Device y]\nScheduleer=kyber\n"),
        ]
        for what, fname, line, text in bad:
            with r.case(f"bad config at start: {what}", env):
                main = env.config("[Daemon]\nRestoreOnExit=yes\n" if fname != "blkmqd.conf"
                                  else text, name="bad.conf")
                path = main
                if fname != "blkmqd.conf":
                    path = env.write("bad.conf.d/" + os.path.basename(fname), text)
                before = a.snapshot()
                p = run_blkmqd(env, ["--config", main])
                r.eq(p.returncode, 1, f"{what}: exit code 1")
                want = f"{path}:{line}"
                r.ok(want in p.stderr, f"{what}: message names {os.path.relpath(path, env.tmp)}"
                     f":{line}", p.stderr or "(no stderr)")
                r.ok(a.snapshot() == before, f"{what}: nothing written")
                if fname != "blkmqd.conf":
                    os.unlink(path)
        with r.case("missing config file", env):
            p = run_blkmqd(env, ["--config", os.path.join(env.tmp, "nope.conf")])
            r.ok(p.returncode != 0 and "nope.conf" in p.stderr,
                 f"missing --config file: non-zero exit ({p.returncode}) naming the file",
                 p.stderr)

        # ------------------------------------------------------------ (9)
        with r.case("--once applies and exits without restoring", env):
            orig_a, orig_b = a.snapshot(), b.snapshot()
            p = run_blkmqd(env, ["--config", cfg, "--once"])
            r.eq(p.returncode, 0, "--once exits 0")
            want_a = {"scheduler": "kyber", "nr_requests": "64", "read_ahead_kb": "1024",
                      "wbt_lat_usec": "4000"}
            r.ok(a.matches(want_a), f"{a.name} tuned and left tuned after exit",
                 a.mismatches(want_a) + [p.stderr])
            r.ok(b.matches(dict(want_a, read_ahead_kb="256")), f"{b.name} tuned, left tuned",
                 b.mismatches(dict(want_a, read_ahead_kb="256")))
            restore_queue(a.name, orig_a)
            restore_queue(b.name, orig_b)

        with r.case("--once with a knob the kernel rejects exits 2", env):
            # With no scheduler, nr_requests above the hardware depth (128 for
            # loop) is EINVAL.
            badcfg = env.config(f"""\
[Device all]
{match}
Scheduler=none
NrRequests=100000
ReadAheadKB=768
""", name="once-fail.conf")
            orig_a = a.snapshot()
            p = run_blkmqd(env, ["--config", badcfg, "--once"])
            r.eq(p.returncode, 2, "--once exits 2 when a knob failed", None)
            r.ok(re.search(r"^<[0-3]>.*nr_requests", p.stderr, re.M),
                 "error-level line names nr_requests", p.stderr)
            r.eq(a.attr("read_ahead_kb"), "768", "the other knobs were still applied")
            restore_queue(a.name, orig_a)

        with r.case("RestoreOnExit=no leaves knobs on SIGTERM", env):
            orig_a = a.snapshot()
            cfgn = env.config(f"""\
[Daemon]
RestoreOnExit=no

[Device all]
{match}
Scheduler=mq-deadline
ReadAheadKB=640
""", name="norestore.conf")
            d = env.daemon(["--config", cfgn], name="norestore")
            d.start(timeout=15)
            rc = d.stop(timeout=10)
            r.eq(rc, 0, "exit code 0", d)
            r.ok(a.matches({"scheduler": "mq-deadline", "read_ahead_kb": "640"}),
                 "values kept after exit", a.mismatches({"scheduler": "mq-deadline",
                                                         "read_ahead_kb": "640"}), d)
            restore_queue(a.name, orig_a)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
