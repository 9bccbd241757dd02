#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Latency probes of a real blkmqd on this test's loop devices, checked for
real:

- probes run: io.blkmqd.Metrics.Get over the socket, the probe count grows,
  the windows have ordered percentiles, Histogram agrees with Get, stats
  appear only after two samples of /sys/block/DEV/stat (a device probed
  every 5 s shows it), per-device ProbeIntervalSec= overrides [Daemon];
- blkmqctl latency DEV (text, --json, an unprobed name: exit 3) and
  blkmqctl top --count=1 (--json and text);
- the MetricsTextfile: exists, is replaced by rename (new inode, every read
  of it complete), no *.tmp.* left, at most about one write a second, and it
  PARSES with prometheus_client's own text parser: families, types and units
  as metrics.c writes them, histogram buckets cumulative, +Inf == _count;
- a read latency alert when the device is slowed for real: the daemon is
  moved into a cgroup v1 blkio group with blkio.throttle.read_iops_device
  "MAJ:MIN 4" for one loop device (probes take ~250 ms), alertRaised on a
  Monitor stream, one log line, Get and the textfile show it; then the
  limit is lifted ("MAJ:MIN 0") and the alert clears. The daemon is moved
  back and the group removed whatever happens;
- probes never write: the backing files' sha256 and the write fields of
  /sys/block/DEV/stat are unchanged after hundreds of probes.

Runs the venv of tests/interop/setup-venv.sh (for prometheus_client):
re-executes itself with its interpreter, like tests/interop/test_interop.py.
Needs root, loop devices, systemd-udevd, cgroup v1 blkio throttling at
/sys/fs/cgroup/blkio, $BLKMQD and $BLKMQCTL (or argv[1], argv[2]).
Exit 0 pass, 1 fail, 77 skip (a skip fails under CI=true)."""

import contextlib
import hashlib
import json
import os
import re
import subprocess
import threading
import time
import uuid

from blkmqtest import (Ctl, Env, Runner, VarlinkError, ctl_path, diag, ensure_venv, log, main_guard, need_all,
                       show, skip, timeout_scale, udevd, VarlinkStream, varlink_ok, wait_for)

BLKIO = "/sys/fs/cgroup/blkio"
METRICS = "io.blkmqd.Metrics."

INTERVAL = 0.05            # [Daemon] ProbeIntervalSec=
SLOW_INTERVAL = 5          # [Device slow] ProbeIntervalSec=
ALERT_USEC = 50000         # AlertReadLatUsec=
THROTTLE_IOPS = 4          # -> ~250 ms per probe read
READ_AHEAD_KB = 256

# What metrics.c writes (name as prometheus_client names the family, type).
FAMILIES = {
    "blkmqd_device_managed": "gauge",
    "blkmqd_device_settings_failed": "gauge",
    "blkmqd_device_settings_adjusted": "gauge",
    "blkmqd_device_settings_drifted": "gauge",
    "blkmqd_device_info": "gauge",
    "blkmqd_probe_latency_seconds": "histogram",
    "blkmqd_probe_latency_quantile_seconds": "gauge",
    "blkmqd_probes": "counter",                 # blkmqd_probes_total
    "blkmqd_probe_errors": "counter",           # blkmqd_probe_errors_total
    "blkmqd_device_reads_per_second": "gauge",
    "blkmqd_device_writes_per_second": "gauge",
    "blkmqd_device_read_bytes_per_second": "gauge",
    "blkmqd_device_write_bytes_per_second": "gauge",
    "blkmqd_device_read_await_seconds": "gauge",
    "blkmqd_device_write_await_seconds": "gauge",
    "blkmqd_device_utilization_ratio": "gauge",
    "blkmqd_device_queue_size": "gauge",
    "blkmqd_latency_alerts": "counter",         # blkmqd_latency_alerts_total
    "blkmqd_latency_alert_active": "gauge",
}
LE_SECONDS = [1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
              0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf")]


def need_blkio_throttle():
    for f in ("cgroup.procs", "blkio.throttle.read_iops_device"):
        if not os.path.exists(os.path.join(BLKIO, f)):
            skip(f"no cgroup v1 blkio throttling: {BLKIO}/{f} missing")


# --------------------------------------------------------------------------
# the textfile

class TextfileWatcher:
    """Reads the metrics textfile every ~10 ms while the test runs: every
    read must parse and be complete (atomic replacement), the versions seen
    (inode, mtime) count the writes, and temp files seen must go away."""

    def __init__(self, path, parse):
        self.path = path
        self.dir = os.path.dirname(path)
        self.parse = parse
        self.versions = {}        # (ino, mtime_ns) -> first seen
        self.reads = 0
        self.bad = []             # (error, text head/tail)
        self.tmp_seen = set()
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True, name="textfile")
        self.t0 = time.monotonic()
        self.t.start()

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                for n in os.listdir(self.dir):
                    if ".tmp." in n:
                        self.tmp_seen.add(n)
                with open(self.path) as f:
                    st = os.fstat(f.fileno())
                    text = f.read()
            except FileNotFoundError:
                self.stop_ev.wait(0.01)
                continue
            self.versions.setdefault((st.st_ino, st.st_mtime_ns), time.monotonic())
            self.reads += 1
            err = None
            if not text.endswith("\n") or "blkmqd_device_settings_failed" not in text:
                err = "incomplete file"
            else:
                try:
                    list(self.parse(text))
                except Exception as e:   # noqa: BLE001 (the parser's own errors)
                    err = f"{type(e).__name__}: {e}"
            if err and len(self.bad) < 5:
                self.bad.append((err, text[:200] + " ... " + text[-200:]))
            self.stop_ev.wait(0.01)

    def stop(self):
        self.stop_ev.set()
        self.t.join(2)
        return time.monotonic() - self.t0


def families(text, parse):
    """{family name: Metric} from prometheus_client's parser (the first
    family of a name; see family_problems() for repeated ones)."""
    out = {}
    for f in parse(text):
        out.setdefault(f.name, f)
    return out


def family_problems(text, parse):
    """The exposition format wants all lines of a family in one group after
    its HELP/TYPE: a family the parser sees twice, or one it types
    "unknown" (samples not under their TYPE line), breaks that."""
    seen, problems = set(), []
    for f in parse(text):
        if f.name in seen:
            problems.append(f"{f.name}: a second group ({f.type}, {len(f.samples)} samples)")
        seen.add(f.name)
        if f.type == "unknown":
            problems.append(f"{f.name}: untyped samples {[(s.name, s.labels) for s in f.samples][:3]}")
    return problems


def samples(fam, name=None, **labels):
    return [s for s in fam.samples if (name is None or s.name == name)
            and all(s.labels.get(k) == v for k, v in labels.items())]


def value_of(text, parse, sample, **labels):
    """The value of the one sample of that name and labels, wherever the
    parser put it; None unless exactly one."""
    ss = [s for f in parse(text) for s in samples(f, sample, **labels)]
    return ss[0].value if len(ss) == 1 else None


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


# --------------------------------------------------------------------------
# cgroup v1 blkio throttling of the daemon

def blkio_cgroup_of(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "blkio" in ctrls.split(","):
                return path
    return "/"


class Throttle:
    """The daemon in /sys/fs/cgroup/blkio/blkmqd-test-XXXX, and per-device
    read IOPS limits there. Leaving the with-block lifts the limits, moves
    the daemon back where it was and removes the group, also on failure."""

    def __init__(self, pid):
        self.pid = pid
        self.orig = os.path.join(BLKIO, blkio_cgroup_of(pid).lstrip("/"))
        self.dir = os.path.join(BLKIO, f"blkmqd-test-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self.limits = set()

    def __enter__(self):
        os.mkdir(self.dir)
        try:
            with open(os.path.join(self.dir, "cgroup.procs"), "w") as f:
                f.write(str(self.pid))
        except BaseException:
            self.__exit__()
            raise
        return self

    def tasks(self):
        with open(os.path.join(self.dir, "tasks")) as f:
            return sorted(int(x) for x in f.read().split())

    def limit(self, majmin, iops):
        with open(os.path.join(self.dir, "blkio.throttle.read_iops_device"), "w") as f:
            f.write(f"{majmin} {iops}")
        if iops:
            self.limits.add(majmin)
        else:
            self.limits.discard(majmin)

    def __exit__(self, *exc):
        problems = []
        for mm in list(self.limits):
            try:
                self.limit(mm, 0)
            except OSError as e:
                problems.append(f"lift {mm}: {e}")
        if os.path.isdir(self.dir):
            for _ in range(50):
                try:
                    pids = self.procs()
                except OSError:
                    break
                if not pids:
                    break
                for p in pids:
                    for dest in (self.orig, BLKIO):
                        try:
                            with open(os.path.join(dest, "cgroup.procs"), "w") as f:
                                f.write(str(p))
                            break
                        except ProcessLookupError:
                            break
                        except OSError as e:
                            problems.append(f"move {p} to {dest}: {e}")
                time.sleep(0.02)
            for _ in range(50):
                try:
                    os.rmdir(self.dir)
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    err = e
                    time.sleep(0.1)
            else:
                problems.append(f"rmdir {self.dir}: {err}")
        if problems:
            diag("throttle cleanup: " + "; ".join(problems))
        return False

    def procs(self):
        with open(os.path.join(self.dir, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]


# --------------------------------------------------------------------------

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def blockstat(name):
    with open(f"/sys/block/{name}/stat") as f:
        return [int(x) for x in f.read().split()]


def fill_image(path, data=8 << 20):
    """Random data over the first 8 MiB of an image (before the daemon
    starts; probes read with O_DIRECT, past the loop device's page cache):
    the hash means something."""
    with open(path, "r+b") as f:
        f.write(os.urandom(data))
        f.flush()
        os.fsync(f.fileno())


def window_ok(w):
    """Problems with one Window of Get: ordered percentiles when count > 0,
    none of them when count is 0."""
    keys = ["minNs", "p50Ns", "p90Ns", "p99Ns", "p999Ns", "maxNs"]
    if w.get("count", 0) == 0:
        return [k for k in keys if k in w]
    vals = [w.get(k) for k in keys]
    if any(not isinstance(v, int) or v <= 0 for v in vals):
        return [f"missing or not positive: {w}"]
    if vals != sorted(vals):
        return [f"not ordered: {w}"]
    return []


def main():
    # Skips first (cheap, no network), then into the venv.
    need_all()
    need_blkio_throttle()
    ctl_bin = ctl_path()
    ensure_venv("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families as parse
    import prometheus_client

    r = Runner("integration")
    from importlib.metadata import version as pkg_version
    log(f"# prometheus_client {pkg_version('prometheus_client')} from "
        f"{os.path.dirname(prometheus_client.__file__)}")

    with udevd(), Env("probes") as env:
        a, b, c = loops = [env.attach(prefix=p) for p in ("p", "p", "s")]
        for lp in loops:
            fill_image(lp.backing)
        subprocess.run(["udevadm", "settle", "--timeout=10"], check=False)
        ours = {a.name, b.name, c.name}
        log(f"# devices: {a} {b} (every {INTERVAL}s), {c} (every {SLOW_INTERVAL}s)")

        hashes = {lp.name: sha256(lp.backing) for lp in loops}
        stat0 = {lp.name: blockstat(lp.name) for lp in loops}

        promdir = os.path.join(env.tmp, "textfile")
        os.makedirs(promdir)
        prom = os.path.join(promdir, "blkmqd.prom")
        sock = os.path.join(env.tmp, "io.blkmqd")
        cfg = env.config(f"""\
# probes test: only this test's loop devices match
[Daemon]
ProbeIntervalSec={INTERVAL}
MetricsTextfile={prom}

[Device probes]
MatchBackingFile={env.glob('p-*.img')}
AlertReadLatUsec={ALERT_USEC}
# Two settings, so that the textfile has blkmqd_device_scheduler_info and
# blkmqd_device_setting samples too (and top a scheduler).
Scheduler=none
ReadAheadKB={READ_AHEAD_KB}

[Device slow]
MatchBackingFile={env.glob('s-*.img')}
ProbeIntervalSec={SLOW_INTERVAL}
""")
        ctl = Ctl(ctl_bin, sock)
        d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "info"])
        slow_seen = []            # (probes, errors, has stats) of c, whenever Get() ran

        def get(device=None):
            p = varlink_ok(sock, METRICS + "Get", {"device": device} if device else {})
            devs = {x["device"]: x for x in p["devices"]}
            if c.name in devs:
                x = devs[c.name]
                slow_seen.append((x["probes"], x["errors"], "stats" in x))
            return devs

        d.start(timeout=15)
        t_ready = time.monotonic()
        # The slow device's (probes, errors, stats?) every 0.1 s, to catch the
        # span between its first and second probe.
        poll_stop = threading.Event()

        def poll_slow():
            while not poll_stop.wait(0.1):
                with contextlib.suppress(Exception):
                    get(c.name)
        poller = threading.Thread(target=poll_slow, daemon=True, name="poll-slow")
        poller.start()
        watcher = TextfileWatcher(prom, parse)
        mon = VarlinkStream(sock, METRICS + "Monitor")

        with r.case("probes run (io.blkmqd.Metrics.Get)", env):
            devs = get()
            r.eq(set(devs), ours, "Get: exactly this test's three loop devices are probed")
            r.ok(wait_for(lambda: all(x["probes"] >= 5 for n, x in get().items() if n != c.name), 10),
                 f"{a.name} and {b.name} have 5 probes within 10 s", get(), d)
            # 4 more probes each: 10 intervals (0.5 s) on a quiet host,
            # waited for up to 10 s (a CI lane beside guests and builds
            # once saw 3 in 0.5 s); the interval itself is checked by the
            # stats' span below and on the slow device (its spanUsec).
            before = get()
            t0 = time.monotonic()
            wait_for(lambda: all(get()[lp.name]["probes"] >= before[lp.name]["probes"] + 4 for lp in (a, b)),
                     10 * INTERVAL * timeout_scale() + 10)
            took = time.monotonic() - t0
            after = get()
            for lp in (a, b):
                x0, x = before[lp.name], after[lp.name]
                r.ok(x["probes"] >= x0["probes"] + 4,
                     f"{lp.name}: probe count grows ({x0['probes']} -> {x['probes']} in {took:.1f} s)", x)
                r.ok(x["errors"] == 0 and "lastErrno" not in x and "note" not in x,
                     f"{lp.name}: no errors, no note", x)
                r.ok(x["devnode"] == lp.dev and x["intervalUsec"] == int(INTERVAL * 1e6)
                     and x["sizeBytes"] == 4096 and x["polled"] is False,
                     f"{lp.name}: devnode, intervalUsec {int(INTERVAL * 1e6)}, 4 KiB, not polled", x)
                ws = x["windows"]
                r.eq([w["window"] for w in ws], ["1m", "10m", "total"], f"{lp.name}: windows 1m, 10m, total")
                r.ok(all(w["count"] > 0 for w in ws) and not sum((window_ok(w) for w in ws), []),
                     f"{lp.name}: every window has min <= p50 <= p90 <= p99 <= p99.9 <= max",
                     sum((window_ok(w) for w in ws), []))
                st = x.get("stats")
                r.ok(st is not None and 0.5 * INTERVAL * 1e6 <= st["spanUsec"] <= 4 * INTERVAL * 1e6
                     and st["readIops"] > 0 and st["writeIops"] == 0 and st["writeBytesPerSec"] == 0
                     and "writeAwaitUsec" not in st,
                     f"{lp.name}: stats over ~one interval: reads > 0, no writes", st)
                al = x["alerts"]
                r.ok(al["read"] == {"thresholdUsec": ALERT_USEC, "active": False, "episodes": 0}
                     and al["write"] == {"active": False, "episodes": 0},
                     f"{lp.name}: read alert configured at {ALERT_USEC} µs, inactive; write alert not configured",
                     al)
            try:
                varlink_ok(sock, METRICS + "Get", {"device": "nosuchdev0"})
                r.ok(False, "Get(nosuchdev0): NoSuchDevice")
            except VarlinkError as e:
                r.ok(e.name == METRICS + "NoSuchDevice" and e.parameters == {"device": "nosuchdev0"},
                     "Get(nosuchdev0): NoSuchDevice", str(e))
            x = get(a.dev)
            r.eq(list(x), [a.name], "Get(/dev path) answers for that device only")

        with r.case("Histogram agrees with Get", env):
            h = varlink_ok(sock, METRICS + "Histogram", {"device": a.name, "window": "total"})
            bsum = sum(bk["count"] for bk in h["buckets"])
            r.ok(h["count"] > 0 and bsum == h["count"] and sum(h["log2Usec"]) == h["count"],
                 "Histogram: buckets and log2Usec each add up to count",
                 f"count {h['count']}, buckets {bsum}, log2Usec {sum(h['log2Usec'])}")
            r.ok(all(bk["lowerNs"] < bk["upperNs"] and (bk["upperNs"] - bk["lowerNs"]) * 16 <= max(bk["lowerNs"], 16)
                     for bk in h["buckets"])
                 and all(x["upperNs"] <= y["lowerNs"] for x, y in zip(h["buckets"], h["buckets"][1:])),
                 "Histogram: ascending, disjoint buckets, each at most 1/16 of its lower bound wide",
                 h["buckets"][:10])
            r.ok(isinstance(h.get("sumNs"), int) and h["count"] * 1000 <= h["sumNs"] <= h["count"] * 10**9,
                 "Histogram: sumNs present, 1 µs..1 s per probe on average", h.get("sumNs"))
            try:
                varlink_ok(sock, METRICS + "Histogram", {"device": a.name, "window": "5m"})
                r.ok(False, "Histogram(window 5m): InvalidParameter")
            except VarlinkError as e:
                r.ok(e.name == "org.varlink.service.InvalidParameter" and e.parameters == {"parameter": "window"},
                     "Histogram(window 5m): InvalidParameter window", str(e))

        with r.case("blkmqctl latency and top", env):
            p = ctl("latency", a.name)
            lines = p.stdout.splitlines()
            r.ok(p.returncode == 0 and lines and re.match(
                rf"{a.name}: \d+ probe reads .*\(4(\.0)? KiB every ", lines[0])
                and any(re.match(r"\s+usecs\s+: count\s+distribution", l) for l in lines)
                and any(re.match(r"\s*\d+ -> \d+\s+: \d+\s+\|\**\s*\|", l) for l in lines)
                and any(l.startswith("p50 ") and " p99 " in l and " max " in l for l in lines),
                 f"blkmqctl latency {a.name}: header, biolatency histogram, percentiles", show(p))
            p = ctl("latency", a.dev, "--window=1m", "--json")
            try:
                doc = json.loads(p.stdout)
            except ValueError:
                doc = {}
            r.ok(p.returncode == 0 and doc.get("histogram", {}).get("window") == "1m"
                 and doc["histogram"].get("device") == a.name
                 and doc.get("metrics", {}).get("device") == a.name
                 and doc["histogram"]["count"] > 0,
                 "blkmqctl latency /dev/... --window=1m --json: {histogram, metrics}", show(p))
            p = ctl("latency", "nosuchdev0")
            r.ok(p.returncode == 3 and p.stderr.startswith("blkmqctl: ") and not p.stdout,
                 "blkmqctl latency nosuchdev0: exit 3", show(p))
            p = ctl("top", "--count=1", "--json")
            out = p.stdout.splitlines()
            try:
                doc = json.loads(out[0]) if len(out) == 1 else {}
            except ValueError:
                doc = {}
            tdevs = {x.get("device"): x for x in doc.get("devices", [])}
            r.ok(p.returncode == 0 and len(out) == 1 and isinstance(doc.get("timeUsec"), int)
                 and abs(doc["timeUsec"] / 1e6 - time.time()) < 60 and set(tdevs) == ours,
                 "blkmqctl top --count=1 --json: one line, timeUsec, our three devices", show(p))
            ta = tdevs.get(a.name, {})
            r.ok(ta.get("scheduler") == a.scheduler() and ta.get("probes", 0) > 0 and "stats" in ta,
                 f"top --json: {a.name} as Get has it, plus scheduler {a.scheduler()}", ta)
            p = ctl("top", "--count=1")
            rows = {l.split()[0]: l.split() for l in p.stdout.splitlines() if l.split() and l.split()[0] in ours}
            r.ok(p.returncode == 0 and re.search(r"DEVICE\s+SCHED\s+r/s\s+w/s.*p99\(1m\)\s+ALERT", p.stdout)
                 and {a.name, b.name} <= set(rows) and len(rows.get(a.name, [])) >= 11,
                 "blkmqctl top --count=1: iostat-like table with our devices", show(p))

        with r.case("metrics textfile parses with prometheus_client", env):
            r.ok(wait_for(lambda: os.path.exists(prom), 3), f"{prom} exists", daemon=d)
            # A version written after the second probe of a and b.
            wait_for(lambda: "blkmqd_device_reads_per_second{" in read_text(prom), 3)
            text = read_text(prom)
            fams = families(text, parse)
            r.ok(all(fams.get(n) is not None and fams[n].type == t for n, t in FAMILIES.items()),
                 "every documented family with its type (counters end in _total)",
                 {n: (fams[n].type if n in fams else None) for n in FAMILIES})
            probs = family_problems(text, parse)
            r.ok(not probs, "each family is one group under its HELP/TYPE lines (parsed once, typed)",
                 probs + [l for l in text.splitlines() if "alert" in l])
            odd = [n for n in fams if not n.startswith("blkmqd_")]
            r.ok(not odd, "no family outside blkmqd_", odd)
            hist = fams.get("blkmqd_probe_latency_seconds")
            for lp in (a, b):
                bk = samples(hist, "blkmqd_probe_latency_seconds_bucket", device=lp.name) if hist else []
                les = [float(s.labels["le"]) for s in bk]
                vals = [s.value for s in bk]
                cnt = samples(hist, "blkmqd_probe_latency_seconds_count", device=lp.name) if hist else []
                sm = samples(hist, "blkmqd_probe_latency_seconds_sum", device=lp.name) if hist else []
                r.eq(les, LE_SECONDS, f"{lp.name}: histogram le bounds 10 µs .. 10 s, +Inf (in seconds)")
                r.ok(vals == sorted(vals) and vals and cnt and vals[-1] == cnt[0].value > 0,
                     f"{lp.name}: buckets cumulative, +Inf == _count > 0", list(zip(les, vals)))
                r.ok(sm and cnt and 1e-6 * cnt[0].value <= sm[0].value <= 0.05 * cnt[0].value,
                     f"{lp.name}: _sum in seconds (1 µs .. 50 ms a probe unthrottled)",
                     (sm[0].value if sm else None, cnt[0].value if cnt else None))
                q = fams.get("blkmqd_probe_latency_quantile_seconds")
                qs = samples(q, device=lp.name) if q else []
                r.ok({(s.labels["window"], s.labels["quantile"]) for s in qs} ==
                     {(w, x) for w in ("1m", "10m", "total") for x in ("0.5", "0.9", "0.99", "0.999")}
                     and all(1e-7 < s.value < 1 for s in qs),
                     f"{lp.name}: quantile gauges per window and quantile, in seconds", qs)
                pt = samples(fams["blkmqd_probes"], "blkmqd_probes_total", device=lp.name) \
                    if "blkmqd_probes" in fams else []
                r.ok(pt and pt[0].value == cnt[0].value,
                     f"{lp.name}: blkmqd_probes_total == histogram _count", pt)
                ut = samples(fams["blkmqd_device_utilization_ratio"], device=lp.name) \
                    if "blkmqd_device_utilization_ratio" in fams else []
                r.ok(len(ut) == 1 and 0 <= ut[0].value <= 1, f"{lp.name}: utilization as a 0..1 ratio", ut)
                al = value_of(text, parse, "blkmqd_latency_alerts_total",
                              device=lp.name, kind="read")
                ac = value_of(text, parse, "blkmqd_latency_alert_active",
                              device=lp.name, kind="read")
                r.ok(al == 0 and ac == 0, f"{lp.name}: read alert: 0 episodes, inactive", (al, ac))
            r.ok(not [sm for f in parse(text) for sm in samples(f, device=c.name) if "alert" in sm.name],
                 f"{c.name}: no alert series (none configured)")
            for lp in (a, b):
                ra = value_of(text, parse, "blkmqd_device_setting", device=lp.name, key="ReadAheadKB",
                              attribute="queue/read_ahead_kb", source="Device probes")
                si = value_of(text, parse, "blkmqd_device_scheduler_info", device=lp.name, scheduler="none",
                              source="Device probes")
                r.ok(ra == READ_AHEAD_KB and si == 1,
                     f"{lp.name}: blkmqd_device_setting ReadAheadKB {READ_AHEAD_KB}, scheduler_info none 1, "
                     "both from source \"Device probes\"",
                     [l for l in text.splitlines() if lp.name in l and "setting" in l or "scheduler" in l])
            mg = samples(fams["blkmqd_device_managed"], device=a.name) if "blkmqd_device_managed" in fams else []
            r.ok(len(mg) == 1 and mg[0].value == 1 and mg[0].labels.get("id") == f"loop:{a.backing}",
                 f"blkmqd_device_managed{{device={a.name}}} 1 with its id", mg)
            di = samples(fams["blkmqd_device_info"], device=a.name) if "blkmqd_device_info" in fams else []
            r.ok(len(di) == 1 and di[0].value == 1 and di[0].labels.get("id") == f"loop:{a.backing}"
                 and di[0].labels.get("transport") == "loop" and "model" in di[0].labels
                 and "firmware" in di[0].labels,
                 f"blkmqd_device_info{{device={a.name}}} 1 with id, transport loop, model, firmware", di)

        with r.case("Monitor: subscribed, then samples at most 1/s per device", env):
            i = mon.wait(lambda p: True, 5)
            r.ok(i == 0 and mon.params(0) == {"event": "subscribed"}, "first reply {event: subscribed}",
                 mon.events[:1])
            j = mon.wait(lambda p: p.get("event") == "sample" and p.get("device") == a.name, 5)
            r.ok(j is not None and isinstance(mon.params(j).get("latencyNs"), int)
                 and 0 < mon.params(j)["latencyNs"] < 10**9,
                 f"a sample event of {a.name} with latencyNs", mon.events[-5:])

        throttled_at = cleared_at = None
        with r.case("read latency alert: blkio throttling of the daemon", env):
            with open(f"/sys/block/{a.name}/dev") as f:
                majmin = f.read().strip()
            mark = len(mon.events)
            log_before = d.log_text()
            with Throttle(d.pid()) as th:
                threads = sorted(int(t) for t in os.listdir(f"/proc/{d.pid()}/task"))
                r.eq(th.tasks(), threads, f"all {len(threads)} daemon threads in {th.dir}")
                th.limit(majmin, THROTTLE_IOPS)
                throttled_at = time.monotonic()
                i = mon.wait(lambda p: p.get("event") == "alertRaised" and p.get("device") == a.name,
                             15, since=mark)
                r.ok(i is not None, f"Monitor: alertRaised for {a.name} within 15 s of "
                     f"read_iops_device \"{majmin} {THROTTLE_IOPS}\"", mon.events[mark:][-10:], d)
                if i is not None:
                    ev = mon.params(i)
                    log(f"# alertRaised {time.monotonic() - throttled_at:.2f} s after the throttle: {ev}")
                    r.ok(ev.get("detail") == "read" and ev.get("latencyNs", 0) > ALERT_USEC * 1000,
                         f"alertRaised: detail read, latencyNs above {ALERT_USEC} µs", ev)
                x = get(a.name)[a.name]
                r.ok(x["alerts"]["read"]["active"] is True and x["alerts"]["read"]["episodes"] == 1,
                     "Get: read alert active, 1 episode", x["alerts"])
                r.ok(x["windows"][0]["maxNs"] > 100 * 10**6,
                     "Get: 1m max above 100 ms (probes are throttled for real)", x["windows"][0])
                r.ok(wait_for(lambda: value_of(read_text(prom), parse,
                                               "blkmqd_latency_alert_active", device=a.name, kind="read") == 1
                              and value_of(read_text(prom), parse,
                                           "blkmqd_latency_alerts_total", device=a.name, kind="read") == 1, 3),
                     "textfile: blkmqd_latency_alert_active 1, blkmqd_latency_alerts_total 1",
                     [l for l in read_text(prom).splitlines() if "alert" in l])
                # Still slow: the episode goes on, nothing new is raised.
                time.sleep(1.5)
                xb = get(b.name)[b.name]
                r.ok(xb["alerts"]["read"] == {"thresholdUsec": ALERT_USEC, "active": False, "episodes": 0},
                     f"{b.name} (not throttled): no alert (1m max {xb['windows'][0].get('maxNs', 0) / 1e3:.0f} µs)",
                     xb)
                th.limit(majmin, 0)
                lifted_at = time.monotonic()
                k = mon.wait(lambda p: p.get("event") == "alertCleared" and p.get("device") == a.name,
                             10, since=mark)
                r.ok(k is not None, f"Monitor: alertCleared for {a.name} within 10 s of \"{majmin} 0\"",
                     mon.events[mark:][-10:], d)
                if k is not None:
                    ev = mon.params(k)
                    cleared_at = mon.events[k][0]
                    log(f"# alertCleared {cleared_at - lifted_at:.2f} s after lifting the limit: {ev}")
                    r.ok(ev.get("detail") == "read" and 0 < ev.get("latencyNs", -1) < 0.8 * ALERT_USEC * 1000,
                         "alertCleared: detail read, latencyNs below 80 % of the threshold", ev)
            now_in = os.path.join(BLKIO, blkio_cgroup_of(d.pid()).lstrip("/"))
            r.ok(not os.path.exists(th.dir) and os.path.realpath(now_in) == os.path.realpath(th.orig),
                 "daemon back in its blkio cgroup, test cgroup removed", blkio_cgroup_of(d.pid()))
            evs = [mon.params(n) for n in range(mark, len(mon.events))]
            raised = [e for e in evs if e.get("event") == "alertRaised"]
            cleared = [e for e in evs if e.get("event") == "alertCleared"]
            r.ok(len(raised) == 1 and len(cleared) == 1 and all(e["device"] == a.name for e in raised + cleared),
                 "one alertRaised and one alertCleared in the episode, both for the throttled device",
                 raised + cleared)
            new_log = d.log_text()[len(log_before):]
            up = re.findall(rf"^<4>{a.name}: read latency \d+ µs, above AlertReadLatUsec={ALERT_USEC}\.$",
                            new_log, re.M)
            down = re.findall(rf"^<5>{a.name}: read latency back to \d+ µs\.$", new_log, re.M)
            r.ok(len(up) == 1 and len(down) == 1, "log: one warning when raised, one notice when cleared",
                 new_log[-2000:])
            x = get(a.name)[a.name]
            r.ok(x["alerts"]["read"]["active"] is False and x["alerts"]["read"]["episodes"] == 1,
                 "Get: read alert inactive again, 1 episode", x["alerts"])
            r.ok(wait_for(lambda: value_of(read_text(prom), parse,
                                           "blkmqd_latency_alert_active", device=a.name, kind="read") == 0, 3)
                 and value_of(read_text(prom), parse,
                              "blkmqd_latency_alerts_total", device=a.name, kind="read") == 1,
                 "textfile: blkmqd_latency_alert_active 0, blkmqd_latency_alerts_total still 1",
                 [l for l in read_text(prom).splitlines() if "alert" in l])

        with r.case("stats appear after two samples (a device probed every 5 s)", env):
            left = t_ready + 2.2 * SLOW_INTERVAL + 1 - time.monotonic()
            wait_for(lambda: "stats" in get(c.name)[c.name], max(left, 0.1), interval=0.2)
            poll_stop.set()
            poller.join(2)
            x = get(c.name)[c.name]
            r.eq(x["intervalUsec"], SLOW_INTERVAL * 10**6,
                 f"{c.name}: [Device slow] ProbeIntervalSec={SLOW_INTERVAL} overrides [Daemon]")
            r.ok(any(p == 1 and not s for p, e, s in slow_seen) and
                 all(not s for p, e, s in slow_seen if p == 0 and e == 0),
                 f"{c.name}: no stats with no probe done, none yet after the first one",
                 sorted(set(slow_seen)))
            st = x.get("stats")
            r.ok(x["probes"] >= 2 and st is not None
                 and 0.88 * SLOW_INTERVAL * 1e6 <= st["spanUsec"] <= 1.12 * SLOW_INTERVAL * 1e6,
                 f"{c.name}: stats after the second probe, spanUsec one interval (±10 % jitter)", x)

        with r.case("monitor rate limit, textfile replaced atomically", env):
            span = mon.events[-1][0] - mon.events[0][0] if mon.events else 0
            for lp in (a, b):
                n = sum(1 for _, e in mon.events if e.get("parameters", {}).get("event") == "sample"
                        and e["parameters"].get("device") == lp.name)
                r.ok(1 <= n <= span + 2, f"Monitor: {n} sample events of {lp.name} in {span:.1f} s (<= 1/s)")
            elapsed = watcher.stop()
            r.ok(watcher.reads > 100 and not watcher.bad,
                 f"{watcher.reads} reads of the textfile while it was rewritten: every one complete and parsed",
                 watcher.bad)
            nv = len(watcher.versions)
            r.ok(3 <= nv <= elapsed + 3, f"{nv} versions (inode, mtime) seen in {elapsed:.1f} s: "
                 "replaced, at most about once a second")
            order = [ino for (ino, _), _t in sorted(watcher.versions.items(), key=lambda kv: kv[1])]
            r.ok(all(x != y for x, y in zip(order, order[1:])),
                 "each version has another inode than the one before (renamed over, not rewritten in place)",
                 order)
            left = [n for n in watcher.tmp_seen if os.path.exists(os.path.join(promdir, n))]
            r.ok(not left, f"temp files seen while running ({len(watcher.tmp_seen)}) are gone", left)

        mon.close()
        with r.case("stop; probes never wrote", env):
            # Many probes before the write check: at least 300 in all.
            wait_for(lambda: sum(x["probes"] for x in get().values()) >= 300, 15, interval=0.2)
            probes = {n: x["probes"] for n, x in get().items()}
            rc = d.stop()
            r.eq(rc, 0, "daemon exits 0 on SIGTERM")
            r.ok(not d.error_lines(), "no error-level log lines", d.error_lines())
            tmps = [n for n in os.listdir(promdir) if ".tmp." in n]
            r.ok(os.listdir(promdir) == ["blkmqd.prom"] and not tmps,
                 f"{promdir} holds blkmqd.prom only (no *.tmp.* left)", os.listdir(promdir))
            total = sum(probes.values())
            log(f"# probes done: {probes}")
            r.ok(total >= 300, f"{total} probe reads in the run", probes)
            for lp in loops:
                s1 = blockstat(lp.name)
                s0 = stat0[lp.name]
                r.eq(s1[4:8], s0[4:8], f"{lp.name}: /sys/block stat write fields unchanged "
                     "(ios, merges, sectors, ticks)")
                r.ok(s1[0] - s0[0] >= probes.get(lp.name, 0) > 0,
                     f"{lp.name}: reads completed grew by at least its {probes.get(lp.name)} probes",
                     (s0[:4], s1[:4]))
                r.eq(sha256(lp.backing), hashes[lp.name], f"{lp.name}: backing file sha256 unchanged")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
