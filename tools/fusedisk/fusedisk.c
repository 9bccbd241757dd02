/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "fusedisk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static FuseDiskFile *files;

void fusedisk_set_files(FuseDiskFile *f) {
        files = f;
}

const FuseDiskFile *fusedisk_file(fuse_ino_t ino) {
        for (FuseDiskFile *f = files; f && f->name; f++)
                if (f->ino == ino)
                        return f;
        return NULL;
}

static void fill_attr(fuse_ino_t ino, const FuseDiskFile *f, struct stat *st) {
        memset(st, 0, sizeof(*st));
        st->st_ino = ino;
        if (!f) {
                st->st_mode = S_IFDIR | 0755;
                st->st_nlink = 2;
                return;
        }
        st->st_mode = f->mode;
        st->st_nlink = 1;
        st->st_size = (off_t) f->size;
        st->st_blksize = 4096;
        st->st_blocks = (blkcnt_t) (f->size / 512);
}

void fusedisk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name) {
        for (FuseDiskFile *f = files; parent == FUSE_ROOT_ID && f && f->name; f++)
                if (strcmp(name, f->name) == 0) {
                        struct fuse_entry_param e = { .ino = f->ino, .attr_timeout = 3600, .entry_timeout = 3600 };
                        fill_attr(f->ino, f, &e.attr);
                        fuse_reply_entry(req, &e);
                        return;
                }
        fuse_reply_err(req, ENOENT);
}

void fusedisk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
        const FuseDiskFile *f = fusedisk_file(ino);
        struct stat st;
        if (ino != FUSE_ROOT_ID && !f) {
                fuse_reply_err(req, ENOENT);
                return;
        }
        fill_attr(ino, f, &st);
        fuse_reply_attr(req, &st, 3600);
}

void fusedisk_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
        char buf[1024];
        size_t len = 0, n = 2;
        struct stat st;
        if (ino != FUSE_ROOT_ID) {
                fuse_reply_err(req, ENOTDIR);
                return;
        }
        while (files && files[n - 2].name)
                n++;
        for (size_t i = (size_t) off; i < n; i++) {
                const FuseDiskFile *f = i < 2 ? NULL : &files[i - 2];
                fill_attr(f ? f->ino : FUSE_ROOT_ID, f, &st);
                size_t l = fuse_add_direntry(req, buf + len, sizeof(buf) - len, i == 0 ? "." : i == 1 ? ".." : f->name,
                                             &st, (off_t) i + 1);
                if (len + l > size || len + l > sizeof(buf))
                        break;
                len += l;
        }
        fuse_reply_buf(req, buf, len);
}

int fusedisk_parse_size(const char *s, double scale, uint64_t *ret) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (errno || end == s || v < 0)
                return -EINVAL;
        if (*end == 'k' || *end == 'K')
                v *= 1024, end++;
        else if (*end == 'm' || *end == 'M')
                v *= 1024 * 1024, end++;
        else if (*end == 'g' || *end == 'G')
                v *= 1024.0 * 1024 * 1024, end++;
        if (*end)
                return -EINVAL;
        *ret = (uint64_t) (v * scale);
        return 0;
}

int fusedisk_serve(const char *name, const char *mountpoint, const struct fuse_lowlevel_ops *ops, unsigned threads,
                   void (*stopped)(void)) {
        char opts[256];
        snprintf(opts, sizeof(opts), "fsname=%s,subtype=%s", name, name);
        char *fargv[] = { (char *) name, (char *) "-o", opts, NULL };
        struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
        struct fuse_session *se = fuse_session_new(&args, ops, sizeof(*ops), NULL);
        int r;
        if (!se)
                return -1;
        if (fuse_set_signal_handlers(se) < 0 || fuse_session_mount(se, mountpoint) < 0) {
                fuse_session_destroy(se);
                return -1;
        }
        if (threads <= 1)
                r = fuse_session_loop(se);
        else {
                struct fuse_loop_config *cfg = fuse_loop_cfg_create();
                fuse_loop_cfg_set_max_threads(cfg, threads);
                fuse_loop_cfg_set_idle_threads(cfg, threads);
                r = fuse_session_loop_mt(se, cfg);
                fuse_loop_cfg_destroy(cfg);
        }
        if (stopped)
                stopped();
        fuse_session_unmount(se);
        fuse_remove_signal_handlers(se);
        fuse_session_destroy(se);
        return r < 0 ? -1 : 0;
}
