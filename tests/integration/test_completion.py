#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""bash completion of blkmqctl (shell-completion/bash/blkmqctl) and blkmqd
(shell-completion/bash/blkmqd), driven the way bash drives it: a bash
sources it (with bash-completion's helpers, and once without them), gets
"complete -F _blkmqctl blkmqctl" (_blkmqd blkmqd), sets COMP_WORDS
(split at blanks, '=' and ':', as readline does), COMP_CWORD, COMP_LINE and
COMP_POINT, calls _blkmqctl and prints COMPREPLY.

- Without a daemon: commands, options and their fixed values complete;
  device names complete to nothing, and nothing reaches standard error.
- Against a test blkmqd (a managed loop device, a profile, zones emulated
  over a file with a sealed object and a lease being written): device
  names, profiles, zoned devices, leases and labels come from the daemon,
  also at the address given by --address= on the line being completed.
- blkmqd: its options and their values, and after --dry-run or
  --check-config the disks of /sys/block.

Needs root, loop devices, udevd, bash; $BLKMQD, $BLKMQCTL."""

import os
import re
import shutil
import subprocess

from blkmqtest import Ctl, Env, Runner, ctl_path, main_guard, need_all, sha, show, skip, udevd

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
COMPLETION = os.path.join(SRC, "shell-completion", "bash", "blkmqctl")
COMPLETION_BLKMQD = os.path.join(SRC, "shell-completion", "bash", "blkmqd")
BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"

DRIVER = r"""
[[ $MODE == full ]] && source "$BASH_COMPLETION"
source "$COMPLETION" || exit 3
[[ $(complete -p $PROG) == "complete -F _$PROG $PROG" ]] || { echo "not registered" >&2; exit 4; }
COMP_LINE=$LINE
COMP_POINT=${#LINE}
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMPREPLY=()
_$PROG $PROG "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def comp_words(line):
    """COMP_WORDS as readline makes them: blanks separate words, and each of
    '=' and ':' is a word of its own; a blank at the end starts an empty
    word."""
    words = []
    for tok in line.split():
        words += [p for p in re.split(r"([=:])", tok) if p]
    if line.endswith(" "):
        words.append("")
    return words


def main():
    need_all()
    if not os.environ.get("BLKMQCTL"):
        skip("set BLKMQCTL")
    if not shutil.which("bash"):
        skip("no bash")
    modes = ["plain"] + (["full"] if os.path.exists(BASH_COMPLETION) else [])
    if "full" not in modes:
        if os.environ.get("CI") == "true":
            skip(f"no {BASH_COMPLETION} (tools/install-deps: bash-completion)")
        print(f"# no {BASH_COMPLETION}: only without bash-completion's helpers")
    r = Runner("integration/completion")
    ctl_bin = ctl_path()

    def complete(line, address, mode, extra_env=None):
        prog = line.split()[0]
        env = dict(os.environ, MODE=mode, LINE=line, PROG=prog, BASH_COMPLETION=BASH_COMPLETION,
                   COMPLETION=COMPLETION_BLKMQD if prog == "blkmqd" else COMPLETION,
                   PATH=os.path.dirname(ctl_bin) + ":" + os.environ.get("PATH", ""))
        env.pop("BLKMQD_ADDRESS", None)
        if address:
            env["BLKMQD_ADDRESS"] = address
        env.update(extra_env or {})
        p = subprocess.run(["bash", "--norc", "--noprofile", "-c", DRIVER, "driver"] + comp_words(line),
                           capture_output=True, text=True, env=env, timeout=30)
        return p, [l for l in p.stdout.splitlines() if l]

    def check(line, address, want, name, exact=False, absent=()):
        for mode in modes:
            p, got = complete(line, address, mode)
            ok = p.returncode == 0 and p.stderr == ""
            ok = ok and (sorted(got) == sorted(want) if exact else set(want) <= set(got))
            ok = ok and not set(absent) & set(got)
            r.ok(ok, f"[{mode}] '{line}' -> {name}",
                 f"exit {p.returncode}, COMPREPLY {got}, want {want}{' exactly' if exact else ''}, "
                 f"not {list(absent)}; stderr: {p.stderr!r}")

    verbs = ["status", "devices", "show", "explain", "trial", "export", "apply", "restore", "verify", "reload",
             "profiles", "profile", "monitor", "log-level", "latency", "top", "zones", "stage"]
    with udevd(), Env("completion") as env:
        nowhere = os.path.join(env.tmp, "no-daemon")
        with r.case("without a daemon: commands and options complete, names to nothing, silently"):
            check("blkmqctl ", nowhere, verbs, "every command", exact=True)
            check("blkmqctl ex", nowhere, ["explain", "export"], "explain export", exact=True)
            check("blkmqctl prof", nowhere, ["profile", "profiles"], "profile profiles", exact=True)
            check("blkmqctl profiles ", nowhere, [], "nothing after profiles", exact=True)
            check("blkmqctl --js", nowhere, ["--json"], "--json", exact=True)
            check("blkmqctl --win", nowhere, ["--window="], "--window=", exact=True)
            check("blkmqctl latency x --window=", nowhere, ["1m", "10m", "total"], "the windows", exact=True)
            check("blkmqctl zones --state=s", nowhere, ["sealed"], "sealed", exact=True)
            check("blkmqctl log-level w", nowhere, ["warning"], "warning", exact=True)
            check("blkmqctl zones ", nowhere, ["free", "alloc", "append", "seal", "release", "get", "objects",
                                               "find", "cat", "verify", "repair"], "the zones subcommands", exact=True)
            check("blkmqctl show ", nowhere, [], "nothing (no daemon)", exact=True)
            check("blkmqctl zones seal ", nowhere, [], "nothing (no daemon)", exact=True)
            p = subprocess.run([ctl_bin, "__complete", "devices"], capture_output=True, text=True,
                               env=dict(os.environ, BLKMQD_ADDRESS=nowhere))
            r.ok(p.returncode == 2 and p.stdout == "" and p.stderr == "",
                 "blkmqctl __complete devices: exit 2, silent", show(p))
            p = subprocess.run([ctl_bin, "--help"], capture_output=True, text=True)
            r.ok("__complete" not in p.stdout, "__complete is not in --help")

        loop = env.attach("comp")
        with r.case("blkmqd: options, their values, and the DEVICE of --dry-run and --check-config"):
            check("blkmqd --che", None, ["--check-config"], "--check-config", exact=True)
            check("blkmqd --log-t", None, ["--log-target="], "--log-target=", exact=True)
            check("blkmqd --log-level=d", None, ["debug"], "debug", exact=True)
            check(f"blkmqd --dry-run {loop.name[:-1]}", None, [loop.name], f"--dry-run: {loop.name} among the disks")
            check("blkmqd --check-config ", None, [loop.name], f"--check-config: {loop.name} among the disks")
            check(f"blkmqd --check-config {loop.name} ", None, [], "one DEVICE only", exact=True)
            check(f"blkmqd {loop.name[:-1]}", None, [], "no DEVICE without --dry-run or --check-config",
                  exact=True)

        img = os.path.join(env.tmp, "zones.img")
        cfg = env.config(f"""\
[Device comp]
MatchBackingFile={env.glob()}
ReadAheadKB=512

[Profile night]
ReadAheadKB=1024

[Profile weekend]
ReadAheadKB=2048

[Zones]
Emulate={img}
ZoneSizeMB=4
ZoneCount=4
Database={env.tmp}/zones.db
""")
        addr = os.path.join(env.tmp, "io.blkmqd")
        d = env.daemon(["--config", cfg, "--varlink-address", addr])
        d.start(timeout=15)
        ctl = Ctl(ctl_bin, addr)
        payload = env.write("fw.bin", "firmware" * 100)
        p = ctl("stage", payload, "--label=fw-1.2")
        r.eq(p.returncode, 0, "stage fw-1.2", daemon=d)
        p, a = ctl.json("zones", "alloc", "--size=4096", "--label=scratch")
        lease = (a or {}).get("lease", "?")
        sealed = ctl.json("zones", "find", "fw-1.2")[1] or {}
        zdev = "emu:" + img

        with r.case("against blkmqd: names from the daemon", env):
            check("blkmqctl show ", addr, [loop.name], f"the devices ({loop.name} among them)")
            check(f"blkmqctl explain {loop.name[:-1]}", addr, [loop.name], loop.name)
            check("blkmqctl verify ", addr, [loop.name], f"verify: the devices ({loop.name} among them)")
            check("blkmqctl profile ", addr, ["night", "weekend"], "the profiles", exact=True)
            check("blkmqctl profile w", addr, ["weekend"], "weekend", exact=True)
            check("blkmqctl zones seal ", addr, [lease], "the lease being written")
            check("blkmqctl zones find ", addr, ["fw-1.2"], "the label", exact=True)
            check("blkmqctl zones cat ", addr, ["fw-1.2", sealed.get("lease", "?")], "labels and leases")
            check("blkmqctl zones ", addr, ["free", "seal", zdev], "subcommands and the zoned device")
            check("blkmqctl zones free ", addr, [zdev], "the zoned device", exact=True)
            check("blkmqctl zones free emu:", addr, [img], "after emu:, the path (readline splits at ':')",
                  exact=True)
            check("blkmqctl stage x --device=", addr, [zdev], "--device=: the zoned device", exact=True)
            check("blkmqctl zones seal ", addr, [], "leases only, no label", absent=["fw-1.2"])
            # the daemon the line names, not $BLKMQD_ADDRESS
            check(f"blkmqctl --address={addr} profile ", None, ["night", "weekend"], "--address= on the line",
                  exact=True)
            check(f"blkmqctl --address {addr} show ", nowhere, [loop.name], "--address ADDR on the line")
        d.stop()
    r.finish()


if __name__ == "__main__":
    main_guard(main)
