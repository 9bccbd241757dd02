/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The one sysfs accessor pair. Paths are absolute; callers build them from a
 * root that tests point at a fake tree. Both return 0 or -errno and log
 * every access at debug level. Safe to call from worker threads. */

/* Reads the attribute, strips the trailing newline and trailing blanks. */
int sysfs_read(const char *path, char **ret);
/* Writes value with one write(2), as the kernel wants it. */
int sysfs_write(const char *path, const char *value);
int sysfs_read_int(const char *path, long long *ret);
bool sysfs_exists(const char *path);
/* 1 if the attribute exists and has a write bit, 0 if read-only, -ENOENT. */
int sysfs_writable(const char *path);

/* Joins with '/', skipping empty parts; returns NULL on OOM. */
char *path_join_many(const char *first, ...) __attribute__((sentinel));
#define path_join(...) path_join_many(__VA_ARGS__, NULL)
