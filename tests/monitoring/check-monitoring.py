#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What the package ships for Prometheus and Grafana, checked against what
blkmqd really exports. Two modes:

  check-monitoring.py rules SRCDIR
    - `promtool check rules` on monitoring/blkmqd-rules.yml;
    - every blkmqd_ metric it names is one blkmqd writes: a family of the
      textfiles in tests/fixtures/metrics/ (written by blkmqd in
      tests/integration/test_prometheus.py), histogram series by their
      _bucket/_sum/_count names;
    - `promtool test rules` on tests/monitoring/rules-test.yml (written by
      hand: the alerts a short run does not raise) and on a test that
      tests/monitoring/promtest.py makes from those textfiles.

  check-monitoring.py dashboard SRCDIR
    - monitoring/blkmqd-dashboard.json is JSON with panels and targets;
    - every expression parses: Grafana's variables ($instance, $device,
      $__rate_interval) replaced, each is a recording rule of a temporary
      rules file that `promtool check rules` reads;
    - every blkmqd_ metric it names is a family blkmqd writes (as above),
      every blkmqd: one a recording rule of the shipped rules.

Exit 0 pass, 1 fail, 77 skip (promtool or PyYAML missing; a skip fails
under CI=true)."""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

CI = os.environ.get("CI", "").lower() == "true"
NAME = re.compile(r"\b(blkmqd(?:_[a-z0-9_]+|:[a-z0-9_:]+))\b")
failed = 0
passed = 0


def ok(cond, what, detail=None):
    global failed, passed
    if cond:
        passed += 1
        print(f"ok {passed + failed} - {what}")
    else:
        failed += 1
        print(f"not ok {passed + failed} - {what}")
        if detail:
            for line in str(detail).rstrip().splitlines():
                print("# " + line)
    return cond


def skip(reason):
    if CI:
        print(f"not ok - would skip, but CI=true forbids passing by not running: {reason}")
        sys.exit(1)
    print(f"SKIP: {reason}")
    sys.exit(77)


def promtool(*args, cwd=None):
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)


def exported_names(src):
    """Every sample name the fixtures' textfiles can hold: the families of
    their TYPE lines (histograms as _bucket, _sum, _count)."""
    sys.path.insert(0, os.path.join(src, "tests", "monitoring"))
    import promtest
    names, files = set(), sorted(glob.glob(os.path.join(src, "tests", "fixtures", "metrics", "*.prom")))
    for p in files:
        with open(p) as f:
            _, types = promtest.parse_textfile(f.read())
        for fam, typ in types.items():
            names |= {fam + s for s in ("_bucket", "_sum", "_count")} if typ == "histogram" else {fam}
    return names, files


def recorded_names(rules_path):
    import yaml
    with open(rules_path) as f:
        doc = yaml.safe_load(f)
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}, doc


def check_names(where, exprs, exported, recorded):
    used = {n for e in exprs for n in NAME.findall(e)}
    unknown = sorted(n for n in used if (n not in exported if n.startswith("blkmqd_") else n not in recorded))
    ok(used and not unknown, f"{where}: the {len(used)} metrics it names are exported by blkmqd "
       f"or recorded by the rules", f"unknown: {unknown}")


def rules(src):
    import promtest
    path = os.path.join(src, "monitoring", "blkmqd-rules.yml")
    p = promtool("check", "rules", path)
    ok(p.returncode == 0, "promtool check rules monitoring/blkmqd-rules.yml", p.stdout + p.stderr)
    exported, files = exported_names(src)
    ok(len(files) >= 2, f"{len(files)} textfiles blkmqd wrote in tests/fixtures/metrics/")
    recorded, doc = recorded_names(path)
    rs = [r for g in doc["groups"] for r in g["rules"]]
    check_names("blkmqd-rules.yml", [r["expr"] for r in rs], exported, recorded)
    alerts = [r for r in rs if "alert" in r]
    ok(alerts and all(r.get("annotations", {}).get("summary") and r["annotations"].get("runbook")
                      for r in alerts),
       f"each of the {len(alerts)} alerts has a summary and a runbook",
       [r["alert"] for r in alerts if not (r.get("annotations", {}).get("summary")
                                          and r["annotations"].get("runbook"))])
    here = os.path.join(src, "tests", "monitoring")
    p = promtool("test", "rules", "rules-test.yml", cwd=here)   # its rule_files: relative to here
    ok(p.returncode == 0, "promtool test rules tests/monitoring/rules-test.yml (hand-written series)",
       p.stdout + p.stderr)
    snaps = []
    for f in files:
        with open(f) as fh:
            snaps.append(promtest.parse_textfile(fh.read())[0])
    built = promtest.build(path, snaps)
    t = built["tests"][0]
    ok(any("p99_5m" in e["expr"] for e in t["promql_expr_test"])
       and any(a["alertname"] == "BlkmqdLatencyAlert" and a["exp_alerts"] for a in t["alert_rule_test"]),
       "the textfiles make a test with a p99 to check and a latency alert expected firing")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        json.dump(built, fh)
    try:
        p = promtool("test", "rules", fh.name)
    finally:
        os.unlink(fh.name)
    ok(p.returncode == 0, f"promtool test rules on the {len(files)} textfiles: {len(t['input_series'])} series, "
       f"{len(t['promql_expr_test'])} expressions, {len(t['alert_rule_test'])} alerts", (p.stdout + p.stderr)[-4000:])


GRAFANA_VARS = [("$__rate_interval", "5m"), ("$__interval", "1m"), ("$__range", "1h"),
                ("$instance", ".*"), ("$device", ".*")]


def dashboard(src):
    path = os.path.join(src, "monitoring", "blkmqd-dashboard.json")
    with open(path) as f:
        dash = json.load(f)
    targets = [(p["title"], t) for p in dash.get("panels", []) for t in p.get("targets", [])]
    exprs = [(title, t["expr"]) for title, t in targets]
    ok(exprs and all(e for _, e in exprs), f"blkmqd-dashboard.json: {len(exprs)} panel expressions")
    variables = [v["query"]["query"] for v in dash.get("templating", {}).get("list", [])
                 if isinstance(v.get("query"), dict)]
    # label_values(EXPR, label): the EXPR part is PromQL
    var_exprs = [re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", q) for q in variables]
    rules = {"groups": [{"name": "dashboard", "rules": []}]}
    left = []
    for i, (title, e) in enumerate(exprs + [("variable", v) for v in var_exprs]):
        for var, val in GRAFANA_VARS:
            e = e.replace(var, val)
        if "$" in e:
            left.append(f"{title}: {e}")
        rules["groups"][0]["rules"].append({"record": f"dashboard:expr_{i}", "expr": e})
    ok(not left, "no Grafana variable but $instance, $device, $__rate_interval, $__interval, $__range", left)
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        json.dump(rules, fh)
    try:
        p = promtool("check", "rules", fh.name)
    finally:
        os.unlink(fh.name)
    ok(p.returncode == 0, f"promtool check rules: all {len(rules['groups'][0]['rules'])} expressions parse",
       p.stdout + p.stderr)
    exported, files = exported_names(src)
    ok(len(files) >= 1, f"{len(files)} textfiles blkmqd wrote in tests/fixtures/metrics/")
    recorded, _ = recorded_names(os.path.join(src, "monitoring", "blkmqd-rules.yml"))
    check_names("blkmqd-dashboard.json", [e for _, e in exprs] + var_exprs, exported, recorded)
    kinds = {p["type"] for p in dash["panels"]}
    heat = [p for p in dash["panels"] if p["type"] == "heatmap"]
    ok(heat and all("_bucket" in t["expr"] and t.get("format") == "heatmap" for p in heat for t in p["targets"]),
       "probe latency as a heatmap of the histogram's buckets", kinds)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("rules", "dashboard"):
        print(__doc__)
        return 2
    src = os.path.abspath(sys.argv[2])
    from shutil import which
    if not which("promtool"):
        skip("promtool missing (apt-get install --no-install-recommends prometheus: tools/install-deps)")
    try:
        import yaml  # noqa: F401
    except ImportError:
        skip("PyYAML missing (apt-get install python3-yaml)")
    sys.path.insert(0, os.path.join(src, "tests", "monitoring"))
    (rules if sys.argv[1] == "rules" else dashboard)(src)
    print(f"monitoring {sys.argv[1]}: {passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
