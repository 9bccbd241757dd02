#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The shape of blkmqctl --json, for every verb (blkmqctl(8), --json): a
list is an array of its items, one thing one object, a stream one object a
line; export and trial --emit-conf refuse --json.

Every verb of the table in src/ctl/blkmqctl.c must have a case here: a
verb added without one fails this test. Against one blkmqd with a managed
loop device (with Auto* bounds, for a short trial), a profile, and zones
emulated over a file. Needs root, loop devices, udevd; $BLKMQD, $BLKMQCTL."""

import json
import os
import re
import signal

from blkmqtest import Ctl, Env, Runner, ctl_path, main_guard, need_all, sha, show, skip, udevd

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "ctl", "blkmqctl.c")


def table_verbs():
    text = open(SRC).read()
    table = text[text.index("static const Verb verbs[]"):]
    table = table[:table.index("};")]
    return set(re.findall(r'\{ "([a-z-]+)",', table))


def lines_of_objects(text):
    out = []
    for l in text.splitlines():
        if l.strip():
            out.append(json.loads(l))
    return out


def main():
    need_all()
    if not os.environ.get("BLKMQCTL"):
        skip("set BLKMQCTL")
    r = Runner("integration/json-shapes")
    covered = set()
    with udevd(), Env("json-shapes") as env:
        loop = env.attach("shape")
        img = os.path.join(env.tmp, "zones.img")
        cfg = env.config(f"""\
[Daemon]
ProbeIntervalSec=1

[Device shape]
MatchBackingFile={env.glob()}
ReadAheadKB=512
AutoScheduler=none mq-deadline
AutoEpochSec=0.25
AutoRounds=3
AutoMinIOPS=1

[Profile night]
ReadAheadKB=1024

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCount=4
Database={env.tmp}/zones.db
""")
        addr = os.path.join(env.tmp, "io.blkmqd")
        d = env.daemon(["--config", cfg, "--varlink-address", addr])
        d.start(timeout=15)
        ctl = Ctl(ctl_path(), addr)
        payload = os.path.join(env.tmp, "payload")
        with open(payload, "wb") as f:
            f.write(b"shape" * 1000)

        def one(verb, args, kind, keys=(), status=0):
            """blkmqctl ARGS --json: exit STATUS, stdout one JSON document
            of KIND (dict or list) with KEYS (each item's, for a list)."""
            covered.add(verb)
            p, doc = ctl.json(*args)
            name = f"{' '.join(map(str, args))} --json: {kind.__name__}"
            if not r.ok(p.returncode == status and isinstance(doc, kind), name, show(p), daemon=d):
                return None
            items = doc if kind is list else [doc]
            missing = [k for it in items for k in keys if k not in it]
            r.ok(not missing and (kind is dict or items), f"  with {', '.join(keys) or 'nothing else'}"
                 + (" in each item" if kind is list else ""), f"missing {missing} in {doc}")
            return doc

        def stream(verb, args, keys, last=None):
            """one object a line, each with KEYS; LAST: the last one's keys."""
            covered.add(verb)
            p = ctl(*args, "--json", timeout=120)
            try:
                objs = lines_of_objects(p.stdout)
            except ValueError:
                objs = None
            name = f"{' '.join(map(str, args))} --json: one object a line"
            if not r.ok(p.returncode == 0 and objs and all(isinstance(o, dict) for o in objs), name, show(p),
                        daemon=d):
                return None
            r.ok(all(k in o for o in objs for k in keys), f"  each with {', '.join(keys)}", show(p))
            if last:
                r.ok(all(k in objs[-1] for k in last), f"  the last with {', '.join(last)}", show(p))
            return objs

        with r.case("the Manager's verbs", env):
            one("status", ["status"], dict, ["version", "state", "configFiles", "profiles"])
            one("devices", ["devices"], list, ["device", "id", "managed", "matched"])
            one("show", ["show", loop.name], dict, ["device"])
            one("explain", ["explain", loop.name], dict, ["device", "managed", "values"])
            for verb in ("apply", "restore"):
                one(verb, [verb, loop.name], dict, ["results"])
            one("reload", ["reload"], dict, ["results"])
            one("verify", ["verify"], list, ["device", "managed", "busy", "drifted", "knobs"])
            doc = one("verify", ["verify", loop.name], list, ["device", "managed", "busy", "drifted", "knobs"])
            knob = ((doc or [{}])[0].get("knobs") or [{}])[0]
            r.ok({"attribute", "key", "state"} <= set(knob), "  verify's knobs with attribute, key, state", str(doc))
            one("profiles", ["profiles"], list, ["name", "active", "devices", "values", "origin"])
            one("profile", ["profile", "night"], dict, ["results"])
            one("profile", ["profile", "--clear"], dict, ["results"])
            doc = one("log-level", ["log-level", "info"], dict)
            r.eq(doc, {}, "log-level --json: {}")
            one("latency", ["latency", loop.name], dict, ["histogram", "metrics"])
            stream("top", ["top", "--count=2", "--interval=0.1"], ["timeUsec", "devices"])
            stream("trial", ["trial", loop.name], ["device", "trial"])

        with r.case("monitor --json: one object a line, subscribed first", env):
            covered.add("monitor")
            mon = ctl.popen("monitor", "--json", text=True)
            ctl("apply", loop.name)
            mon.send_signal(signal.SIGINT)
            out, _ = mon.communicate(timeout=10)
            objs = lines_of_objects(out)
            r.ok(objs and objs[0] == {"event": "subscribed"} and all(isinstance(o, dict) and "event" in o
                                                                     for o in objs),
                 "monitor --json: {\"event\": \"subscribed\"}, then an object with event a line", out)

        with r.case("the zone verbs", env):
            devs = one("zones", ["zones"], list, ["deviceId", "zones", "free"])
            dev = devs[0]["deviceId"] if devs else "emu:" + img
            one("zones", ["zones", dev], list, ["zoneIndex", "startLba", "state", "condition"])
            one("zones", ["zones", "free", dev], dict, ["zoneIndex", "startLba", "state"])
            a = one("zones", ["zones", "alloc", "--size=4096", "--label=shape-a"], dict, ["lease", "zone"])
            lease = a["lease"]
            one("zones", ["zones", "append", lease, payload], dict, ["bytesWritten", "zone"])
            one("zones", ["zones", "seal", lease, sha(open(payload, "rb").read())], dict, ["zone"])
            one("zones", ["zones", "get", lease], dict, ["zone"])
            one("zones", ["zones", "objects"], list, ["label", "sha256", "lease"])
            one("zones", ["zones", "find", "shape-a"], dict, ["label", "sha256", "lease"])
            one("zones", ["zones", "verify"], list, ["label", "scrub"])
            out = os.path.join(env.tmp, "cat.out")
            p = ctl("zones", "cat", "shape-a", "-o", out, "--json")
            doc = json.loads(p.stderr.strip().splitlines()[-1]) if p.stderr.strip() else None
            r.ok(p.returncode == 0 and p.stdout == "" and isinstance(doc, dict)
                 and {"bytes", "sha256", "object"} <= set(doc),
                 "zones cat -o --json: {bytes, sha256, object} on stderr, nothing on stdout", show(p))
            p = ctl("zones", "cat", "shape-a", "--json")
            r.ok(p.returncode == 0 and p.stdout == "shape" * 1000, "zones cat --json: the bytes on stdout", show(p))
            one("zones", ["zones", "release", lease], dict, ["zone"])
            one("stage", ["stage", payload, "--label=shape-b"], dict,
                ["device", "deviceId", "zoneIndex", "startLba", "lease", "sha256", "size", "zone", "seconds"])

        with r.case("export and trial --emit-conf refuse --json; an error reply is {error, parameters}", env):
            covered.add("export")
            p = ctl("export", loop.name, "--json")
            r.ok(p.returncode == 1 and p.stdout == "" and "not JSON" in p.stderr, "export --json: usage error",
                 show(p))
            p = ctl("trial", loop.name, "--emit-conf", "--json")
            r.ok(p.returncode == 1 and p.stdout == "", "trial --emit-conf --json: usage error", show(p))
            one("show", ["show", "no-such-device"], dict, ["error", "parameters"], status=3)

        missing = table_verbs() - covered
        r.ok(table_verbs() and not missing, f"every verb of blkmqctl's table has a case here "
             f"({len(table_verbs())} verbs)", f"no case for: {sorted(missing)}")
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
