/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* blkmqctl's tables: sized to the terminal, the widest column gives way,
 * whole lines when not on a terminal. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

/* Display width of UTF-8 text, one column per code point (the daemon sends
 * sysfs values, names and paths: no wide characters to speak of). */
static size_t text_width(const char *s) {
        size_t w = 0;

        for (; *s; s++)
                if (((unsigned char) *s & 0xc0) != 0x80)
                        w++;
        return w;
}

/* Prints s in exactly width columns (padded unless last), cut with an
 * ellipsis if it does not fit. */
static void print_cell(const char *s, size_t width, bool right, bool last) {
        size_t w = text_width(s);

        if (w <= width) {
                if (right)
                        printf("%*s%s", (int) (width - w), "", s);
                else if (last)
                        fputs(s, stdout);
                else
                        printf("%s%*s", s, (int) (width - w), "");
                return;
        }

        size_t ew = text_width(ellipsis()), keep = width > ew ? width - ew : 0, n = 0;
        const char *p = s;

        /* Copy keep code points. */
        while (*p) {
                if (((unsigned char) *p & 0xc0) != 0x80) {
                        if (n == keep)
                                break;
                        n++;
                }
                p++;
        }
        fwrite(s, 1, p - s, stdout);
        if (width >= ew)
                fputs(ellipsis(), stdout);
}

Table *table_free(Table *t) {
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n_cells; i++)
                free(t->cells[i]);
        free(t->cells);
        free(t);
        return NULL;
}

int table_add(Table *t, const char *s) {
        char *c;

        if (t->n_cells == t->allocated) {
                size_t a = t->allocated ? t->allocated * 2 : 32;
                char **p = realloc(t->cells, a * sizeof *p);
                if (!p)
                        return -ENOMEM;
                t->cells = p;
                t->allocated = a;
        }
        c = strdup(dash(s));
        if (!c)
                return -ENOMEM;
        /* A cell is one line. */
        for (char *p = c; *p; p++)
                if (*p == '\n' || *p == '\t')
                        *p = ' ';
        t->cells[t->n_cells++] = c;
        return 0;
}

int table_addf(Table *t, const char *fmt, ...) {
        _cleanup_free_ char *s = NULL;
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        return table_add(t, s);
}

/* headers: n_columns names; a name starting with '>' is right-aligned. */
Table *table_new(size_t n_columns, const char *const *headers) {
        _cleanup_(table_freep) Table *t = calloc(1, sizeof *t);

        if (!t || n_columns > TABLE_COLUMNS_MAX)
                return NULL;
        t->n_columns = n_columns;
        for (size_t i = 0; i < n_columns; i++) {
                const char *h = headers[i];
                if (h[0] == '>') {
                        t->right[i] = true;
                        h++;
                }
                if (table_add(t, h) < 0)
                        return NULL;
        }
        return TAKE_PTR(t);
}

size_t table_rows(const Table *t) {
        return t->n_cells / t->n_columns - 1;
}

void table_print(const Table *t) {
        size_t width[TABLE_COLUMNS_MAX] = {}, n = t->n_columns, total = 0, avail = columns();
        size_t first = arg_legend ? 0 : 1;

        for (size_t row = first; row * n < t->n_cells; row++)
                for (size_t c = 0; c < n; c++) {
                        size_t w = text_width(t->cells[row * n + c]);
                        if (w > width[c])
                                width[c] = w;
                }
        for (size_t c = 0; c < n; c++)
                total += width[c] + (c + 1 < n ? 2 : 0);

        /* Too wide: take from the widest column, one at a time, so several
         * long columns end up equally cut; no column goes below 4 (a
         * character and an ellipsis). */
        while (!t->full_width && total > avail) {
                size_t widest = SIZE_MAX;
                for (size_t c = 0; c < n; c++)
                        if (!t->fixed[c] && (widest == SIZE_MAX || width[c] > width[widest]))
                                widest = c;
                if (widest == SIZE_MAX || width[widest] <= 4)
                        break;
                width[widest]--;
                total--;
        }

        for (size_t row = first; row * n < t->n_cells; row++) {
                for (size_t c = 0; c < n; c++) {
                        print_cell(t->cells[row * n + c], width[c], t->right[c], c + 1 == n);
                        if (c + 1 < n)
                                fputs("  ", stdout);
                }
                fputc('\n', stdout);
        }
}
/* A number field divided by div, as "%.Nf"; "-" when absent. */
int table_add_float(Table *t, json_t *o, const char *key, int decimals, double div) {
        json_t *v = json_object_get(o, key);

        if (!json_is_number(v))
                return table_add(t, NULL);
        return table_addf(t, "%.*f", decimals, json_number_value(v) / div);
}

void table_print_counted(const Table *t, const char *noun, const char *tail) {
        size_t n = table_rows(t);

        if (n > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu %s%s%s\n", n > 0 ? "\n" : "", n, noun, n == 1 ? "" : "s", tail);
}

const char *const write_limit_headers[WRITE_LIMIT_COLUMNS] = {
        ">STREAMS", ">STREAM-GRAN", ">ATOMIC-MAX", ">ATOMIC-UNIT-MIN", ">ATOMIC-UNIT-MAX", ">ATOMIC-BOUNDARY",
};

int table_add_write_limits(Table *t, json_t *limits) {
        static const char *const keys[WRITE_LIMIT_COLUMNS] = {
                "maxWriteStreams",         "writeStreamGranularity",  "atomicWriteMaxBytes",
                "atomicWriteUnitMinBytes", "atomicWriteUnitMaxBytes", "atomicWriteBoundaryBytes",
        };

        for (size_t i = 0; i < WRITE_LIMIT_COLUMNS; i++) {
                json_t *v = json_object_get(limits, keys[i]);
                int r = json_is_integer(v) ? table_addf(t, "%lld", (long long) json_integer_value(v))
                                           : table_add(t, NULL);
                if (r < 0)
                        return r;
        }
        return 0;
}
