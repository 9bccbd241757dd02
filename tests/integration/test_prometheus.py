#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The shipped Prometheus rules end to end, with the real parts: blkmqd
writes its MetricsTextfile=, Debian's prometheus-node-exporter serves it
with the textfile collector, Debian's prometheus scrapes that every second
and evaluates monitoring/blkmqd-rules.yml every second. Both servers run
from this test on free loopback ports, with their data in the test's temp
dir, and stop with it (never through systemd).

- the series are in Prometheus (its HTTP API, /api/v1/query): the probe
  histogram, blkmqd_device_info, the settings with their source, the
  zones of an emulated zoned device; the recording rules have values;
- a setting written by hand behind blkmqd's back: drifted in the metrics,
  BlkmqdSettingDrifted pending, gone once the value is put back;
- a short trial on the quiet disk: its verdict in Prometheus, and the
  fleet's count by verdict;
- a probe latency alert fires on a loop device: none while its
  AlertReadLatUsec= is 10 s; reloaded with 1 (every probe read is slower
  than 1 µs), blkmqd raises its alert after 3 probes, and /api/v1/alerts
  shows BlkmqdLatencyAlert firing for that device and no other;
- it resolves: the threshold goes to 10 s by a reload, blkmqd's alert ends,
  and Prometheus' does;
- six snapshots of the textfile taken while the alert was raised become
  `promtool test rules` input (tests/monitoring/promtest.py): what the
  rules compute from what blkmqd really wrote is checked offline too.

Needs root, loop devices, systemd-udevd, /usr/bin/prometheus,
/usr/bin/prometheus-node-exporter and promtool (tools/install-deps), PyYAML.
Exit 0 pass, 1 fail, 77 skip (a skip fails under CI=true)."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from blkmqtest import (Ctl, Env, Runner, ctl_path, free_port, log, main_guard, need_all, skip, udevd,
                       wait_for)

SRC = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "monitoring"))
import promtest  # noqa: E402

RULES = os.path.join(SRC, "monitoring", "blkmqd-rules.yml")
PROBE_INTERVAL = 0.1
SNAPSHOTS = 6


def need_servers():
    found = {}
    for name in ("prometheus", "prometheus-node-exporter", "promtool"):
        found[name] = shutil.which(name)
        if not found[name]:
            skip(f"{name} missing (apt-get install --no-install-recommends prometheus "
                 "prometheus-node-exporter: tools/install-deps)")
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("PyYAML missing (apt-get install python3-yaml)")
    return found


class Prom:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path, **params):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=5) as f:
            return json.load(f)

    def query(self, q):
        try:
            doc = self.get("/api/v1/query", query=q)
        except OSError:
            return []
        return doc["data"]["result"] if doc.get("status") == "success" else []

    def alerts(self, name):
        try:
            doc = self.get("/api/v1/alerts")
        except OSError:
            return []
        return [a for a in doc["data"]["alerts"] if a["labels"].get("alertname") == name]

    def ready(self):
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as f:
                return f.status == 200
        except OSError:
            return False


def main():
    need_all()
    bins = need_servers()
    ctl_bin = ctl_path()
    r = Runner("integration")

    with udevd(), Env("prometheus") as env:
        a = env.attach(prefix="m")      # the alert fires here
        b = env.attach(prefix="q")      # probed, no alert configured
        subprocess.run(["udevadm", "settle", "--timeout=10"], check=False)

        textdir = os.path.join(env.tmp, "textfile")
        os.makedirs(textdir)
        prom_file = os.path.join(textdir, "blkmqd.prom")
        sock = os.path.join(env.tmp, "io.blkmqd")

        def config(threshold_usec):
            return env.config(f"""\
[Daemon]
ProbeIntervalSec={PROBE_INTERVAL}
MetricsTextfile={prom_file}

[Device alerting]
MatchBackingFile={env.glob('m-*.img')}
AlertReadLatUsec={threshold_usec}
Scheduler=none
ReadAheadKB=256

[Device quiet]
MatchBackingFile={env.glob('q-*.img')}
Scheduler=mq-deadline
# A short trial (only the probes' reads): a verdict in the metrics.
AutoTune=yes
AutoScheduler=mq-deadline none
AutoEpochSec=0.25
AutoRounds=3

[Zones]
Emulate={os.path.join(env.tmp, 'zones.img')}
ZoneSizeMB=4
ZoneCapacityMB=3
ZoneCount=4
Database={os.path.join(env.tmp, 'zones.db')}
""")

        cfg = config(10000000)    # 10 s: no alert until the test lowers it
        d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "info"])
        d.start(timeout=15)
        ctl = Ctl(ctl_bin, sock)

        ne_port, prom_port = free_port(), free_port()
        ne = env.spawn("node-exporter", [
            bins["prometheus-node-exporter"], f"--web.listen-address=127.0.0.1:{ne_port}",
            "--collector.disable-defaults", "--collector.textfile",
            f"--collector.textfile.directory={textdir}"])
        prom_cfg = env.write("prometheus.yml", f"""\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ['127.0.0.1:{ne_port}']
""")
        pr = env.spawn("prometheus", [
            bins["prometheus"], f"--config.file={prom_cfg}", f"--storage.tsdb.path={env.tmp}/tsdb",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"])
        p = Prom(prom_port)
        t0 = time.monotonic()

        def server_logs():
            out = []
            for proc in (ne, pr):
                with open(proc.log_path, errors="replace") as f:
                    out.append(f"{proc.log_path}:\n" + "".join(f.readlines()[-15:]))
            return out

        with r.case("node_exporter and prometheus up on loopback", env):
            r.ok(wait_for(p.ready, 20) and ne.poll() is None and pr.poll() is None,
                 f"prometheus ready on 127.0.0.1:{prom_port}, node_exporter on {ne_port} "
                 f"({time.monotonic() - t0:.1f} s)", server_logs())
            up = wait_for(lambda: [x for x in p.query('up{job="node"}') if x["value"][1] == "1"], 10)
            r.ok(up, "the textfile collector's target is up", server_logs())

        inst = f"127.0.0.1:{ne_port}"
        with r.case("blkmqd's series in Prometheus", env):
            def has(q):
                return bool(p.query(q))
            want = [
                f'blkmqd_probe_latency_seconds_bucket{{device="{a.name}",le="+Inf",instance="{inst}"}}',
                f'blkmqd_device_info{{device="{a.name}",transport="loop"}}',
                f'blkmqd_device_setting{{device="{a.name}",key="ReadAheadKB",source="Device alerting"}} == 256',
                f'blkmqd_device_scheduler_info{{device="{b.name}",scheduler="mq-deadline",source="Device quiet"}}',
                'blkmqd_zones{state="free"} == 4',
                'blkmqd_zone_objects == 0',
                # not before the textfile collector reads the file cleanly
                'node_textfile_scrape_error == 0',
            ]
            for q in want:
                r.ok(wait_for(lambda: has(q), 10), f"/api/v1/query {q}", server_logs())
            p99 = wait_for(lambda: p.query(f'blkmqd:probe_latency_seconds:p99_5m{{device="{a.name}"}} > 0'), 10)
            r.ok(p99, f"recording rule blkmqd:probe_latency_seconds:p99_5m has a value for {a.name}",
                 p.query("blkmqd:probe_latency_seconds:p99_5m"))
            if p99:
                log(f"# {a.name} p99 over 5m: {float(p99[0]['value'][1]) * 1e6:.0f} µs")
            sched = wait_for(lambda: {x["metric"]["scheduler"]: x["value"][1]
                                      for x in p.query("blkmqd:devices:count_by_scheduler")}
                             if len(p.query("blkmqd:devices:count_by_scheduler")) == 2 else None, 10)
            r.eq(sched, {"none": "1", "mq-deadline": "1"}, "blkmqd:devices:count_by_scheduler")

        with r.case("a setting changed behind blkmqd's back: drifted", env):
            ra = f"/sys/block/{a.name}/queue/read_ahead_kb"
            drifted = f'blkmqd_device_settings_drifted{{device="{a.name}"}}'
            r.ok(wait_for(lambda: p.query(drifted + " == 0"), 10), f"{drifted} 0 at first", p.query(drifted))
            with open(ra, "w") as f:
                f.write("128")
            r.ok(wait_for(lambda: p.query(drifted + " == 1"), 10),
                 f"read_ahead_kb 256 -> 128 by hand: {drifted} 1", p.query(drifted))
            pend = wait_for(lambda: [x for x in p.alerts("BlkmqdSettingDrifted")
                                     if x["labels"].get("device") == a.name and x["state"] == "pending"], 10)
            r.ok(pend, "BlkmqdSettingDrifted pending (for: 5m)", p.alerts("BlkmqdSettingDrifted"))
            with open(ra, "w") as f:
                f.write("256")
            r.ok(wait_for(lambda: p.query(drifted + " == 0") and not p.alerts("BlkmqdSettingDrifted"), 10),
                 f"put back: {drifted} 0, the alert gone", p.alerts("BlkmqdSettingDrifted"))

        with r.case("a trial's verdict (blkmqctl trial on the quiet disk)", env):
            tr = ctl("trial", b.name, timeout=60)
            r.ok(tr.returncode == 0, f"blkmqctl trial {b.name}", tr.stdout[-1500:] + tr.stderr[-500:])
            verdicts = wait_for(lambda: p.query(f'blkmqd_autotune_last_verdict_info{{device="{b.name}"}} == 1'), 10)
            verdict = verdicts[0]["metric"].get("verdict") if verdicts else None
            # Any verdict: on a loaded machine the guard rail may end it (aborted).
            r.ok(verdict in ("change", "keep-best", "keep-noise", "keep-hysteresis", "keep-idle", "keep-no-data",
                             "aborted"),
                 f"blkmqd_autotune_last_verdict_info for {b.name}: verdict {verdict}", verdicts)
            r.ok(wait_for(lambda: p.query(f'blkmqd:devices:count_by_verdict{{verdict="{verdict}"}} == 1'), 10),
                 f"blkmqd:devices:count_by_verdict{{verdict=\"{verdict}\"}} 1",
                 p.query("blkmqd:devices:count_by_verdict"))

        snaps = []
        with r.case("a probe latency alert fires (AlertReadLatUsec=1)", env):
            r.ok(not p.alerts("BlkmqdLatencyAlert") and p.query(
                 f'blkmqd_latency_alert_active{{device="{a.name}",kind="read"}} == 0'),
                 "no BlkmqdLatencyAlert while the threshold is 10 s", p.alerts("BlkmqdLatencyAlert"))
            config(1)
            d.reload()
            t_fire = time.monotonic()
            firing = wait_for(lambda: [x for x in p.alerts("BlkmqdLatencyAlert") if x["state"] == "firing"], 15)
            r.ok(firing, f"/api/v1/alerts: BlkmqdLatencyAlert firing within 15 s "
                 f"({time.monotonic() - t_fire:.1f} s)", server_logs())
            labels = [x["labels"] for x in firing or []]
            r.ok(len(labels) == 1 and labels[0].get("device") == a.name and labels[0].get("kind") == "read"
                 and labels[0].get("instance") == inst and labels[0].get("severity") == "warning",
                 f"only {a.name}, kind read, from {inst}, severity warning", labels)
            ann = (firing or [{}])[0].get("annotations", {})
            r.ok(ann.get("summary", "").startswith(f"{inst} {a.name}: read latency above")
                 and a.name in ann.get("runbook", ""),
                 "annotations: summary names instance and device, runbook names the device", ann)
            lat = ctl("latency", a.name, "--json")
            r.ok(lat.returncode == 0 and json.loads(lat.stdout)["metrics"]["alerts"]["read"]["active"] is True,
                 f"blkmqctl latency {a.name}: the read alert is active in blkmqd too", lat.stdout[-500:])
            # Six textfile versions while the alert is raised.
            snaps = promtest.textfile_versions(prom_file, SNAPSHOTS, 15)
            r.eq(len(snaps), SNAPSHOTS, f"{SNAPSHOTS} versions of the textfile within 15 s")

        with r.case("it resolves (threshold 10 s, reload)", env):
            config(10000000)
            d.reload()
            t_res = time.monotonic()
            gone = wait_for(lambda: not p.alerts("BlkmqdLatencyAlert")
                            and not p.query('ALERTS{alertname="BlkmqdLatencyAlert"}'), 15)
            r.ok(gone, f"BlkmqdLatencyAlert no longer in /api/v1/alerts nor ALERTS "
                 f"({time.monotonic() - t_res:.1f} s after the reload)", p.alerts("BlkmqdLatencyAlert"))
            r.ok(wait_for(lambda: p.query(f'blkmqd_latency_alert_active{{device="{a.name}"}} == 0'), 5),
                 "blkmqd_latency_alert_active 0 in Prometheus")

        with r.case("promtool test rules on the snapshots", env):
            for i, text in enumerate(snaps):
                env.write(f"snap/{i}.prom", text)
            doc = promtest.build(RULES, [promtest.parse_textfile(t)[0] for t in snaps], instance=inst)
            test_yml = env.write("rules-test.yml", json.dumps(doc, indent=1))
            t = doc["tests"][0]
            firing_exp = [x for x in t["alert_rule_test"] if x["alertname"] == "BlkmqdLatencyAlert"]
            r.ok(len(snaps) >= 2 and firing_exp and len(firing_exp[0]["exp_alerts"]) == 1
                 and any("p99_5m" in x["expr"] for x in t["promql_expr_test"]),
                 "the snapshots make a test: the latency alert expected firing once, a p99 to check",
                 firing_exp)
            pt = subprocess.run([bins["promtool"], "test", "rules", test_yml], capture_output=True, text=True)
            r.ok(pt.returncode == 0, f"promtool test rules: {len(t['input_series'])} series, "
                 f"{len(t['promql_expr_test'])} expressions, {len(t['alert_rule_test'])} alerts",
                 (pt.stdout + pt.stderr)[-3000:])

        log(f"# servers up for {time.monotonic() - t0:.1f} s")
        r.ok(ne.poll() is None and pr.poll() is None, "node_exporter and prometheus still running at the end",
             server_logs())
    r.finish()


if __name__ == "__main__":
    main_guard(main)
