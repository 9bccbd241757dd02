/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What trials chose per workload, per disk, kept across restarts in
 * StateDirectory=/autotune-memory: one line per workload
 * (autotune_memory_format()), the disk's identity and diskseq first. A
 * disk is known by its identity (Device.info->id); another medium under
 * the same identity (a loop device attached again, a disk swapped into the
 * slot: its diskseq differs) starts with no memory. Loop thread only; the
 * file is small and written once per trial decision, like the metrics
 * textfile. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autotune-state.h"
#include "log.h"
#include "sysfs.h"
#include "util.h"

#define MEMORY_FILE "autotune-memory"
#define MEMORY_DISKS_MAX 256

static char *memory_path(AutotuneRunner *t) {
        const char *dir = t->manager->config->daemon.state_directory;
        return dir ? path_join(dir, MEMORY_FILE) : NULL;
}

static AutotuneMemoryDisk *disk_add(AutotuneRunner *t, const char *id, uint64_t diskseq) {
        AutotuneMemoryDisk *n;

        if (t->n_memory >= MEMORY_DISKS_MAX)
                return NULL;
        n = realloc(t->memory, sizeof *n * (t->n_memory + 1));
        if (!n)
                return NULL;
        t->memory = n;
        n = &t->memory[t->n_memory];
        *n = (AutotuneMemoryDisk) { .id = strdup(id), .diskseq = diskseq };
        if (!n->id)
                return NULL;
        t->n_memory++;
        return n;
}

static AutotuneMemoryDisk *disk_find(AutotuneRunner *t, const char *id) {
        for (size_t i = 0; i < t->n_memory; i++)
                if (streq(t->memory[i].id, id))
                        return &t->memory[i];
        return NULL;
}

static void memory_load(AutotuneRunner *t) {
        _cleanup_free_ char *path = NULL, *line = NULL;
        _cleanup_fclose_ FILE *f = NULL;
        size_t size = 0;
        unsigned lineno = 0;

        t->memory_loaded = true;
        path = memory_path(t);
        if (!path)
                return;
        f = fopen(path, "re");
        if (!f) {
                if (errno != ENOENT)
                        log_warning_errno(errno, "Failed to read %s, starting without the workloads it holds: %m",
                                          path);
                return;
        }
        while (getline(&line, &size, f) >= 0) {
                char id[256];
                uint64_t seq;
                AutotuneMemory e;
                lineno++;
                line[strcspn(line, "\n")] = 0;
                if (!*line || *line == '#')
                        continue;
                if (autotune_memory_parse(line, id, sizeof id, &seq, &e) < 0) {
                        log_warning("%s:%u: not a remembered workload, ignoring.", path, lineno);
                        continue;
                }
                AutotuneMemoryDisk *m = disk_find(t, id);
                if (!m && !(m = disk_add(t, id, seq)))
                        return (void) log_oom();
                if (m->diskseq != seq || m->n >= AUTOTUNE_MEMORY_MAX)
                        continue;
                m->m[m->n++] = e;
        }
        log_debug("Read the workloads of %zu disks from %s.", t->n_memory, path);
}

AutotuneMemoryDisk *autotune_memory_disk(AutotuneRunner *t, const Device *d, bool create) {
        const char *id = d->info ? d->info->id : NULL;
        uint64_t seq = d->info ? d->info->diskseq : 0;
        AutotuneMemoryDisk *m;

        if (!t->memory_loaded)
                memory_load(t);
        if (!id)
                return NULL;
        m = disk_find(t, id);
        if (m && m->diskseq != seq) {
                if (m->n > 0)
                        log_info("%s: another medium under %s (diskseq %" PRIu64 ", was %" PRIu64
                                 "): the %zu workloads trials learned of it are forgotten.",
                                 d->sysname, id, seq, m->diskseq, m->n);
                m->n = 0;
                m->diskseq = seq;
                (void) autotune_memory_save(t);
        }
        if (!m && create)
                m = disk_add(t, id, seq);
        return m;
}

void autotune_memory_forget(AutotuneRunner *t, const Device *d) {
        AutotuneMemoryDisk *m = autotune_memory_disk(t, d, false);

        if (!m || m->n == 0)
                return;
        m->n = 0;
        (void) autotune_memory_save(t);
}

int autotune_memory_save(AutotuneRunner *t) {
        _cleanup_free_ char *path = memory_path(t), *tmp = NULL;
        _cleanup_fclose_ FILE *f = NULL;
        int fd, r;

        if (!path)
                return -ENOMEM;
        if (asprintf(&tmp, "%s.XXXXXX", path) < 0) {
                tmp = NULL;
                return log_oom();
        }
        (void) mkdir_p(t->manager->config->daemon.state_directory, 0755);
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                tmp = mfree(tmp);
                return log_warning_errno(r, "Failed to save the workloads trials learned (%s): %m", path);
        }
        f = fdopen(fd, "w");
        if (!f) {
                r = -errno;
                close(fd);
                goto fail;
        }
        fputs("# blkmqd: what closed-loop tuning trials chose per workload; see blkmqd.conf(5), AutoRemember=\n", f);
        for (size_t i = 0; i < t->n_memory; i++)
                for (size_t j = 0; j < t->memory[i].n; j++) {
                        char line[512];
                        if (autotune_memory_format(t->memory[i].id, t->memory[i].diskseq, &t->memory[i].m[j], line,
                                                   sizeof line) >= 0)
                                fprintf(f, "%s\n", line);
                }
        if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) < 0) {
                r = errno ? -errno : -EIO;
                goto fail;
        }
        if (fclose(TAKE_PTR(f)) != 0 || rename(tmp, path) < 0) {
                r = -errno;
                goto fail;
        }
        tmp = mfree(tmp);
        return 0;
fail:
        (void) unlink(tmp);
        return log_warning_errno(r, "Failed to save the workloads trials learned (%s): %m", path);
}

void autotune_memory_free(AutotuneRunner *t) {
        for (size_t i = 0; i < t->n_memory; i++)
                free(t->memory[i].id);
        t->memory = mfree(t->memory);
        t->n_memory = 0;
}
