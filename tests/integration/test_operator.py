#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""An operator's first hour: the checks one runs before and after starting
blkmqd.

- blkmqd --check-config: a good configuration prints the plan of each disk
  and exits 0, and writes nothing (the loop device's queue/ is the same
  before and after, no originals record, no socket); a broken drop-in is
  named with file:line for each of its errors, exit 1; --json both ways.
- blkmqd --dry-run --once DEVICE: that device's plan alone, by kernel name
  or /dev path; an unknown device is named, exit 1.
- blkmqctl verify: no drift after the apply; a read_ahead_kb written behind
  the daemon's back is named with the value found, exit 12 (table and
  --json); show marks it in its DRIFT column; apply puts it back.
- blkmqctl profiles: the [Profile] sections with the keys each sets, the
  active one marked after blkmqctl profile NAME.
- verify and profiles read: uid 65534 gets the same answers.

Needs root, loop devices, udevd; $BLKMQD, $BLKMQCTL."""

import json
import os

from blkmqtest import (Ctl, Env, Runner, ctl_path, main_guard, need_all, queue_snapshot, run_blkmqd, show,
                       snapshot_diff, udevd)

EXIT_DRIFT = 12


def ran(p):
    return (f"$ {' '.join(map(str, p.args))}\nexit {p.returncode}\n--- stdout:\n{p.stdout or '(empty)'}\n"
            f"--- stderr:\n{p.stderr or '(empty)'}")


def files_below(top):
    out = set()
    for d, _, fs in os.walk(top):
        out |= {os.path.join(d, f) for f in fs}
    return out


def main():
    need_all()
    ctl_bin = ctl_path()
    r = Runner("integration/operator")
    with udevd(), Env("operator") as env:
        loop = env.attach("op")
        cfg = env.config(f"""\
[Device op]
MatchBackingFile={env.glob()}
ReadAheadKB=512

[Profile night]
ReadAheadKB=1024

[Profile weekend]
Devices=op
ReadAheadKB=2048
RqAffinity=2
""")
        ra = loop.attr("read_ahead_kb")
        r.ok(ra != "512", f"{loop.name} starts with read_ahead_kb {ra}, not the 512 the policy wants")

        with r.case("--check-config on a good configuration: the plan, exit 0, nothing written", env):
            before, files = queue_snapshot(loop.name), files_below(env.tmp)
            # A socket it would serve would be made here, in the files compared.
            p = run_blkmqd(env, ["--check-config", "--config", cfg, "--varlink-address", env.tmp + "/cc.sock"])
            after = queue_snapshot(loop.name)
            r.ok(p.returncode == 0 and "The configuration is valid" in p.stdout, "exit 0, the configuration is valid",
                 ran(p))
            r.ok(f"{loop.name}  " in p.stdout and "queue/read_ahead_kb" in p.stdout and "→ 512  [planned]" in p.stdout,
                 f"the plan of {loop.name}: queue/read_ahead_kb {ra} → 512 [planned]", ran(p))
            r.ok(before == after, f"{loop.name}'s queue/ is the same before and after",
                 snapshot_diff(before, after))
            r.ok(files_below(env.tmp) == files, "no file made (no originals record, no socket)",
                 sorted(files_below(env.tmp) - files))
            p = run_blkmqd(env, ["--check-config", "--config", cfg, "--json"])
            doc = json.loads(p.stdout) if p.returncode == 0 else {}
            plan = [e for d in doc.get("devices", []) if d.get("device") == loop.name for e in d.get("plan", [])]
            r.ok(doc.get("valid") is True and doc.get("errors") == [] and cfg in doc.get("configFiles", [])
                 and any(e.get("attribute") == "queue/read_ahead_kb" and e.get("wanted") == "512"
                         and e.get("outcome") == "planned" for e in plan),
                 "--json: valid, no errors, the files, the planned read_ahead_kb", ran(p))
            r.ok(queue_snapshot(loop.name) == before, "--json wrote nothing either")

        with r.case("--dry-run --once DEVICE: that device's plan alone; an unknown device is named", env):
            other = env.attach("other")
            for dev in (loop.name, loop.dev):
                p = run_blkmqd(env, ["--dry-run", "--once", "--config", cfg, dev, "--json"])
                doc = json.loads(p.stdout) if p.returncode == 0 else {}
                r.eq([d.get("device") for d in doc.get("devices", [])], [loop.name],
                     f"--dry-run --once {dev} --json: {loop.name} alone")
            p = run_blkmqd(env, ["--dry-run", "--once", "--config", cfg, loop.name])
            r.ok(p.returncode == 0 and p.stdout.startswith(loop.name + "  ") and other.name + "  " not in p.stdout,
                 f"--dry-run --once {loop.name}: its plan, not {other.name}'s", ran(p))
            p = run_blkmqd(env, ["--check-config", "--config", cfg, other.name])
            r.ok(p.returncode == 0 and f"\n{other.name}  " in p.stdout and f"\n{loop.name}  " not in p.stdout,
                 f"--check-config {other.name}: that device's plan alone", ran(p))
            env.detach(other)
            p = run_blkmqd(env, ["--dry-run", "--once", "--config", cfg, "nosuchdisk7"])
            r.ok(p.returncode == 1 and "nosuchdisk7: no such block device" in p.stderr and p.stdout == "",
                 "--dry-run --once nosuchdisk7: exit 1, named", ran(p))
            p = run_blkmqd(env, ["--check-config", "--config", cfg, "/dev/null"])
            r.ok(p.returncode == 1 and "/dev/null: not a block device" in p.stderr,
                 "--check-config /dev/null: exit 1, not a block device", ran(p))
            p = run_blkmqd(env, ["--config", cfg, loop.name])
            r.ok(p.returncode == 1 and "goes with --dry-run or --check-config" in p.stderr,
                 "a DEVICE without --dry-run: usage error", ran(p))

        with r.case("--check-config on broken drop-ins: each error with file:line, exit 1", env):
            bad = env.dropin(cfg, "50-bad.conf", "[Device op]\nNrRequest=4\n\n[Profile late]\nReadAheadKB=lots\n")
            bad2 = env.dropin(cfg, "60-bad.conf", "[Device op]\nno equals sign here\n")
            p = run_blkmqd(env, ["--check-config", "--config", cfg])
            r.ok(p.returncode == 1 and f"{bad}:2: unknown key NrRequest=" in p.stderr
                 and f"{bad}:5: ReadAheadKB=" in p.stderr and f"{bad2}:2: syntax error" in p.stderr
                 and "3 errors" in p.stderr,
                 "exit 1, 50-bad.conf:2, 50-bad.conf:5 and 60-bad.conf:2 named", ran(p))
            r.ok("queue/read_ahead_kb" not in p.stdout, "no plan for a broken configuration", ran(p))
            p = run_blkmqd(env, ["--check-config", "--config", cfg, "--json"])
            doc = json.loads(p.stdout) if p.stdout.strip() else {}
            r.ok(p.returncode == 1 and doc.get("valid") is False
                 and [(e.get("file"), e.get("line")) for e in doc.get("errors", [])] == [(bad, 2), (bad, 5), (bad2, 2)],
                 "--json: valid false, the errors with file and line", ran(p))
            os.unlink(bad)
            os.unlink(bad2)

        # The socket's directory reachable for the uid 65534 cases; the temp
        # dir itself only searchable.
        os.chmod(env.tmp, 0o711)
        rundir = os.path.join(env.tmp, "run")
        os.makedirs(rundir, mode=0o755)
        os.chmod(rundir, 0o755)
        addr = os.path.join(rundir, "io.blkmqd")
        d = env.daemon(["--config", cfg, "--varlink-address", addr])
        d.start(timeout=15)
        ctl = Ctl(ctl_bin, addr)
        rak = f"/sys/block/{loop.name}/queue/read_ahead_kb"

        with r.case("verify: no drift after the apply", env):
            r.eq(loop.attr("read_ahead_kb"), "512", "read_ahead_kb applied", daemon=d)
            p = ctl("verify")
            r.ok(p.returncode == 0 and "0 drifted" in p.stdout and p.stderr == "", "verify: exit 0, 0 drifted",
                 show(p), daemon=d)
            p, doc = ctl.json("verify", loop.name)
            knobs = {k["attribute"]: k for k in (doc or [{}])[0].get("knobs", [])}
            k = knobs.get("queue/read_ahead_kb", {})
            r.ok(p.returncode == 0 and k.get("state") == "ok" and k.get("found") == "512"
                 and k.get("applied") == "512" and k.get("wanted") == "512",
                 "verify --json: read_ahead_kb ok, found 512", show(p))

        with r.case(f"verify after echo 4096 > {rak} behind the daemon's back", env):
            with open(rak, "w") as f:
                f.write("4096")
            p = ctl("verify")
            rows = [l.split() for l in p.stdout.splitlines()]
            r.ok(p.returncode == EXIT_DRIFT and [loop.name, "queue/read_ahead_kb", "512", "512", "4096", "drifted"]
                 in rows, f"verify: exit {EXIT_DRIFT}, the row names read_ahead_kb, found 4096, drifted", show(p))
            r.ok(f"{loop.name}: queue/read_ahead_kb: drifted: reads 4096, blkmqd left 512" in p.stderr,
                 "verify: stderr names the knob and the value found", show(p))
            p, doc = ctl.json("verify", loop.name)
            dev = (doc or [{}])[0]
            knobs = {k["attribute"]: k for k in dev.get("knobs", [])}
            r.ok(p.returncode == EXIT_DRIFT and dev.get("drifted") == 1
                 and knobs.get("queue/read_ahead_kb", {}).get("state") == "drifted"
                 and knobs.get("queue/read_ahead_kb", {}).get("found") == "4096",
                 f"verify {loop.name} --json: exit {EXIT_DRIFT}, drifted 1, found 4096", show(p))
            p = ctl("show", loop.name)
            row = next((l.split() for l in p.stdout.splitlines() if l.startswith("queue/read_ahead_kb")), [])
            r.ok(p.returncode == 0 and row[-2:] == ["now", "4096"] and "reads 4096, blkmqd left 512" in p.stdout,
                 "show: DRIFT says now 4096, and the Drift lines say so", show(p))
            p = ctl("verify", loop.name, uid=65534)
            r.ok(p.returncode == EXIT_DRIFT and "reads 4096" in p.stderr,
                 "verify as nobody: the same (reading is open to every user)", show(p))
            p = ctl("apply", loop.name)
            r.eq(p.returncode, 0, "apply puts it back", daemon=d)
            p = ctl("verify", loop.name)
            r.ok(p.returncode == 0 and loop.attr("read_ahead_kb") == "512", "verify after apply: exit 0", show(p))
            p = ctl("verify", "nosuchdisk7")
            r.eq(p.returncode, 3, "verify nosuchdisk7: exit 3 (no such device)")

        with r.case("profiles: the sections, the keys, the active one", env):
            p, doc = ctl.json("profiles")
            by = {x.get("name"): x for x in doc or []}
            r.ok(p.returncode == 0 and set(by) == {"night", "weekend"} and not any(x["active"] for x in by.values()),
                 "profiles --json: night and weekend, neither active", show(p))
            w = by.get("weekend", {})
            r.ok(w.get("devices") == ["op"] and [(v["key"], v["value"]) for v in w.get("values", [])]
                 == [("ReadAheadKB", "2048"), ("RqAffinity", "2")] and w.get("origin", "").startswith(cfg + ":"),
                 "weekend: Devices=op, ReadAheadKB=2048 RqAffinity=2, its file:line", show(p))
            p = ctl("profiles", uid=65534)
            r.ok(p.returncode == 0 and "weekend" in p.stdout, "profiles as nobody", show(p))
            p = ctl("profile", "night")
            r.eq(p.returncode, 0, "profile night", daemon=d)
            p = ctl("profiles")
            rows = {l.split()[0]: l.split() for l in p.stdout.splitlines() if l.strip()}
            r.ok(p.returncode == 0 and rows.get("night", [])[:4] == ["night", "yes", "all", "ReadAheadKB=1024"]
                 and rows.get("weekend", [])[:5] == ["weekend", "no", "op", "ReadAheadKB=2048", "RqAffinity=2"],
                 "profiles: night active (yes), weekend not", show(p))
            p, doc = ctl.json("profiles")
            r.ok([x["name"] for x in doc or [] if x.get("active")] == ["night"], "profiles --json: night active",
                 show(p))
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
