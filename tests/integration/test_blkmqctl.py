#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""blkmqctl against a real blkmqd over its varlink socket: every verb, with
the effect checked in sysfs where there is one, --json, and the documented
exit codes (0 ok, 1 usage, 2 not reachable, 3 no such device/profile,
4 permission denied, 5 config invalid, 6 setting failed, 7 protocol).

Needs root, loop devices and systemd-udevd (blkmqtest), and $BLKMQCTL (or
the second argument) naming the blkmqctl under test."""

import json
import os
import re
import select
import signal
import subprocess
import time

from blkmqtest import (Ctl, Env, Runner, ctl_path, need_all, udevd, main_guard, show, wait_for, diag,
                       timeout_scale)

NOBODY = 65534


def parse_json(r, p, name):
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        r.ok(False, f"{name}: stdout parses as JSON ({e})", show(p))
        return None
    r.ok(True, f"{name}: stdout parses as JSON")
    return doc


def knob_rows(text):
    """{attribute: [original, wanted, current, outcome, section...]} from the
    knob table of `blkmqctl show`."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if f and (f[0].startswith("queue/") or f[0].startswith("irq/")):
            rows[f[0]] = f[1:]
    return rows


def line_of(text, needle):
    """1-based number of the first line of text containing needle."""
    for i, l in enumerate(text.splitlines(), 1):
        if needle in l:
            return i
    raise ValueError(needle)


class Monitor:
    """blkmqctl monitor --json in the background, read line by line."""

    def __init__(self, ctl):
        self.proc = ctl.popen("monitor", "--json")
        self.buf = b""
        self.lines = []

    def read(self, timeout):
        deadline = time.monotonic() + timeout * timeout_scale()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if not r:
                return False
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                return False
            self.buf += data
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                self.lines.append(line.decode(errors="replace"))
            return True

    def wait_for(self, pred, timeout=10):
        """The first parsed event matching pred, or None."""
        seen = 0
        deadline = time.monotonic() + timeout * timeout_scale()
        while True:
            for line in self.lines[seen:]:
                seen += 1
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if pred(ev):
                    return ev
            left = deadline - time.monotonic()
            if left <= 0 or not self.read(left):
                if seen == len(self.lines):
                    return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(5 * timeout_scale())
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc, err


# io.blkmqd.Manager's WriteLimits: field, attribute below queue/
WRITE_LIMITS = (("maxWriteStreams", "max_write_streams"), ("writeStreamGranularity", "write_stream_granularity"),
                ("atomicWriteMaxBytes", "atomic_write_max_bytes"),
                ("atomicWriteUnitMinBytes", "atomic_write_unit_min_bytes"),
                ("atomicWriteUnitMaxBytes", "atomic_write_unit_max_bytes"),
                ("atomicWriteBoundaryBytes", "atomic_write_boundary_bytes"))


def main():
    need_all()
    binary = ctl_path()
    r = Runner("integration")
    with udevd(), Env("blkmqctl") as env:
        a = env.attach(prefix="a")
        b = env.attach(prefix="b")
        # The socket's directory must be reachable for the uid 65534 case;
        # the temp dir itself only needs to be searchable.
        os.chmod(env.tmp, 0o711)
        rundir = os.path.join(env.tmp, "run")
        os.makedirs(rundir, mode=0o755)
        os.chmod(rundir, 0o755)
        sock = os.path.join(rundir, "io.blkmqd")
        ctl = Ctl(binary, sock)

        good = f"""\
[Device all]
MatchBackingFile={env.glob('*.img')}
Scheduler=mq-deadline
NrRequests=64
ReadAheadKB=1024

[Profile night]
NrRequests=32
"""
        cfg = env.config(good)
        nr_line = line_of(good, "NrRequests=64")
        d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "debug"])
        WANT = {"scheduler": "mq-deadline", "nr_requests": "64", "read_ahead_kb": "1024"}

        with r.case("daemon up", env):
            d.start(timeout=15)
            r.ok(a.matches(WANT) and b.matches(WANT), "policy applied at READY",
                 a.mismatches(WANT) + b.mismatches(WANT), d)
            r.ok(wait_for(lambda: os.path.exists(sock), 5), f"socket {sock} exists", daemon=d)

        with r.case("usage errors", env):
            for args, what in ((["frobnicate"], "unknown command"), (["show"], "show without DEVICE"),
                               (["--bogus", "status"], "unknown option"),
                               (["status", "extra"], "too many arguments"),
                               (["profile"], "profile without NAME or --clear"),
                               (["log-level", "loud"], "invalid log level")):
                p = ctl(*args)
                r.ok(p.returncode == 1 and p.stderr.startswith("blkmqctl: ")
                     and p.stderr.count("\n") == 1,
                     f"{what}: exit 1, one 'blkmqctl: ...' line", show(p))
            p = ctl("--help")
            r.ok(p.returncode == 0 and "Exit status" in p.stdout and "permission denied" in p.stdout,
                 "--help lists the exit statuses", show(p))

        with r.case("status", env):
            p = ctl("status")
            r.ok(p.returncode == 0 and "running" in p.stdout and sock in p.stdout
                 and cfg in p.stdout, "status: exit 0, running, address and config file", show(p))
            p = ctl("status", "--json")
            doc = parse_json(r, p, "status --json")
            if doc is not None:
                r.ok(doc.get("state") == "running" and doc.get("managed") == 2
                     and doc.get("configFiles") == [cfg] and "profile" not in doc,
                     "status --json: running, 2 managed, our config, no profile", doc)

        with r.case("devices", env):
            p = ctl("devices")
            rows = {l.split()[0]: l.split() for l in p.stdout.splitlines()[1:] if l.strip()}
            r.ok(p.returncode == 0 and p.stdout.split()[:2] == ["DEVICE", "TRANSPORT"]
                 and a.name in rows and b.name in rows and "listed." in p.stdout,
                 "devices: exit 0, header, both loop devices, footer", show(p))
            r.ok(rows.get(a.name, [])[3:5] == ["yes", "mq-deadline"],
                 f"devices: {a.name} managed, scheduler mq-deadline", rows.get(a.name))
            p = ctl("devices", "--no-legend")
            r.ok(p.returncode == 0 and "DEVICE" not in p.stdout and "listed" not in p.stdout
                 and a.name in p.stdout, "devices --no-legend: no header or footer", show(p))
            p = ctl("devices", "--json")
            doc = parse_json(r, p, "devices --json")
            if doc is not None:
                devs = {x.get("device"): x for x in doc} if isinstance(doc, list) else {}
                r.ok(isinstance(doc, list) and a.name in devs and b.name in devs,
                     "devices --json: an array holding both loop devices", doc)
                da = devs.get(a.name, {})
                r.ok(da.get("managed") is True and da.get("matched") == ["all"]
                     and da.get("changed") == 3 and da.get("scheduler") == "mq-deadline",
                     f"devices --json: {a.name} managed by [all], 3 values changed", da)
                others = [n for n, x in devs.items() if n not in (a.name, b.name) and x.get("managed")]
                r.ok(not others, "devices --json: no other disk managed", others)

        with r.case("show", env):
            p = ctl("show", a.name)
            rows = knob_rows(p.stdout)
            r.ok(p.returncode == 0 and re.search(
                r"ATTRIBUTE\s+ORIGINAL\s+WANTED\s+CURRENT\s+OUTCOME\s+SECTION", p.stdout)
                and a.backing in p.stdout,
                "show: exit 0, identity (backing file) and the knob table header", show(p))
            nr = rows.get("queue/nr_requests", [])
            r.eq(nr[:3], [a.pristine["nr_requests"], "64", "64"],
                 "show: nr_requests ORIGINAL (the kernel's) WANTED CURRENT")
            r.eq(nr[4:6], ["Device", "all"], "show: nr_requests SECTION is Device all")
            sched = rows.get("queue/scheduler", [])
            r.ok(sched[:3] == ["none", "mq-deadline", "mq-deadline"] or
                 (sched[1:3] == ["mq-deadline", "mq-deadline"] and sched[0] != "mq-deadline"),
                 "show: scheduler original -> mq-deadline", sched)
            r.ok(re.search(r"hctx\d+ -> ", p.stdout), "show: hardware queue -> CPU map", show(p))
            p = ctl("show", a.dev, "--json")
            doc = parse_json(r, p, "show /dev/loopN --json")
            if doc is not None:
                knobs = {k.get("attribute"): k for k in doc.get("device", {}).get("knobs", [])}
                k = knobs.get("queue/nr_requests", {})
                r.ok(k.get("original") == a.pristine["nr_requests"] and k.get("current") == "64"
                     and k.get("origin") == f"{cfg}:{nr_line}",
                     "show --json: nr_requests original, current and origin file:line", k)
                # The kernel's write limits, reported (not tuned): each as
                # sysfs has it, absent (not 0) where sysfs has no such file.
                want = {}
                for key, attr in WRITE_LIMITS:
                    path = f"/sys/block/{a.name}/queue/{attr}"
                    if os.path.exists(path):
                        want[key] = int(open(path).read())
                got = doc.get("device", {}).get("writeLimits")
                r.eq(got, want or None, "show --json: writeLimits as sysfs has them (host kernel "
                     f"{os.uname().release})")
                # The table: a figure or "-" per column, in the same order.
                p = ctl("show", a.name)
                tl = p.stdout.splitlines()
                hi = next((i for i, l in enumerate(tl) if l.split()[:1] == ["STREAMS"]), None)
                cells = tl[hi + 1].split() if hi is not None and hi + 1 < len(tl) else []
                r.eq(cells, [str(want[k]) if k in want else "-" for k, _ in WRITE_LIMITS],
                     "show: the write limits table (STREAMS ... ATOMIC-BOUNDARY), - where absent")
            p = ctl("show", a.name, env={"COLUMNS": "40"})
            lines = p.stdout.splitlines()
            # The knob table comes after the identity block and a blank line.
            start = next((i + 1 for i, l in enumerate(lines) if not l.strip()), len(lines))
            end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
            table = lines[start:end]
            r.ok(p.returncode == 0 and len(table) >= 4 and all(len(l) <= 40 for l in table)
                 and any("..." in l for l in table),
                 "show with COLUMNS=40: table cut to 40 columns with an ellipsis", show(p))

        with r.case("explain", env):
            p = ctl("explain", a.name)
            r.ok(p.returncode == 0 and re.search(r"\[Device all\] \(" + re.escape(cfg) + r":1\) matches",
                                                 p.stdout),
                 "explain: [Device all] matches, with file:line", show(p))
            r.ok(re.search(r"NrRequests\s+64\s+Device all\s+" + re.escape(f"{cfg}:{nr_line}"), p.stdout),
                 f"explain: NrRequests 64 from Device all at {cfg}:{nr_line}", show(p))
            p = ctl("explain", a.name, "--json")
            doc = parse_json(r, p, "explain --json")
            if doc is not None:
                vals = {v.get("key"): v for v in doc.get("values", [])}
                r.ok(vals.get("NrRequests", {}).get("origin") == f"{cfg}:{nr_line}"
                     and doc.get("matched") == ["all"], "explain --json: values with origin", doc)

        with r.case("apply", env):
            a.set("nr_requests", "100")
            p = ctl("apply", a.name)
            r.ok(p.returncode == 0 and a.name in p.stdout and b.name not in p.stdout,
                 f"apply {a.name}: exit 0, one result", show(p))
            r.eq(a.attr("nr_requests"), "64", f"apply {a.name}: nr_requests 100 -> 64 in sysfs")
            p = ctl("apply", "--json")
            doc = parse_json(r, p, "apply --json")
            if doc is not None:
                res = {x.get("device"): x for x in doc.get("results", [])}
                r.ok(set(res) == {a.name, b.name} and all(x.get("failed") == 0 for x in res.values()),
                     "apply --json: a result per managed device, none failed", doc)

        with r.case("profile", env):
            p = ctl("profile", "night")
            r.ok(p.returncode == 0, "profile night: exit 0", show(p))
            r.ok(a.attr("nr_requests") == "32" and b.attr("nr_requests") == "32",
                 "profile night: nr_requests 32 in sysfs on both",
                 [a.attr("nr_requests"), b.attr("nr_requests")])
            p = ctl("status", "--json")
            r.ok(p.returncode == 0 and json.loads(p.stdout).get("profile") == "night",
                 "status --json: profile night", show(p))
            p = ctl("show", a.name)
            r.ok((knob_rows(p.stdout).get("queue/nr_requests") or [""] * 6)[4:6] == ["Profile", "night"],
                 "show: nr_requests SECTION is Profile night", show(p))
            p = ctl("profile", "--clear")
            r.ok(p.returncode == 0, "profile --clear: exit 0", show(p))
            r.ok(a.attr("nr_requests") == "64" and b.attr("nr_requests") == "64",
                 "profile --clear: nr_requests back to 64 in sysfs",
                 [a.attr("nr_requests"), b.attr("nr_requests")])
            p = ctl("profile", "daytime")
            r.ok(p.returncode == 3 and p.stderr == "blkmqctl: daytime: no such profile\n",
                 "profile daytime (absent): exit 3, 'no such profile'", show(p))

        with r.case("restore", env):
            p = ctl("restore", a.name)
            r.ok(p.returncode == 0, f"restore {a.name}: exit 0", show(p))
            orig = {k: a.pristine[k] for k in ("nr_requests", "read_ahead_kb")}
            orig["scheduler"] = [s.strip("[]") for s in a.pristine["scheduler"].split()
                                 if s.startswith("[")][0]
            r.ok(a.matches(orig), f"restore {a.name}: originals back in sysfs", a.mismatches(orig))
            r.ok(b.matches(WANT), f"restore {a.name}: {b.name} left alone", b.mismatches(WANT))
            p = ctl("apply", a.name)
            r.ok(p.returncode == 0 and a.matches(WANT), f"apply {a.name} again after restore",
                 show(p) + "\n" + "\n".join(a.mismatches(WANT)))

        with r.case("no such device", env):
            for verb in ("show", "explain", "apply", "restore"):
                p = ctl(verb, "nosuchdisk9")
                r.ok(p.returncode == 3 and p.stderr == "blkmqctl: nosuchdisk9: no such device\n",
                     f"{verb} nosuchdisk9: exit 3, 'no such device'", show(p))
            p = ctl("show", "nosuchdisk9", "--json")
            r.ok(p.returncode == 3 and json.loads(p.stdout or "{}").get("error")
                 == "io.blkmqd.Manager.NoSuchDevice", "show --json: the error as JSON too", show(p))

        with r.case("as uid 65534", env):
            p = ctl("--version", uid=NOBODY)
            if p.returncode != 0:
                r.ok(False, f"blkmqctl runs as uid {NOBODY} (check the path's permissions)", show(p))
            else:
                p = ctl("status", uid=NOBODY)
                r.ok(p.returncode == 0 and "running" in p.stdout, "status as uid 65534: exit 0", show(p))
                p = ctl("devices", "--json", uid=NOBODY)
                r.ok(p.returncode == 0 and a.name in p.stdout, "devices as uid 65534: exit 0", show(p))
                a.set("nr_requests", "100")
                p = ctl("apply", a.name, uid=NOBODY)
                r.ok(p.returncode == 4 and p.stderr ==
                     "blkmqctl: permission denied: apply needs root or the AdminGroup\n",
                     "apply as uid 65534: exit 4, 'permission denied'", show(p))
                r.eq(a.attr("nr_requests"), "100", "apply as uid 65534: nothing written")
                for args in (["restore"], ["reload"], ["profile", "night"], ["profile", "--clear"],
                             ["log-level", "debug"]):
                    p = ctl(*args, uid=NOBODY)
                    r.eq(p.returncode, 4, f"{' '.join(args)} as uid 65534: exit 4")
                ctl("apply", a.name)

        with r.case("log-level", env):
            p = ctl("log-level", "info")
            r.ok(p.returncode == 0 and p.stdout == "", "log-level info: exit 0, silent", show(p))
            p = ctl("log-level", "debug", "--json")
            r.ok(p.returncode == 0 and p.stdout.strip() == "{}", "log-level --json: {}", show(p))

        with r.case("monitor --json", env):
            mon = Monitor(ctl)
            try:
                ev = mon.wait_for(lambda e: e.get("event") == "subscribed", 10)
                r.ok(ev is not None, "monitor --json: first line is the subscribed event", mon.lines)
                c = env.attach(prefix="c")
                ev = mon.wait_for(lambda e: e.get("event") == "applied" and e.get("device") == c.name, 15)
                r.ok(ev is not None and ev.get("result", {}).get("failed") == 0
                     and ev["result"].get("changed", 0) >= 1,
                     f"monitor --json: 'applied' event for the attached {c.name}", mon.lines, d)
                r.ok(all(isinstance(json.loads(l), dict) for l in mon.lines),
                     "monitor --json: one JSON object per line", mon.lines)
            finally:
                rc, err = mon.stop()
            r.ok(rc == 0 and err == "", "monitor: SIGINT ends it with exit 0", f"exit {rc}: {err}")

        with r.case("reload", env):
            broken = good + "\n[Device broken]\nMatchBackingFile=/nonexistent/*\nNrRequest=8\n"
            bad_line = line_of(broken, "NrRequest=8")
            env.config(broken)
            p = ctl("reload")
            r.ok(p.returncode == 5 and p.stderr.startswith(f"blkmqctl: {cfg}:{bad_line}: ")
                 and p.stderr.count("\n") == 1,
                 f"reload of a broken config: exit 5, 'FILE:{bad_line}: MESSAGE'", show(p), d)
            r.ok(d.alive() and ctl("status").returncode == 0, "daemon still serving after the refusal")
            r.ok(a.matches(WANT), "old config still in force", a.mismatches(WANT))
            env.config(good.replace("NrRequests=64", "NrRequests=48"))
            p = ctl("reload")
            r.ok(p.returncode == 0 and a.attr("nr_requests") == "48",
                 "reload of an edited config: exit 0, nr_requests 48 in sysfs", show(p))

        with r.case("a setting fails", env):
            # Loop queues do not poll: the kernel refuses io_poll=1 (EINVAL).
            # Only when it does here is that a failure blkmqd must report.
            try:
                a.set("io_poll", "1")
                refused = a.attr("io_poll") != "1"
            except OSError:
                refused = True
            if not refused:
                diag("io_poll=1 accepted on a loop device here; exit status 6 not checked")
            else:
                env.config(good.replace("ReadAheadKB=1024", "ReadAheadKB=1024\nIOPoll=yes"))
                p = ctl("reload")
                r.ok(p.returncode == 6 and f"reload: {a.name}: 1 setting failed" in p.stderr,
                     "reload with IOPoll=yes on loop devices: exit 6, failure named", show(p))
                p = ctl("apply", a.name)
                r.ok(p.returncode == 6 and p.stderr.startswith(f"blkmqctl: {a.name}: queue/io_poll: "),
                     "apply DEV: AttributeNotWritable -> exit 6, 'DEV: ATTRIBUTE: why'", show(p))
                p = ctl("show", a.name)
                r.ok(p.returncode == 0 and "failed" in p.stdout and "Notes:" in p.stdout,
                     "show: the failed setting and its note", show(p))
                env.config(good.replace("NrRequests=64", "NrRequests=48"))
                r.eq(ctl("reload").returncode, 0, "reload without IOPoll=: exit 0")

        with r.case("daemon not running", env):
            p = ctl("--address", os.path.join(rundir, "nothing-here"), "status")
            r.ok(p.returncode == 2 and "cannot connect to" in p.stderr and "is blkmqd running?" in p.stderr,
                 "status at an address nobody serves: exit 2", show(p))
            rc = d.stop()
            r.eq(rc, 0, "daemon stopped")
            p = ctl("status")
            r.ok(p.returncode == 2 and p.stderr.startswith(f"blkmqctl: cannot connect to {sock}: "),
                 "status after the daemon stopped: exit 2", show(p))

    r.finish()


if __name__ == "__main__":
    main_guard(main)
