/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "sysfs.h"
#include "util.h"

int sysfs_read(const char *path, char **ret) {
        _cleanup_close_ int fd = -EBADF;
        char buf[8192];
        ssize_t n;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_debug_errno(errno, "sysfs: open %s: %m", path);
        n = read(fd, buf, sizeof buf - 1);
        if (n < 0)
                return log_debug_errno(errno, "sysfs: read %s: %m", path);
        buf[n] = 0;
        while (n > 0 && strchr("\n \t", buf[n - 1]))
                buf[--n] = 0;
        log_debug("sysfs: read %s = \"%s\"", path, buf);
        *ret = strdup(buf);
        return *ret ? 0 : -ENOMEM;
}

int sysfs_write(const char *path, const char *value) {
        _cleanup_close_ int fd = -EBADF;
        size_t len = strlen(value);
        ssize_t n;

        fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_debug_errno(errno, "sysfs: open %s for writing: %m", path);
        n = write(fd, value, len);
        if (n < 0)
                return log_debug_errno(errno, "sysfs: write %s = \"%s\": %m", path, value);
        if ((size_t) n != len)
                return log_debug_errno(EIO, "sysfs: short write to %s", path);
        log_debug("sysfs: wrote %s = \"%s\"", path, value);
        return 0;
}

int sysfs_read_int(const char *path, long long *ret) {
        _cleanup_free_ char *s = NULL;
        int r;

        r = sysfs_read(path, &s);
        if (r < 0)
                return r;
        return safe_atolli(s, ret);
}

bool sysfs_exists(const char *path) {
        return access(path, F_OK) == 0;
}

int sysfs_writable(const char *path) {
        struct stat st;

        if (stat(path, &st) < 0)
                return -errno;
        return !!(st.st_mode & 0222);
}

char *path_join_many(const char *first, ...) {
        size_t len = 0;
        const char *p;
        char *out, *q;
        va_list ap;

        va_start(ap, first);
        for (p = first; p; p = va_arg(ap, const char *))
                len += strlen(p) + 1;
        va_end(ap);

        out = q = malloc(len + 1);
        if (!out)
                return NULL;
        *q = 0;
        va_start(ap, first);
        for (p = first; p; p = va_arg(ap, const char *)) {
                if (!*p)
                        continue;
                if (q > out && q[-1] != '/' && *p != '/')
                        *q++ = '/';
                else if (q > out && q[-1] == '/' && *p == '/')
                        p++;
                q = stpcpy(q, p);
        }
        va_end(ap);
        return out;
}
