#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Turns textfiles that blkmqd wrote (MetricsTextfile=) into a `promtool
test rules` file for the shipped rules (monitoring/blkmqd-rules.yml).

Each snapshot of the textfile becomes one step (1 minute) of the input
series, labelled as node_exporter's textfile collector and a scrape add
them (instance, job). What the rules must then say is worked out here from
the same snapshots, independently of PromQL: the per-disk probe p99 from the
histogram's bucket increases (Prometheus' histogram_quantile interpolation),
the disks by scheduler and by trial verdict, and which alerts fire (their
annotations rendered from the rules' templates).

    promtest.py --rules RULES --out TEST.yml SNAPSHOT.prom...

Used by tests/monitoring/check-monitoring.py and
tests/integration/test_prometheus.py on the versions of the textfile that
the blkmqd each of them starts writes while it runs (textfile_versions()).
Needs PyYAML (python3-yaml) for the rules."""

import argparse
import json
import math
import os
import re
import sys
import time

INSTANCE = "blkmqd-host:9100"
JOB = "node"
STEP_MIN = 1

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse_textfile(text):
    """[(name, {label: value}, float)], {family: type} of the exposition text."""
    samples, types = [], {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, fam, typ = line.split(None, 3)
            types[fam] = typ
            continue
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        samples.append((m.group(1), _labels(m.group(3), line), float(m.group(4))))
    return samples, types


def _labels(rest, where):
    """The label="value" pairs of a sample or a selector, {label: value}."""
    labels, rest = {}, rest or ""
    while rest:
        lm = _LABEL.match(rest)
        if not lm:
            raise ValueError(f"bad labels in {where!r}")
        labels[lm.group(1)] = _unescape(lm.group(2))
        rest = rest[lm.end():]
    return labels


def parse_selector(text):
    """NAME{label="value",...} (a series of a promtool test): name, {label: value}."""
    m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$', text.strip())
    if not m:
        raise ValueError(f"not a series selector: {text!r}")
    return m.group(1), _labels(m.group(2), text)


def textfile_versions(path, n, timeout):
    """Up to N successive versions of the textfile at PATH (blkmqd replaces
    it by a rename, at most once a second), read within TIMEOUT seconds."""
    texts, last = [], None
    deadline = time.monotonic() + timeout
    while len(texts) < n and time.monotonic() < deadline:
        try:
            with open(path) as f:
                st = os.fstat(f.fileno())
                if (st.st_ino, st.st_mtime_ns) != last:
                    last = (st.st_ino, st.st_mtime_ns)
                    texts.append(f.read())
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    return texts


def _escape(v):
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(name, labels):
    # node_exporter drops empty labels: Prometheus has no empty label.
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()) if v != "")
    return f"{name}{{{inner}}}"


def _fmt(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Inf" if v > 0 else "-Inf"
    return repr(v)


def scraped(labels, instance=INSTANCE, job=JOB):
    return {**{k: v for k, v in labels.items() if v != ""}, "instance": instance, "job": job}


def input_series(snaps, instance=INSTANCE, job=JOB):
    """One input series per sample name and labels over the snapshots ('_'
    where a snapshot lacks it)."""
    keys, table = [], {}
    for i, samples in enumerate(snaps):
        for name, labels, value in samples:
            k = selector(name, scraped(labels, instance, job))
            if k not in table:
                keys.append(k)
                table[k] = ["_"] * len(snaps)
            table[k][i] = _fmt(value)
    return [{"series": k, "values": " ".join(table[k])} for k in keys]


def histogram_quantile(q, buckets):
    """Prometheus' histogram_quantile() over [(le, cumulative count)]."""
    buckets = sorted(buckets)
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return math.nan
    # ensureMonotonic
    mono, top = [], -math.inf
    for le, c in buckets:
        top = max(top, c)
        mono.append((le, top))
    total = mono[-1][1]
    if total == 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, c) in enumerate(mono) if c >= rank)
    if b == len(mono) - 1:
        return mono[-2][0]
    if b == 0 and mono[0][0] <= 0:
        return mono[0][0]
    start, count = 0.0, mono[b][1]
    if b > 0:
        start = mono[b - 1][0]
        count -= mono[b - 1][1]
        rank -= mono[b - 1][1]
    return start + (mono[b][0] - start) * (rank / count)


def _by(samples, name):
    return [(labels, v) for n, labels, v in samples if n == name]


def probe_p99(first, last):
    """{device: p99 in seconds} from the bucket increases between two
    snapshots, for the devices probed in between."""
    out = {}
    f = {(l["device"], l["le"]): v for l, v in _by(first, "blkmqd_probe_latency_seconds_bucket")}
    per = {}
    for l, v in _by(last, "blkmqd_probe_latency_seconds_bucket"):
        key = (l["device"], l["le"])
        if key in f:
            per.setdefault(l["device"], []).append((float(l["le"]), v - f[key]))
    for dev, bk in per.items():
        if max(c for _, c in bk) > 0:
            out[dev] = histogram_quantile(0.99, bk)
    return out


def _go_float(v):
    """A float as Go's templates print it (strconv 'g', shortest): 1, 0.25, 1e+21."""
    if math.isnan(v) or math.isinf(v):
        return _fmt(v).replace("Inf", "+Inf") if v > 0 else _fmt(v)
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    r = repr(v)
    return re.sub(r"e([+-]?)0*(\d\d)", lambda m: "e" + (m.group(1) or "+") + m.group(2), r)


def render(template, labels, value=None):
    """The rules' annotation templates: {{ $labels.x }} and {{ $value }} only."""
    def sub(m):
        expr = m.group(1).strip()
        if expr.startswith("$labels."):
            return labels.get(expr[len("$labels."):], "")
        if expr == "$value":
            return _go_float(value)
        raise ValueError(f"template not rendered here: {{{{ {expr} }}}}")
    return re.sub(r"\{\{(.*?)\}\}", sub, template)


def load_alerts(rules_path):
    import yaml
    with open(rules_path) as f:
        doc = yaml.safe_load(f)
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def expected_alert(rule, labels, value=None):
    lab = {**labels, **rule.get("labels", {})}
    lab.pop("__name__", None)
    return {"exp_labels": lab,
            "exp_annotations": {k: render(v, lab, value) for k, v in rule.get("annotations", {}).items()}}


def build(rules_path, snaps, instance=INSTANCE, job=JOB):
    """The promtool test document for these snapshots (>= 2)."""
    if len(snaps) < 2:
        raise ValueError("need at least two snapshots")
    alerts = load_alerts(rules_path)
    last = snaps[-1]
    t_end = f"{(len(snaps) - 1) * STEP_MIN}m"
    exprs, atests = [], []

    # Per-disk p99 over 5 minutes, compared within a millionth.
    for dev, p in sorted(probe_p99(snaps[0], last).items()):
        lab = {"device": dev, "instance": instance}
        sel = selector("blkmqd:probe_latency_seconds:p99_5m", lab)
        exprs.append({"expr": f"({sel} >= bool {_fmt(p * (1 - 1e-6))}) * ({sel} <= bool {_fmt(p * (1 + 1e-6))})",
                      "eval_time": t_end,
                      "exp_samples": [{"labels": selector("", lab), "value": 1}]})

    # The fleet by scheduler and by the last trial's verdict.
    for rec, fam, label in (("blkmqd:devices:count_by_scheduler", "blkmqd_device_scheduler_info", "scheduler"),
                            ("blkmqd:devices:count_by_verdict", "blkmqd_autotune_last_verdict_info", "verdict")):
        counts = {}
        for l, _ in _by(last, fam):
            counts[l[label]] = counts.get(l[label], 0) + 1
        exprs.append({"expr": rec, "eval_time": t_end,
                      "exp_samples": [{"labels": selector(rec, {label: k}), "value": n}
                                      for k, n in sorted(counts.items())]})

    # Alerts without a for: delay fire on the last snapshot alone.
    def fire_now(alertname, fam, pred):
        rule = alerts[alertname]
        exp = [expected_alert(rule, {**scraped(l, instance, job), "alertname": alertname}, v)
               for l, v in _by(last, fam) if pred(l, v)]
        for e in exp:
            e["exp_labels"].pop("alertname")
        atests.append({"eval_time": t_end, "alertname": alertname, "exp_alerts": exp})

    fire_now("BlkmqdLatencyAlert", "blkmqd_latency_alert_active", lambda l, v: v == 1)
    if any(n == "blkmqd_zones" for n, _, _ in last):
        fire_now("BlkmqdZoneFailed", "blkmqd_zones", lambda l, v: l.get("state") == "failed" and v > 0)
    if any(n == "blkmqd_zone_objects_damaged" for n, _, _ in last):
        fire_now("BlkmqdObjectDamaged", "blkmqd_zone_objects_damaged", lambda l, v: v > 0)

    # Settings never failed, drifted or adjusted in the span: none of
    # their alerts fires.
    for alertname, fam in (("BlkmqdSettingFailed", "blkmqd_device_settings_failed"),
                           ("BlkmqdSettingDrifted", "blkmqd_device_settings_drifted"),
                           ("BlkmqdSettingAdjusted", "blkmqd_device_settings_adjusted")):
        if not [l for s in snaps for l, v in _by(s, fam) if v > 0]:
            atests.append({"eval_time": t_end, "alertname": alertname, "exp_alerts": []})
    # Probe errors that never grew raise nothing.
    if all(_by(s, "blkmqd_probe_errors_total") == _by(last, "blkmqd_probe_errors_total") for s in snaps):
        atests.append({"eval_time": t_end, "alertname": "BlkmqdProbeErrors", "exp_alerts": []})

    return {"rule_files": [rules_path],
            "evaluation_interval": f"{STEP_MIN}m",
            "tests": [{"name": f"{len(snaps)} snapshots of a textfile blkmqd wrote",
                       "interval": f"{STEP_MIN}m",
                       "input_series": input_series(snaps, instance, job),
                       "promql_expr_test": exprs,
                       "alert_rule_test": atests}]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--instance", default=INSTANCE)
    ap.add_argument("snapshots", nargs="+")
    a = ap.parse_args()
    snaps = []
    for p in a.snapshots:
        with open(p) as f:
            snaps.append(parse_textfile(f.read())[0])
    doc = build(a.rules, snaps, a.instance)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)   # JSON is YAML
    t = doc["tests"][0]
    print(f"{a.out}: {len(t['input_series'])} input series, {len(t['promql_expr_test'])} expression tests, "
          f"{len(t['alert_rule_test'])} alert tests")


if __name__ == "__main__":
    sys.exit(main())
