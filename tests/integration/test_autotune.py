#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Closed-loop tuning on a disk with a known behaviour.

The disk: tools/modeldisk (a FUSE file with a modelled service time: 8
channels, reads 100 µs, writes 200 µs + 128 KiB at 20 MiB/s per channel)
under a loop device with --direct-io=on. The workload: fio, 128 KiB random
writes at depth 256 plus 4 KiB random reads at depth 4. With mq-deadline,
nr_requests decides how many writes sit in the disk's queue ahead of a
read: 256 (the default) lets the 128 driver tags fill with writes, 32
about 24 (mq-deadline's async_depth is 3/4 of nr_requests), 4 keeps the
queue short but leaves most channels idle (write throughput falls by more
than half).

1. A fio sweep of the three settings in this test decides which one is
   clearly best for "lowest read latency, write throughput within 20 % of
   the best" (the known answer: nr_requests 32).
   The bound is 20 %: on this 2-core shared host nr_requests 32 costs
   0-14 % of the write throughput depending on the load of the machine
   (the FUSE server and fio compete for the CPUs), 4 costs over 50 %.
2. blkmqctl trial picks the same one and sets it; a second trial keeps it
   (no flapping); GetDevice, Explain and Monitor say so.
3. Stopping the daemon puts nr_requests back.
   The second trial races: a setting the sweep found far slower than
   the best leaves after one epoch, and the trial goes on to its decision.
4. After a change the daemon watches the chosen setting against the
   write bound it was chosen under: when the disk slows down (the model's
   write bandwidth drops to a third, SIGUSR1) under the same workload, it
   says the bound broke once six watch intervals of it are in (the
   daemon's watch interval divided by 5 by a test hook: 2 s, not 10 s),
   and falls back to the trial's candidate that kept the bound
   with the most margin (GetDevice, explain, the log).
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

No timed assertions: the comparison is between settings measured in one
run. Needs root, loop devices, udevd, /dev/fuse, fio; $BLKMQD, $BLKMQCTL,
$MODELDISK."""

import json
import os
import signal
import shutil
import statistics
import subprocess
import time

from blkmqtest import Ctl, Env, FuseDisk, Runner, ctl_path, main_guard, need_all, skip, udevd, wait_for, log

CANDIDATES = [4, 32, 256]
TOLERANCE = 0.20
# --write-bw-usr1: after a SIGUSR1 the disk writes at 7 of its 20 MiB/s
# per channel (the promise case below)
MODEL = ["--size=512M", "--channels=8", "--read-lat-us=100", "--write-lat-us=200",
         "--write-bw=20M", "--read-bw=200M", "--write-bw-usr1=7M"]


def fio_cmd(dev, runtime, output_json=True):
    cmd = ["fio", "--filename=" + dev, "--direct=1", "--ioengine=libaio", f"--runtime={runtime}",
           "--time_based", "--name=w", "--bs=128k", "--rw=randwrite", "--iodepth=256", "--size=400M",
           "--name=r", "--bs=4k", "--rw=randread", "--iodepth=4", "--size=400M"]
    if output_json:
        cmd += ["--output-format=json", "--lat_percentiles=1"]
    return cmd


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
        md = FuseDisk(env, modeldisk, MODEL, "model")
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
AutoNrRequests={' '.join(str(c) for c in CANDIDATES)}
AutoWriteTolerance={int(TOLERANCE * 100)}%
AutoEpochSec=1.5
AutoRounds=4
""")
            d = env.daemon(["--config", cfg, "--varlink-address", addr, "--log-level", "debug"])
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
                progress = [l for l in p.stdout.splitlines() if '"running"' in l]
                r.ok(len(progress) >= 3, f"progress came per epoch ({len(progress)} replies)")

            with r.case("a second trial on the same workload keeps the setting (no flapping)", env):
                p2 = ctl("--json", "trial", loop.name, timeout=None)
                t2 = last_json(p2.stdout)["trial"]
                log(f"# second trial: {t2['verdict']} {t2['winner']}: {t2['reason']}")
                for c in t2["candidates"]:
                    log(f"# second trial: {c['setting']}: {c['epochs']} epochs, read await "
                        f"{c.get('readAwaitMs', 0):.2f} ms{', left: ' + c['dropReason'] if c.get('dropped') else ''}")
                log(f"# second trial: price {t2.get('price')}, {t2.get('schedulerSwitches')} switches")
                r.ok(t2["verdict"] != "change", f"no change ({t2['verdict']})")
                r.eq(loop.attr("nr_requests"), str(best), f"nr_requests still {best}")
                n_trials = 2

            with r.case("the second trial races: a candidate far worse than the best so far leaves after one "
                        "epoch, the trial goes on", env):
                # From the best, a setting whose reads the first trial
                # measured 6 times slower or more (its median) is far worse
                # than the best so far (AutoGuardFactor=4, against the best's
                # slowest epoch): it must leave at its first epoch.
                # (Only from the best: a first trial that did not change has
                # failed above already, and its second trial starts from the
                # slow setting, which never leaves: it is the baseline.)
                by1 = {c["setting"]: c.get("readAwaitMs", 0) for c in t["candidates"]}
                first = by1[f"mq-deadline nr_requests={best}"]
                worse = [nr for nr in CANDIDATES if nr != best and by1[f"mq-deadline nr_requests={nr}"] >= 6 * first
                         and t["verdict"] == "change"]
                by = {c["setting"]: c for c in t2["candidates"]}
                r.ok(t2["state"] == "decided", f"the trial decided, not aborted ({t2['state']}: "
                     f"{t2.get('abortReason', '')})")
                r.ok((sum(c["epochs"] for c in t2["candidates"]) < len(t2["candidates"]) * 4) ==
                     any(c.get("dropped") for c in t2["candidates"]),
                     "fewer epochs than candidates x rounds exactly when one left", detail=str(by))
                for nr in worse:
                    c = by.get(f"mq-deadline nr_requests={nr}", {})
                    r.ok(c.get("dropped") and c.get("epochs") == 1 and "far worse" in c.get("dropReason", ""),
                         f"nr_requests={nr} (the first trial: {by1[f'mq-deadline nr_requests={nr}']:.1f} ms against "
                         f"{first:.1f}) left after one epoch", detail=str(c))
                if not worse:
                    log("# the first trial has no setting 6 times slower than the best: no far-worse check this run")
                price = t2.get("price", {})
                left = [c for c in t2["candidates"] if not c.get("dropped")]
                if len(left) == 1:
                    # every challenger left: the trial ends there, at the round they left in
                    r.ok("every other candidate left the race" in t2.get("reason", "")
                         and left[0].get("epochs", 0) == max(c.get("epochs", 0) for c in t2["candidates"]),
                         "every challenger left: the trial ended with the round the last one left in",
                         detail=str(t2["candidates"]))
                elif "settled" in t2.get("stopReason", ""):
                    r.ok(len({c.get("epochs") for c in left}) == 1, "the race settled: those left ran the same rounds",
                         detail=str(left))
                else:
                    r.ok(all(c.get("epochs", 0) == 4 for c in left), "the candidates still in the race ran every round",
                         detail=str(left))
                log(f"# price: {price}")
                # before or after can lack 50 probes on this slow disk (reads
                # of 100 ms and more under the writes, probes at QD1)
                if price.get("readP99MsDuring") and (price.get("readP99MsBefore") or price.get("readP99MsAfter")):
                    ref = max(price.get("readP99MsBefore", 0), price.get("readP99MsAfter", 0))
                    r.ok(abs(price.get("ratio", 0) - price["readP99MsDuring"] / ref) < 1e-6,
                         "the price: the read p99 during the trial against the worse of before and after",
                         detail=str(price))
                    ex = ctl("explain", loop.name).stdout
                    r.ok("The last trial's price: a read p99 of" in ex, "explain shows the price", detail=ex)
                if t2["verdict"] == "aborted" and " with mq-deadline nr_requests=" in t2.get("abortReason", ""):
                    # The candidate that tripped the guard rail is left out
                    # of the next trial (for an hour, or until the workload
                    # changes), so it does not end that one early too.
                    tripped = t2["abortReason"].rsplit(" with ", 1)[1]
                    n_trials = 3
                    t3 = last_json(ctl("--json", "trial", loop.name, timeout=None).stdout)["trial"]
                    log(f"# third trial: {t3['verdict']} {t3['winner']}: {t3.get('note')}")
                    r.ok(f"{tripped} left out" in t3.get("note", ""), f"a third trial leaves out {tripped}",
                         detail=str(t3.get("note")))
                    r.ok(all(c["setting"] != tripped for c in t3["candidates"]), "it is not among the candidates")
                    r.eq(loop.attr("nr_requests"), str(best), f"nr_requests still {best}")

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
                cfg3 = env.config(open(cfg).read() + "AutoRemember=no\n", name="blkmqd-promise.conf")
                # The watch's interval divided by 5 (2 s, not 10 s): the six
                # intervals the promise needs before judging take 12 s.
                d3 = env.daemon(["--config", cfg3, "--varlink-address", addr, "--log-level", "debug"],
                                name="blkmqd-promise", environ={"BLKMQD_TEST_WATCH_DIVISOR": "5"})
                d3.start(timeout=15)
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
                # back to (the setting before the trial if there is none).
                adm = [c for c in t3["candidates"] if c.get("admissible") and c["setting"] != t3["winner"]]
                want = max(adm, key=lambda c: c.get("writeMBps", 0))["setting"] if adm else None
                md.proc.send_signal(signal.SIGUSR1)
                t_slow = time.monotonic()
                broke = wait_for(lambda: autotune().get("promise", {}).get("state") == "broken", 90, interval=1)
                at = autotune()
                log(f"# promise after {time.monotonic() - t_slow:.0f} s: {at.get('promise')}")
                r.ok(broke, "GetDevice: the promise is broken once the disk writes under the floor",
                     detail=str(at.get("promise")), daemon=d3)
                if want:
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
                    r.ok(True, f"LOOP_CTL_REMOVE refused ({rc}); the detach alone")
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
                d3 = env.daemon(["--config", fcfg, "--varlink-address", addr, "--log-level", "debug"], name="blkmqd3")
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
                d4 = env.daemon(["--config", scfg, "--varlink-address", addr, "--log-level", "debug"], name="blkmqd4")
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
