/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fusedisk: what the FUSE test disks (modeldisk, powerdisk) share: a flat
 * directory of a few fixed files (lookup, getattr, readdir answered from a
 * table), size parsing, and the session's mount and loop.
 */
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <stdbool.h>
#include <stdint.h>

typedef struct FuseDiskFile {
        const char *name;
        fuse_ino_t ino;         /* 2, 3, ... (1 is the root) */
        unsigned mode;          /* S_IFREG | permissions */
        uint64_t size;
} FuseDiskFile;

/* The table the directory ops answer from; ends with a NULL name. */
void fusedisk_set_files(FuseDiskFile *files);
const FuseDiskFile *fusedisk_file(fuse_ino_t ino);

void fusedisk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void fusedisk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fusedisk_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);

/* "4096", "64K", "1.5M", "2G" times scale; -EINVAL on anything else. */
int fusedisk_parse_size(const char *s, double scale, uint64_t *ret);

/* Mounts ops at mountpoint (fsname NAME) and serves requests on THREADS
 * threads (1: the single-threaded loop, requests in arrival order) until
 * SIGTERM/SIGINT or an unmount; then calls stopped() (may be NULL) while
 * the session is still there (a thread that replies later stops in it), and
 * unmounts. 0 or -1. */
int fusedisk_serve(const char *name, const char *mountpoint, const struct fuse_lowlevel_ops *ops, unsigned threads,
                   void (*stopped)(void));
