#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The test hooks against their list, src/basic/test-hooks.h.

- every BLKMQD_TEST_* variable that src/ names is read only in
  src/basic/test-hooks.c, and has its entry in test-hooks.h;
- every entry names the tests that use it ("Used by: PATH, ..."), and each
  of those files exists and sets that variable;
- every hook the header lists is read in test-hooks.c.

Usage: test_hooks.py [SRCDIR]. Prints one "not ok" line per mismatch.
"""
import re
import sys
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
HEADER = "src/basic/test-hooks.h"
READER = "src/basic/test-hooks.c"
NAME_RE = re.compile(r"\bBLKMQD_TEST_[A-Z0-9_]+")
failures = []


def fail(msg):
    failures.append(msg)
    print(f"not ok - {msg}")


header = (SRC / HEADER).read_text()
entries = {}
for block in re.findall(r"/\*(.*?)\*/", header, re.S):
    m = re.match(r"\s*(BLKMQD_TEST_[A-Z0-9_]+)=", block)
    if not m:
        continue
    used = re.search(r"Used by:(.*)", block, re.S)
    paths = re.split(r"[\s,]+", re.sub(r"\n\s*\*", " ", used.group(1)).strip()) if used else []
    entries[m.group(1)] = [p for p in paths if p]
if not entries:
    fail(f"{HEADER}: no hook entries found (a comment starting BLKMQD_TEST_NAME=)")

reader = (SRC / READER).read_text()
for name, paths in sorted(entries.items()):
    if f'secure_getenv("{name}")' not in reader:
        fail(f"{name}: listed in {HEADER} but not read in {READER}")
    if not paths:
        fail(f"{name}: its entry in {HEADER} names no test (\"Used by: PATH\")")
    for p in paths:
        f = SRC / p
        if not f.is_file():
            fail(f"{name}: {HEADER} names {p}, which does not exist")
        elif name not in f.read_text(errors="replace"):
            fail(f"{name}: {HEADER} names {p}, which does not use it")

for f in sorted((SRC / "src").rglob("*.[ch]")):
    rel = str(f.relative_to(SRC))
    text = f.read_text(errors="replace")
    for lineno, line in enumerate(text.splitlines(), 1):
        for name in NAME_RE.findall(line):
            if name not in entries:
                fail(f"{rel}:{lineno}: {name} has no entry in {HEADER}")
        if rel != READER and re.search(r'getenv\s*\(\s*"BLKMQD_TEST_', line):
            fail(f"{rel}:{lineno}: a test hook read outside {READER}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print(f"ok - {len(entries)} test hooks, each read in {READER} and used by the tests it names")
