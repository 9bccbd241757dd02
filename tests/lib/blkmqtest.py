# SPDX-License-Identifier: LGPL-2.1-or-later
"""Helpers for blkmqd's host integration tests (python3 stdlib only).

What is real: the kernel's sysfs, loop devices, systemd-udevd, the daemon.
Every test program is standalone: exit 0 pass, 1 fail, 77 skip (but under
CI=true a skip is a failure: nothing passes by not running).

Typical use:

    r = Runner("apply")
    with udevd(), Env("apply") as env:
        a = env.attach(prefix="a")
        d = env.daemon(config)
        d.start()
        r.ok(a.scheduler() == "kyber", "scheduler applied", daemon=d)
    r.finish()

Cleanup (daemons killed, knobs put back, loop devices detached, temp files
removed, a udevd we started stopped) happens on normal exit, on exceptions,
on SIGTERM (meson's timeout) and on SIGINT.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

CI = os.environ.get("CI", "").lower() == "true"
EXIT_SKIP = 77

UDEVD = "/lib/systemd/systemd-udevd"
STATE_DIR = "/run/blkmqd-test"           # shared between concurrent test programs
UDEVD_LOCK = STATE_DIR + "/udevd.lock"
UDEVD_PIDFILE = STATE_DIR + "/udevd.pid"

VALGRIND_ARGS = ["valgrind", "--leak-check=full",
                 "--show-leak-kinds=definite,indirect",
                 "--errors-for-leak-kinds=definite,indirect",
                 "--error-exitcode=99", "--track-fds=no"]

# Knobs a test snapshots and puts back; scheduler first (switching it resets
# nr_requests and swaps iosched/).
KNOBS = ["scheduler", "nr_requests", "read_ahead_kb", "wbt_lat_usec",
         "rq_affinity", "io_poll", "io_poll_delay", "nomerges", "max_sectors_kb",
         "add_random", "iostats"]


# --------------------------------------------------------------------------
# exits, skips, signals

def log(msg=""):
    print(msg, flush=True)


def diag(text, prefix="# "):
    for line in str(text).rstrip("\n").splitlines():
        print(prefix + line)
    sys.stdout.flush()


def skip(reason):
    """Skip the whole program (exit 77). Under CI=true a skip fails (exit 1)."""
    if CI:
        log(f"not ok - would skip, but CI=true forbids passing by not running: {reason}")
        sys.exit(1)
    log(f"SKIP: {reason}")
    sys.exit(EXIT_SKIP)


def need_root():
    if os.geteuid() != 0:
        skip("needs root (loop devices, sysfs writes, udevd)")


def need_loop():
    if not os.path.exists("/dev/loop-control"):
        subprocess.run(["modprobe", "loop"], stderr=subprocess.DEVNULL)
    if not os.path.exists("/dev/loop-control"):
        skip("no /dev/loop-control (loop module missing)")
    if not shutil.which("losetup"):
        skip("losetup (util-linux) missing")


def need_udevd_binary():
    if not os.access(UDEVD, os.X_OK) or not shutil.which("udevadm"):
        skip(f"{UDEVD} or udevadm missing (apt-get install udev)")


def daemon_path():
    """The blkmqd under test: $BLKMQD, else argv[1]."""
    p = os.environ.get("BLKMQD") or (sys.argv[1] if len(sys.argv) > 1 else None)
    if not p:
        skip("set BLKMQD=/path/to/blkmqd (or pass it as the first argument)")
    if not os.access(p, os.X_OK):
        skip(f"blkmqd not executable: {p}")
    return os.path.abspath(p)


def need_powerdisk():
    """What the power-cut and I/O error tests need besides root and loop
    devices: tools/powerdisk ($POWERDISK), /dev/fuse, and e2fsprogs' mkfs.ext4
    and filefrag for ext4 over it. Returns powerdisk's path."""
    need_root()
    need_loop()
    powerdisk = os.environ.get("POWERDISK")
    if not powerdisk or not os.access(powerdisk, os.X_OK):
        skip("set POWERDISK=/path/to/powerdisk (built with libfuse3-dev)")
    if not os.path.exists("/dev/fuse"):
        skip("no /dev/fuse")
    for tool in ("mkfs.ext4", "filefrag"):
        if not shutil.which(tool):
            skip(f"{tool} missing (e2fsprogs)")
    return powerdisk


def need_all():
    need_root()
    need_loop()
    need_udevd_binary()
    return daemon_path()


def ctl_path():
    """The blkmqctl under test: $BLKMQCTL, else argv[2]."""
    p = os.environ.get("BLKMQCTL") or (sys.argv[2] if len(sys.argv) > 2 else None)
    if not p:
        skip("set BLKMQCTL=/path/to/blkmqctl (or pass it as the second argument)")
    if not os.access(p, os.X_OK):
        skip(f"blkmqctl not executable: {p}")
    return os.path.abspath(p)


INTEROP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "interop")


def ensure_venv(what, optional=False):
    """Run the calling test program in the venv of tests/interop/setup-venv.sh
    (the PyPI varlink package and prometheus_client): re-executes the program
    with the venv's interpreter and returns there with None. WHAT names
    what the program needs the venv for, for the skip message. Without the
    venv (setup-venv.sh exit 77: no python3 venv or no PyPI) the program
    skips, or, if OPTIONAL, returns the reason in this interpreter (the
    cases that need the venv skip one by one)."""
    if os.environ.get("BLKMQD_TEST_IN_VENV") == "1":
        return None
    if os.environ.get("BLKMQD_TEST_NO_VENV"):
        return os.environ["BLKMQD_TEST_NO_VENV"]
    venv = os.environ.get("BLKMQD_INTEROP_VENV") or "/tmp/blkmqd-interop-venv"
    p = subprocess.run([os.path.join(INTEROP_DIR, "setup-venv.sh"), venv],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout.splitlines():
        log("# " + line)
    if p.returncode == 77:
        why = f"no venv with {what} (see above): {venv}"
        if not optional:
            skip(why)
        os.environ["BLKMQD_TEST_NO_VENV"] = why
        return why
    if p.returncode != 0:
        log(f"not ok - setup-venv.sh {venv} failed ({p.returncode})")
        sys.exit(1)
    py = os.path.join(venv, "bin", "python")
    env = dict(os.environ, BLKMQD_TEST_IN_VENV="1", BLKMQD_INTEROP_VENV=venv)
    sys.stdout.flush()
    os.execve(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:], env)


class Terminated(BaseException):
    """Raised by the SIGTERM/SIGHUP handler so that every finally/with runs."""


def _on_term(signum, frame):
    raise Terminated(f"got signal {signum}")


def install_signal_handlers():
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGHUP, _on_term)


install_signal_handlers()


def timeout_scale():
    try:
        return float(os.environ.get("BLKMQD_TEST_TIMEOUT_SCALE", "1"))
    except ValueError:
        return 1.0


def wait_for(predicate, timeout=10.0, interval=0.01):
    """Poll predicate() until it returns something truthy; return that value,
    or the last (falsy) value after timeout seconds."""
    deadline = time.monotonic() + timeout * timeout_scale()
    while True:
        v = predicate()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def run(cmd, check=True, **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    kw.setdefault("text", True)
    p = subprocess.run(cmd, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


# --------------------------------------------------------------------------
# varlink, the plain way (one connection per call; the tests that need the
# PyPI client use it through tests/interop's venv instead)

def varlink_replies(address, method, params=None, more=False, timeout=30, fds=()):
    """Every reply of METHOD on the unix socket ADDRESS, as dicts (an error
    reply has its "error" key set), up to the first without "continues".
    MORE asks for a stream. TIMEOUT (seconds, scaled by
    BLKMQD_TEST_TIMEOUT_SCALE) bounds each receive. ConnectionError if
    blkmqd closed the connection before that. FDS go with the call
    (SCM_RIGHTS), which the PyPI client cannot do."""
    m = {"method": method}
    if params is not None:
        m["parameters"] = params
    if more:
        m["more"] = True
    out = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as s:
        s.settimeout(timeout * timeout_scale())
        s.connect(address)
        data = json.dumps(m).encode() + b"\0"
        if fds:
            socket.send_fds(s, [data], list(fds))
        else:
            s.sendall(data)
        buf = b""
        while True:
            while b"\0" in buf:
                one, buf = buf.split(b"\0", 1)
                r = json.loads(one)
                out.append(r)
                if not r.get("continues"):
                    return out
            chunk = s.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{method}: blkmqd closed the connection after {len(out)} replies")
            buf += chunk


def varlink_call(address, method, params=None, timeout=30, fds=()):
    """The last reply of one call (see varlink_replies)."""
    return varlink_replies(address, method, params, timeout=timeout, fds=fds)[-1]


class VarlinkStream:
    """METHOD with "more" on ADDRESS (io.blkmqd.Metrics.Monitor, say): every
    reply as it comes, collected by a thread of its own."""

    def __init__(self, address, method, params=None):
        m = {"method": method, "more": True}
        if params is not None:
            m["parameters"] = params
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.s.connect(address)
        self.s.sendall(json.dumps(m).encode() + b"\0")
        self.events = []          # [(monotonic time, reply)]
        self.cond = threading.Condition()
        self.eof = False
        self.t = threading.Thread(target=self._run, daemon=True, name="monitor")
        self.t.start()

    def _run(self):
        buf = b""
        while True:
            try:
                d = self.s.recv(1 << 16)
            except OSError:
                d = b""
            if not d:
                with self.cond:
                    self.eof = True
                    self.cond.notify_all()
                return
            buf += d
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                with self.cond:
                    self.events.append((time.monotonic(), json.loads(msg)))
                    self.cond.notify_all()

    def wait(self, pred, timeout, since=0):
        """Index of the first event at >= since whose parameters match pred."""
        deadline = time.monotonic() + timeout * timeout_scale()
        with self.cond:
            while True:
                for i in range(since, len(self.events)):
                    if pred(self.events[i][1].get("parameters", {})):
                        return i
                left = deadline - time.monotonic()
                if left <= 0 or self.eof:
                    return None
                self.cond.wait(left)

    def params(self, i):
        """The parameters of reply I."""
        return self.events[i][1].get("parameters", {})

    def close(self):
        with contextlib.suppress(OSError):
            self.s.shutdown(socket.SHUT_RDWR)
        self.s.close()
        self.t.join(2)


class VarlinkError(Exception):
    def __init__(self, reply):
        super().__init__(f"{reply.get('error')} {reply.get('parameters')}")
        self.name = reply.get("error")
        self.parameters = reply.get("parameters") or {}


def varlink_ok(address, method, params=None, timeout=30, fds=()):
    """The parameters of the reply of one call; VarlinkError for an error
    reply."""
    reply = varlink_call(address, method, params or {}, timeout=timeout, fds=fds)
    if "error" in reply:
        raise VarlinkError(reply)
    return reply.get("parameters", {})


def recorded_originals(address, sysname):
    """{attribute: original} that blkmqd recorded for SYSNAME before its
    first write (GetDevice's knobs), for queue/ attributes."""
    rep = varlink_call(address, "io.blkmqd.Manager.GetDevice", {"device": sysname})
    if "error" in rep:
        raise VarlinkError(rep)
    knobs = rep.get("parameters", {}).get("device", {}).get("knobs") or []
    return {k["attribute"]: k["original"] for k in knobs
            if k.get("original") is not None and k["attribute"].startswith("queue/")}


def originals_missed(originals):
    """[(sysname, attribute, recorded original, value now)] of every
    {(sysname, attribute): original} that sysfs does not show back."""
    missed = []
    for (n, attr), want in sorted(originals.items()):
        try:
            have = sysfs_read(f"/sys/block/{n}/{attr}")
        except OSError as e:
            have = f"({e.strerror})"
        if attr.endswith("scheduler"):
            have = parse_scheduler(have) or have
        if have != want:
            missed.append((n, attr, want, have))
    return missed


# --------------------------------------------------------------------------
# blkmqctl

def _as_user(uid):
    def f():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return f


class Ctl:
    """Runs blkmqctl with BLKMQD_ADDRESS set to the test daemon's socket,
    COLUMNS=250 (no truncation unless a case sets COLUMNS in env) and
    LC_ALL=C. Output as text (undecodable bytes replaced)."""

    def __init__(self, binary, address):
        self.binary = binary
        self.address = address

    def env(self, extra=None):
        e = dict(os.environ)
        e["BLKMQD_ADDRESS"] = self.address
        e["COLUMNS"] = "250"
        e["LC_ALL"] = "C"
        e.update(extra or {})
        return e

    def __call__(self, *args, uid=None, data=None, env=None, timeout=30):
        """One run: uid runs it as that uid (and gid, no groups), data (bytes)
        is its stdin (else /dev/null); timeout None: no limit (a trial)."""
        p = subprocess.run([self.binary] + [str(a) for a in args],
                           input=data, stdin=subprocess.DEVNULL if data is None else None,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env(env),
                           preexec_fn=_as_user(uid) if uid is not None else None,
                           timeout=None if timeout is None else timeout * timeout_scale())
        p.stdout = p.stdout.decode(errors="replace")
        p.stderr = p.stderr.decode(errors="replace")
        return p

    def json(self, *args, **kw):
        """(CompletedProcess, the parsed stdout or None) of ARGS --json."""
        p = self(*args, "--json", **kw)
        try:
            doc = json.loads(p.stdout) if p.stdout.strip() else None
        except ValueError:
            doc = None
        return p, doc

    def popen(self, *args, **kw):
        """blkmqctl ARGS in the background, stdout and stderr piped (bytes,
        unless KW says otherwise: KW goes to subprocess.Popen)."""
        kw = dict(dict(stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE), **kw)
        return subprocess.Popen([self.binary] + [str(a) for a in args], env=self.env(), **kw)


def show(p):
    """A finished blkmqctl run, for a failed check's diagnostics."""
    return (f"$ blkmqctl {' '.join(map(str, p.args[1:]))}\nexit {p.returncode}\n"
            f"--- stdout:\n{p.stdout or '(empty)'}\n--- stderr:\n{p.stderr or '(empty)'}")


# --------------------------------------------------------------------------
# sysfs

def sysfs_read(path, default=None):
    try:
        with open(path) as f:
            return f.read().rstrip("\n")
    except OSError:
        if default is not None:
            return default
        raise


def sysfs_write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def parse_scheduler(text):
    """'[none] mq-deadline kyber bfq' -> 'none'. None if no bracketed entry."""
    m = re.search(r"\[([^\]]+)\]", text or "")
    return m.group(1) if m else None


def queue_snapshot(sysname, writable_only=True):
    """{relative attr path: value} for /sys/block/NAME/queue and queue/iosched.
    Only writable attributes by default (read-only ones are not knobs)."""
    base = f"/sys/block/{sysname}/queue"
    out = {}
    for sub in ("", "iosched"):
        d = os.path.join(base, sub)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            try:
                st = os.stat(p)
            except OSError:
                continue
            if not (st.st_mode & 0o444) or os.path.isdir(p):
                continue
            if writable_only and not (st.st_mode & 0o200):
                continue
            try:
                out[os.path.join(sub, n) if sub else n] = sysfs_read(p)
            except OSError:
                pass
    return out


def snapshot_diff(before, after):
    """Lines describing what differs between two snapshots."""
    lines = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            lines.append(f"{k}: {before.get(k)!r} -> {after.get(k)!r}")
    return lines


def restore_queue(sysname, snap):
    """Put back a snapshot taken with queue_snapshot(): scheduler first, then
    the other knobs, then the scheduler's tunables. Best effort."""
    base = f"/sys/block/{sysname}/queue"
    failed = []
    want_sched = parse_scheduler(snap.get("scheduler"))
    if want_sched and parse_scheduler(sysfs_read(base + "/scheduler", "")) != want_sched:
        try:
            sysfs_write(base + "/scheduler", want_sched)
        except OSError as e:
            failed.append(f"scheduler: {e}")
    for k, v in snap.items():
        if k == "scheduler" or k.startswith("iosched/"):
            continue
        if k in ("write_cache",):  # not ours to toggle
            continue
        try:
            if sysfs_read(os.path.join(base, k), "") != v:
                sysfs_write(os.path.join(base, k), v)
        except OSError as e:
            failed.append(f"{k}: {e}")
    if parse_scheduler(sysfs_read(base + "/scheduler", "")) == want_sched:
        for k, v in snap.items():
            if not k.startswith("iosched/"):
                continue
            try:
                if sysfs_read(os.path.join(base, k), "") != v:
                    sysfs_write(os.path.join(base, k), v)
            except OSError as e:
                failed.append(f"{k}: {e}")
    return failed


def sha(b):
    """The SHA-256 of bytes B, in hex."""
    return hashlib.sha256(b).hexdigest()


def read_img(img, offset, length):
    """LENGTH bytes of the file IMG at OFFSET (a zone read back from an
    emulation file, say)."""
    with open(img, "rb") as f:
        f.seek(offset)
        return f.read(length)


# --------------------------------------------------------------------------
# udevd

def udevd_running():
    p = subprocess.run(["udevadm", "control", "--ping", "--timeout=2"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


def _pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


@contextlib.contextmanager
def udevd():
    """Ensure a systemd-udevd runs for the duration of the block.

    If one already runs (systemd's, or another test's), use it and never stop
    it. Otherwise start one. Test programs and tools/demo may run at the same
    time, so the one we start is shared: each user holds a shared flock on
    /run/blkmqd-test/udevd.lock, and the last user to leave stops the udevd
    recorded in udevd.pid (only ever a udevd this harness started)."""
    need_udevd_binary()
    os.makedirs(STATE_DIR, exist_ok=True)
    lock = os.open(UDEVD_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    started = None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not udevd_running():
            logpath = os.path.join(STATE_DIR, "udevd.log")
            with open(logpath, "ab") as lf:
                # Not --daemon: as our child we can reap it (PID 1 here may not).
                started = subprocess.Popen([UDEVD], stdin=subprocess.DEVNULL,
                                           stdout=lf, stderr=lf,
                                           start_new_session=True, close_fds=True)
            with open(UDEVD_PIDFILE, "w") as f:
                f.write(f"{started.pid}\n")
            if not wait_for(lambda: started.poll() is not None or udevd_running(), 10):
                raise RuntimeError("systemd-udevd did not answer a ping within 10 s")
            if started.poll() is not None:
                raise RuntimeError(f"systemd-udevd exited ({started.returncode}), "
                                   f"see {logpath}")
            log(f"# started systemd-udevd (pid {started.pid})")
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield
    finally:
        try:
            # Last one out stops a harness-started udevd. Converting to LOCK_EX
            # fails while any other user holds its shared lock.
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _stop_harness_udevd(started)
        except BlockingIOError:
            pass
        finally:
            os.close(lock)


def _stop_harness_udevd(child):
    try:
        pid = int(sysfs_read(UDEVD_PIDFILE).strip())
    except (OSError, ValueError):
        return
    subprocess.run(["udevadm", "settle", "--timeout=5"], stderr=subprocess.DEVNULL)
    if _pid_alive(pid):
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if child is not None and child.pid == pid:
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        else:
            wait_for(lambda: not _pid_alive(pid), 5)
            if _pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
        log(f"# stopped systemd-udevd (pid {pid})")
    with contextlib.suppress(OSError):
        os.unlink(UDEVD_PIDFILE)


# --------------------------------------------------------------------------
# loop devices

class Loop:
    """A loop device attached over a sparse file in the test's temp dir."""

    def __init__(self, dev, backing, pristine=None):
        self.dev = dev                       # /dev/loop3
        self.name = os.path.basename(dev)    # loop3
        self.backing = backing
        self.queue = f"/sys/block/{self.name}/queue"
        self.attached = True
        # Knobs right after this attach. A loop queue outlives its attachment,
        # so if this loopN was used (and tuned) earlier in the test, this is
        # not what a daemon that saw it first would restore: see pristine.
        self.original = queue_snapshot(self.name)
        # Knobs of this loopN the first time this Env attached it.
        self.pristine = pristine if pristine is not None else self.original

    def __repr__(self):
        return f"{self.name}({os.path.basename(self.backing)})"

    def attr(self, name, default=""):
        return sysfs_read(os.path.join(self.queue, name), default)

    def set(self, name, value):
        sysfs_write(os.path.join(self.queue, name), value)

    def scheduler(self):
        return parse_scheduler(self.attr("scheduler"))

    def snapshot(self):
        return queue_snapshot(self.name)

    def backing_file(self):
        return sysfs_read(f"/sys/block/{self.name}/loop/backing_file", "")

    def matches(self, want):
        """want: {attr: value}; 'scheduler' compares the bracketed name."""
        for k, v in want.items():
            cur = self.scheduler() if k == "scheduler" else self.attr(k)
            if cur != str(v):
                return False
        return True

    def mismatches(self, want):
        out = []
        for k, v in want.items():
            cur = self.scheduler() if k == "scheduler" else self.attr(k)
            if cur != str(v):
                out.append(f"{self.name} {k}: have {cur!r}, want {str(v)!r}")
        return out


# --------------------------------------------------------------------------
# the daemon

def unit_settings():
    """The [Service] settings of systemd/blkmqd.service.in, {key: value}."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    u = {}
    with open(os.path.join(src, "systemd", "blkmqd.service.in")) as f:
        for line in f:
            k, eq, v = line.strip().partition("=")
            if eq and not k.startswith("#"):
                u[k] = v
    return u


class DaemonError(Exception):
    pass


class Daemon:
    """blkmqd started with a NOTIFY_SOCKET we own; stderr goes to a log file."""

    def __init__(self, env, args, name="blkmqd", valgrind=False, binary=None, as_unit=False,
                 close_stderr=False, environ=None):
        self.env = env
        # Variables added to the daemon's environment (a test's kill point,
        # fault hooks); one whose value is None is left as it is.
        self.environ = {k: v for k, v in (environ or {}).items() if v is not None}
        # Started with fd 2 closed (and no journal): a daemon with nowhere to log.
        self.close_stderr = close_stderr
        # as blkmqd.service runs it: its own session (so its own autogroup),
        # with the unit's Nice= and CPUSchedulingPolicy=/CPUSchedulingPriority=.
        self.as_unit = as_unit
        self.binary = binary or env.blkmqd
        self.args = list(args)
        self.name = name
        self.valgrind = valgrind
        self.logpath = os.path.join(env.tmp, f"{name}.log")
        self.outpath = os.path.join(env.tmp, f"{name}.stdout")
        self.vgpath = os.path.join(env.tmp, f"{name}.valgrind")
        self.sockpath = os.path.join(env.tmp, f"{name}.notify")
        self.proc = None
        self.sock = None
        self.messages = []        # [(monotonic time, {key: value}, raw)]
        self.scale = timeout_scale() * (10 if valgrind else 1)

    # -- lifecycle
    def cmdline(self):
        cmd = [self.binary] + self.args
        if self.valgrind:
            cmd = VALGRIND_ARGS + [f"--log-file={self.vgpath}"] + cmd
        if self.as_unit:
            u = unit_settings()
            if "Nice" in u:
                cmd = ["nice", "-n", u["Nice"]] + cmd
            if u.get("CPUSchedulingPolicy") in ("rr", "fifo"):
                cmd = ["chrt", "--" + u["CPUSchedulingPolicy"], u.get("CPUSchedulingPriority", "1")] + cmd
        return cmd

    def start(self, wait_ready=True, timeout=10):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sockpath)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.sock.bind(self.sockpath)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self._cond = threading.Condition()
        self._stop_reader = False
        self._thread = threading.Thread(target=self._reader, daemon=True,
                                        name=f"{self.name}-notify")
        self._thread.start()
        env = dict(os.environ, **self.environ)
        env["NOTIFY_SOCKET"] = self.sockpath
        env.pop("JOURNAL_STREAM", None)     # logs must go to our stderr file
        env.pop("LISTEN_FDS", None)
        env.pop("WATCHDOG_USEC", None)
        # Originals on record in the Env (shared by its daemons, as the
        # instances of one service share /run/blkmqd/originals), never in
        # the machine's: another test's daemon must not adopt them.
        env["RUNTIME_DIRECTORY"] = self.env.originals_dir
        # What the daemon keeps across restarts (StateDirectory=: the
        # workloads trials learned) stays in the test's own directory,
        # shared by the daemons of one Env.
        env["STATE_DIRECTORY"] = os.path.join(self.env.tmp, "state")
        self._log = open(self.logpath, "ab")
        self._out = open(self.outpath, "ab")
        self.proc = subprocess.Popen(self.cmdline(), stdin=subprocess.DEVNULL,
                                     stdout=self._out,
                                     stderr=subprocess.DEVNULL if self.close_stderr else self._log,
                                     preexec_fn=(lambda: os.close(2)) if self.close_stderr else None,
                                     env=env, close_fds=True, start_new_session=self.as_unit)
        self.env.daemons.append(self)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=10):
        try:
            return self.proc.wait(timeout * self.scale)
        except subprocess.TimeoutExpired:
            raise DaemonError(f"{self.name} did not exit within {timeout * self.scale:.0f} s")

    def stop(self, timeout=10, expect_stopping=True):
        """SIGTERM, wait for STOPPING=1 and the exit; returns the exit code."""
        if not self.alive():
            return self.proc.returncode
        mark = self.mark()
        self.proc.send_signal(signal.SIGTERM)
        rc = self.wait_exit(timeout)
        if self.find("STOPPING", "1", since=mark) is None:
            self._drain(0.3)
        if expect_stopping and self.find("STOPPING", "1", since=mark) is None:
            raise DaemonError(f"{self.name} exited ({rc}) without sending STOPPING=1")
        return rc

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5 * self.scale)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.close()

    def close(self):
        if getattr(self, "_thread", None) is not None:
            self._stop_reader = True
            self._thread.join(2)
            self._thread = None
        for f in ("sock", "_log", "_out"):
            o = getattr(self, f, None)
            if o is not None:
                with contextlib.suppress(OSError):
                    o.close()
                setattr(self, f, None)

    # -- sd_notify
    def _reader(self):
        """Receive notify datagrams as they come, like systemd does. (A
        unix datagram socket queues only net.unix.max_dgram_qlen messages;
        a receiver that does not keep up blocks the daemon's sd_notify().)"""
        sock = self.sock
        while not self._stop_reader:
            try:
                r, _, _ = select.select([sock], [], [], 0.2)
                if not r:
                    continue
                data = sock.recv(65536)
            except (OSError, ValueError):
                return
            fields = {}
            for line in data.decode(errors="replace").split("\n"):
                if "=" in line:
                    k, v = line.split("=", 1)
                    fields[k] = v
            with self._cond:
                self.messages.append((time.monotonic(), fields, data))
                self._cond.notify_all()

    def _drain(self, timeout):
        """Wait up to timeout seconds for a new datagram (0: just return)."""
        if timeout <= 0:
            return
        with self._cond:
            n = len(self.messages)
            self._cond.wait_for(lambda: len(self.messages) > n, timeout)

    def mark(self):
        """An index: find()/wait_notify() with since=mark look only at later messages."""
        self._drain(0)
        return len(self.messages)

    def find(self, key, value=None, since=0):
        for i in range(since, len(self.messages)):
            f = self.messages[i][1]
            if key in f and (value is None or f[key] == value):
                return i
        return None

    def wait_notify(self, key, value=None, since=0, timeout=10):
        """Wait for a datagram with key(=value) at index >= since; return its
        index. Raises DaemonError if the daemon exits or the time runs out."""
        deadline = time.monotonic() + timeout * self.scale
        while True:
            self._drain(0)
            i = self.find(key, value, since)
            if i is not None:
                return i
            if not self.alive():
                self._drain(0.1)
                i = self.find(key, value, since)
                if i is not None:
                    return i
                raise DaemonError(f"{self.name} exited with {self.proc.returncode} "
                                  f"before sending {key}={value or '*'}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise DaemonError(f"{self.name} sent no {key}={value or '*'} within "
                                  f"{timeout * self.scale:.0f} s")
            self._drain(min(left, 0.1))

    def wait_ready(self, timeout=10, since=0):
        return self.wait_notify("READY", "1", since=since, timeout=timeout)

    def reload(self, timeout=10):
        """SIGHUP; wait for RELOADING=1 then READY=1. Returns (reloading, ready)
        message dicts."""
        mark = self.mark()
        self.proc.send_signal(signal.SIGHUP)
        i = self.wait_notify("RELOADING", "1", since=mark, timeout=timeout)
        j = self.wait_notify("READY", "1", since=i, timeout=timeout)
        if j == i:   # RELOADING=1 and READY=1 in one datagram: not a reload
            j = self.wait_notify("READY", "1", since=i + 1, timeout=timeout)
        return self.messages[i][1], self.messages[j][1]

    def statuses(self):
        return [f["STATUS"] for _, f, _ in self.messages if "STATUS" in f]

    # -- output
    def log_text(self):
        if getattr(self, "_log", None):
            self._log.flush()
        return sysfs_read(self.logpath, "")

    def stdout_text(self):
        if getattr(self, "_out", None):
            self._out.flush()
        return sysfs_read(self.outpath, "")

    def error_lines(self):
        """Log lines at error level or worse (<0>..<3>)."""
        return [l for l in self.log_text().splitlines() if re.match(r"<[0-3]>", l)]

    def dump(self, tail=80):
        lines = self.log_text().splitlines()
        diag(f"--- {self.name} {' '.join(self.cmdline())}")
        diag(f"--- {self.name} stderr ({len(lines)} lines, last {tail}):")
        diag("\n".join(lines[-tail:]) or "(empty)")
        out = self.stdout_text().splitlines()
        if out:
            diag(f"--- {self.name} stdout (last 40 of {len(out)}):")
            diag("\n".join(out[-40:]))
        if self.messages:
            diag(f"--- {self.name} notify messages:")
            t0 = self.messages[0][0]
            for t, _, raw in self.messages[-20:]:
                diag(f"  +{t - t0:.3f}s {raw.decode(errors='replace')!r}")
        if self.valgrind and os.path.exists(self.vgpath):
            vg = sysfs_read(self.vgpath, "").splitlines()
            diag(f"--- valgrind log (last 60 of {len(vg)}):")
            diag("\n".join(vg[-60:]))


def run_blkmqd(env, args, timeout=20, valgrind=False):
    """Run blkmqd to completion (--once, --dry-run --once, bad configs).
    Returns CompletedProcess with stdout/stderr text."""
    cmd = [env.blkmqd] + list(args)
    if valgrind:
        cmd = VALGRIND_ARGS + cmd
    e = dict(os.environ)
    e.pop("NOTIFY_SOCKET", None)
    e.pop("JOURNAL_STREAM", None)
    e["RUNTIME_DIRECTORY"] = env.originals_dir
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=e,
                          timeout=timeout * timeout_scale())


# --------------------------------------------------------------------------
# the environment: temp dir, configs, loop devices, daemons

class Env:
    def __init__(self, name):
        self.blkmqd = daemon_path()
        base = os.environ.get("BLKMQD_TEST_TMPDIR", "/tmp")
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix=f"blkmqd-{name}-", dir=base))
        # Where its daemons keep the original values on record ($RUNTIME_DIRECTORY).
        self.originals_dir = os.path.join(self.tmp, "originals")
        self.loops = []
        self.daemons = []
        self.pristine = {}       # loop name -> knobs when this Env first attached it
        self.removed = set()     # loop nodes removed with LOOP_CTL_REMOVE
        self.children = []       # spawn()
        self._n = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def glob(self, pattern="*.img"):
        """A MatchBackingFile= glob that matches only this test's images."""
        return os.path.join(self.tmp, pattern)

    # -- files
    def write(self, relpath, text):
        p = os.path.join(self.tmp, relpath)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.rename(p + ".tmp", p)   # the daemon never reads a half-written file
        return p

    def config(self, text, name="blkmqd.conf"):
        return self.write(name, text)

    def dropin(self, main, name, text):
        return self.write(os.path.basename(main) + ".d/" + name, text)

    # -- loop devices
    def attach(self, prefix="dev", size=64 << 20, path=None, direct_io=False, node=None):
        """A loop device over a new sparse file of SIZE bytes in the test's
        temp dir (PREFIX-N.img), or over the existing file PATH; DIRECT_IO:
        losetup --direct-io=on (reads go past the page cache to the file);
        NODE: on that loop device ("/dev/loop7", detached) instead of the
        first free one."""
        if path is None:
            self._n += 1
            img = os.path.join(self.tmp, f"{prefix}-{self._n}.img")
            with open(img, "wb") as f:
                f.truncate(size)
        else:
            img = path
        p = run(["losetup", "--show"] + (["--direct-io=on"] if direct_io else []) +
                ([node, img] if node else ["--find", img]))
        dev = node or p.stdout.strip()
        name = os.path.basename(dev)
        # A loop queue outlives its attachment: a node that someone else
        # (a bench killed mid-run, another suite) left tuned would make the
        # tests' "a new loop device has scheduler none" untrue.
        sched_path = f"/sys/block/{name}/queue/scheduler"
        sched = sysfs_read(sched_path, "")
        if name not in self.pristine and parse_scheduler(sched) not in (None, "none") and "none" in sched.split():
            diag(f"{name} was left with scheduler {parse_scheduler(sched)} by an earlier user: set to none")
            with contextlib.suppress(OSError):
                sysfs_write(sched_path, "none")
        loop = Loop(dev, img, self.pristine.get(name))
        self.pristine.setdefault(name, loop.original)
        self.removed.discard(name)
        self.loops.append(loop)
        return loop

    def remove_node(self, loop):
        """Detached loop device -> LOOP_CTL_REMOVE (a real 'remove' uevent).
        The node is re-added at cleanup. Returns 0 or -errno."""
        r = loop_ctl_remove(loop.name)
        if r == 0:
            self.removed.add(loop.name)
            self.pristine.pop(loop.name, None)
        return r

    def detach(self, loop, wait=True):
        run(["losetup", "-d", loop.dev], check=False)
        loop.attached = False
        if wait:   # detach may be deferred while udev's probe holds it open
            wait_for(lambda: not loop.backing_file(), 5)

    def daemon(self, args, **kw):
        return Daemon(self, args, name=kw.pop("name", f"blkmqd{len(self.daemons) + 1}"), **kw)

    def dump_daemons(self):
        for d in self.daemons:
            d.dump()

    def spawn(self, name, argv):
        """Another program a test runs beside blkmqd (a Prometheus, an
        exporter): its stdout and stderr go to NAME.log in the temp dir, and
        it is stopped (SIGTERM, then SIGKILL) when the Env closes."""
        logf = open(os.path.join(self.tmp, name + ".log"), "wb")
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                 cwd=self.tmp)
        finally:
            logf.close()
        p.log_path = os.path.join(self.tmp, name + ".log")
        self.children.append(p)
        return p

    def close(self):
        for p in self.children:
            with contextlib.suppress(Exception):
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        for d in self.daemons:
            with contextlib.suppress(Exception):
                d.kill()
        # Anything attached over our images, even if losetup's output was lost.
        names = {l.name: l for l in self.loops}
        for b in _glob_sys("/sys/block/loop*/loop/backing_file"):
            name = b.split("/")[3]
            if sysfs_read(b, "").startswith(self.tmp + "/") and name not in names:
                names[name] = Loop("/dev/" + name, sysfs_read(b, ""))
        for name, l in names.items():
            # Knobs back to what they were when this Env first attached the
            # loopN, so its next user (loop queues outlive the attachment)
            # starts clean.
            if os.path.isdir(l.queue) and name not in self.removed:
                failed = restore_queue(name, self.pristine.get(name, l.original))
                if failed:
                    diag(f"cleanup: {name}: could not restore {failed}")
            if l.backing_file().startswith(self.tmp + "/"):
                run(["losetup", "-d", l.dev], check=False)
        for name, l in names.items():
            wait_for(lambda: not l.backing_file().startswith(self.tmp + "/"), 5)
        # Put back loop nodes we removed (unless losetup -f re-created them).
        for name in sorted(self.removed):
            if not os.path.exists(f"/sys/block/{name}"):
                loop_ctl_add(name)
        if os.environ.get("BLKMQD_TEST_KEEP"):
            log(f"# kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


class FuseDisk:
    """A FUSE test disk of tools/ (modeldisk, powerdisk) serving
    env.tmp/NAME/disk, started with ARGS (its log: env.tmp/NAME.log);
    close() stops it and unmounts. ctl()/stats(): powerdisk's control file."""

    def __init__(self, env, binary, args, name="fusedisk"):
        self.dir = os.path.join(env.tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(env.tmp, name + ".log")
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen([binary] + list(args) + [self.dir], stderr=err, stdin=subprocess.DEVNULL)
        self.file = os.path.join(self.dir, "disk")
        # Loading an image of a few hundred MiB takes seconds on a busy machine.
        if not wait_for(lambda: os.path.exists(self.file) or self.proc.poll() is not None,
                        60 * timeout_scale()) or \
                self.proc.poll() is not None:
            self.close()
            raise RuntimeError(f"{os.path.basename(binary)} did not come up: {self.log_text()}")

    def ctl(self, command):
        """One command to DIR/ctl (powerdisk); OSError if it is refused."""
        fd = os.open(os.path.join(self.dir, "ctl"), os.O_WRONLY)
        try:
            os.write(fd, command.encode())
        finally:
            os.close(fd)

    def stats(self):
        with open(os.path.join(self.dir, "ctl")) as f:
            return {k: v for k, _, v in (line.partition(" ") for line in f.read().splitlines())}

    def log_text(self):
        return sysfs_read(self.log, "")

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["umount", "-l", self.dir], stderr=subprocess.DEVNULL, check=False)


def _glob_sys(pattern):
    import glob
    return sorted(glob.glob(pattern))


def loop_nodes():
    """The names of the loop device nodes now ({"loop0", ...})."""
    return {os.path.basename(p) for p in _glob_sys("/sys/block/loop*")}


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now (the kernel's
    choice for a bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_loop_nodes(names):
    """LOOP_CTL_REMOVE of every node in NAMES that nothing is attached to
    (a bench removes the nodes its attaches created); returns how many went."""
    removed = 0
    for name in sorted(names):
        if not sysfs_read(f"/sys/block/{name}/loop/backing_file", "") and loop_ctl_remove(name) == 0:
            removed += 1
    return removed


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of process PID, in seconds (/proc/PID/stat fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()    # fields[0] is field 3 (state)
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def loop_ctl_add(name):
    """Create loop device node N again (LOOP_CTL_ADD). Returns 0 or -errno."""
    fd = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, 0x4C80, int(name[4:]))
        return 0
    except OSError as e:
        return -e.errno
    finally:
        os.close(fd)


def loop_ctl_remove(name):
    """Remove a detached loop device node (LOOP_CTL_REMOVE): a real 'remove'
    uevent. Returns 0 or -errno."""
    n = int(name[4:])
    fd = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, 0x4C81, n)
        return 0
    except OSError as e:
        return -e.errno
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# reporting

class Runner:
    """ok/not ok lines, per-case exception capture, final summary line."""

    def __init__(self, suite="integration"):
        self.suite = suite
        self.passed = 0
        self.failed = 0
        self.env = None
        self.t0 = time.monotonic()

    def ok(self, cond, name, detail=None, daemon=None):
        if cond:
            self.passed += 1
            log(f"ok {self.passed + self.failed} - {name}")
            return True
        self.failed += 1
        log(f"not ok {self.passed + self.failed} - {name}")
        if detail:
            diag(detail if isinstance(detail, str) else "\n".join(map(str, detail)))
        if daemon is not None:
            daemon.dump()
        return False

    def eq(self, have, want, name, daemon=None):
        return self.ok(have == want, name, f"have {have!r}, want {want!r}", daemon)

    @contextlib.contextmanager
    def case(self, name, env=None):
        """A scenario: an exception inside fails it (and prints daemon logs)
        without stopping the following scenarios."""
        log(f"# --- {name}")
        try:
            yield
        except Terminated:
            raise
        except Exception as e:
            self.ok(False, f"{name}: {type(e).__name__}: {e}", traceback.format_exc())
            if env is not None:
                env.dump_daemons()

    def finish(self):
        dt = time.monotonic() - self.t0
        log(f"{self.suite}: {self.passed} passed, {self.failed} failed ({dt:.1f} s)")
        sys.exit(1 if self.failed or not self.passed else 0)


def main_guard(fn):
    """Run a test's main(); Terminated (SIGTERM) and stray exceptions fail
    after cleanup already ran in the with-blocks."""
    try:
        fn()
    except Terminated as e:
        log(f"not ok - interrupted: {e}")
        sys.exit(1)
    except KeyboardInterrupt:
        log("not ok - interrupted")
        sys.exit(1)
