/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cleanup.h"

/* Strict number parsing: the whole string, no trailing junk, -ERANGE/-EINVAL. */
int safe_atolli(const char *s, long long *ret);
int safe_atoi(const char *s, int *ret);
int safe_atou64(const char *s, uint64_t *ret);
/* yes/no/true/false/on/off/1/0 → 1/0, else -EINVAL. */
int parse_boolean(const char *s);
/* "512", "4K", "1.5G" (base 1024; B optional) → bytes. */
int parse_size(const char *s, uint64_t *ret);
char *format_size(uint64_t bytes, char buf[static 16]);

/* Trims in place, returns s. */
char *strstrip(char *s);

/* NULL-terminated string vectors (char **). */
size_t strv_length(char *const *l);
void strv_free(char **l);
DEFINE_TRIVIAL_CLEANUP_FUNC(char **, strv_free)
#define _cleanup_strv_free_ _cleanup_(strv_freep)
int strv_push(char ***l, char *value);          /* takes value; on failure frees it */
int strv_extend(char ***l, const char *value);  /* copies value */
char **strv_copy(char *const *l);
bool strv_contains(char *const *l, const char *s);
/* Splits on whitespace; returns -ENOMEM only. */
int strv_split_ws(const char *s, char ***ret);
char *strv_join(char *const *l, const char *sep);
bool strv_fnmatch(char *const *patterns, const char *s);
#define STRV_FOREACH(s, l) for (char *const *s = (l); s && *s; s++)

/* CPU sets as bitmaps of up to CPU_MAX bits, parsed from "0-3,8,10-11". */
#define CPU_MAX 1024
typedef struct CpuSet {
        uint64_t bits[CPU_MAX / 64];
} CpuSet;
int cpuset_parse(const char *s, CpuSet *ret);
char *cpuset_format(const CpuSet *c); /* "0-3,8"; "" for empty */
bool cpuset_equal(const CpuSet *a, const CpuSet *b);
bool cpuset_is_empty(const CpuSet *c);
bool cpuset_subset(const CpuSet *a, const CpuSet *b); /* a ⊆ b */
static inline void cpuset_set(CpuSet *c, unsigned cpu) {
        if (cpu < CPU_MAX)
                c->bits[cpu / 64] |= UINT64_C(1) << (cpu % 64);
}
static inline bool cpuset_isset(const CpuSet *c, unsigned cpu) {
        return cpu < CPU_MAX && (c->bits[cpu / 64] >> (cpu % 64)) & 1;
}

/* Kernel release "6.1.0-50-cloud-amd64" → 0x060100 style: major<<16|minor<<8. */
int kernel_version_parse(const char *release, unsigned *ret);
#define KERNEL_VERSION_CODE(a, b) (((unsigned) (a) << 16) | ((unsigned) (b) << 8))

uint64_t now_usec(int clock);

/* Writes text and a newline to path whole or not at all: a temporary file
 * beside it (mode mode), renamed over path. With WRITE_FILE_SYNC the file is
 * fsync()ed before the rename and its directory after, so a crash or a power
 * cut leaves the old content or the new; without, it is for a tmpfs such as
 * /run. */
typedef enum WriteFileFlags {
        WRITE_FILE_SYNC = 1 << 0,
} WriteFileFlags;
int write_file_atomic(const char *path, const char *text, mode_t mode, WriteFileFlags flags);
int fsync_directory(const char *dir);
/* dir and its missing parents (as systemd's StateDirectory= would); 0 if
 * it is there already. */
int mkdir_p(const char *dir, mode_t mode);
