#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What blkmqd keeps across a restart and what it does beside other writers:

- a profile set is kept in the state directory (--state-dir): stopped
  (SIGTERM) and started again with the same state directory, blkmqd has it
  active again and its values are in sysfs; a reload keeps it;
  ClearProfile removes it (after a restart: no profile); a profile the
  configuration no longer has: a warning naming it, the status saying so,
  no profile active;
- blkmqd --once puts the originals on record before its first write: a
  later start adopts them and its stop puts the values from before --once
  back; beside a running blkmqd that has its records there, --once refuses;
  with a record directory it cannot write, --once refuses (exit 1) and
  writes nothing; --no-record writes anyway;
- drift (DriftCheckSec=1): a setting written behind blkmqd's back is logged
  once with the drift MESSAGE_ID and its fields (not again for the same
  value), then per DriftPolicy=: reapply writes the wanted value again
  within the check period; keep leaves it, verify says kept (exit 0), show
  notes it, apply manages it again; report (the default) leaves it, verify
  says drifted (exit 12).

Needs root, loop devices, udev."""

import os
import re
import subprocess
import time

from blkmqtest import (Ctl, Env, Runner, ctl_path, main_guard, need_all, run_blkmqd, show, udevd, varlink_call,
                       wait_for)


def message_id(name):
    here = os.path.dirname(os.path.abspath(__file__))
    text = open(os.path.join(here, "..", "..", "src", "basic", "message-id.h")).read()
    return re.search(rf'#define {name} "([0-9a-f]{{32}})"', text).group(1)


def main():
    need_all()
    drift_id = message_id("BLKMQD_MESSAGE_DRIFT")
    ctl_bin = ctl_path()
    r = Runner("integration/persist")
    with udevd(), Env("persist") as env:
        sock = os.path.join(env.tmp, "io.blkmqd")
        state = os.path.join(env.tmp, "pstate")
        profile_file = os.path.join(state, "profile")
        ctl = Ctl(ctl_bin, sock)
        base = f"""\
[Daemon]
DriftCheckSec=1

[Device t]
MatchBackingFile={env.glob('t-*.img')}
Scheduler=kyber
NrRequests=64
ReadAheadKB=512
"""
        night = """
[Profile night]
ReadAheadKB=1024
"""
        cfg = env.config(base + night)
        n = [0]

        def daemon():
            n[0] += 1
            d = env.daemon(["--config", cfg, "--varlink-address", sock, "--state-dir", state],
                           name=f"blkmqd-{n[0]}")
            d.start(timeout=15)
            return d

        def status():
            return varlink_call(sock, "io.blkmqd.Manager.GetStatus")["parameters"]

        a = env.attach(prefix="t")
        ORIG = {"scheduler": "none", "nr_requests": a.attr("nr_requests"), "read_ahead_kb": a.attr("read_ahead_kb")}
        TUNED = {"scheduler": "kyber", "nr_requests": "64", "read_ahead_kb": "512"}
        NIGHT = dict(TUNED, read_ahead_kb="1024")

        with r.case("a profile survives a restart, and a reload", env):
            r.ok(a.matches(ORIG) and "512" not in ORIG.values(), f"the new loop device is at {ORIG}",
                 a.mismatches(ORIG))
            d = daemon()
            r.ok(a.matches(TUNED), "tuned", a.mismatches(TUNED), d)
            p = ctl("profile", "night")
            r.ok(p.returncode == 0 and a.matches(NIGHT), "profile night: read_ahead_kb 1024",
                 show(p) + str(a.mismatches(NIGHT)), d)
            r.eq(open(profile_file).read() if os.path.exists(profile_file) else None, "night\n",
                 "the state directory holds the profile")
            d.reload()
            r.ok(status().get("profile") == "night" and a.matches(NIGHT), "a reload keeps it", status(), d)
            r.eq(d.stop(), 0, "stopped (SIGTERM)")
            r.ok(a.matches(ORIG), "the stop put the originals back", a.mismatches(ORIG))
            d = daemon()
            r.ok(status().get("profile") == "night", "started again: profile night active", status(), d)
            r.ok(a.matches(NIGHT), "its value in sysfs: read_ahead_kb 1024", a.mismatches(NIGHT), d)
            r.ok(f"Profile night, on record in {profile_file}: active." in d.log_text(),
                 "the log says it came from the state directory", None, d)

        with r.case("ClearProfile: after a restart, no profile", env):
            p = ctl("profile", "--clear")
            r.ok(p.returncode == 0 and a.matches(TUNED), "cleared: read_ahead_kb 512", show(p), d)
            r.ok(not os.path.exists(profile_file), "the state directory holds no profile", os.listdir(state))
            d.stop()
            d = daemon()
            r.ok("profile" not in status() and a.matches(TUNED), "started again: no profile, read_ahead_kb 512",
                 [status(), a.mismatches(TUNED)], d)

        with r.case("a profile gone from the configuration: a warning, none active", env):
            p = ctl("profile", "night")
            r.ok(p.returncode == 0, "profile night", show(p), d)
            d.stop()
            env.config(base)
            d = daemon()
            warn = [l for l in d.log_text().splitlines() if l.startswith("<4>") and "night" in l]
            r.ok(len(warn) == 1, "one warning naming the profile", d.log_text().splitlines()[-10:], d)
            r.ok("profile" not in status() and a.matches(TUNED), "no profile active: read_ahead_kb 512",
                 [status(), a.mismatches(TUNED)], d)
            r.ok(any("no [Profile] night" in s for s in d.statuses()), "the status says so", d.statuses(), d)
            ctl("profile", "--clear")
            d.stop()
            env.config(base + night)

        # --once: what a later start finds.
        def once(*args):
            return run_blkmqd(env, ["--once", "--config", cfg, "--state-dir", state] + list(args))

        record = os.path.join(env.originals_dir, a.name + ".json")
        with r.case("--once records its originals: a later start adopts them, its stop puts them back", env):
            r.ok(a.matches(ORIG), "at the originals before --once", a.mismatches(ORIG))
            p = once()
            r.ok(p.returncode == 0 and a.matches(TUNED), "--once tuned it", p.stderr[-2000:])
            r.ok(os.path.exists(record), "its originals on record", os.listdir(env.originals_dir))
            d = daemon()
            r.ok(re.search(rf"{a.name}: adopting \d+ original values", d.log_text()), "a start adopts them",
                 None, d)
            d.stop()
            r.ok(a.matches(ORIG), "its stop put the values from before --once back", a.mismatches(ORIG))

        with r.case("--once beside a running blkmqd: refused", env):
            d = daemon()
            p = once()
            r.ok(p.returncode == 1 and f"blkmqd[{d.pid()}] runs and manages {a.name}" in p.stderr,
                 "exit 1, naming the running blkmqd", f"exit {p.returncode}\n{p.stderr[-2000:]}", d)
            d.stop()
            r.ok(a.matches(ORIG), "the running one's stop put the originals back", a.mismatches(ORIG))

        bad = os.path.join(env.tmp, "a-file", "originals")
        open(os.path.join(env.tmp, "a-file"), "w").close()
        with r.case("--once refuses when it cannot record; --no-record writes", env):
            p = once("--originals-dir", bad)
            r.ok(p.returncode == 1 and "--no-record" in p.stderr, "refused (exit 1), naming --no-record",
                 f"exit {p.returncode}\n{p.stderr[-2000:]}")
            r.ok(a.matches(ORIG), "nothing written", a.mismatches(ORIG))
            p = once("--originals-dir", bad, "--no-record")
            r.ok(p.returncode == 0 and a.matches(TUNED), "--no-record: tuned", p.stderr[-2000:])
            for k, v in ORIG.items():
                a.set(k, v)

        # Drift: one device per policy.
        cfg = env.config(f"""\
[Daemon]
DriftCheckSec=1

[Device re]
MatchBackingFile={env.glob('re-*.img')}
ReadAheadKB=512
DriftPolicy=reapply

[Device ke]
MatchBackingFile={env.glob('ke-*.img')}
ReadAheadKB=512
DriftPolicy=keep

[Device rp]
MatchBackingFile={env.glob('rp-*.img')}
ReadAheadKB=512
""", name="drift.conf")
        re_, ke, rp = env.attach(prefix="re"), env.attach(prefix="ke"), env.attach(prefix="rp")
        ra0 = {x.name: x.attr("read_ahead_kb") for x in (re_, ke, rp)}
        # The attaches' change events handled: a change event applies the
        # policy again, which would hide what a drift check does.
        subprocess.run(["udevadm", "settle", "--timeout=10"], stderr=subprocess.DEVNULL)

        def drift_lines(d, dev):
            return [l for l in d.log_text().splitlines()
                    if f"MESSAGE_ID={drift_id}" in l and f"BLKMQD_DEVICE={dev.name} " in l]

        with r.case("drift: logged once with its MESSAGE_ID, then what DriftPolicy= says", env):
            d = daemon()
            for x in (re_, ke, rp):
                r.ok(x.attr("read_ahead_kb") == "512", f"{x.name}: read_ahead_kb 512", None, d)
                x.set("read_ahead_kb", "2048")
            t0 = time.monotonic()
            r.ok(wait_for(lambda: re_.attr("read_ahead_kb") == "512", 5), "reapply: back to 512", None, d)
            dt = time.monotonic() - t0
            r.ok(dt < 2.5, f"within the check period (1 s): {dt:.1f} s")
            wait_for(lambda: drift_lines(d, ke) and drift_lines(d, rp), 3)
            for x, pol in ((re_, "reapply"), (ke, "keep"), (rp, "report")):
                lines = drift_lines(d, x)
                r.ok(len(lines) == 1 and "BLKMQD_KNOB=queue/read_ahead_kb" in lines[0] and
                     "BLKMQD_OLD=512" in lines[0] and "BLKMQD_NEW=2048" in lines[0] and
                     f"BLKMQD_POLICY={pol}" in lines[0], f"{x.name}: one drift entry, policy {pol}", lines, d)
            r.ok(ke.attr("read_ahead_kb") == "2048", "keep: left at 2048")
            r.ok(rp.attr("read_ahead_kb") == "2048", "report: left at 2048")

            # The same value written again: reapplied again, not logged again.
            re_.set("read_ahead_kb", "2048")
            r.ok(wait_for(lambda: re_.attr("read_ahead_kb") == "512", 5), "reapply: back to 512 again", None, d)
            time.sleep(1.5)
            r.eq([len(drift_lines(d, x)) for x in (re_, ke, rp)], [1, 1, 1],
                 "no second entry for the same value, after more checks", d)

            p, v = ctl.json("verify", ke.name)
            k = v and v[0]["knobs"][0]
            r.ok(p.returncode == 0 and k and k["state"] == "kept" and k.get("found") == "2048",
                 "keep: verify says kept, found 2048 (exit 0)", show(p), d)
            p = ctl("show", ke.name)
            r.ok("kept as something else wrote it" in p.stdout, "keep: show says so", show(p), d)
            p, v = ctl.json("verify", rp.name)
            k = v and v[0]["knobs"][0]
            r.ok(p.returncode == 12 and k and k["state"] == "drifted" and k.get("found") == "2048",
                 "report: verify says drifted (exit 12)", show(p), d)
            p = ctl("apply", ke.name)
            r.ok(p.returncode == 0 and ke.attr("read_ahead_kb") == "512", "keep: apply manages it again",
                 show(p), d)
            d.stop()
            for x in (re_, ke, rp):
                r.eq(x.attr("read_ahead_kb"), ra0[x.name], f"{x.name}: the stop put the original back")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
