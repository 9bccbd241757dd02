#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The documentation against the code, so that the two cannot drift apart.

Read from the sources themselves, each list failing loudly when none is
found (a renamed table must not make a check pass by checking nothing):

- the configuration keys of src/policy/conf.c (parse_match, parse_daemon,
  parse_zones, parser_handler), src/policy/knobs.c (the knob table) and
  src/policy/autotune-policy.c (the Auto* keys): each is an entry of its section
  in blkmqd.conf(5), and every entry there is a key the parser takes; each
  [Daemon] key is shown in conf/blkmqd.conf; the keys that append when
  given again (set_list(), strv_extend() in the parser) are exactly those
  blkmqd.conf(5) says append;
- the verb table of src/ctl/blkmqctl.c: each verb has an entry in
  blkmqctl(8) and a row in its table of exit statuses, and every exit
  status of src/ctl/ctl.h is described;
- the methods marked VARLINK_METHOD_MUTATING in src/daemon/api-manager.c
  and src/zones/zones-varlink.c: exactly those are the ones blkmqd-varlink(7)
  and blkmqctl(8) say need root or AdminGroup=, and every other method is
  named as open to everyone;
- the runbooks of monitoring/blkmqd-rules.yml run blkmqctl verbs that exist;
- every command of README.md's quick start is in debian/README.Debian.

Usage: test_docs.py [SRCDIR]. Prints one "not ok" line per mismatch.
"""
import re
import sys
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
failures = []


def fail(msg):
    failures.append(msg)
    print(f"not ok - {msg}")


def read(rel):
    return (SRC / rel).read_text()


def nonempty(what, items):
    if not items:
        print(f"not ok - found no {what}: the pattern that reads it is stale; fix test_docs.py")
        sys.exit(1)
    return items


def c_function(text, name):
    m = re.search(r"^(?:static )?int " + re.escape(name) + r"\(.*?^}", text, re.S | re.M)
    return nonempty(f"function {name}()", m.group(0) if m else "")


def streq_keys(body):
    return re.findall(r'streq\(key, "([A-Za-z0-9]+)"\)', body)


def man_sections(text):
    """{top-level heading: its text} of an scdoc page."""
    parts = re.split(r"^# (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def man_terms(text):
    """The *Key=* of every entry: a definition term (a line starting with
    *...*) or a table row's first cell (|  *...*)."""
    keys = set()
    lines = text.splitlines() + [""]
    for line, after in zip(lines, lines[1:]):
        if re.match(r"^\|\s+\*", line) or (line.startswith("*") and after.startswith("\t")):
            keys.update(re.findall(r"\*([A-Z][A-Za-z0-9]+)=\*", line))
    return keys


# --- configuration keys -------------------------------------------------------
conf = read("src/policy/conf.c")
match_body = c_function(conf, "parse_match")
daemon_body = c_function(conf, "parse_daemon")
zones_body = c_function(conf, "parse_zones")
handler_body = c_function(conf, "parser_handler")

match_keys = set(nonempty("Match* keys in parse_match()", streq_keys(match_body)))
daemon_keys = set(nonempty("keys in parse_daemon()", streq_keys(daemon_body)))
zones_keys = set(nonempty("keys in parse_zones()", streq_keys(zones_body)))
knob_keys = set(nonempty("keys in the knob table of knobs.c",
                         re.findall(r'\[KNOB_\w+\]\s*=\s*\{\s*"(\w+)"', read("src/policy/knobs.c"))))
auto = read("src/policy/autotune-policy.c")
auto_keys = set(nonempty("Auto* keys in autotune-policy.c",
                         re.findall(r'\{\s*"(Auto\w+)",\s*AUTO_KEY_', auto) +
                         re.findall(r'streq\(key, "(Auto\w+)"\)', auto)))
# parser_handler's own keys: [Profile] Devices=, and any [Device] key it
# handles itself; by the case they sit in.
device_own, profile_own = set(), set()
for case, body in re.findall(r"case (SECTION_\w+):(.*?)(?=case SECTION_|\n        }\n)", handler_body, re.S):
    if case == "SECTION_DEVICE":
        device_own.update(streq_keys(body))
    elif case == "SECTION_PROFILE":
        profile_own.update(streq_keys(body))
nonempty("[Profile] keys in parser_handler()", profile_own)

# An old name still read, with a warning: documented inside its new key's
# entry, not as an entry of its own.
aliases = {}
for m in re.finditer(r'streq\(key, "(\w+)"\) \|\| streq\(key, "(\w+)"\)\) \{(.*?)\n        \}', daemon_body, re.S):
    if "old name" in m.group(3):
        aliases[m.group(2)] = m.group(1)
daemon_keys -= set(aliases)

man5 = read("man/blkmqd.conf.5.scd")
sec = man_sections(man5)


def section(title):
    return nonempty(f'the section "# {title}" of blkmqd.conf(5)', sec.get(title, ""))


doc_daemon = man_terms(section("[Daemon] SECTION"))
doc_zones = man_terms(section("[Zones] SECTION"))
doc_device = man_terms(section("[Device NAME] SECTIONS")) | man_terms(section("CLOSED-LOOP TUNING"))
doc_profile = man_terms(section("[Profile NAME] SECTIONS"))
device_keys = match_keys | knob_keys | auto_keys | device_own

for what, code, doc in (("[Daemon]", daemon_keys, doc_daemon), ("[Zones]", zones_keys, doc_zones),
                        ("[Device]", device_keys, doc_device)):
    for k in sorted(code - doc):
        fail(f"{k}= ({what}, src/policy) has no entry in blkmqd.conf(5)'s {what} section")
    for k in sorted(doc - code):
        fail(f"{k}= has an entry in blkmqd.conf(5)'s {what} section, but the parser does not take it there")
for k in sorted(profile_own - doc_profile):
    fail(f"{k}= ([Profile], src/policy/conf.c) has no entry in blkmqd.conf(5)'s [Profile] section")
for old, new in sorted(aliases.items()):
    entry = re.search(r"^\*" + new + r"=\*\n(.*?)(?=^\S)", section("[Daemon] SECTION"), re.S | re.M)
    if not entry or f"*{old}=*" not in entry.group(1):
        fail(f"{new}='s entry in blkmqd.conf(5) does not name its old name {old}=, which the parser still reads")

shipped = read("conf/blkmqd.conf")
for k in sorted(daemon_keys):
    if not re.search(r"^#?" + k + "=", shipped, re.M):
        fail(f"{k}= ([Daemon]) is not shown in conf/blkmqd.conf, which shows every [Daemon] default")
for old in aliases:
    if re.search(r"^#?" + old + "=", shipped, re.M):
        fail(f"conf/blkmqd.conf shows {old}=, the old name of {aliases[old]}=")

# Append or replace: the keys whose parser extends a list.
appending = set()
for m in re.finditer(r"if \((streq\(key, \"\w+\"\)(?: \|\| streq\(key, \"\w+\"\))*)\)(.*?)(?=\n        if \(|\n        return -ENOENT)",
                     match_body, re.S):
    if re.search(r"set_list\(|strv_extend\(", m.group(2)):
        appending.update(streq_keys(m.group(1)))
for k in profile_own:
    if re.search(r'streq\(key, "' + k + r'"\)\)\s*r = set_list', handler_body):
        appending.add(k)
nonempty("keys that append (set_list(), strv_extend() in conf.c)", appending)
rows = re.search(r"^\|\s+(\*MatchKernel=\*.*?)^:", man5, re.S | re.M)
doc_appending = set(re.findall(r"\*([A-Z]\w+)=\*", rows.group(1))) if rows else set()
nonempty("row of appending keys (starting *MatchKernel=*) in blkmqd.conf(5)", doc_appending)
for k in sorted(appending - doc_appending):
    fail(f"{k}= appends when given again (conf.c), but blkmqd.conf(5)'s table does not list it among the keys that append")
for k in sorted(doc_appending - appending):
    fail(f"blkmqd.conf(5) lists {k}= among the keys that append, but conf.c replaces it")

# --- blkmqctl's verbs ------------------------------------------------------------
ctl = read("src/ctl/blkmqctl.c")
table = re.search(r"static const Verb verbs\[\] = \{(.*?)\};", ctl, re.S)
verbs = nonempty("verbs in src/ctl/blkmqctl.c's verb table",
                 re.findall(r'\{\s*"([a-z-]+)",\s*\d+,\s*\d+,\s*\w+\s*\}', table.group(1) if table else ""))
man8 = read("man/blkmqctl.8.scd")
msec = man_sections(man8)
commands = nonempty("COMMANDS in blkmqctl(8)", msec.get("COMMANDS", "")) + msec.get("ZONE ALLOCATOR", "")
entries = set(re.findall(r"^\*([a-z][a-z-]*)\*.*\n\t", commands, re.M))
for v in verbs:
    if v not in entries:
        fail(f"blkmqctl verb '{v}' (src/ctl/blkmqctl.c) has no entry in blkmqctl(8), COMMANDS")

exit_text = nonempty("EXIT STATUS in blkmqctl(8)", msec.get("EXIT STATUS", ""))
codes = nonempty("exit statuses in src/ctl/ctl.h",
                 [int(n) for n in re.findall(r"^\s*EXIT_\w+ = (\d+),", read("src/ctl/ctl.h"), re.M)])
for c in codes:
    if not re.search(r"^\*" + str(c) + r"\*$", exit_text, re.M):
        fail(f"exit status {c} (src/ctl/ctl.h) is not described in blkmqctl(8), EXIT STATUS")
verb_rows = set()
for row in re.findall(r"^\|\s+(.*)$", exit_text, re.M):
    verb_rows.update(re.findall(r"\*([a-z][a-z-]*)\*", row))
for v in verbs:
    if v not in verb_rows:
        fail(f"blkmqctl verb '{v}' has no row in blkmqctl(8)'s table of exit statuses")

# --- who may call what -------------------------------------------------------------
mutating, open_methods = set(), set()
for f in ("src/daemon/api-manager.c", "src/zones/zones-varlink.c"):
    t = read(f)
    ms = re.findall(r'\{\s*"([A-Z]\w+)",\s*method_\w+,\s*([^}]*)\}', t)
    nonempty(f"methods in {f}", ms)
    for name, flags in ms:
        (mutating if "VARLINK_METHOD_MUTATING" in flags else open_methods).add(name)
nonempty("VARLINK_METHOD_MUTATING methods", mutating)

perm = nonempty("PERMISSIONS in blkmqd-varlink(7)", man_sections(read("man/blkmqd-varlink.7.scd")).get("PERMISSIONS", ""))
open_part, _, rest = perm.partition("These change something:")
changing_part = rest.partition("blkmqd takes")[0]
doc_mutating = set(re.findall(r"\*([A-Z]\w+)\*", changing_part)) - {"AdminGroup"}
doc_open = set(re.findall(r"\*([A-Z]\w+)\*", open_part))
nonempty('the methods after "These change something:" in blkmqd-varlink(7), PERMISSIONS', doc_mutating)
for m in sorted(mutating - doc_mutating):
    fail(f"{m} needs root or AdminGroup= in the code (VARLINK_METHOD_MUTATING), but blkmqd-varlink(7), PERMISSIONS does not say so")
for m in sorted(doc_mutating - mutating):
    fail(f"blkmqd-varlink(7), PERMISSIONS says {m} needs root or AdminGroup=, but the code lets anyone call it")
for m in sorted(open_methods - doc_open):
    fail(f"{m} is open to everyone in the code, but blkmqd-varlink(7), PERMISSIONS does not name it")

desc = nonempty("DESCRIPTION in blkmqctl(8)", msec.get("DESCRIPTION", ""))
ptable = re.search(r"\[\[ \*Command\*\n:\[ \*Method\*.*?(?=\n\n|\Z)", desc, re.S)
nonempty("the table of commands and methods in blkmqctl(8), DESCRIPTION", ptable.group(0) if ptable else "")
ctl_methods, ctl_verbs = set(), set()
for line in ptable.group(0).splitlines()[2:]:
    if line.startswith("|"):
        ctl_verbs.update(w.split()[0] for w in re.findall(r"\*([a-z][a-z -]*)\*", line))
    elif line.startswith(":"):
        ctl_methods.update(re.findall(r"\*([A-Z]\w+)\*", line))
for m in sorted(mutating - ctl_methods):
    fail(f"{m} needs root or AdminGroup= in the code, but blkmqctl(8)'s table of commands that need it has no command calling it")
for m in sorted(ctl_methods - mutating):
    fail(f"blkmqctl(8) lists {m} among the methods that need root or AdminGroup=, but the code lets anyone call it")
for v in sorted(ctl_verbs - set(verbs)):
    fail(f"blkmqctl(8)'s table of commands that need root names '{v}', which is no verb")

# --- runbooks ------------------------------------------------------------------------
rules = read("monitoring/blkmqd-rules.yml")
runbooks = nonempty("runbooks in monitoring/blkmqd-rules.yml", re.findall(r'runbook: "(.*)"', rules))
zones_subs = set(re.findall(r"^\*zones ([a-z]+)\*", commands, re.M))
for rb in runbooks:
    for verb, sub in re.findall(r"blkmqctl ([a-z][a-z-]*)(?: ([a-z{][^ ,;.)]*))?", rb):
        if verb not in verbs:
            fail(f"a runbook runs 'blkmqctl {verb}', which is no verb: {rb[:80]}")
        elif verb == "zones" and sub and not sub.startswith("{") and sub not in zones_subs:
            fail(f"a runbook runs 'blkmqctl zones {sub}', which blkmqctl(8) does not have")
    if re.search(r"blkmqctl zones get \{\{ \$labels\.device \}\}(?! INDEX)", rb):
        fail(f"a runbook runs 'blkmqctl zones get DEVICE' without the zone's INDEX: {rb[:80]}")

# --- the quick start in README.Debian ------------------------------------------------
readme = read("README.md")
marked = re.findall(r"^<!-- quickstart(?:-systemd)?: ([\w-]+) -->\n```\w*\n(.*?)^```", readme, re.S | re.M)
nonempty("blocks marked <!-- quickstart: NAME --> in README.md", marked)
# README.Debian is read once the package is installed: all but the install.
blocks = [b for name, b in marked if name != "install"]
debian = [line.strip() for line in read("debian/README.Debian").splitlines()]
for b in blocks:
    for line in b.splitlines():
        if line.strip() and line.strip() not in debian:
            fail(f"README.md's quick start line is not in debian/README.Debian: {line.strip()}")

if failures:
    print(f"# {len(failures)} mismatch(es) between the docs and the code")
    sys.exit(1)
print(f"ok - {len(daemon_keys) + len(zones_keys) + len(device_keys)} keys, {len(verbs)} verbs, "
      f"{len(mutating)} privileged methods, {len(runbooks)} runbooks, {len(blocks)} quick start blocks agree with the docs")
