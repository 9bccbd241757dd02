/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake-sysfs.h"
#include "sysfs.h"

const char *t_fixtures_dir(void) {
        const char *d = getenv("FIXTURES_DIR");
        return d && *d ? d : NULL;
}

int t_mkdtemp(const char *prefix, char **ret) {
        const char *tmp = getenv("TMPDIR");
        char *p = NULL;

        if (asprintf(&p, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix) < 0)
                return -ENOMEM;
        if (!mkdtemp(p)) {
                int r = -errno;
                free(p);
                return r;
        }
        *ret = p;
        return 0;
}

int t_mkdir_p(const char *path) {
        _cleanup_free_ char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -errno;
                *s = '/';
        }
        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                return -errno;
        return 0;
}

int t_write_file(const char *path, const char *content) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        size_t len = strlen(content);

        if (fd < 0)
                return -errno;
        if (write(fd, content, len) != (ssize_t) len)
                return -EIO;
        return 0;
}

static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
        return (type == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

int t_rm_rf(const char *path) {
        if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
                return errno == ENOENT ? 0 : -errno;
        return 0;
}

/* Writes value + "\n", then mode and the old mtime. The mode is applied
 * last: as root a 0444 file could be rewritten anyway, but a 0200 one must
 * still be created readable by nobody but its owner. */
static int write_attr(const char *path, const char *value, mode_t mode) {
        const struct timespec ts[2] = { { .tv_sec = FAKE_SYSFS_MTIME }, { .tv_sec = FAKE_SYSFS_MTIME } };
        _cleanup_free_ char *content = NULL;
        _cleanup_free_ char *dir = strdup(path);
        char *slash;
        int r;

        /* A captured value that ends in a newline (uevent) already has the
         * kernel's last one. */
        if (!dir || asprintf(&content, "%s%s", value, *value && value[strlen(value) - 1] == '\n' ? "" : "\n") < 0)
                return -ENOMEM;
        slash = strrchr(dir, '/');
        if (slash) {
                *slash = 0;
                r = t_mkdir_p(dir);
                if (r < 0)
                        return r;
        }
        (void) unlink(path);
        r = t_write_file(path, content);
        if (r < 0)
                return r;
        if (chmod(path, mode) < 0 || utimensat(AT_FDCWD, path, ts, 0) < 0)
                return -errno;
        return 0;
}

FakeSysfs *fake_sysfs_free(FakeSysfs *f) {
        if (!f)
                return NULL;
        if (f->root)
                (void) t_rm_rf(f->root);
        free(f->root);
        free(f->blockdir);
        free(f->sysname);
        free(f);
        return NULL;
}

/* "nvme1n1/queue/scheduler<TAB>644<TAB>[none] mq-deadline kyber " */
static int load_line(FakeSysfs *f, char *line) {
        _cleanup_free_ char *path = NULL;
        char *mode_s, *value, *end, *slash;
        unsigned long mode;

        mode_s = strchr(line, '\t');
        if (!mode_s)
                return -EBADMSG;
        *mode_s++ = 0;
        value = strchr(mode_s, '\t');
        if (!value)
                return -EBADMSG;
        *value++ = 0;
        errno = 0;
        mode = strtoul(mode_s, &end, 8);
        if (errno || *end || end == mode_s || mode > 07777 || line[0] == '/' || strstr(line, ".."))
                return -EBADMSG;
        for (char *c = value; *c; c++)
                if (*c == '\x1c')
                        *c = '\n';

        slash = strchr(line, '/');
        if (!slash)
                return -EBADMSG;
        if (!f->sysname) {
                f->sysname = strndup(line, slash - line);
                if (!f->sysname || asprintf(&f->blockdir, "%s/block/%s", f->root, f->sysname) < 0)
                        return -ENOMEM;
        } else if (strncmp(line, f->sysname, slash - line) != 0 || strlen(f->sysname) != (size_t) (slash - line))
                return -EBADMSG; /* one device per fixture */
        if (asprintf(&path, "%s/block/%s", f->root, line) < 0)
                return -ENOMEM;
        return write_attr(path, value, (mode_t) mode);
}

int fake_sysfs_new(const char *fixture, FakeSysfs **ret) {
        _cleanup_(fake_sysfs_freep) FakeSysfs *f = NULL;
        _cleanup_free_ char *tsv = NULL, *line = NULL;
        _cleanup_fclose_ FILE *in = NULL;
        const char *dir = t_fixtures_dir();
        size_t size = 0;
        ssize_t n;
        int r;

        if (!dir)
                return -ENOENT;
        if (asprintf(&tsv, "%s/sysfs/%s", dir, fixture) < 0)
                return -ENOMEM;
        in = fopen(tsv, "re");
        if (!in)
                return -errno;
        f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        r = t_mkdtemp("fake-sysfs", &f->root);
        if (r < 0)
                return r;
        while ((n = getline(&line, &size, in)) >= 0) {
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = 0;
                if (n == 0 || line[0] == '#')
                        continue;
                r = load_line(f, line);
                if (r < 0)
                        return r;
        }
        if (!f->sysname)
                return -EBADMSG;
        *ret = TAKE_PTR(f);
        return 0;
}

char *fake_sysfs_get(const FakeSysfs *f, const char *attr) {
        _cleanup_free_ char *p = path_join(f->blockdir, attr);
        _cleanup_fclose_ FILE *in = NULL;
        char *buf = NULL;
        size_t len = 0;
        FILE *out;
        int c;

        if (!p || !(in = fopen(p, "re")))
                return NULL;
        out = open_memstream(&buf, &len);
        if (!out)
                return NULL;
        while ((c = fgetc(in)) != EOF)
                fputc(c, out);
        if (fclose(out) != 0) {
                free(buf);
                return NULL;
        }
        return buf;
}

int fake_sysfs_set(const FakeSysfs *f, const char *attr, const char *value, mode_t mode) {
        _cleanup_free_ char *p = path_join(f->blockdir, attr);

        if (!p)
                return -ENOMEM;
        return write_attr(p, value, mode);
}

int fake_sysfs_remove(const FakeSysfs *f, const char *attr) {
        _cleanup_free_ char *p = path_join(f->blockdir, attr);

        if (!p)
                return -ENOMEM;
        return t_rm_rf(p);
}

bool fake_sysfs_untouched(const FakeSysfs *f, const char *attr) {
        _cleanup_free_ char *p = path_join(f->blockdir, attr);
        struct stat st;

        return p && stat(p, &st) == 0 && st.st_mtim.tv_sec == FAKE_SYSFS_MTIME && st.st_mtim.tv_nsec == 0;
}

static int snapshot_dir(FILE *out, const char *dir, const char *rel) {
        struct dirent **names = NULL;
        int n, r = 0;

        n = scandir(dir, &names, NULL, alphasort);
        if (n < 0)
                return -errno;
        for (int i = 0; i < n; i++) {
                _cleanup_free_ char *p = NULL, *q = NULL;
                const char *name = names[i]->d_name;
                struct stat st;

                if (r < 0 || streq(name, ".") || streq(name, ".."))
                        continue;
                if (asprintf(&p, "%s/%s", dir, name) < 0 || asprintf(&q, "%s%s%s", rel, *rel ? "/" : "", name) < 0) {
                        r = -ENOMEM;
                        continue;
                }
                if (lstat(p, &st) < 0) {
                        r = -errno;
                        continue;
                }
                fprintf(out, "%s %o %lld.%09ld\n", q, (unsigned) st.st_mode, (long long) st.st_mtim.tv_sec,
                        st.st_mtim.tv_nsec);
                if (S_ISDIR(st.st_mode))
                        r = snapshot_dir(out, p, q);
                else if (S_ISREG(st.st_mode)) {
                        _cleanup_fclose_ FILE *in = fopen(p, "re");
                        int c;

                        if (!in) {
                                r = -errno;
                                continue;
                        }
                        while ((c = fgetc(in)) != EOF)
                                fputc(c, out);
                        fputc('\n', out);
                }
        }
        for (int i = 0; i < n; i++)
                free(names[i]);
        free(names);
        return r;
}

int t_tree_snapshot(const char *dir, char **ret) {
        char *buf = NULL;
        size_t len = 0;
        FILE *out = open_memstream(&buf, &len);
        int r;

        if (!out)
                return -ENOMEM;
        r = snapshot_dir(out, dir, "");
        if (fclose(out) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret = buf;
        return 0;
}
