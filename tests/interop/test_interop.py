#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Interop: blkmqd's varlink server against a client nobody here wrote, the
PyPI `varlink` package (pinned by setup-venv.sh), library and CLI.

Run with any python3: it creates/updates the venv ($BLKMQD_INTEROP_VENV, else
a directory beside this build) with setup-venv.sh and re-executes itself with
the venv's interpreter. Exit 0 pass, 1 fail, 77 skip (a skip fails under
CI=true, see blkmqtest)."""

import json
import os
import queue
import subprocess
import sys
import threading
import time

from blkmqtest import (Env, Runner, ensure_venv, main_guard, need_all, udevd, varlink_replies, wait_for,
                       log)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_IDL = os.path.join(HERE, "..", "..", "src", "varlink", "io.blkmqd.Manager.varlink")
MANAGER = "io.blkmqd.Manager"


def drop_nulls(v):
    if isinstance(v, dict):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v


def cli(venv_py, *args, timeout=30):
    return subprocess.run([venv_py, "-m", "varlink.cli"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def main():
    ensure_venv("varlink")
    import varlink  # noqa: E402  (only inside the venv)
    from importlib.metadata import version as pkg_version

    need_all()
    r = Runner("interop")
    log(f"# varlink package {pkg_version('varlink')} at {os.path.dirname(varlink.__file__)}")
    py = sys.executable

    with udevd(), Env("interop") as env:
        a = env.attach(prefix="if")
        b = env.attach(prefix="if")
        cfg = env.config(f"""\
# interop test: only this test's loop devices match
[Device interop]
MatchBackingFile={env.glob('if-*.img')}
ReadAheadKB=384
""")
        sock = os.path.join(env.tmp, "io.blkmqd")
        address = "unix:" + sock
        d = env.daemon(["--config", cfg, "--varlink-address", sock, "--log-level", "debug"])
        d.start(timeout=15)
        client = varlink.Client.new_with_address(address)

        with r.case("org.varlink.service through the package", env):
            with client.open("org.varlink.service") as svc:
                info = svc.GetInfo()
                r.ok(set(info.get("interfaces", [])) >= {"org.varlink.service", MANAGER},
                     "GetInfo lists org.varlink.service and io.blkmqd.Manager", info)
                r.ok(all(isinstance(info.get(k), str) for k in ("vendor", "product", "version", "url")),
                     "GetInfo: vendor, product, version, url are strings", info)
                desc = svc.GetInterfaceDescription(MANAGER)["description"]
                with open(SRC_IDL) as f:
                    r.eq(desc, f.read(), "GetInterfaceDescription returns src/varlink/io.blkmqd.Manager.varlink verbatim")
                sdesc = svc.GetInterfaceDescription("org.varlink.service")["description"]
                siface = varlink.Interface(sdesc)
                r.eq(siface.name, "org.varlink.service", "the package parses our org.varlink.service IDL")
                try:
                    svc.GetInterfaceDescription("io.blkmqd.Nope")
                    r.ok(False, "GetInterfaceDescription(unknown) raises")
                except varlink.VarlinkError as e:
                    r.eq((e.error(), e.parameters()),
                         ("org.varlink.service.InterfaceNotFound", {"interface": "io.blkmqd.Nope"}),
                         "GetInterfaceDescription(unknown) -> InterfaceNotFound{interface}")

        with r.case("the package parses the io.blkmqd.Manager IDL", env):
            iface = client.get_interface(MANAGER)
            methods = {n for n, m in iface.members.items() if type(m).__name__ == "_Method"}
            want = {"GetStatus", "ListDevices", "GetDevice", "Explain", "Apply", "Restore", "Reload",
                    "SetProfile", "ClearProfile", "SetLogLevel", "Monitor", "Trial", "Verify", "ListProfiles"}
            r.eq(methods, want, "all Manager methods known to the package")
            errors = {n for n, m in iface.members.items() if type(m).__name__ == "_Error"}
            r.ok(errors >= {"NoSuchDevice", "NoSuchProfile", "ConfigInvalid", "AttributeNotWritable"},
                 "Manager errors known to the package", errors)

        def conforms(method, raw_params):
            """The package filters replies through the IDL: it drops undeclared
            fields and raises on wrong types. A conforming reply passes intact."""
            iface = client.get_interface(MANAGER)
            m = iface.get_method(method)
            try:
                f = iface.filter_params("client.reply", m.out_type, False, json.loads(json.dumps(raw_params)),
                                        None)
            except varlink.VarlinkError as e:
                return False, f"package rejects the reply: {e}"
            # The package drops null fields; a null for a ?type is fine.
            want = drop_nulls(raw_params)
            return f == want, f"raw {want!r}\nfiltered {f!r}"

        with client.open(MANAGER) as mgr:
            with r.case("GetStatus", env):
                st = mgr.GetStatus()
                r.eq(st.get("state"), "running", "GetStatus: state running")
                r.ok(st.get("managed", 0) >= 2 and st.get("devices", 0) >= 2,
                     "GetStatus: devices/managed count our two loop devices", st)
                raw = varlink_replies(sock, MANAGER + ".GetStatus")
                good, why = conforms("GetStatus", raw[0]["parameters"])
                r.ok(good, "GetStatus reply passes the package's IDL filter unchanged "
                     "(no undeclared field, no wrong type)", why)

            with r.case("GetDevice on a loop device", env):
                dev = mgr.GetDevice(a.name)["device"]
                r.eq((dev.get("device"), dev.get("backingFile"), dev.get("managed")),
                     (a.name, a.backing, True), "GetDevice: name, backingFile, managed")
                r.eq(dev.get("matched"), ["interop"], "GetDevice: matched [Device interop]")
                ra = [k for k in dev.get("knobs", []) if k.get("attribute") == "queue/read_ahead_kb"]
                r.ok(ra and ra[0].get("wanted") == "384" and ra[0].get("current") == "384",
                     "GetDevice: knob read_ahead_kb wanted=current=384", dev.get("knobs"))
                dev2 = mgr.GetDevice(a.dev)["device"]
                r.eq(dev2.get("device"), a.name, "GetDevice by /dev path")
                raw = varlink_replies(sock, MANAGER + ".GetDevice", {"device": a.name})
                good, why = conforms("GetDevice", raw[0]["parameters"])
                r.ok(good, "GetDevice reply passes the package's IDL filter unchanged", why)
                raw = varlink_replies(sock, MANAGER + ".Verify", {"device": a.name})
                good, why = conforms("Verify", raw[0]["parameters"])
                r.ok(good and raw[0]["parameters"]["devices"], "Verify reply passes the package's IDL filter unchanged",
                     why)
                raw = varlink_replies(sock, MANAGER + ".ListProfiles")
                good, why = conforms("ListProfiles", raw[0]["parameters"])
                r.ok(good, "ListProfiles reply passes the package's IDL filter unchanged", why)
                ex = mgr.Explain(b.name)
                r.ok(ex.get("device") == b.name and ex.get("managed") is True and
                     any(v.get("key") == "ReadAheadKB" and v.get("value") == "384" for v in ex.get("values", [])),
                     "Explain: ReadAheadKB=384 from [Device interop]", ex)

            with r.case("ListDevices with _more=True streams", env):
                items = list(mgr.ListDevices(_more=True))
                names = [i["device"]["device"] for i in items if i.get("device")]
                r.ok(len(items) >= 2 and {a.name, b.name} <= set(names),
                     f"ListDevices stream: {len(items)} replies incl. {a.name}, {b.name}", names)
                r.eq(len(names), len(set(names)), "ListDevices: every device once")
                raw = varlink_replies(sock, MANAGER + ".ListDevices", more=True)
                r.ok(all(m.get("continues") is True for m in raw[:-1]) and "continues" not in raw[-1],
                     "raw stream: continues on all but the last reply", raw[-2:])
                bad = [m for m in raw if not conforms("ListDevices", m["parameters"])[0]]
                r.ok(not bad, "every ListDevices reply passes the package's IDL filter", bad[:2])
                st = mgr.GetStatus()
                r.eq(len(names), st.get("devices"), "ListDevices count = GetStatus devices")

            with r.case("errors raised as varlink.VarlinkError", env):
                try:
                    mgr.GetDevice("blkmqd-no-such-device")
                    r.ok(False, "GetDevice(missing) raises")
                except varlink.VarlinkError as e:
                    r.eq((e.error(), e.parameters()),
                         ("io.blkmqd.Manager.NoSuchDevice", {"device": "blkmqd-no-such-device"}),
                         "GetDevice(missing) -> io.blkmqd.Manager.NoSuchDevice{device}")
                r.eq(mgr.GetStatus().get("state"), "running", "the connection serves on after an error")

                # A wrong-typed parameter: the package checks types against the
                # IDL it fetched, so give it a definition in which device is an
                # int; the server must answer InvalidParameter for "device".
                fake = varlink.Interface(f"interface {MANAGER}\n"
                                         "method GetDevice(device: int) -> (device: object)\n")
                with varlink.SimpleClientInterfaceHandler(fake, client.open_connection()) as wrong:
                    try:
                        wrong.GetDevice(42)
                        r.ok(False, "GetDevice(device: 42) raises")
                    except varlink.InvalidParameter as e:
                        r.eq((e.error(), e.parameters()),
                             ("org.varlink.service.InvalidParameter", {"parameter": "device"}),
                             "GetDevice(device: 42) -> varlink.InvalidParameter{parameter: device}")
                    except varlink.VarlinkError as e:
                        r.ok(False, "GetDevice(device: 42) raises varlink.InvalidParameter", e.as_dict())
                fake2 = varlink.Interface(f"interface {MANAGER}\nmethod ListDevices() -> (device: object)\n"
                                          "method Frobnicate() -> ()\n")
                with varlink.SimpleClientInterfaceHandler(fake2, client.open_connection()) as c2:
                    try:
                        c2.ListDevices()
                        r.ok(False, "ListDevices without more raises")
                    except varlink.VarlinkError as e:
                        r.eq(e.error(), "org.varlink.service.ExpectedMore", "ListDevices without more -> ExpectedMore")
                    try:
                        c2.Frobnicate()
                        r.ok(False, "unknown method raises")
                    except varlink.VarlinkError as e:
                        r.eq((e.error(), e.parameters()), ("org.varlink.service.MethodNotFound",
                                                           {"method": MANAGER + ".Frobnicate"}),
                             "unknown method -> MethodNotFound{method}")

            with r.case("oneway through the package", env):
                r.eq(mgr.GetStatus(_oneway=True), None, "GetStatus(_oneway=True) returns nothing")
                r.eq(mgr.GetDevice(b.name)["device"]["device"], b.name,
                     "next call on the same connection gets its own reply (no stray reply of the oneway call)")

        with r.case("python -m varlink.cli", env):
            p = cli(py, "info", address)
            r.ok(p.returncode == 0 and MANAGER in p.stdout and "org.varlink.service" in p.stdout,
                 "cli info lists the interfaces", [p.returncode, p.stdout, p.stderr])
            p = cli(py, "help", f"{address}/{MANAGER}")
            r.ok(p.returncode == 0 and f"interface {MANAGER}" in p.stdout and "method GetDevice" in p.stdout,
                 "cli help prints the Manager IDL", [p.returncode, p.stdout[:400], p.stderr])
            p = cli(py, "call", f"{address}/{MANAGER}.GetStatus", "{}")
            try:
                out = json.loads(p.stdout)
            except ValueError:
                out = None
            r.ok(p.returncode == 0 and out and out.get("state") == "running",
                 "cli call GetStatus '{}' prints the status", [p.returncode, p.stdout, p.stderr])
            p = cli(py, "call", "--more", f"{address}/{MANAGER}.ListDevices", "{}")
            r.ok(p.returncode == 0 and f'"{a.name}"' in p.stdout and f'"{b.name}"' in p.stdout,
                 "cli call --more ListDevices streams our devices", [p.returncode, p.stdout[-400:], p.stderr])
            p = cli(py, "call", f"{address}/{MANAGER}.GetDevice", '{"device": "blkmqd-no-such-device"}')
            r.ok("io.blkmqd.Manager.NoSuchDevice" in p.stderr and "blkmqd-no-such-device" in p.stderr,
                 "cli call GetDevice(missing) reports NoSuchDevice", [p.returncode, p.stdout, p.stderr])

        with r.case("Monitor with more sees a hotplug applied", env):
            mon = client.open(MANAGER)
            events = queue.Queue()

            def reader():
                try:
                    for ev in mon.Monitor(_more=True):
                        events.put(ev)
                except Exception as e:  # BrokenPipeError when we close it
                    events.put(e)

            t = threading.Thread(target=reader, daemon=True)
            t.start()
            try:
                first = events.get(timeout=10)
            except queue.Empty:
                first = None
            r.eq(first, {"event": "subscribed"}, "Monitor: first reply {event: subscribed}")
            c = env.attach(prefix="if")
            seen = []
            deadline = time.monotonic() + 15
            applied = None
            while time.monotonic() < deadline and not applied:
                try:
                    ev = events.get(timeout=max(0.1, deadline - time.monotonic()))
                except queue.Empty:
                    break
                seen.append(ev)
                if isinstance(ev, dict) and ev.get("event") == "applied" and ev.get("device") == c.name:
                    applied = ev
            r.ok(applied is not None, f"Monitor: 'applied' event for hotplugged {c.name}", seen, d)
            if applied:
                res = applied.get("result") or {}
                r.ok(res.get("device") == c.name and res.get("failed") == 0 and res.get("changed", 0) >= 1,
                     "applied event carries the Result (changed >= 1, failed 0)", applied)
            r.ok(wait_for(lambda: c.attr("read_ahead_kb") == "384", 5),
                 f"{c.name}: read_ahead_kb=384 applied", c.attr("read_ahead_kb"))
            # A second client's Reload shows up on the stream too.
            with client.open(MANAGER) as m2:
                res = m2.Reload()
                r.ok(isinstance(res.get("results"), list), "Reload through the package", res)
            ev = None
            try:
                while True:
                    ev = events.get(timeout=10)
                    if not isinstance(ev, dict) or ev.get("event") == "reloaded":
                        break
            except queue.Empty:
                pass
            r.eq(ev, {"event": "reloaded"}, "Monitor: 'reloaded' event")
            mon.close()
            t.join(5)
            r.ok(not t.is_alive(), "Monitor reader ends once the connection is closed")
            with client.open(MANAGER) as m3:
                st = m3.GetStatus()
                r.ok(st.get("state") == "running" and st.get("managed", 0) >= 3,
                     "daemon serves on after the monitor went away (3 managed)", st)

        with r.case("daemon healthy at the end", env):
            r.ok(d.alive(), "blkmqd still running", daemon=d)
            r.eq(d.error_lines(), [], "no error-level log lines", daemon=d)
            rc = d.stop()
            r.eq(rc, 0, "SIGTERM: exit 0", daemon=d)
    r.finish()


if __name__ == "__main__":
    main_guard(main)
