#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A trial's choice shipped as configuration to another host.

1. "Host A": a loop device over hostA/disk.img, set to mq-deadline with
   nr_requests 64, and a blkmqd whose [Device] section bounds a trial
   (AutoNrRequests=32 64, AutoWbtLatUsec=2000). blkmqctl trial DEV
   --emit-conf runs the trial under a read workload and prints a drop-in.
2. "Host B": an identical loop device over hostB/disk.img (same size, same
   file name, another directory), left as attached (scheduler none), and a
   second blkmqd whose only [Device] section is that drop-in in its
   blkmqd.conf.d/. Its sysfs ends up as host A's after the trial: every
   writable queue/ and queue/iosched/ attribute, except those in which the
   two devices already differed before (other users of this host's loop
   devices leave some behind).
3. blkmqctl export of host A's device carries the same keys, parses as a
   configuration (blkmqd --dry-run --once), and names the trial's figures
   when the trial changed the setting (the [Device] section holds the
   trial's baseline as static keys: a trial that keeps it leaves them in
   force, so the keys agree whatever it decides).
4. Ctrl-C in trial --emit-conf emits nothing (exit 6); export while that
   trial goes on in the daemon is refused (exit 11).
5. export of a device no section matches, and of an unknown device: exit 3
   and a message saying which.

Needs root, loop devices, udevd, fio; $BLKMQD, $BLKMQCTL."""

import json
import os
import shutil
import signal
import subprocess
import time

from blkmqtest import (Ctl, Env, Runner, ctl_path, daemon_path, main_guard, need_all, queue_snapshot, show, skip,
                       snapshot_diff, udevd, wait_for, log)


def key_lines(text):
    """{key: value} of the KEY=VALUE lines of a drop-in (comments left out)."""
    out = {}
    for l in text.splitlines():
        if l.startswith(("#", ";", "[")) or "=" not in l:
            continue
        k, v = l.split("=", 1)
        out[k] = v
    return out


def main():
    need_all()
    if not os.environ.get("BLKMQCTL"):
        skip("set BLKMQCTL")
    if not shutil.which("fio"):
        skip("fio missing")
    r = Runner("integration/export")
    with udevd(), Env("export") as env:
        fio = None
        try:
            imgs = []
            for host in ("hostA", "hostB"):
                os.makedirs(os.path.join(env.tmp, host))
                img = os.path.join(env.tmp, host, "disk.img")
                with open(img, "wb") as f:
                    f.truncate(64 << 20)
                imgs.append(img)
            a = env.attach(path=imgs[0])
            b = env.attach(path=imgs[1])
            other = env.attach("other")
            differed = {k for k in set(a.original) | set(b.original) if a.original.get(k) != b.original.get(k)}
            if differed:
                log(f"# left out of the comparison (the two devices differed before): {sorted(differed)}")
            a.set("scheduler", "mq-deadline")
            a.set("nr_requests", "64")
            addr = env.tmp + "/io.blkmqd"
            ctl = Ctl(ctl_path(), addr)
            cfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=1

[Device canary]
MatchBackingFile={imgs[0]}
Scheduler=mq-deadline
NrRequests=64
WbtLatUsec=2000
ReadAheadKB=256
AutoTune=no
AutoScheduler=mq-deadline
AutoNrRequests=32 64
AutoWbtLatUsec=2000
AutoEpochSec=0.5
AutoRounds=3
AutoMinIOPS=1
# no early end on this shared host's noise: the test is about what is emitted
AutoGuardFactor=1000
""", name="hostA.conf")
            da = env.daemon(["--config", cfg, "--varlink-address", addr], name="blkmqd-hostA")
            da.start(timeout=15)

            with r.case("trial --emit-conf prints the trial's choice as a [Device] drop-in", env):
                fio = subprocess.Popen(["fio", "--filename=" + a.dev, "--direct=1", "--ioengine=libaio",
                                        "--runtime=120", "--time_based", "--name=r", "--bs=4k", "--rw=randread",
                                        "--iodepth=4", "--size=32M"], stdout=subprocess.DEVNULL)
                time.sleep(1)
                p = ctl("trial", a.name, "--emit-conf", timeout=None)
                conf = p.stdout
                log("# emitted:\n" + "\n".join("#   " + l for l in conf.splitlines()))
                r.ok(p.returncode == 0, "exit 0", show(p), daemon=da)
                r.ok("epoch " in p.stderr, "the epochs went to standard error", show(p))
                keys = key_lines(conf)
                r.ok("[Device fleet-loop-disk.img]" in conf, "one [Device fleet-loop-disk.img] section", show(p))
                r.eq((keys.get("MatchTransport"), keys.get("MatchBackingFile")), ("loop", "*/disk.img"),
                     "a loop device is matched by its backing file's name")
                r.eq(keys.get("Scheduler"), "mq-deadline", "Scheduler= of the winner")
                r.ok(keys.get("NrRequests") in ("32", "64"), f"NrRequests= of the winner ({keys.get('NrRequests')})",
                     show(p))
                r.ok("WbtLatUsec" in keys, "WbtLatUsec= of the winner", show(p))
                r.eq(keys.get("AutoTune"), "no", "AutoTune=no: the other hosts run no trial of their own")
                r.ok("ReadAheadKB" not in keys, "only the keys the trial chose (not ReadAheadKB=)")
                verdict = "change" if ": change " in conf else "keep" 
                r.ok(any(l.startswith("# Trial from 20") and " UTC to 20" in l for l in conf.splitlines()),
                     "a comment with the trial's dates", show(p))
                r.ok("<- chosen" in conf and "READ AWAIT" in conf, "and its figures per candidate", show(p))
                fio.send_signal(signal.SIGTERM)
                fio.wait(30)
                fio = None
                r.ok(wait_for(lambda: a.attr("nr_requests") == keys.get("NrRequests"), 10),
                     f"host A's device has nr_requests {keys.get('NrRequests')}")
                snap_a = queue_snapshot(a.name)

            with r.case("export: the keys in force, the trial's among them, as a configuration", env):
                p = ctl("export", a.name)
                log("# export:\n" + "\n".join("#   " + l for l in p.stdout.splitlines()))
                r.eq(p.returncode, 0, "exit 0", daemon=da)
                ek = key_lines(p.stdout)
                for k in ("Scheduler", "NrRequests", "WbtLatUsec"):
                    r.eq(ek.get(k), keys.get(k), f"{k}= as the trial chose")
                r.eq(ek.get("ReadAheadKB"), "256", "the static ReadAheadKB= of [Device canary]")
                r.ok(f"# Device canary, {cfg}:" in p.stdout, "each key says its section and file:line", show(p))
                if verdict == "change":
                    r.ok("# Trial from " in p.stdout, "the trial's figures, as its choice is in force", show(p))
                else:
                    r.ok("# Trial from " not in p.stdout, "no trial's figures: the trial kept the static keys",
                         show(p))
                exp = env.write("export/blkmqd.conf", p.stdout)
                dry = subprocess.run([daemon_path(), "--config", exp, "--dry-run", "--once"], capture_output=True,
                                     text=True, timeout=60)
                r.eq(dry.returncode, 0, "blkmqd --dry-run reads it", daemon=None)
                r.ok(f"fleet-loop-disk.img" in dry.stdout and b.name in dry.stdout,
                     "and matches host B's device by it", dry.stdout + dry.stderr)

            with r.case("Ctrl-C in trial --emit-conf: nothing emitted (exit 6); export while it runs: exit 11", env):
                tp = ctl.popen("trial", a.name, "--emit-conf", text=True)
                first = tp.stderr.readline()
                tp.send_signal(signal.SIGINT)
                out, err = tp.communicate(timeout=30)
                r.ok(first.startswith("epoch ") and tp.returncode == 6 and out == "" and "nothing emitted" in err,
                     "exit 6, nothing on stdout, said on stderr",
                     f"exit {tp.returncode}; stdout {out!r}; stderr {first + err!r}")
                p = ctl("export", a.name)
                r.ok(p.returncode == 11 and "a trial is running" in p.stderr and p.stdout == "",
                     "export while the trial goes on in the daemon: exit 11", show(p))
                r.ok(wait_for(lambda: (ctl.json("show", a.name)[1] or {}).get("device", {}).get("autotune", {})
                              .get("trial", {}).get("state") != "running", 60), "the trial ends in the daemon")

            with r.case("export of a device without a policy, and of an unknown device: exit 3, said why", env):
                p = ctl("export", other.name)
                r.eq(p.returncode, 3, "a device no section matches: exit 3")
                r.ok("no [Device] section matches it" in p.stderr and p.stdout == "", "said on stderr, nothing on stdout",
                     show(p))
                p = ctl("export", "loop-no-such")
                r.eq(p.returncode, 3, "an unknown device: exit 3")
                r.ok("loop-no-such: no such device" in p.stderr, "said on stderr", show(p))
                p = ctl("export", a.name, "--emit-conf")
                r.eq(p.returncode, 1, "--emit-conf goes with trial only")
                p = ctl("trial", a.name, "--emit-conf", "--json")
                r.eq(p.returncode, 1, "--emit-conf with --json: a usage error")

            da.stop()

            with r.case("a second blkmqd with the drop-in gives host B's device host A's sysfs", env):
                addr_b = env.tmp + "/io.blkmqd-b"
                # The fleet's own configuration, shared by every host: the
                # keys no trial decides. The trial's choice comes as the
                # drop-in.
                cfg_b = env.config(f"[Daemon]\nProbeIntervalSec=0\n\n[Device base]\nMatchBackingFile=*/disk.img\n"
                                   f"ReadAheadKB=256\n", name="hostB.conf")
                env.dropin(cfg_b, "60-fleet.conf", conf)
                db = env.daemon(["--config", cfg_b, "--varlink-address", addr_b], name="blkmqd-hostB")
                db.start(timeout=15)

                def same():
                    sb = queue_snapshot(b.name)
                    return [l for l in snapshot_diff(snap_a, sb) if l.split(":")[0] not in differed]
                wait_for(lambda: not same(), 10)
                r.ok(not same(), f"host B's {b.name} has every setting of host A's {a.name} "
                     f"({len(snap_a) - len(differed)} attributes)", "\n".join(same()), daemon=db)
                r.eq(queue_snapshot(b.name).get("scheduler", "").count("[mq-deadline]"), 1, "mq-deadline on host B")
                sb = Ctl(ctl_path(), addr_b)
                p, d = sb.json("show", b.name)
                r.eq((d or {}).get("device", {}).get("matched"), ["base", "fleet-loop-disk.img"],
                     "it is managed by the fleet's section and the drop-in's", daemon=db)
                r.eq(sb.json("trial", b.name)[0].returncode, 6, "and runs no trial there (no bounds)")
                db.stop()
        finally:
            if fio:
                fio.kill()
                fio.wait()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
