/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

int safe_atolli(const char *s, long long *ret) {
        char *end = NULL;
        long long v;

        if (!s || !*s || isspace((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (!end || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int safe_atoi(const char *s, int *ret) {
        long long v;
        int r = safe_atolli(s, &v);
        if (r < 0)
                return r;
        if (v < INT_MIN || v > INT_MAX)
                return -ERANGE;
        *ret = (int) v;
        return 0;
}

int safe_atou64(const char *s, uint64_t *ret) {
        char *end = NULL;
        unsigned long long v;

        if (!s || !*s || !isdigit((unsigned char) *s))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno == ERANGE)
                return -ERANGE;
        if (!end || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int parse_boolean(const char *s) {
        static const char *const yes[] = { "1", "yes", "y", "true", "t", "on" };
        static const char *const no[] = { "0", "no", "n", "false", "f", "off" };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (strcasecmp(s, yes[i]) == 0)
                        return 1;
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (strcasecmp(s, no[i]) == 0)
                        return 0;
        return -EINVAL;
}

int parse_size(const char *s, uint64_t *ret) {
        static const struct { char c; uint64_t f; } suffixes[] = {
                { 'K', UINT64_C(1) << 10 }, { 'M', UINT64_C(1) << 20 }, { 'G', UINT64_C(1) << 30 },
                { 'T', UINT64_C(1) << 40 }, { 'P', UINT64_C(1) << 50 },
        };
        char *end = NULL;
        long double v;
        uint64_t f = 1;

        if (!s || !*s || !(isdigit((unsigned char) *s) || *s == '.'))
                return -EINVAL;
        /* Decimal digits and one point only: strtold() would also take hex,
         * exponents, "inf" and "nan". */
        size_t digits = strspn(s, "0123456789.");
        const char *dot = memchr(s, '.', digits);
        if (dot && memchr(dot + 1, '.', digits - (size_t) (dot + 1 - s)))
                return -EINVAL;
        if (s[digits] && !strchr("KMGTPkmgtpBb", s[digits]))
                return -EINVAL;
        errno = 0;
        v = strtold(s, &end);
        if (errno == ERANGE || v < 0)
                return -ERANGE;
        if (*end) {
                size_t i;
                for (i = 0; i < ELEMENTSOF(suffixes); i++)
                        if (toupper((unsigned char) *end) == suffixes[i].c)
                                break;
                if (i < ELEMENTSOF(suffixes)) {
                        f = suffixes[i].f;
                        end++;
                        if (*end == 'i' || *end == 'I')
                                end++;
                }
                if (*end == 'B' || *end == 'b')
                        end++;
                if (*end)
                        return -EINVAL;
        }
        v *= f;
        if (v >= 18446744073709551615.0L)
                return -ERANGE;
        *ret = (uint64_t) v;
        return 0;
}

char *format_size(uint64_t bytes, char buf[static 16]) {
        static const char units[] = "BKMGTP";
        unsigned i = 0;
        double v = (double) bytes;

        while (v >= 1024 && i < sizeof units - 2) {
                v /= 1024;
                i++;
        }
        if (i == 0)
                snprintf(buf, 16, "%llu", (unsigned long long) bytes);
        else if (v == (double) (uint64_t) v)
                snprintf(buf, 16, "%llu%c", (unsigned long long) v, units[i]);
        else
                snprintf(buf, 16, "%.1f%c", v, units[i]);
        return buf;
}

char *strstrip(char *s) {
        char *e;

        while (isspace((unsigned char) *s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char) e[-1]))
                *--e = 0;
        return s;
}

size_t strv_length(char *const *l) {
        size_t n = 0;
        while (l && l[n])
                n++;
        return n;
}

void strv_free(char **l) {
        STRV_FOREACH(s, l)
                free(*s);
        free(l);
}

int strv_push(char ***l, char *value) {
        size_t n = strv_length(*l);
        char **t = realloc(*l, sizeof(char *) * (n + 2));
        if (!t) {
                free(value);
                return -ENOMEM;
        }
        t[n] = value;
        t[n + 1] = NULL;
        *l = t;
        return 0;
}

int strv_extend(char ***l, const char *value) {
        char *c = strdup(value);
        if (!c)
                return -ENOMEM;
        return strv_push(l, c);
}

char **strv_copy(char *const *l) {
        char **c = calloc(strv_length(l) + 1, sizeof(char *));
        size_t i = 0;
        if (!c)
                return NULL;
        STRV_FOREACH(s, l) {
                c[i] = strdup(*s);
                if (!c[i]) {
                        strv_free(c);
                        return NULL;
                }
                i++;
        }
        return c;
}

bool strv_contains(char *const *l, const char *s) {
        STRV_FOREACH(i, l)
                if (streq(*i, s))
                        return true;
        return false;
}

int strv_split_ws(const char *s, char ***ret) {
        _cleanup_strv_free_ char **l = calloc(1, sizeof(char *));
        const char *p = s;

        if (!l)
                return -ENOMEM;
        for (;;) {
                size_t n;
                char *w;

                p += strspn(p, " \t\n");
                if (!*p)
                        break;
                n = strcspn(p, " \t\n");
                w = strndup(p, n);
                if (!w || strv_push(&l, w) < 0)
                        return -ENOMEM;
                p += n;
        }
        *ret = TAKE_PTR(l);
        return 0;
}

char *strv_join(char *const *l, const char *sep) {
        size_t len = 1, sl = strlen(sep);
        char *out, *q;

        STRV_FOREACH(s, l)
                len += strlen(*s) + sl;
        out = q = malloc(len);
        if (!out)
                return NULL;
        *q = 0;
        STRV_FOREACH(s, l) {
                if (s != l)
                        q = stpcpy(q, sep);
                q = stpcpy(q, *s);
        }
        return out;
}

bool strv_fnmatch(char *const *patterns, const char *s) {
        STRV_FOREACH(p, patterns)
                if (fnmatch(*p, s, 0) == 0)
                        return true;
        return false;
}

int cpuset_parse(const char *s, CpuSet *ret) {
        CpuSet c = {};
        const char *p = s;

        if (!s)
                return -EINVAL;
        while (*p) {
                unsigned long a, b;
                char *end;

                while (*p == ' ' || *p == ',')
                        p++;
                if (!*p)
                        break;
                if (!isdigit((unsigned char) *p))
                        return -EINVAL;
                a = strtoul(p, &end, 10);
                b = a;
                p = end;
                if (*p == '-') {
                        p++;
                        if (!isdigit((unsigned char) *p))
                                return -EINVAL;
                        b = strtoul(p, &end, 10);
                        p = end;
                }
                if (a > b || b >= CPU_MAX)
                        return -ERANGE;
                if (*p && *p != ',' && *p != ' ')
                        return -EINVAL;
                for (unsigned long i = a; i <= b; i++)
                        cpuset_set(&c, (unsigned) i);
        }
        *ret = c;
        return 0;
}

char *cpuset_format(const CpuSet *c) {
        char *out = calloc(1, CPU_MAX * 6), *q = out;
        unsigned i = 0;

        if (!out)
                return NULL;
        while (i < CPU_MAX) {
                unsigned j;
                if (!cpuset_isset(c, i)) {
                        i++;
                        continue;
                }
                for (j = i; j + 1 < CPU_MAX && cpuset_isset(c, j + 1); j++)
                        ;
                if (q > out)
                        *q++ = ',';
                q += j == i ? sprintf(q, "%u", i) : sprintf(q, "%u-%u", i, j);
                i = j + 1;
        }
        return out;
}

bool cpuset_equal(const CpuSet *a, const CpuSet *b) {
        return memcmp(a, b, sizeof *a) == 0;
}

bool cpuset_is_empty(const CpuSet *c) {
        for (size_t i = 0; i < ELEMENTSOF(c->bits); i++)
                if (c->bits[i])
                        return false;
        return true;
}

bool cpuset_subset(const CpuSet *a, const CpuSet *b) {
        for (size_t i = 0; i < ELEMENTSOF(a->bits); i++)
                if (a->bits[i] & ~b->bits[i])
                        return false;
        return true;
}

int kernel_version_parse(const char *release, unsigned *ret) {
        unsigned a, b;
        if (!release || sscanf(release, "%u.%u", &a, &b) != 2 || a > 255 || b > 255)
                return -EINVAL;
        *ret = KERNEL_VERSION_CODE(a, b);
        return 0;
}

uint64_t now_usec(int clock) {
        struct timespec ts;
        clock_gettime(clock, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

int mkdir_p(const char *dir, mode_t mode) {
        _cleanup_free_ char *p = strdup(dir);

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++)
                if (*s == '/') {
                        *s = 0;
                        if (mkdir(p, mode) < 0 && errno != EEXIST)
                                return -errno;
                        *s = '/';
                }
        if (mkdir(p, mode) < 0) {
                struct stat st;
                if (errno != EEXIST)
                        return -errno;
                if (stat(p, &st) < 0)
                        return -errno;
                if (!S_ISDIR(st.st_mode))
                        return -ENOTDIR;
        }
        return 0;
}

int fsync_directory(const char *dir) {
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

        if (fd < 0 || fsync(fd) < 0)
                return -errno;
        return 0;
}

int write_file_atomic(const char *path, const char *text, mode_t mode, WriteFileFlags flags) {
        _cleanup_free_ char *tmp = NULL, *dir = NULL;
        _cleanup_close_ int fd = -EBADF;
        size_t len = strlen(text);
        int r;

        if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0)
                return -errno;
        errno = 0;
        if (write(fd, text, len) != (ssize_t) len || write(fd, "\n", 1) != 1 || fchmod(fd, mode) < 0 ||
            ((flags & WRITE_FILE_SYNC) && fsync(fd) < 0)) {
                r = errno ? -errno : -EIO;
                (void) unlink(tmp);
                return r;
        }
        if (rename(tmp, path) < 0) {
                r = -errno;
                (void) unlink(tmp);
                return r;
        }
        if (!(flags & WRITE_FILE_SYNC))
                return 0;
        dir = strdup(path);
        if (!dir)
                return -ENOMEM;
        char *slash = strrchr(dir, '/');
        if (slash == dir)
                slash[1] = 0;
        else if (slash)
                *slash = 0;
        else
                strcpy(dir, ".");
        return fsync_directory(dir);
}
