#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What the package ships for Prometheus and Grafana (monitoring/), checked
against what a blkmqd started by this test exports now, never against
committed copies of its output:

  BLKMQD=… BLKMQCTL=… check-monitoring.py   (or check-monitoring.py BLKMQD BLKMQCTL)

- the live run: blkmqd with MetricsTextfile= on two loop devices, both
  probed every 0.1 s, one with a read latency alert raised
  (AlertReadLatUsec=1) and written to (a write await), one after a short
  trial (epochs of 2 s: a read p99 per candidate), and emulated zones
  holding a sealed object, a damaged one (a byte of the emulation file
  flipped, then zones verify) and a failed zone (sealed with the SHA-256
  of other bytes); a few versions of its textfile, and
  io.blkmqd.Metrics.Get;
- every family the textfile declares has samples in that run (so each
  conditional family is there to be checked against), and the textfile
  agrees with Metrics.Get (the probed devices, their read alerts);
- monitoring/blkmqd-rules.yml: `promtool check rules`; every blkmqd_
  metric each rule names (expression, summary, runbook) is a sample name of
  the live textfile, every blkmqd: one a recording rule; each alert has a
  summary and a runbook;
- tests/monitoring/rules-test.yml (hand-written series for the alerts a
  short run does not raise): each series' name and label names are the
  live export's, then `promtool test rules` on it;
- `promtool test rules` on a test that tests/monitoring/promtest.py makes
  from the live textfile versions (the p99, the latency, damaged-object and
  failed-zone alerts firing);
- monitoring/blkmqd-dashboard.json: every panel expression and template
  variable parses (`promtool check rules` on them as recording rules, the
  Grafana variables replaced), every blkmqd_ name each panel uses is a
  sample name of the live textfile, every blkmqd: one a recording rule.

A missing name fails the rule or panel that uses it, by name. Needs root,
loop devices, systemd-udevd, promtool (Debian's prometheus) and PyYAML.
Exit 0 pass, 1 fail, 77 skip (a skip fails under CI=true)."""

import json
import mmap
import os
import re
import shutil
import subprocess
import sys
import threading
import time

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
sys.path.insert(0, os.path.join(SRC, "tests", "monitoring"))

from blkmqtest import (Ctl, Env, Runner, ctl_path, log, main_guard, need_all, sha, show, skip,  # noqa: E402
                       udevd, varlink_call, wait_for)
import promtest  # noqa: E402

RULES = os.path.join(SRC, "monitoring", "blkmqd-rules.yml")
DASHBOARD = os.path.join(SRC, "monitoring", "blkmqd-dashboard.json")
RULES_TEST = os.path.join(SRC, "tests", "monitoring", "rules-test.yml")
NAME = re.compile(r"\b(blkmqd(?:_[a-z0-9_]+|:[a-z0-9_:]+))\b")
SNAPSHOTS = 4
MIB = 1 << 20

GRAFANA_VARS = [("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "1h"),
                ("$instance", ".*"), ("$device", ".*")]


def promtool(*args, cwd=None):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)


def corrupt(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xff]))


class Writer:
    """4 KiB direct writes to DEV every 20 ms while in the with-block: a
    write await in the iostat figures."""

    def __init__(self, dev):
        self.dev = dev
        self.stop = threading.Event()

    def run(self):
        fd = os.open(self.dev, os.O_WRONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 4096)
        try:
            i = 0
            while not self.stop.wait(0.02):
                os.pwrite(fd, buf, (i % 256) * 4096)
                i += 1
        finally:
            os.close(fd)

    def __enter__(self):
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)
        return False


class Export:
    """What the live blkmqd wrote: its textfile versions, parsed."""

    def __init__(self, texts):
        self.texts = texts
        self.snaps, self.types = [], {}
        for t in texts:
            samples, types = promtest.parse_textfile(t)
            self.snaps.append(samples)
            self.types.update(types)
        # sample name -> the label names it carries
        self.labels = {}
        for s in self.snaps:
            for name, labels, _ in s:
                self.labels.setdefault(name, set()).update(labels)

    def family_of(self, name):
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and self.types.get(name[:-len(suffix)]) == "histogram":
                return name[:-len(suffix)]
        return name

    def names(self):
        """Every sample name with samples, and the histogram families too."""
        return set(self.labels) | {self.family_of(n) for n in self.labels}

    def empty_families(self):
        have = {self.family_of(n) for n in self.labels}
        return sorted(f for f in self.types if f not in have)


def live_export(r, env):
    """Starts blkmqd, makes every conditional family appear, returns
    (Export, Metrics.Get's devices, device names)."""
    a = env.attach(prefix="m")      # a read latency alert raised
    b = env.attach(prefix="t")      # a trial
    subprocess.run(["udevadm", "settle", "--timeout=10"], check=False)
    prom_file = os.path.join(env.tmp, "textfile", "blkmqd.prom")
    os.makedirs(os.path.dirname(prom_file))
    img = os.path.join(env.tmp, "zones.img")
    sock = os.path.join(env.tmp, "io.blkmqd")
    cfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=0.1
MetricsTextfile={prom_file}

[Device alerting]
MatchBackingFile={env.glob('m-*.img')}
# Every probe read is slower than 1 µs: raised after 3 probes.
AlertReadLatUsec=1
Scheduler=none
ReadAheadKB=256

[Device trial]
MatchBackingFile={env.glob('t-*.img')}
Scheduler=mq-deadline
AutoScheduler=mq-deadline none
# Epochs long enough for the 50 probes (every 20 ms in a trial) of a
# candidate's read p99, with room for a busy machine (one at a load of 9
# probed every 28 ms).
AutoEpochSec=2
AutoRounds=3

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=4
Database={os.path.join(env.tmp, 'zones.db')}
""")
    d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "info"])
    d.start(timeout=15)
    ctl = Ctl(ctl_path(), sock)

    with r.case("the live run: a trial, a sealed, a damaged object and a failed zone", env):
        t0 = time.monotonic()
        tr = ctl("trial", b.name, timeout=60)
        r.ok(tr.returncode == 0, f"blkmqctl trial {b.name} ({time.monotonic() - t0:.1f} s)",
             tr.stdout[-1500:] + tr.stderr[-500:], daemon=d)
        payload = os.path.join(env.tmp, "object.bin")
        data = os.urandom(MIB + 17)
        with open(payload, "wb") as f:
            f.write(data)
        p, _ = ctl.json("stage", payload, "--label", "mon-good")
        r.ok(p.returncode == 0, "stage mon-good", show(p), daemon=d)
        p, bad = ctl.json("stage", payload, "--label", "mon-bad")
        r.ok(p.returncode == 0, "stage mon-bad", show(p), daemon=d)
        corrupt(img, bad["zone"]["start"] + 4096 + 3)
        p = ctl("zones", "verify")
        r.ok(p.returncode == 9 and "mismatch" in p.stdout, "a byte of mon-bad flipped: zones verify exit 9, mismatch",
             show(p))
        p, al = ctl.json("zones", "alloc", f"--size={len(data)}", "--label=mon-failed")
        r.ok(p.returncode == 0, "zones alloc mon-failed", show(p))
        p = ctl("zones", "append", al["lease"], payload)
        r.ok(p.returncode == 0, "zones append mon-failed", show(p))
        p = ctl("zones", "seal", al["lease"], sha(data[:-1] + bytes([data[-1] ^ 0xff])))
        r.ok(p.returncode == 9, "sealed with the SHA-256 of other bytes: zones seal exit 9, the zone failed",
             show(p))

    def last_text():
        try:
            with open(prom_file) as f:
                return f.read()
        except OSError:
            return ""

    def settled():
        t = last_text()
        return (f'blkmqd_latency_alert_active{{device="{a.name}",kind="read"}} 1' in t
                and f'blkmqd_autotune_last_verdict_info{{device="{b.name}"' in t
                and "\nblkmqd_zone_objects_damaged 1" in t and 'state="failed"} 1' in t
                and "blkmqd_device_write_await_seconds{" in t)

    texts = []
    with r.case(f"{SNAPSHOTS} versions of the textfile", env), Writer(a.dev):
        r.ok(wait_for(settled, 15, interval=0.1),
             "the textfile has the alert raised, the verdict, a damaged object, a failed zone, write await",
             last_text()[-3000:], daemon=d)
        texts = promtest.textfile_versions(prom_file, SNAPSHOTS, 15)
        r.eq(len(texts), SNAPSHOTS, f"{SNAPSHOTS} versions of the textfile within 15 s")
    rep = varlink_call(sock, "io.blkmqd.Metrics.Get", {})
    devices = rep.get("parameters", {}).get("devices", [])
    r.ok(devices, "io.blkmqd.Metrics.Get: the probed devices", str(rep))
    return Export(texts), devices, (a.name, b.name)


def check_export(r, ex, devices, names):
    a, b = names
    last = ex.snaps[-1]
    empty = ex.empty_families()
    r.ok(ex.types and not empty, f"every one of the {len(ex.types)} families of the textfile has samples in the run",
         f"declared without a sample: {empty}")
    probed = {l["device"]: v for n, l, v in last if n == "blkmqd_probes_total"}
    got = {x["device"]: x for x in devices}
    r.ok(set(probed) == set(got) and {a, b} <= set(got),
         f"blkmqd_probes_total and Metrics.Get name the same probed devices ({', '.join(sorted(got))})",
         f"textfile {sorted(probed)}, Metrics.Get {sorted(got)}")
    r.ok(all(probed[k] <= got[k]["probes"] for k in set(probed) & set(got)),
         "each device's probes in the textfile <= Metrics.Get's, taken after",
         str({k: (probed[k], got[k]["probes"]) for k in set(probed) & set(got)}))
    active = {l["device"]: v for n, l, v in last if n == "blkmqd_latency_alert_active" and l.get("kind") == "read"}
    want = {k: 1.0 if x["alerts"]["read"]["active"] else 0.0 for k, x in got.items()
            if x["alerts"]["read"].get("thresholdUsec")}
    r.ok(active == want and active.get(a) == 1.0,
         f"blkmqd_latency_alert_active{{kind=\"read\"}} as Metrics.Get's alerts.read.active: raised on {a}",
         f"textfile {active}, Metrics.Get {want}")


def recorded_names(doc):
    return {x["record"] for g in doc["groups"] for x in g["rules"] if "record" in x}


def check_users(r, where, users, exported, recorded):
    """USERS: [(what, texts)]: each one's blkmqd_ names exported, blkmqd:
    names recorded."""
    for what, texts in users:
        used = sorted({n for t in texts for n in NAME.findall(t)})
        missing = [n for n in used if (n not in exported if n.startswith("blkmqd_") else n not in recorded)]
        r.ok(not missing, f"{where}: {what}: " + (", ".join(used) or "no blkmqd name") +
             " in the live export" + (" or recorded" if any(":" in n for n in used) else ""),
             f"not exported by the live blkmqd (nor recorded by the rules): {missing}")


def rules(r, ex, env):
    import yaml
    p = promtool("check", "rules", RULES)
    r.ok(p.returncode == 0, "promtool check rules monitoring/blkmqd-rules.yml", p.stdout + p.stderr)
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    recorded = recorded_names(doc)
    rs = [x for g in doc["groups"] for x in g["rules"]]
    exported = ex.names()
    check_users(r, "blkmqd-rules.yml", [
        (f"alert {x['alert']}" if "alert" in x else f"record {x['record']}",
         [x["expr"]] + list(x.get("annotations", {}).values())) for x in rs], exported, recorded)
    alerts = [x for x in rs if "alert" in x]
    r.ok(alerts and all(x.get("annotations", {}).get("summary") and x["annotations"].get("runbook") for x in alerts),
         f"each of the {len(alerts)} alerts has a summary and a runbook",
         [x["alert"] for x in alerts if not (x.get("annotations", {}).get("summary")
                                            and x["annotations"].get("runbook"))])

    # The hand-written series: blkmqd's names and label names, as it writes them now.
    with open(RULES_TEST) as f:
        hand = yaml.safe_load(f)
    wrong = []
    n = 0
    for t in hand["tests"]:
        for s in t["input_series"]:
            n += 1
            name, labels = promtest.parse_selector(s["series"])
            extra = set(labels) - {"instance", "job"} - ex.labels.get(name, set())
            if name not in ex.labels or extra:
                wrong.append(f"{t['name']}: {s['series']}: " + (f"{name} not exported" if name not in ex.labels
                                                                 else f"labels {sorted(extra)} not on {name}"))
    r.ok(n and not wrong, f"tests/monitoring/rules-test.yml: the {n} hand-written series have the names and "
         "label names of the live export", wrong)
    p = promtool("test", "rules", os.path.basename(RULES_TEST), cwd=os.path.dirname(RULES_TEST))
    r.ok(p.returncode == 0, "promtool test rules tests/monitoring/rules-test.yml (hand-written series)",
         p.stdout + p.stderr)

    # The live textfile versions as promtool input.
    built = promtest.build(RULES, ex.snaps)
    t = built["tests"][0]
    firing = {x["alertname"]: len(x["exp_alerts"]) for x in t["alert_rule_test"]}
    r.ok(any("p99_5m" in e["expr"] for e in t["promql_expr_test"])
         and firing.get("BlkmqdLatencyAlert") == 1 and firing.get("BlkmqdObjectDamaged") == 1
         and firing.get("BlkmqdZoneFailed") == 1,
         "the live textfile makes a test: a p99 to check, BlkmqdLatencyAlert, BlkmqdObjectDamaged and "
         "BlkmqdZoneFailed expected firing once each", str(firing))
    path = env.write("rules-test-live.yml", json.dumps(built, indent=1))
    p = promtool("test", "rules", path)
    r.ok(p.returncode == 0, f"promtool test rules on the {len(ex.snaps)} live textfile versions: "
         f"{len(t['input_series'])} series, {len(t['promql_expr_test'])} expressions, "
         f"{len(t['alert_rule_test'])} alerts", (p.stdout + p.stderr)[-4000:])


def panels(ps):
    for p in ps:
        yield p
        yield from panels(p.get("panels", []))


def dashboard(r, ex, env):
    import yaml
    with open(DASHBOARD) as f:
        dash = json.load(f)
    ps = [p for p in panels(dash.get("panels", [])) if p.get("type") != "row"]
    exprs = [(p["title"], t["expr"]) for p in ps for t in p.get("targets", [])]
    r.ok(exprs and all(e for _, e in exprs), f"blkmqd-dashboard.json: {len(exprs)} panel expressions")
    variables = [v["query"]["query"] for v in dash.get("templating", {}).get("list", [])
                 if isinstance(v.get("query"), dict)]
    # label_values(EXPR, label): the EXPR part is PromQL
    var_exprs = [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q) for q in variables]
    doc = {"groups": [{"name": "dashboard", "rules": []}]}
    left = []
    for i, (title, e) in enumerate(exprs + [("variable", v) for v in var_exprs]):
        for var, val in GRAFANA_VARS:
            e = e.replace(var, val)
        if "$" in e:
            left.append(f"{title}: {e}")
        doc["groups"][0]["rules"].append({"record": f"dashboard:expr_{i}", "expr": e})
    r.ok(not left, "no Grafana variable but $instance, $device, $__rate_interval, $__interval, $__range", left)
    path = env.write("dashboard-rules.yml", json.dumps(doc))
    p = promtool("check", "rules", path)
    r.ok(p.returncode == 0, f"promtool check rules: all {len(doc['groups'][0]['rules'])} expressions parse",
         p.stdout + p.stderr)
    with open(RULES) as f:
        recorded = recorded_names(yaml.safe_load(f))
    users = [(f"panel {p['title']!r}", [t["expr"] for t in p.get("targets", [])] + [p.get("description", "")])
             for p in ps]
    users.append(("template variables", variables))
    check_users(r, "blkmqd-dashboard.json", users, ex.names(), recorded)
    heat = [p for p in ps if p["type"] == "heatmap"]
    r.ok(heat and all("_bucket" in t["expr"] and t.get("format") == "heatmap" for p in heat for t in p["targets"]),
         "probe latency as a heatmap of the histogram's buckets", sorted({p["type"] for p in ps}))


def main():
    need_all()
    if not shutil.which("promtool"):
        skip("promtool missing (apt-get install --no-install-recommends prometheus: tools/install-deps)")
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("PyYAML missing (apt-get install python3-yaml)")
    r = Runner("monitoring")
    with udevd(), Env("monitoring") as env:
        t0 = time.monotonic()
        ex, devices, names = live_export(r, env)
        log(f"# the live run: {time.monotonic() - t0:.1f} s")
        with r.case("the live export", env):
            check_export(r, ex, devices, names)
        for what, fn in (("monitoring/blkmqd-rules.yml", rules), ("monitoring/blkmqd-dashboard.json", dashboard)):
            t0 = time.monotonic()
            with r.case(what, env):
                fn(r, ex, env)
            log(f"# {what}: {time.monotonic() - t0:.1f} s")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
