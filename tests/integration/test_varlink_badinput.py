#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Bad input on the varlink socket: a table of hostile or broken messages,
each with the outcome src/varlink/varlink.h specifies (an exact error name and
parameters, or the connection closed), and after each one proof that the
daemon still serves (GetStatus on a fresh connection), that nothing changed
(the test loop device's sysfs knobs, GetStatus counters, GetDevice's apply
history) and that the daemon's fd count is back where it was (no leaked
connection or passed fd).

Also: framing limits (16 MiB, exactly 16 MiB), fd passing (SCM_RIGHTS),
pipelining, oneway/more/upgrade, a stalled client, a client that does not
read, 2,000 connections against the per-uid limit, an unprivileged caller
(uid/gid 65534) of every mutating method, and a daemon running with the
soft RLIMIT_NOFILE systemd gives services (1024).

Standalone: exit 0 pass, 1 fail, 77 skip (a skip fails under CI=true)."""

import json
import os
import resource
import select
import socket
import time

from blkmqtest import (Env, Runner, log, main_guard, need_all, udevd, wait_for)
from blkmqtest import run as bt_run

M = "io.blkmqd.Manager."
S = "org.varlink.service."
MIB = 1024 * 1024
MESSAGE_MAX = 16 * MIB          # VARLINK_MESSAGE_SIZE_MAX
PER_UID_MAX = 1024              # VARLINK_CONNECTIONS_PER_UID_MAX
REFUSED_MAX = 64                # VARLINK_REFUSED_MAX
FDS_MAX = 16                    # VARLINK_FDS_MAX
NOBODY = 65534
TIMEOUT = 3.0


def msg(method, params=None, **flags):
    m = {"method": method}
    if params is not None:
        m["parameters"] = params
    m.update(flags)
    return json.dumps(m).encode() + b"\0"


def err(name, **params):
    return {"error": name, "parameters": params}


def invalid(parameter):
    return err(S + "InvalidParameter", parameter=parameter)


class Conn:
    """A raw varlink connection: bytes in, parsed replies (or EOF) out."""

    def __init__(self, path, timeout=TIMEOUT):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.buf = b""
        self.eof = False

    def send(self, data, fds=None):
        """False if the peer closed while we were writing."""
        try:
            if fds:
                n = socket.send_fds(self.s, [data], fds)
                if n < len(data):
                    self.s.sendall(data[n:])
            else:
                self.s.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            self.eof = True
            return False

    def recv(self, n=1, timeout=TIMEOUT):
        """Up to n messages; stops early at EOF or after timeout seconds."""
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            if b"\0" in self.buf:
                m, self.buf = self.buf.split(b"\0", 1)
                out.append(json.loads(m))
                continue
            if self.eof:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.s.settimeout(left)
            try:
                d = self.s.recv(1 << 20)
            except socket.timeout:
                break
            except ConnectionResetError:
                d = b""
            if not d:
                self.eof = True
            self.buf += d
        return out

    def call(self, data, n=1, timeout=TIMEOUT):
        self.send(data)
        return self.recv(n, timeout)

    def call_more(self, data, timeout=TIMEOUT):
        """All replies of one "more" call, up to the one without continues."""
        self.send(data)
        out = []
        while not out or out[-1].get("continues"):
            got = self.recv(1, timeout)
            if not got:
                break
            out += got
        return out

    def closed(self, timeout=TIMEOUT):
        """(closed by the peer within timeout, messages received before)."""
        got = self.recv(1 << 30, timeout)
        return self.eof, got

    def close(self):
        self.s.close()


def fd_count(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def pipe_closed_by_peer(rfd, timeout=TIMEOUT):
    """True once every copy of the write end is closed (read gives EOF)."""
    r, _, _ = select.select([rfd], [], [], timeout)
    return bool(r) and os.read(rfd, 1) == b""


def main():
    need_all()
    r = Runner("integration")
    with udevd(), Env("vlbad") as env:
        os.chmod(env.tmp, 0o711)   # uid 65534 must reach the socket (mode 0666)
        a = env.attach(prefix="bad")
        bt_run(["udevadm", "settle", "--timeout=10"], check=False)
        cfg = env.config(f"""\
# varlink bad-input test: only this test's loop device matches.
[Device vlbad]
MatchBackingFile={env.glob('bad-*.img')}
ReadAheadKB=768
""")
        sock = os.path.join(env.tmp, "io.blkmqd")
        d = env.daemon(["--config", cfg, "--varlink-address", sock])
        d.start(timeout=15)
        pid = d.pid()

        def status():
            c = Conn(sock)
            try:
                rep = c.call(msg(M + "GetStatus"))
                dev = c.call(msg(M + "GetDevice", {"device": a.name}))
            finally:
                c.close()
            return rep, dev

        def state():
            rep, dev = status()
            st = rep[0].get("parameters", {}) if rep else {}
            dv = dev[0].get("parameters", {}).get("device", {}) if dev else {}
            return {
                "status": {k: st.get(k) for k in ("state", "profile", "configFiles", "managed", "changed",
                                                  "failed")},
                "device": {k: dv.get(k) for k in ("managed", "matched", "profile", "knobs", "jobs",
                                                  "failedJobs", "lastAppliedUsec")},
                "sysfs": a.snapshot(),
            }

        # The attach's uevents may still reach the daemon after READY=1 and
        # re-apply (jobs += 1): the baseline is taken once that settled.
        bt_run(["udevadm", "settle", "--timeout=10"], check=False)
        base = state()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.3)
            again = state()
            if again == base:
                break
            base = again
        if not (base["status"]["state"] == "running" and base["status"]["managed"] == 1 and
                base["device"]["jobs"] and a.attr("read_ahead_kb") == "768"):
            r.ok(False, "baseline: daemon running, loop device managed and tuned", base, d)
            r.finish()
        base_fds = fd_count(pid)
        log(f"# baseline: blkmqd pid {pid}, {base_fds} fds, {a.name} read_ahead_kb=768")

        def healthy(name):
            """The daemon serves, nothing changed, no fd leaked."""
            problems = []
            if not d.alive():
                r.ok(False, f"{name}: daemon still running", daemon=d)
                return
            try:
                now = state()
            except OSError as e:
                r.ok(False, f"{name}: GetStatus on a fresh connection: {e}", daemon=d)
                return
            if now["status"]["state"] != "running":
                problems.append(f"GetStatus: {now['status']}")
            for k in ("status", "device"):
                for f in base[k]:
                    if now[k][f] != base[k][f]:
                        problems.append(f"{k}.{f}: {base[k][f]!r} -> {now[k][f]!r}")
            diff = [f"sysfs {k}: {base['sysfs'].get(k)!r} -> {now['sysfs'].get(k)!r}"
                    for k in sorted(set(base["sysfs"]) | set(now["sysfs"]))
                    if base["sysfs"].get(k) != now["sysfs"].get(k)]
            problems += diff
            wait_for(lambda: fd_count(pid) <= base_fds, 3)
            if fd_count(pid) > base_fds:
                problems.append(f"daemon fds {base_fds} -> {fd_count(pid)}: "
                                f"{sorted(os.readlink(f'/proc/{pid}/fd/{x}') for x in os.listdir(f'/proc/{pid}/fd'))}")
            r.ok(not problems, f"{name}: daemon serves, state and fds unchanged", problems, d if problems else None)

        def case(name, fn):
            t0 = time.monotonic()
            with r.case(name, env):
                fn(name)
            healthy(name)
            dt = time.monotonic() - t0
            if dt > 0.5:
                log(f"# ({name}: {dt:.1f} s)")

        # -------------------------------------------------------- the table
        # (name, bytes to send, expected): a dict = that exact single reply
        # (then the connection must still answer GetStatus), "closed" = no
        # reply and EOF.
        table = [
            # framing and JSON
            ("malformed JSON", b'{"method":"io.blkmqd.Manager.GetStatus"\0', "closed"),
            ("garbage, not JSON", b"hello varlink\0", "closed"),
            ("empty message (lone NUL)", b"\0", "closed"),
            ("invalid UTF-8 in a string", b'{"method":"io.blkmqd.Manager.GetDevice","parameters":'
                                          b'{"device":"\xff\xfe"}}\0', "closed"),
            ("\\u0000 inside a string", b'{"method":"io.blkmqd.Manager.GetDevice","parameters":'
                                        b'{"device":"a\\u0000b"}}\0', "closed"),
            ("trailing data after the object", msg(M + "GetStatus")[:-1] + b"{}\0", "closed"),
            ("deeply nested JSON (200k levels)", b'{"method":"io.blkmqd.Manager.GetStatus","parameters":{"x":'
                                                 + b"[" * 200000 + b"]" * 200000 + b"}}\0", "closed"),
            # message shape
            ("non-object message: array", b'[{"method":"io.blkmqd.Manager.GetStatus"}]\0', "closed"),
            ("non-object message: string", b'"io.blkmqd.Manager.GetStatus"\0', "closed"),
            ("non-object message: number", b"42\0", "closed"),
            ("missing method", b'{"parameters":{}}\0', "closed"),
            ("method not a string (number)", b'{"method":42}\0', "closed"),
            ("method not a string (null)", b'{"method":null}\0', "closed"),
            ("method not a string (object)", b'{"method":{"name":"GetStatus"}}\0', "closed"),
            ("non-boolean more", msg(M + "GetStatus", more="yes"), "closed"),
            ("non-boolean oneway", msg(M + "GetStatus", oneway=1), "closed"),
            ("oneway and more together", msg(M + "GetStatus", oneway=True, more=True), "closed"),
            ("oneway and more together on a streaming method", msg(M + "ListDevices", oneway=True, more=True),
             "closed"),
            # names
            ("unknown interface", msg("io.blkmqd.Nope.GetStatus"),
             err(S + "InterfaceNotFound", interface="io.blkmqd.Nope")),
            ("unknown method", msg(M + "Nope"), err(S + "MethodNotFound", method=M + "Nope")),
            ("method name is case sensitive", msg(M + "getstatus"), err(S + "MethodNotFound", method=M + "getstatus")),
            ("method without interface", msg("GetStatus"), err(S + "MethodNotFound", method="GetStatus")),
            ("method with empty member", msg(M), err(S + "MethodNotFound", method=M)),
            ("GetInterfaceDescription of an unknown interface",
             msg(S + "GetInterfaceDescription", {"interface": "io.blkmqd.Nope"}),
             err(S + "InterfaceNotFound", interface="io.blkmqd.Nope")),
            ("GetInterfaceDescription interface: 1", msg(S + "GetInterfaceDescription", {"interface": 1}),
             invalid("interface")),
            ("GetInterfaceDescription without parameters", msg(S + "GetInterfaceDescription"),
             invalid("interface")),
            # wrong parameter types, for every Manager method with parameters
            ("GetDevice device: 42", msg(M + "GetDevice", {"device": 42}), invalid("device")),
            ("GetDevice device: true", msg(M + "GetDevice", {"device": True}), invalid("device")),
            ("GetDevice device: []", msg(M + "GetDevice", {"device": []}), invalid("device")),
            ("GetDevice device: {}", msg(M + "GetDevice", {"device": {"name": a.name}}), invalid("device")),
            ("Explain device: 1.5", msg(M + "Explain", {"device": 1.5}), invalid("device")),
            ("Apply device: 1", msg(M + "Apply", {"device": 1}), invalid("device")),
            ("Apply device: [name]", msg(M + "Apply", {"device": [a.name]}), invalid("device")),
            ("Restore device: false", msg(M + "Restore", {"device": False}), invalid("device")),
            ("SetProfile profile: 7", msg(M + "SetProfile", {"profile": 7}), invalid("profile")),
            ("SetLogLevel level: 3", msg(M + "SetLogLevel", {"level": 3}), invalid("level")),
            # missing / null for non-nullable parameters
            ("GetDevice without device", msg(M + "GetDevice", {}), invalid("device")),
            ("GetDevice device: null", msg(M + "GetDevice", {"device": None}), invalid("device")),
            ("Explain without parameters", msg(M + "Explain"), invalid("device")),
            ("SetProfile profile: null", msg(M + "SetProfile", {"profile": None}), invalid("profile")),
            ("SetLogLevel level: null", msg(M + "SetLogLevel", {"level": None}), invalid("level")),
            # extra unknown fields
            ("GetStatus with an unknown parameter", msg(M + "GetStatus", {"bogus": 1}), invalid("bogus")),
            ("GetDevice with an unknown parameter", msg(M + "GetDevice", {"device": a.name, "bogus": 1}),
             invalid("bogus")),
            ("Reload with an unknown parameter", msg(M + "Reload", {"bogus": True}), invalid("bogus")),
            ("ClearProfile with an unknown parameter", msg(M + "ClearProfile", {"bogus": "x"}),
             invalid("bogus")),
            ("ListDevices (more) with an unknown parameter", msg(M + "ListDevices", {"bogus": 1}, more=True),
             invalid("bogus")),
            ("parameters is an array", msg(M + "GetStatus", [1]), invalid("parameters")),
            ("parameters is a string", msg(M + "GetDevice", a.name), invalid("parameters")),
            # well-formed, but naming nothing
            ("GetDevice of a missing device", msg(M + "GetDevice", {"device": "nope0n1"}),
             err(M + "NoSuchDevice", device="nope0n1")),
            ("GetDevice device: \"\"", msg(M + "GetDevice", {"device": ""}), err(M + "NoSuchDevice", device="")),
            ("Explain of a missing device", msg(M + "Explain", {"device": "/dev/nope"}),
             err(M + "NoSuchDevice", device="/dev/nope")),
            ("Apply of a missing device", msg(M + "Apply", {"device": "nope0n1"}),
             err(M + "NoSuchDevice", device="nope0n1")),
            ("Restore of a missing device", msg(M + "Restore", {"device": "nope0n1"}),
             err(M + "NoSuchDevice", device="nope0n1")),
            ("SetProfile of a missing profile", msg(M + "SetProfile", {"profile": "nope"}),
             err(M + "NoSuchProfile", profile="nope")),
            ("SetLogLevel level: \"loud\"", msg(M + "SetLogLevel", {"level": "loud"}), invalid("level")),
            ("SetLogLevel level: \"\"", msg(M + "SetLogLevel", {"level": ""}), invalid("level")),
            # flags
            ("upgrade", msg(M + "GetStatus", upgrade=True), err(S + "MethodNotImplemented", method=M + "GetStatus")),
            ("upgrade of an unknown method: MethodNotFound first", msg(M + "Nope", upgrade=True),
             err(S + "MethodNotFound", method=M + "Nope")),
            ("ListDevices without more", msg(M + "ListDevices"), err(S + "ExpectedMore")),
            ("ListDevices with more: false", msg(M + "ListDevices", more=False), err(S + "ExpectedMore")),
            ("Monitor without more", msg(M + "Monitor"), err(S + "ExpectedMore")),
            ("ExpectedMore comes before InvalidParameter", msg(M + "ListDevices", {"bogus": 1}),
             err(S + "ExpectedMore")),
        ]

        def table_case(data, want):
            def fn(name):
                c = Conn(sock)
                try:
                    c.send(data)
                    if want == "closed":
                        closed, got = c.closed()
                        r.ok(closed and not got, f"{name}: connection closed without a reply",
                             f"closed={closed} got={got}", d)
                    else:
                        got = c.recv(1)
                        r.eq(got, [want], f"{name}: {want['error']} {json.dumps(want['parameters'])}"
                             if "error" in want else name, d)
                        # Replies come in order: a stray second reply would
                        # arrive before GetStatus's.
                        after = c.call(msg(M + "GetStatus"))
                        r.ok(len(after) == 1 and after[0].get("parameters", {}).get("state") == "running",
                             f"{name}: no further reply; the same connection answers the next call", after)
                finally:
                    c.close()
            return fn

        for name, data, want in table:
            case(name, table_case(data, want))

        # ------------------------------------------------ well-formed oddities
        def ok_reply(rep):
            return len(rep) == 1 and "error" not in rep[0] and "continues" not in rep[0]

        def unknown_toplevel(name):
            c = Conn(sock)
            rep = c.call(msg(M + "GetStatus", foo=1, extra={"x": [1]}))
            r.ok(ok_reply(rep) and rep[0]["parameters"].get("state") == "running",
                 f"{name}: ignored, GetStatus answered", rep)
            c.close()
        case("unknown top-level message fields", unknown_toplevel)

        def null_params(name):
            c = Conn(sock)
            rep = c.call(b'{"method":"io.blkmqd.Manager.GetStatus","parameters":null,"more":null}\0')
            r.ok(ok_reply(rep), f"{name}: null parameters/flags are as absent", rep)
            c.close()
        case("\"parameters\": null and \"more\": null", null_params)

        def more_nonstreaming(name):
            # varlink.h: "continues" only for a caller that set "more"; a
            # method that does not stream replies once, with no "continues".
            # The GetInfo sent behind each call must be answered next.
            c = Conn(sock)
            info = msg(S + "GetInfo")
            rep = c.call(msg(M + "GetStatus", more=True) + info, n=2)
            r.ok(len(rep) == 2 and ok_reply(rep[:1]) and "state" in rep[0]["parameters"] and
                 "interfaces" in rep[1]["parameters"],
                 f"{name}: GetStatus: exactly one final reply, no continues", rep)
            rep = c.call(msg(M + "GetDevice", {"device": a.name}, more=True) + info, n=2)
            r.ok(len(rep) == 2 and ok_reply(rep[:1]) and rep[0]["parameters"]["device"]["device"] == a.name and
                 "interfaces" in rep[1]["parameters"],
                 f"{name}: GetDevice: exactly one final reply, no continues", rep)
            rep = c.call(msg(M + "GetDevice", {"device": "nope0n1"}, more=True) + info, n=2)
            r.ok(len(rep) == 2 and rep[0] == err(M + "NoSuchDevice", device="nope0n1") and
                 "interfaces" in rep[1]["parameters"], f"{name}: errors are final too", rep)
            c.close()
        case("more on methods that do not stream", more_nonstreaming)

        def oneway(name):
            c = Conn(sock)
            c.send(msg(M + "GetStatus", oneway=True))
            c.send(msg(M + "GetDevice", {"device": "nope0n1"}, oneway=True))       # an error: dropped too
            c.send(msg(M + "GetDevice", {"device": 5}, oneway=True))               # InvalidParameter: dropped
            c.send(msg(M + "ListDevices", oneway=True))                            # ExpectedMore: dropped
            rep = c.call(msg(M + "GetDevice", {"device": a.name}) + msg(S + "GetInfo"), n=2)
            rep = rep[:1] if len(rep) == 2 and "interfaces" in rep[1].get("parameters", {}) else rep
            r.ok(len(rep) == 1 and rep[0].get("parameters", {}).get("device", {}).get("device") == a.name,
                 f"{name}: no reply to 4 oneway calls; the next call on the connection gets its own", rep)
            c.close()
        case("oneway", oneway)

        def pipelined(name):
            c = Conn(sock)
            c.send(msg(M + "GetDevice", {"device": a.name}) + msg(M + "GetDevice", {"device": "nope0n1"}) +
                   msg(M + "GetStatus", oneway=True) + msg(M + "ListDevices", more=True) +
                   msg(S + "GetInterfaceDescription", {"interface": "io.blkmqd.Nope"}) + msg(M + "Explain", {"device": 1}) +
                   msg(S + "GetInfo"))
            rep = []
            while not rep or "interfaces" not in rep[-1].get("parameters", {}):   # GetInfo's reply ends it
                got = c.recv(1)
                if not got:
                    break
                rep += got
            names = []
            for m in rep:
                if "error" in m:
                    names.append(m["error"].rsplit(".", 1)[1])
                elif "device" in m["parameters"] and isinstance(m["parameters"]["device"], dict) and \
                        "knobs" in m["parameters"]["device"]:
                    names.append("Device")
                elif "device" in m["parameters"] or m.get("continues"):
                    names.append("Summary+" if m.get("continues") else "Summary")
                elif "interfaces" in m["parameters"]:
                    names.append("Info")
                else:
                    names.append("?")
            collapsed = [x for i, x in enumerate(names) if i == 0 or not (x == "Summary+" and names[i - 1] == x)]
            r.eq(collapsed, ["Device", "NoSuchDevice", "Summary+", "Summary", "InterfaceNotFound",
                             "InvalidParameter", "Info"], f"{name}: 7 calls in one write answered in order", d)
            c.close()
        case("pipelined calls in one write", pipelined)

        def at_limit(name):
            head = msg(M + "GetStatus")[:-2]          # without the closing brace and NUL
            pad = MESSAGE_MAX - len(head) - 1
            c = Conn(sock, timeout=20)
            c.send(head + b" " * pad + b"}\0")
            rep = c.recv(1, timeout=20)
            r.ok(ok_reply(rep), f"{name}: a {MESSAGE_MAX}-byte message (the limit) is served", rep, d)
            c.close()
        case("message of exactly 16 MiB", at_limit)

        def over_limit(name):
            head = msg(M + "GetStatus")[:-2]
            pad = MESSAGE_MAX + 1 - len(head) - 1
            c = Conn(sock, timeout=20)
            c.send(head + b" " * pad + b"}\0")
            closed, got = c.closed(10)
            r.ok(closed and not got, f"{name}: 16 MiB + 1 byte message: connection closed", got, d)
            c.close()
            c = Conn(sock, timeout=20)
            sent = c.send(b'{"method":"io.blkmqd.Manager.GetStatus","parameters":{"x":"' + b"a" * (MESSAGE_MAX + 2 * MIB))
            closed, got = c.closed(10)
            r.ok(closed and not got, f"{name}: 18 MiB without a NUL: connection closed (writer got EPIPE: "
                 f"{not sent})", got, d)
            c.close()
        case("message of 16 MiB + 1", over_limit)

        def half_then_close(name):
            c = Conn(sock)
            c.send(msg(M + "GetStatus")[:-5])
            c.s.shutdown(socket.SHUT_WR)
            closed, got = c.closed()
            r.ok(closed and not got, f"{name}: no reply to a message without NUL, connection closed at EOF", got, d)
            c.close()
            c = Conn(sock)
            c.send(msg(M + "GetStatus")[:-1])           # complete JSON, only the NUL missing
            c.close()
        case("no NUL terminator, then EOF", half_then_close)

        def call_then_shutdown(name):
            c = Conn(sock)
            c.send(msg(M + "GetDevice", {"device": a.name}) + msg(M + "GetStatus", oneway=True) +
                   msg(M + "GetStatus"))
            c.s.shutdown(socket.SHUT_WR)
            closed, got = c.closed()
            r.ok(closed and len(got) == 2 and "device" in got[0].get("parameters", {}) and
                 "state" in got[1].get("parameters", {}),
                 f"{name}: both replies arrive, then EOF", got, d)
            c.close()
        case("calls, then shutdown(SHUT_WR)", call_then_shutdown)

        def stalled(name):
            slow = Conn(sock)
            slow.send(msg(M + "GetStatus")[:20])
            big = Conn(sock, timeout=20)
            big.send(b'{"method":"io.blkmqd.Manager.GetStatus","parameters":{"x":"' + b"a" * (8 * MIB))
            time.sleep(0.2)
            t0 = time.monotonic()
            c = Conn(sock)
            rep = c.call(msg(M + "GetStatus"))
            dt = time.monotonic() - t0
            r.ok(ok_reply(rep) and dt < 1.0, f"{name}: another client is served while two stall mid-message "
                 f"({dt * 1000:.1f} ms)", rep, d)
            c.close()
            slow.send(msg(M + "GetStatus")[20:])
            rep = slow.recv(1)
            r.ok(ok_reply(rep), f"{name}: the stalled client's message, once complete, is served", rep, d)
            big.send(b'"}}\0')
            rep = big.recv(1, 10)
            r.eq(rep, [invalid("x")], f"{name}: the 8 MiB message, once complete, is answered", d)
            slow.close()
            big.close()
        case("half a message, then a stall", stalled)

        def no_reader(name):
            # The daemon buffers replies up to 17 MiB for a peer that does not
            # read, then drops it.
            c = Conn(sock, timeout=10)
            c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            one = msg(M + "GetDevice", {"device": a.name})
            n = 0
            t0 = time.monotonic()
            while n < 100000 and time.monotonic() - t0 < 20:
                if not c.send(one * 100):
                    break
                n += 100
            closed, _ = c.closed(10)
            r.ok(c.eof and closed, f"{name}: connection dropped after {n} unread replies "
                 f"({time.monotonic() - t0:.1f} s)", None, d)
            c.close()
        case("a client that never reads its replies", no_reader)

        # -------------------------------------------------------------- fds
        def fds_refused(name):
            rfd, wfd = os.pipe()
            c = Conn(sock)
            c.send(msg(M + "GetStatus"), fds=[wfd, wfd])
            os.close(wfd)
            rep = c.recv(1)
            r.eq(rep, [invalid("fileDescriptors")], f"{name}: GetStatus + 2 fds -> InvalidParameter fileDescriptors")
            r.ok(pipe_closed_by_peer(rfd), f"{name}: the daemon closed the fds it was sent")
            os.close(rfd)
            rfd, wfd = os.pipe()
            c.send(msg(M + "GetDevice", {"device": 5}), fds=[wfd])
            os.close(wfd)
            rep = c.recv(1)
            r.eq(rep, [invalid("fileDescriptors")], f"{name}: fds are refused before parameters are checked")
            r.ok(pipe_closed_by_peer(rfd), f"{name}: ... and closed")
            os.close(rfd)
            rep = c.call(msg(M + "GetStatus"))
            r.ok(ok_reply(rep), f"{name}: the connection serves on", rep)
            c.close()
        case("fds passed to a method that takes none", fds_refused)

        def fds_max(name):
            rfd, wfd = os.pipe()
            c = Conn(sock)
            c.send(msg(M + "GetStatus"), fds=[wfd] * FDS_MAX)
            rep = c.recv(1)
            r.eq(rep, [invalid("fileDescriptors")], f"{name}: {FDS_MAX} fds: InvalidParameter fileDescriptors")
            c.close()
            c = Conn(sock)
            c.send(msg(M + "GetStatus"), fds=[wfd] * (FDS_MAX + 1))
            os.close(wfd)
            closed, got = c.closed()
            r.ok(closed and not got, f"{name}: {FDS_MAX + 1} fds: connection closed", got, d)
            r.ok(pipe_closed_by_peer(rfd), f"{name}: every passed fd closed")
            os.close(rfd)
            c.close()
        case("more than 16 fds", fds_max)

        def fds_misplaced(name):
            rfd, wfd = os.pipe()
            c = Conn(sock)
            full = msg(M + "GetStatus")
            c.send(full[:15])
            time.sleep(0.3)                           # the daemon reads the first part alone
            c.send(full[15:], fds=[wfd])
            os.close(wfd)
            closed, got = c.closed()
            r.ok(closed and not got, f"{name}: fds not on the message's first byte: connection closed", got, d)
            r.ok(pipe_closed_by_peer(rfd), f"{name}: the fd closed")
            os.close(rfd)
            c.close()
            rfd, wfd = os.pipe()
            c = Conn(sock)
            c.send(b"not json\0", fds=[wfd])
            os.close(wfd)
            closed, got = c.closed()
            r.ok(closed and not got and pipe_closed_by_peer(rfd), f"{name}: fds with invalid JSON: closed, fd closed",
                 got, d)
            os.close(rfd)
            c.close()
        case("fds out of place", fds_misplaced)

        # -------------------------------------------------- unprivileged
        def as_nobody(fn):
            """Runs fn() in a child with uid/gid 65534; returns its JSON result."""
            rfd, wfd = os.pipe()
            child = os.fork()
            if child == 0:
                code = 0
                try:
                    os.close(rfd)
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    out = json.dumps(fn()).encode()
                except BaseException as e:  # noqa: B036 - report anything to the parent
                    out = json.dumps({"exception": repr(e)}).encode()
                    code = 1
                try:
                    os.write(wfd, out)
                finally:
                    os._exit(code)
            os.close(wfd)
            data = b""
            while True:
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                data += chunk
            os.close(rfd)
            os.waitpid(child, 0)
            return json.loads(data or b"null")

        mutating = [
            ("Apply", {}), ("Apply", {"device": a.name}), ("Restore", {}), ("Restore", {"device": a.name}),
            ("Reload", {}), ("SetProfile", {"profile": "turbo"}), ("ClearProfile", {}),
            ("SetLogLevel", {"level": "debug"}),
            ("SetLogLevel", {"level": 3}),                 # PermissionDenied comes before InvalidParameter
            ("Apply", {"device": 5}),
        ]
        reads = [(M + "GetStatus", None, False), (M + "GetDevice", {"device": a.name}, False),
                 (M + "Explain", {"device": a.name}, False), (M + "ListDevices", None, True),
                 (S + "GetInfo", None, False), (S + "GetInterfaceDescription", {"interface": "io.blkmqd.Manager"},
                                                False)]

        def unprivileged(name):
            def child():
                out = {"mutating": [], "reads": []}
                c = Conn(sock)
                for meth, params in mutating:
                    out["mutating"].append([meth, params, c.call(msg(M + meth, params))])
                for meth, params, more in reads:
                    rep = (c.call_more(msg(meth, params, more=True)) if more else c.call(msg(meth, params)))
                    out["reads"].append([meth, rep])
                c.close()
                mon = Conn(sock)
                out["monitor"] = mon.call(msg(M + "Monitor", more=True))
                mon.close()
                return out

            res = as_nobody(child)
            if "exception" in (res or {}):
                r.ok(False, f"{name}: child as uid {NOBODY}", res)
                return
            for meth, params, rep in res["mutating"]:
                r.eq(rep, [err(S + "PermissionDenied")], f"{name}: {meth}({json.dumps(params)}) -> PermissionDenied")
            for meth, rep in res["reads"]:
                r.ok(rep and all("error" not in m for m in rep) and "continues" not in rep[-1],
                     f"{name}: {meth} works for uid {NOBODY}", rep[:2])
            r.eq(res["monitor"], [{"parameters": {"event": "subscribed"}, "continues": True}],
                 f"{name}: Monitor works for uid {NOBODY}")
        case("unprivileged caller (uid/gid 65534)", unprivileged)

        # ---------------------------------------------------- connections
        def many_connections(name):
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            want = 2000 + 200
            if soft < want:
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(want, soft), hard), hard))
            socks = []
            try:
                for _ in range(2000):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
                    try:
                        s.connect(sock)
                    except BlockingIOError:   # backlog full: finishes once accepted
                        pass
                    socks.append(s)

                def closed_ones():
                    out = []
                    p = select.poll()
                    for s in socks:
                        p.register(s, select.POLLIN)
                    ready = {fd for fd, _ in p.poll(0)}
                    for s in socks:
                        if s.fileno() in ready:
                            try:
                                if s.recv(1, socket.MSG_PEEK) == b"":
                                    out.append(s)
                            except ConnectionResetError:
                                out.append(s)
                            except BlockingIOError:
                                pass
                    return out
                wait_for(lambda: len(closed_ones()) >= 2000 - PER_UID_MAX - REFUSED_MAX, 10)
                time.sleep(0.3)
                closed = closed_ones()
                r.eq((2000 - len(closed), len(closed)), (PER_UID_MAX + REFUSED_MAX, 2000 - PER_UID_MAX - REFUSED_MAX),
                     f"{name}: 2000 connections from uid 0: {PER_UID_MAX} served, the newest {REFUSED_MAX} refused "
                     "ones kept to be told why, the rest closed", d)
                alive = [s for s in socks if s not in closed]
                if alive:
                    s = alive[len(alive) // 2]
                    s.setblocking(True)
                    s.settimeout(TIMEOUT)
                    s.sendall(msg(M + "GetStatus"))
                    data = b""
                    try:
                        while b"\0" not in data:
                            chunk = s.recv(65536)
                            if not chunk:
                                break
                            data += chunk
                    except socket.timeout:
                        pass
                    r.ok(b'"state":"running"' in data, f"{name}: GetStatus on one of the kept connections", data[:200])
                # one more from uid 0: over its limit, told so, then closed
                c = Conn(sock)
                c.send(msg(M + "GetStatus"))
                closed, got = c.closed()
                r.ok(closed and len(got) == 1 and got[0].get("error") == "io.blkmqd.TooManyConnections" and
                     got[0].get("parameters", {}).get("maxPerUid") == PER_UID_MAX,
                     f"{name}: a further uid 0 connection is answered TooManyConnections, then closed", got, d)
                c.close()
                # another uid is not affected by uid 0's connections
                rep = as_nobody(lambda: Conn(sock).call(msg(M + "GetStatus")))
                r.ok(isinstance(rep, list) and ok_reply(rep), f"{name}: uid {NOBODY} is still served", rep, d)
            finally:
                for s in socks:
                    s.close()
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        case("2,000 concurrent connections", many_connections)

        def systemd_nofile(name):
            # systemd starts services with LimitNOFILE=1024:524288 unless the
            # unit says otherwise (blkmqd.service does not). A local user
            # then must not be able to lock everybody out: past its 1024
            # connections its extra ones are closed and root is served.
            cfg2 = env.config("[Device none]\nMatchBackingFile=/nonexistent/*\n", name="none.conf")
            sock2 = os.path.join(env.tmp, "nofile.sock")
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
            try:
                d2 = env.daemon(["--config", cfg2, "--varlink-address", sock2], name="blkmqd-nofile")
                d2.start(timeout=15)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
            go_r, go_w = os.pipe()
            ready_r, ready_w = os.pipe()
            child = os.fork()
            if child == 0:
                try:
                    os.close(go_w)
                    os.close(ready_r)
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    held = []
                    for _ in range(PER_UID_MAX + 100):
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
                        try:
                            s.connect(sock2)
                        except BlockingIOError:
                            pass
                        held.append(s)
                    os.write(ready_w, b"x")
                    os.read(go_r, 1)
                finally:
                    os._exit(0)
            os.close(go_r)
            os.close(ready_w)
            try:
                os.read(ready_r, 1)
                time.sleep(0.5)
                t0 = time.monotonic()
                try:
                    c = Conn(sock2)
                    rep = c.call(msg(M + "GetStatus"), timeout=3)
                    c.close()
                except OSError as e:
                    rep = [repr(e)]
                dt = time.monotonic() - t0
                r.ok(ok_reply(rep) and dt < 2, f"{name}: uid {NOBODY} holds {PER_UID_MAX + 100} connections, "
                     f"root is still served ({dt:.1f} s)", [rep, f"daemon fds: {fd_count(d2.pid())}",
                                                             [l for l in d2.log_text().splitlines()
                                                              if "accept" in l][-3:]])
            finally:
                os.write(go_w, b"x")
                os.close(go_w)
                os.close(ready_r)
                os.waitpid(child, 0)
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            c = Conn(sock2)
            rep = c.call(msg(M + "GetStatus"), timeout=5)
            c.close()
            r.ok(ok_reply(rep), f"{name}: served again once they are gone", rep)
            r.eq(d2.stop(), 0, f"{name}: second daemon exits 0")
        case("daemon with soft RLIMIT_NOFILE 1024 (systemd's default)", systemd_nofile)

        # ------------------------------------------------------ at the end
        with r.case("daemon at the end", env):
            r.eq(d.error_lines(), [], "no error-level log lines", d)
            r.eq(d.stop(), 0, "SIGTERM: exit 0", d)
            r.eq(a.attr("read_ahead_kb"), env.pristine[a.name]["read_ahead_kb"],
                 "RestoreOnExit (default yes) put read_ahead_kb back")
    r.finish()


if __name__ == "__main__":
    main_guard(main)
