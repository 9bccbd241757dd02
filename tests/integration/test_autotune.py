#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Closed-loop tuning on a disk with a known behaviour.

The disk: tools/modeldisk (a FUSE file with a modelled service time: 8
channels, reads 100 µs, writes 200 µs + 128 KiB at 20 MiB/s per channel)
under a loop device with --direct-io=on; its threads run at SCHED_FIFO 1
and the daemons that race on it as blkmqd.service runs them (SCHED_RR 1),
so that a read's latency is the model's and not a wait for one of the
host's CPUs. The workload: fio, 128 KiB random writes at depth 256 plus
4 KiB random reads at depth 4 (through io_uring: a read that waits for a
tag waits in the kernel's worker, not in fio's submitting thread, where
it would leave reads already done unreaped and their latency counted
long). With mq-deadline, nr_requests decides how many writes sit in the
disk's queue ahead of a read: 256 (the default) lets the 128 driver tags
fill with writes, 32 about 28 (the daemon's epochs show 31-32 requests
in flight, the reads' 4 among them), 4 keeps the queue short but leaves
most channels idle (write throughput falls by more than half).

1. A fio sweep of the three settings in this test decides which one is
   clearly best for "lowest read latency, write throughput within 20 % of
   the best" (the known answer: nr_requests 32).
   The bound is 20 %: on this 2-core shared host nr_requests 32 costs
   0-14 % of the write throughput depending on the load of the machine
   (the FUSE server and fio compete for the CPUs), 4 costs over 50 %.
2. blkmqctl trial picks the same one and sets it; a second trial keeps it
   (no flapping); GetDevice, Explain and Monitor say so.
3. The second trial, from 32, races, every run: 256 starves the reads
   (over 100 ms each behind the queued writes, against 20-30 ms for the
   slowest epoch's probe p99 of 32; AutoGuardFactor=2) and leaves as far
   worse within 0.5 s of its epoch's start (the daemon's report) and is
   in sysfs for less than one epoch (sampled every 5 ms); 4 leaves by the
   write bound (or as far worse); the trial keeps 32. Its price by the workload's own
   reads (fio's latency log): their p99 during the trial under 1.5 times
   the worse of 32's before and after it.
   Stopping the daemon puts nr_requests back.
4. After a change the daemon watches the chosen setting against the
   write bound it was chosen under: when the disk slows down (the model's
   write bandwidth drops to a third, SIGUSR1) under the same workload, it
   says the bound broke once six watch intervals of it are in (the
   daemon's watch interval divided by 5 by a test hook: 2 s, not 10 s),
   and falls back to the trial's candidate that kept the bound
   with the most margin, 256 (GetDevice, explain, sysfs, the log).
5. A trial survives its device vanishing (LOOP_CTL_REMOVE) mid-trial: the
   trial ends saying so and the daemon runs on.
6. On a fast disk (a plain loop device) every epoch has enough probes, and
   the trial ranks reads by the probes' p99 (on the model disk, slower than
   the probe interval, it falls back to the mean await).
7. A search by families (AutoKnobs=scheduler iosched) on the fast disk:
   the schedulers first, then the winner's own tunables, each only under
   its scheduler; the kernel refuses none of them (they are written after
   the scheduler), the winner's values are in sysfs after the trial, and
   stopping the daemon puts the scheduler and its tunables back.

Trials of 6 rounds: one that does not settle can still decide (after 4, a
perfect separation of two candidates' epochs gives p = 0.014, over the
0.0125 a change among 3 candidates needs). The comparisons are between
settings measured in one run; the timed assertions are the daemon's own
promise (an epoch cut within 0.5 s) and one epoch (3 s) as the bound
of a setting's time in sysfs. Needs root, loop devices, udevd, /dev/fuse,
fio; $BLKMQD, $BLKMQCTL, $MODELDISK."""

import json
import os
import re
import signal
import shutil
import statistics
import subprocess
import threading
import time

from blkmqtest import Ctl, Env, FuseDisk, Runner, ctl_path, main_guard, need_all, skip, udevd, wait_for, log

CANDIDATES = [4, 32, 256]
TOLERANCE = 0.20
# --write-bw-usr1: after a SIGUSR1 the disk writes at 7 of its 20 MiB/s
# per channel (the promise case below)
MODEL = ["--size=512M", "--channels=8", "--read-lat-us=100", "--write-lat-us=200",
         "--write-bw=20M", "--read-bw=200M", "--write-bw-usr1=7M"]


def fio_cmd(dev, runtime, output_json=True, read_log=None):
    cmd = ["fio", "--filename=" + dev, "--direct=1", "--ioengine=libaio", f"--runtime={runtime}",
           "--time_based", "--name=w", "--bs=128k", "--rw=randwrite", "--iodepth=256", "--size=400M",
           "--name=r", "--ioengine=io_uring", "--bs=4k", "--rw=randread", "--iodepth=4", "--size=400M"]
    if read_log:
        # every read's latency, stamped with its completion (Unix ms)
        cmd += [f"--write_lat_log={read_log}", "--log_avg_msec=0", "--log_unix_epoch=1"]
    if output_json:
        cmd += ["--output-format=json", "--lat_percentiles=1"]
    return cmd


def read_lat_log(prefix):
    """[(completion time in s since the epoch, latency in ms)] of the reads
    in fio's latency log (the r job's, the only one with a log)."""
    import glob
    out = []
    for path in glob.glob(prefix + "_lat.*.log"):
        for line in open(path):
            f = line.split(",")
            if len(f) >= 3 and f[2].strip() == "0":
                out.append((int(f[0]) / 1e3, int(f[1]) / 1e6))
    return out


def p99(values):
    v = sorted(values)
    return v[min(len(v) - 1, (99 * len(v) + 99) // 100 - 1)] if v else 0.0


def in_force(samples, value):
    """The longest stretch (s) for which a sampled attribute read VALUE:
    samples are (monotonic time, value), taken every few ms."""
    longest, since = 0.0, None
    for t, v in samples:
        if v == value and since is None:
            since = t
        elif v != value and since is not None:
            longest, since = max(longest, t - since), None
    if since is not None and samples:
        longest = max(longest, samples[-1][0] - since)
    return longest


def blockstat(name):
    v = [int(x) for x in open(f"/sys/block/{name}/stat").read().split()[:11]]
    return v, time.monotonic()


def sweep(loop, runtime=10):
    """{nr_requests: (read await ms, fio read p99 ms, write MB/s)}: fio drives
    each setting in turn; read await (ticks / reads) and write MB/s come
    from /sys/block/X/stat over the run, as the daemon measures them. (fio's
    own read latency on this model is bimodal from run to run; its p99 is
    shown for reference.)"""
    out = {}
    for nr in CANDIDATES:
        loop.set("scheduler", "mq-deadline")
        loop.set("nr_requests", str(nr))
        (a, t0) = blockstat(loop.name)
        p = subprocess.run(fio_cmd(loop.dev, runtime), capture_output=True, text=True, check=True)
        (b, t1) = blockstat(loop.name)
        j = json.loads(p.stdout[p.stdout.index("{"):])
        r = j["jobs"][1]
        reads = b[0] - a[0]
        out[nr] = ((b[3] - a[3]) / reads if reads else 0.0,
                   r["read"]["lat_ns"]["percentile"]["99.000000"] / 1e6,
                   (b[6] - a[6]) * 512 / 1e6 / (t1 - t0))
        log(f"# fio sweep: mq-deadline nr_requests={nr}: read await {out[nr][0]:.2f} ms, "
            f"fio read p99 {out[nr][1]:.2f} ms, write {out[nr][2]:.1f} MB/s")
    return out


def best_of(fig):
    top_w = max(v[2] for v in fig.values())
    admissible = {k: v for k, v in fig.items() if v[2] >= top_w * (1 - TOLERANCE)}
    ranked = sorted(admissible, key=lambda k: admissible[k][0])
    return ranked, admissible


def last_json(text):
    lines = [l for l in text.splitlines() if l.strip().startswith("{")]
    return json.loads(lines[-1]) if lines else None


def main():
    need_all()
    modeldisk = os.environ.get("MODELDISK")
    if not modeldisk or not os.access(modeldisk, os.X_OK):
        skip("set MODELDISK=/path/to/modeldisk (built with libfuse3-dev)")
    if not os.path.exists("/dev/fuse"):
        skip("no /dev/fuse")
    if not shutil.which("fio"):
        skip("fio missing")
    if not os.environ.get("BLKMQCTL"):
        skip("set BLKMQCTL")
    r = Runner("integration/autotune")
    with udevd(), Env("autotune") as env:
        # The model's threads at SCHED_FIFO 1, as a disk's timing owes
        # nothing to the host's CPUs: on a loaded 2-core host they would
        # otherwise wait tens of ms for a CPU, and every read with them.
        md = FuseDisk(env, "chrt", ["-f", "1", modeldisk] + MODEL, "model")
        fio = None
        try:
            loop = env.attach(path=md.file, direct_io=True)
            r.eq(open(f"/sys/block/{loop.name}/loop/dio").read().strip(), "1", "the loop device does direct I/O")
            original_nr = "256"
            loop.set("scheduler", "mq-deadline")
            loop.set("nr_requests", original_nr)

            with r.case("a fio sweep in this run shows one setting clearly best", env):
                # The model's latency wanders between runs on a shared host:
                # up to three passes, each setting taken at its median over
                # the passes so far, as the daemon's interleaved epochs do.
                passes = []
                for _ in range(3):
                    passes.append(sweep(loop))
                    fig = {nr: tuple(statistics.median(p[nr][i] for p in passes) for i in range(3))
                           for nr in CANDIDATES}
                    ranked, admissible = best_of(fig)
                    best = ranked[0]
                    if len(ranked) >= 2 and admissible[ranked[1]][0] >= 1.5 * admissible[best][0]:
                        break
                log(f"# sweep: {len(passes)} pass(es)")
                r.ok(len(ranked) >= 2 and admissible[ranked[1]][0] >= 1.5 * admissible[best][0],
                     f"nr_requests={best}: the next admissible setting has 1.5 times its read latency or more",
                     detail=str(fig))
                r.ok(4 not in admissible, "nr_requests=4 costs more than 20 % of the write throughput",
                     detail=str(fig))
            loop.set("nr_requests", original_nr)

            addr = env.tmp + "/io.blkmqd"
            ctl = Ctl(ctl_path(), addr)
            cfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=1

[Device model]
MatchBackingFile={md.file}
Scheduler=mq-deadline
AutoTune=yes
AutoScheduler=mq-deadline
AutoNrRequests=256 4 32
AutoWriteTolerance={int(TOLERANCE * 100)}%
AutoEpochSec=3
AutoRounds=6
AutoGuardFactor=2
""")
            # as blkmqd.service runs it (SCHED_RR 1): its probes' latency is
            # the disk's, not that of a wait for a CPU
            d = env.daemon(["--config", cfg, "--varlink-address", addr, "--log-level", "debug"], as_unit=True)
            d.start(timeout=15)
            mon = ctl.popen("--json", "monitor", stderr=None, text=True)
            fio = subprocess.Popen(fio_cmd(loop.dev, 300, output_json=False), stdout=subprocess.DEVNULL)
            time.sleep(2)

            with r.case("blkmqctl trial picks the sweep's best and sets it", env):
                p = ctl("--json", "trial", loop.name, timeout=None)
                final = last_json(p.stdout)
                t = final["trial"]
                for c in t["candidates"]:
                    log(f"# trial: {c['setting']}: read await {c.get('readAwaitMs', 0):.2f} ms, "
                        f"write {c.get('writeMBps', 0):.1f} MB/s, admissible {c.get('admissible')}")
                log(f"# decision: {t['verdict']} {t['winner']}: {t['reason']}")
                r.eq(t["state"], "decided", "the trial came to a decision")
                r.eq(t["verdict"], "change", "the decision is a change")
                r.eq(t["winner"], f"mq-deadline nr_requests={best}", "the winner is the sweep's best", daemon=d)
                r.ok(wait_for(lambda: loop.attr("nr_requests") == str(best), 10),
                     f"nr_requests is {best} in sysfs")
                # one "running" reply at the end of each epoch, the last one's too
                progress = [l for l in p.stdout.splitlines() if '"running"' in l]
                epochs = sum(c.get("epochs", 0) for c in t["candidates"])
                r.ok(epochs > 0 and len(progress) == epochs,
                     f"progress came per epoch ({len(progress)} replies, {epochs} epochs)")

            with r.case("a second trial on the same workload keeps the setting (no flapping)", env):
                # The workload again, now with every read's latency logged:
                # the trial's price is measured by the workload's own reads.
                fio.send_signal(signal.SIGTERM)
                fio.wait(30)
                lat_prefix = os.path.join(env.tmp, "reads")
                fio = subprocess.Popen(fio_cmd(loop.dev, 300, output_json=False, read_log=lat_prefix),
                                       stdout=subprocess.DEVNULL)
                t_fio = time.time()
                time.sleep(5.5)
                # nr_requests as sysfs shows it, every 5 ms of the trial
                samples, sampling = [], threading.Event()

                def sample():
                    while not sampling.is_set():
                        samples.append((time.monotonic(), loop.attr("nr_requests")))
                        time.sleep(0.005)
                th = threading.Thread(target=sample)
                th.start()
                t2_start = time.time()
                try:
                    p2 = ctl("--json", "trial", loop.name, timeout=None)
                finally:
                    t2_end = time.time()
                    sampling.set()
                    th.join()
                time.sleep(4.5)
                fio.send_signal(signal.SIGINT)  # fio writes its logs as it ends
                fio.wait(60)
                fio = subprocess.Popen(fio_cmd(loop.dev, 300, output_json=False), stdout=subprocess.DEVNULL)
                t2 = last_json(p2.stdout)["trial"]
                log(f"# second trial: {t2['verdict']} {t2['winner']}: {t2['reason']}")
                for c in t2["candidates"]:
                    log(f"# second trial: {c['setting']}: {c['epochs']} epochs, read await "
                        f"{c.get('readAwaitMs', 0):.2f} ms{', left: ' + c['dropReason'] if c.get('dropped') else ''}")
                log(f"# second trial: price {t2.get('price')}, {t2.get('schedulerSwitches')} switches")
                r.ok(t2["verdict"] != "change", f"no change ({t2['verdict']})")
                r.eq(loop.attr("nr_requests"), str(best), f"nr_requests still {best}")
                n_trials = 2

            with r.case("the second trial races: nr_requests=256, far worse than the best, leaves within 1 s of its "
                        "epoch's start; nr_requests=4 leaves by the write bound", env):
                # By construction: under 256 a read waits behind about a
                # hundred queued writes of 6.5 ms on 8 channels (the model's
                # FIFO), over 100 ms; under 32 behind about 20 of them, and
                # the slowest epoch's probe p99 of 32 stays near 20-30 ms
                # even on a loaded host: over AutoGuardFactor=2 times that
                # from 256's first probes on, which the daemon's look at
                # the epoch's probes every 0.1 s sees. How many it needs
                # over the limit grows with the probes an epoch of 3 s can
                # hold at the trial's probe rate: one per 9 ms here (1 in
                # 10 of the disk's 1,100 I/Os a second), about 380, whose
                # p99 allows 3 over it; at QD1 each takes over 100 ms, so
                # 4-5 of them end the epoch after 0.5-0.7 s (seen: "5 of
                # its first 5 probes (0.7 s into the epoch)"); at the
                # 20 ms probes before, 2 of at most 173 did, in 0.2-0.4 s. The look needs a p99 of every epoch
                # before, 50 probes at least: under 32 a probe takes about
                # 16 ms and more on a loaded host, next to the 20 ms
                # interval, hence epochs of 3 s. AutoNrRequests= lists 256
                # before 4: in this trial 256 comes right after 32's first
                # epoch, not after 4's, whose probes wait for tags.
                by = {c["setting"]: c for c in t2["candidates"]}
                r.ok(t2["state"] == "decided", f"the trial decided, not aborted ({t2['state']}: "
                     f"{t2.get('abortReason', '')})")
                c = by.get("mq-deadline nr_requests=256", {})
                m = re.search(r"\(([0-9.]+) s into the epoch\)", c.get("dropReason", ""))
                r.ok(c.get("dropped") and c.get("epochs") == 1 and "far worse" in c.get("dropReason", ""),
                     "nr_requests=256 left as far worse after one epoch", detail=str(c))
                r.ok(m and float(m.group(1)) <= 1.0, "its epoch ended within 1 s of its start (the daemon's report: "
                     f"{m.group(1) + ' s' if m else 'not cut short'})", daemon=d)
                # sysfs: from the write of 256 to the next write, the
                # settling, the drain and the epoch included; an epoch
                # that ran to its end alone takes 3 s
                held = in_force(samples, "256")
                log(f"# nr_requests=256 in sysfs for {held:.2f} s of the trial ({len(samples)} samples)")
                r.ok(0 < held < 3, f"nr_requests=256 was in sysfs for less than one epoch ({held:.2f} s)")
                c4 = by.get("mq-deadline nr_requests=4", {})
                r.ok(c4.get("dropped") and ("outside the write bound" in c4.get("dropReason", "")
                                            or "far worse" in c4.get("dropReason", "")),
                     "nr_requests=4 left the race", detail=str(c4))
                r.ok(t2["verdict"] == "keep-best" and "every other candidate left the race" in t2.get("reason", ""),
                     "every challenger left: the trial kept the best", detail=str(t2.get("reason")))
                left = [c for c in t2["candidates"] if not c.get("dropped")]
                r.ok(len(left) == 1 and left[0].get("epochs", 0) == max(c.get("epochs", 0) for c in t2["candidates"]),
                     "the trial ended with the round the last challenger left in", detail=str(t2["candidates"]))
                price = t2.get("price", {})
                log(f"# the daemon's price: {price}")
                ex = ctl("explain", loop.name).stdout
                r.ok(price.get("readP99MsDuring", 0) > 0 and "The last trial's price: a read p99 of" in ex,
                     "the daemon states a price (Trial, explain)", detail=ex)

            with r.case("the price by the workload's own reads: fio's read p99 during the trial under 1.5 times the "
                        "worse of before and after", env):
                reads = read_lat_log(lat_prefix)
                before = [l for t, l in reads if t_fio + 1.5 <= t < t2_start]
                during = [l for t, l in reads if t2_start <= t < t2_end]
                after = [l for t, l in reads if t2_end + 0.5 <= t < t2_end + 4.5]
                ref = max(p99(before), p99(after))
                log(f"# fio's reads: p99 {p99(before):.2f} ms before ({len(before)} reads), {p99(during):.2f} ms during "
                    f"({len(during)} reads, {t2_end - t2_start:.1f} s), {p99(after):.2f} ms after ({len(after)} reads)")
                r.ok(len(before) >= 300 and len(during) >= 300 and len(after) >= 300,
                     "fio logged reads in each window", detail=f"{len(before)} {len(during)} {len(after)}")
                r.ok(ref > 0 and p99(during) < 1.5 * ref,
                     f"fio's read p99 during the trial {p99(during):.2f} ms < 1.5 x {ref:.2f} ms",
                     detail=f"before {p99(before):.2f}, after {p99(after):.2f}")

            with r.case("GetDevice, Explain and Monitor say so", env):
                show = json.loads(ctl("--json", "show", loop.name).stdout)
                dev = show.get("device", show)
                at = dev.get("autotune", {})
                r.eq(at.get("chosen"), f"mq-deadline nr_requests={best}", "GetDevice: autotune.chosen")
                r.eq(at.get("changes"), 1, f"GetDevice: one change in {n_trials} trials")
                r.eq(at.get("trials"), n_trials, f"GetDevice: {n_trials} trials")
                ex = ctl("explain", loop.name).stdout
                r.ok("chosen by trial at" in ex and f"nr_requests={best}" in ex, "explain names the trial",
                     detail=ex)
                r.ok(any("AutoTune" in l and "NrRequests" in l for l in ex.splitlines()),
                     "explain: NrRequests comes from AutoTune", detail=ex)
                mon.send_signal(signal.SIGINT)
                out, _ = mon.communicate(timeout=10)
                ev = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
                trial_ev = [e for e in ev if e.get("event") == "trial"]
                r.ok(any(e.get("trial", {}).get("verdict") == "change" for e in trial_ev),
                     f"Monitor: a trial event with the decision ({len(trial_ev)} trial events)")
                r.ok("trial chose mq-deadline nr_requests=" in d.log_text(), "log: trial chose …")

            with r.case("stopping the daemon puts nr_requests back", env):
                d.stop()
                r.eq(loop.attr("nr_requests"), original_nr, "nr_requests is back to the original")

            with r.case("a chosen setting that breaks its write bound falls back to the candidate with the most "
                        "margin", env):
                # A daemon of its own that remembers nothing (the memory
                # would give the known workload its setting back at start,
                # and a trial from there keeps it and promises nothing).
                # Epochs of 1.5 s: this trial, from 256, ranks by the mean
                # await (256's probes are too slow for a p99) and needs no
                # look at the probes.
                cfg3 = env.config(open(cfg).read().replace("AutoEpochSec=3", "AutoEpochSec=1.5") + "AutoRemember=no\n",
                                  name="blkmqd-promise.conf")
                # The watch at its real cadence: the six intervals of 10 s
                # the promise needs before judging take a minute (the
                # promise's rules at a fake clock: test-autotune-engine).
                d3 = env.daemon(["--config", cfg3, "--varlink-address", addr, "--log-level", "debug"],
                                name="blkmqd-promise", as_unit=True)
                d3.start(timeout=15)
                # 256 is back since the daemon before stopped: its queue of
                # writes full before the trial's first epoch measures it
                time.sleep(2)
                t3 = last_json(ctl("--json", "trial", loop.name, timeout=None).stdout)["trial"]
                log(f"# trial: {t3['verdict']} {t3['winner']}: {t3['reason']}")
                r.eq((t3["verdict"], t3["winner"]), ("change", f"mq-deadline nr_requests={best}"),
                     "a trial from the original setting changes to the sweep's best again", daemon=d3)

                def autotune():
                    s3 = json.loads(ctl("--json", "show", loop.name).stdout)
                    return s3.get("device", s3).get("autotune", {})
                pr = autotune().get("promise", {})
                r.ok(pr.get("watching") and pr.get("writeFloorMBps", 0) > 0,
                     "GetDevice: the chosen setting is watched against a write floor", detail=str(pr))
                # The trial's admissible candidate with the most write
                # throughput, the winner aside: where the daemon must fall
                # back to. By construction there is one: 256 writes as
                # much as 32 (both keep the 8 channels busy), 4 less than
                # half of it.
                adm = [c for c in t3["candidates"] if c.get("admissible") and c["setting"] != t3["winner"]]
                want = max(adm, key=lambda c: c.get("writeMBps", 0))["setting"] if adm else None
                r.ok(want, "the trial has an admissible candidate besides the winner", detail=str(t3["candidates"]))
                want = want or "mq-deadline nr_requests=256"
                md.proc.send_signal(signal.SIGUSR1)
                t_slow = time.monotonic()
                broke = wait_for(lambda: autotune().get("promise", {}).get("state") == "broken", 150, interval=1)
                at = autotune()
                log(f"# promise after {time.monotonic() - t_slow:.0f} s: {at.get('promise')}")
                r.ok(broke, "GetDevice: the promise is broken once the disk writes under the floor",
                     detail=str(at.get("promise")), daemon=d3)
                r.eq(at.get("chosen"), want, "it fell back to the trial's candidate with the most write margin")
                nr = want.split("nr_requests=")[1]
                r.ok(wait_for(lambda: loop.attr("nr_requests") == nr, 10), f"nr_requests is {nr} in sysfs")
                ex = ctl("explain", loop.name).stdout
                r.ok("fallen back to" in ex and "broke the bound it was chosen under" in ex,
                     "explain says the setting fell back and why", detail=ex)
                r.ok("broke the bound the trial chose it under" in d3.log_text(), "the log says so")
                d3.stop()
                r.eq(loop.attr("nr_requests"), original_nr, "stopping the daemon puts nr_requests back")

            with r.case("a device vanishing mid-trial ends the trial; the daemon runs on", env):
                d2 = env.daemon(["--config", cfg, "--varlink-address", addr, "--log-level", "debug"], name="blkmqd2")
                d2.start(timeout=15)
                tp = ctl.popen("--json", "trial", loop.name, text=True)
                wait_for(lambda: "trial of" in d2.log_text(), 10)
                time.sleep(3)
                fio.send_signal(signal.SIGTERM)
                fio.wait(30)
                fio = None
                env.detach(loop)
                rc = env.remove_node(loop)
                if rc != 0:
                    log(f"# LOOP_CTL_REMOVE refused ({rc}); the detach alone")
                out, err = tp.communicate(timeout=120)
                final = last_json(out)
                t = (final or {}).get("trial", {})
                log(f"# after the removal: {t.get('state')}: {t.get('abortReason')}")
                r.eq(t.get("state"), "aborted", "the trial ended early", daemon=d2)
                r.ok(d2.alive(), "the daemon runs on")
                r.eq(ctl("status").returncode, 0, "and answers")
                d2.stop()

            with r.case("on a fast disk the trial ranks reads by the probes' p99", env):
                # A plain loop device over a sparse file: reads take well
                # under the trial's 20 ms probe interval, so every epoch of
                # 1.5 s has its 50 probes and more. fio is held to 5,000
                # reads a second: unbounded, its reads of the file's holes
                # (250,000 a second) take both CPUs of a small machine, and
                # the probes' own reads then wait tens of ms for a CPU,
                # too few of them finish in an epoch and the trial rightly
                # ranks by await (seen on a loaded 2-core host).
                fast = env.attach("fast")
                fcfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=1

[Device fast]
MatchBackingFile={fast.backing_file()}
AutoTune=yes
AutoScheduler=none mq-deadline
AutoEpochSec=1.5
AutoRounds=3
AutoMinIOPS=1
""", name="fast.conf")
                # as the unit runs it: on a loaded host a daemon at nice 0
                # waits for a CPU, and an epoch then completes too few probes
                d3 = env.daemon(["--config", fcfg, "--varlink-address", addr, "--log-level", "debug"], name="blkmqd3",
                                as_unit=True)
                d3.start(timeout=15)
                fio = subprocess.Popen(["fio", "--filename=" + fast.dev, "--direct=1", "--ioengine=libaio",
                                        "--runtime=120", "--time_based", "--name=r", "--bs=4k", "--rw=randread",
                                        "--iodepth=4", "--size=32M", "--rate_iops=5000"], stdout=subprocess.DEVNULL)
                time.sleep(1)
                t3 = last_json(ctl("--json", "trial", fast.name, timeout=None).stdout)["trial"]
                log(f"# fast disk: {t3.get('verdict')} by {t3.get('readLatency')}: {t3.get('reason')}")
                for c in t3["candidates"]:
                    log(f"# fast disk: {c['setting']}: read p99 {c.get('readP99Ms', 0):.3f} ms, "
                        f"await {c.get('readAwaitMs', 0):.3f} ms")
                r.eq(t3.get("state"), "decided", "the trial came to a decision", daemon=d3)
                r.eq(t3.get("readLatency"), "p99", "reads were ranked by the probes' p99", daemon=d3)
                r.ok(all(c.get("readP99Ms", 0) > 0 for c in t3["candidates"]),
                     "every candidate has a read p99", detail=str(t3["candidates"]))
                r.ok(all(c.get("objective") == c.get("readP99Ms") for c in t3["candidates"]),
                     "the objective is the read p99", detail=str(t3["candidates"]))
                d3.stop()

            with r.case("a search by families sets a scheduler's tunables only under it", env):
                fast.set("scheduler", "mq-deadline")
                orig = {k: fast.attr(f"iosched/{k}") for k in ("fifo_batch", "writes_starved")}
                scfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=1

[Device fast]
MatchBackingFile={fast.backing_file()}
AutoTune=yes
AutoKnobs=scheduler iosched
AutoScheduler=mq-deadline kyber
AutoEpochSec=0.5
AutoRounds=3
AutoMinIOPS=1
AutoMinImprovement=0
""", name="search.conf")
                d4 = env.daemon(["--config", scfg, "--varlink-address", addr, "--log-level", "debug"], name="blkmqd4",
                                as_unit=True)
                d4.start(timeout=15)
                t4 = last_json(ctl("--json", "trial", fast.name, timeout=None).stdout)["trial"]
                se = t4.get("search") or {}
                log(f"# search: {t4.get('verdict')} {t4.get('winner')}: {t4.get('reason')}; {se}")
                r.eq(t4.get("state"), "decided", "the search came to a decision", daemon=d4)
                r.ok(se.get("phases", 0) >= 2 and se.get("family") == "iosched",
                     "a phase of schedulers, then one of the winner's tunables", detail=str(se))
                own = {"kyber": {"read_lat_nsec", "write_lat_nsec"}, "mq-deadline": {"fifo_batch", "writes_starved"}}
                last = t4["candidates"]
                r.ok(len({c["scheduler"] for c in last}) == 1 and
                     all(set(c.get("iosched", {})) <= own.get(c["scheduler"], set()) for c in last) and
                     all(c.get("iosched") for c in last),
                     "the last phase: one scheduler, each candidate setting only its tunables", detail=str(last))
                r.ok(0 < t4.get("schedulerSwitches", 0) <= t4.get("maxSchedulerSwitches", 0),
                     "the switches of both phases counted against AutoMaxSwitches=", detail=str(t4.get("schedulerSwitches")))
                r.ok(se.get("candidatesMeasured", 0) == len(last) + 1,
                     "candidates measured: the phase of 2 schedulers, then the tunables' phase", detail=str(se))
                r.ok("refused" not in d4.log_text(), "the kernel refused no candidate (scheduler first, then its "
                     "tunables)", daemon=d4)
                written = [l for l in d4.log_text().splitlines()
                           if "queue/iosched/" in l and " → " in l and "(AutoTune)" in l]
                r.ok(written, "the trial wrote a scheduler's tunables through the tune path", daemon=d4)
                w = last[t4["winnerIndex"]]
                r.ok(wait_for(lambda: fast.scheduler() == w["scheduler"] and
                              all(fast.attr(f"iosched/{k}") == str(v) for k, v in w["iosched"].items()), 10),
                     f"the winner's scheduler and tunables are in sysfs ({w['setting']})",
                     detail=f"{fast.scheduler()} " + str({k: fast.attr(f"iosched/{k}") for k in w["iosched"]}))
                d4.stop()
                r.eq((fast.scheduler(), {k: fast.attr(f"iosched/{k}") for k in orig}), ("mq-deadline", orig),
                     "stopping the daemon put the scheduler and its tunables back")
                fio.send_signal(signal.SIGTERM)
                fio.wait(30)
                fio = None
        finally:
            if fio:
                fio.kill()
                fio.wait()
            for l in env.loops:
                if l.backing_file():
                    env.detach(l)
            md.close()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
