/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* Small cleanup helpers in the manner of systemd's and libnvme's: scope-bound
 * frees and closes, TAKE_PTR()/TAKE_FD() to hand ownership on. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

#define TAKE_PTR(p)                         \
        ({                                  \
                __typeof__(p) _p_ = (p);    \
                (p) = NULL;                 \
                _p_;                        \
        })

#define TAKE_FD(fd)                         \
        ({                                  \
                int _fd_ = (fd);            \
                (fd) = -EBADF;              \
                _fd_;                       \
        })

static inline void freep(void *p) {
        free(*(void **) p);
}
#define _cleanup_free_ _cleanup_(freep)

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

static inline void fclosep(FILE **f) {
        if (*f)
                fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* Defines name##p(type **p) calling func(*p) when non-NULL. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)         \
        static inline void func##p(type *p) {           \
                if (*p)                                 \
                        func(*p);                       \
        }

static inline int negative_errno(void) {
        return errno > 0 ? -errno : -EIO;
}

static inline int streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

static inline int streq_ptr(const char *a, const char *b) {
        if (!a || !b)
                return a == b;
        return strcmp(a, b) == 0;
}

static inline const char *strempty(const char *s) {
        return s ? s : "";
}

static inline const char *strna(const char *s) {
        return s ? s : "n/a";
}

static inline void *mfree(void *p) {
        free(p);
        return NULL;
}

/* Replace *dst with a copy of src (NULL allowed). */
static inline int free_and_strdup(char **dst, const char *src) {
        char *t = NULL;
        if (src) {
                t = strdup(src);
                if (!t)
                        return -ENOMEM;
        }
        free(*dst);
        *dst = t;
        return 0;
}

#include <dirent.h>
static inline void closedirp_helper(DIR **d) {
        if (*d)
                closedir(*d);
}
