/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The configuration loader as the daemon runs it: inih plus src/policy/conf.c, a
 * main file and its drop-ins (blkmqd.conf.d/NN-*.conf, in lexical order).
 * The input is cut at each "\n--8<--\n" into the main file and up to six
 * drop-ins, written into a private directory. Any input must load or be
 * refused with a file:line message, never crash or leak; what loads must
 * free cleanly. config_load_string() gets the whole input too. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CUT "\n--8<--\n"
#define DROPINS_MAX 6

static char dir[64], main_path[128], dropin_dir[160];

static void put(const char *path, const char *p, size_t n) {
        FILE *f = fopen(path, "we");
        if (!f)
                abort();
        if (n && fwrite(p, 1, n, f) != n)
                abort();
        fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Config *c = NULL;
        ConfigError err;
        char *text, *p, *next;
        unsigned k = 0;

        if (!dir[0]) {
                log_set_max_level(-1); /* quiet: errors come back in err */
                const char *tmp = getenv("TMPDIR");

                /* TMPDIR=/dev/shm: the files are written for every input. */
                snprintf(dir, sizeof dir, "%s/fuzz-conf-%d-XXXXXX", tmp && *tmp ? tmp : "/tmp", (int) getpid());
                if (!mkdtemp(dir))
                        abort();
                snprintf(main_path, sizeof main_path, "%s/blkmqd.conf", dir);
                snprintf(dropin_dir, sizeof dropin_dir, "%s.d", main_path);
                if (mkdir(dropin_dir, 0755) < 0 && errno != EEXIST)
                        abort();
        }
        text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;

        for (unsigned i = 0; i < DROPINS_MAX; i++) {
                char path[256];
                snprintf(path, sizeof path, "%s/%02u-fuzz.conf", dropin_dir, i);
                (void) unlink(path);
        }
        p = text;
        next = strstr(p, CUT);
        put(main_path, p, next ? (size_t) (next - p) : strlen(p));
        while (next && k < DROPINS_MAX) {
                char path[256];
                p = next + strlen(CUT);
                next = strstr(p, CUT);
                snprintf(path, sizeof path, "%s/%02u-fuzz.conf", dropin_dir, k++);
                put(path, p, next ? (size_t) (next - p) : strlen(p));
        }

        memset(&err, 0, sizeof err);
        if (config_load(main_path, &c, &err) >= 0) {
                if (!c)
                        abort();
                config_free(c);
        } else if (!err.message[0])
                abort(); /* a refusal always says why */
        c = NULL;
        memset(&err, 0, sizeof err);
        if (config_load_string(text, "fuzz.conf", &c, &err) >= 0)
                config_free(c);
        else if (!err.message[0])
                abort();
        free(text);
        return 0;
}
