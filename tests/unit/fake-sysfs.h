/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Fake /sys trees for unit tests, built from the captured attribute sets in
 * tests/fixtures/sysfs/ (FIXTURES_DIR, set by meson).
 *
 * A tree is plain files in a mkdtemp() directory: <root>/block/<dev>/...,
 * each file holding its value plus the "\n" the kernel prints (unless the
 * captured value already ends with one, like uevent), with the
 * captured mode applied by chmod(). Two things differ from the kernel, and
 * tests must be written around them:
 *
 *  - Tests run as root, so open(O_WRONLY) succeeds on a 0444 file. Only the
 *    mode bits (sysfs_writable()) say an attribute is read-only.
 *  - A write is stored as written. sysfs_write() opens without O_TRUNC (the
 *    kernel needs none), so a value shorter than the old content leaves the
 *    old tail behind; tests write values at least as long as the current
 *    one. Writing "kyber" to queue/scheduler leaves no "[kyber]" brackets:
 *    what the kernel prints after a switch is for the integration suite on
 *    real devices.
 *
 * Every file's mtime is set to FAKE_SYSFS_MTIME when the tree is built, so
 * fake_sysfs_untouched() can tell whether anything was written since. */

#include <stdbool.h>
#include <sys/types.h>

#include "cleanup.h"

#define FAKE_SYSFS_MTIME 1000000000 /* 2001-09-09: older than any write a test makes */

typedef struct FakeSysfs {
        char *root;     /* the mkdtemp() directory: TuneContext.sysfs_root */
        char *blockdir; /* <root>/block/<sysname> */
        char *sysname;  /* the first path component of the fixture */
} FakeSysfs;

/* "guest-6.1-nvme-conventional.tsv" → a fresh tree; -ENOENT if FIXTURES_DIR
 * is unset or the fixture is missing, -EBADMSG on a malformed line. */
int fake_sysfs_new(const char *fixture, FakeSysfs **ret);
/* Removes the tree; accepts NULL. */
FakeSysfs *fake_sysfs_free(FakeSysfs *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(FakeSysfs *, fake_sysfs_free)
#define _cleanup_fake_sysfs_ _cleanup_(fake_sysfs_freep)

/* The raw content of <blockdir>/<attr> (trailing "\n" included); NULL if absent. */
char *fake_sysfs_get(const FakeSysfs *f, const char *attr);
/* Creates or replaces <blockdir>/<attr> (parents included) holding value
 * plus the kernel's "\n", with the given mode and the old FAKE_SYSFS_MTIME. */
int fake_sysfs_set(const FakeSysfs *f, const char *attr, const char *value, mode_t mode);
/* Removes <blockdir>/<attr>, a file or a whole directory. */
int fake_sysfs_remove(const FakeSysfs *f, const char *attr);
/* true if <blockdir>/<attr> exists and was not written since it was made. */
bool fake_sysfs_untouched(const FakeSysfs *f, const char *attr);

/* Every file below dir, sorted: "path mode mtime\n<content>\n", for
 * comparing a whole tree before and after. */
int t_tree_snapshot(const char *dir, char **ret);

/* Helpers for any test that needs files. */
int t_mkdtemp(const char *prefix, char **ret); /* in $TMPDIR or /tmp */
int t_write_file(const char *path, const char *content);
int t_mkdir_p(const char *path);
int t_rm_rf(const char *path);
/* FIXTURES_DIR or NULL: main() of a fixture test exits 77 (skip) without it. */
const char *t_fixtures_dir(void);
