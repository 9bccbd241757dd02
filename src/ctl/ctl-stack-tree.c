/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* explain's stacks drawn as trees, the way lsblk -s and systemd-cgls draw
 * theirs: box-drawing glyphs on a UTF-8 terminal, ASCII otherwise (the
 * glyphs and their fallbacks are systemd's). Each device on a line of its
 * own, what blkmqd sets there on the lines below it. Jansson only, so that
 * test-stack draws the captured stacks with this very code. */

#include <stdio.h>
#include <string.h>

#include "ctl.h"

typedef struct Glyphs {
        const char *vertical, *branch, *right, *space, *arrow;
} Glyphs;

static const Glyphs glyphs_utf8 = { "│ ", "├─", "└─", "  ", "→" };
static const Glyphs glyphs_ascii = { "| ", "|-", "`-", "  ", "->" };

static const char *s_(json_t *o, const char *key) {
        return json_string_value(json_object_get(o, key));
}

static const char *or_dash(const char *s) {
        return s ? s : "-";
}

static void print_value(FILE *f, const char *prefix, json_t *v, const Glyphs *g) {
        const char *value = or_dash(s_(v, "value")), *applied = s_(v, "applied");

        fprintf(f, "%s%s=%s", prefix, or_dash(s_(v, "key")), value);
        if (applied && strcmp(applied, value) != 0)
                fprintf(f, " %s %s", g->arrow, applied);
        fprintf(f, " ([%s], %s)\n", or_dash(s_(v, "section")), or_dash(s_(v, "origin")));
}

static void print_loss(FILE *f, const char *prefix, json_t *l) {
        bool own = s_(l, "reason") && strcmp(s_(l, "reason"), "ownSection") == 0;

        fprintf(f, "%s%s=%s not applied ([%s], %s): %s[%s] %s\n", prefix, or_dash(s_(l, "key")),
                or_dash(s_(l, "value")), or_dash(s_(l, "section")), or_dash(s_(l, "origin")), own ? "its own " : "",
                or_dash(s_(l, "winner")), "comes later");
}

static void print_node(FILE *f, json_t *n, const char *prefix, bool root, bool last, const Glyphs *g) {
        json_t *children = json_object_get(n, "children"), *values = json_object_get(n, "values"),
               *losses = json_object_get(n, "notApplied"), *e;
        bool top = json_is_true(json_object_get(n, "top")), member = json_is_true(json_object_get(n, "member"));
        const char *path_of = s_(n, "pathOf");
        size_t nc = json_array_size(children), i;
        char own[512], detail[516];

        fprintf(f, "%s%s%s", prefix, root ? "" : last ? g->right : g->branch, or_dash(s_(n, "device")));
        if (s_(n, "name"))
                fprintf(f, " (%s)", s_(n, "name"));
        /* a top that is a member (a request-based multipath map) */
        fprintf(f, ": %s%s%s\n", top ? "top, " : "", or_dash(s_(n, "role")),
                top && member ? ": takes the queue keys itself" : "");

        /* the lines of this device, then its children, below the same prefix */
        snprintf(own, sizeof own, "%s%s", prefix, root ? "" : last ? g->space : g->vertical);
        snprintf(detail, sizeof detail, "%s%s", own, nc > 0 ? g->vertical : g->space);
        if (path_of)
                fprintf(f, "%s(a path of %s: the stack's keys stay on %s, none go here)\n", detail, path_of,
                        path_of);
        json_array_foreach(values, i, e)
                print_value(f, detail, e, g);
        json_array_foreach(losses, i, e)
                print_loss(f, detail, e);
        if (values && json_array_size(values) == 0 && json_array_size(losses) == 0) {
                if (!json_is_true(json_object_get(n, "managed")))
                        fprintf(f, "%s(not managed: no section matches it%s)\n", detail,
                                member ? " or a stack above it" : "");
                else
                        fprintf(f, "%s(nothing set here%s)\n", detail,
                                member || path_of ? "" : ": its request-queue keys go to the disks below");
        }
        json_array_foreach(children, i, e)
                print_node(f, e, own, false, i + 1 == nc, g);
}

void stack_tree_print(FILE *f, json_t *tree, const char *indent, bool use_utf8) {
        print_node(f, tree, indent, true, true, use_utf8 ? &glyphs_utf8 : &glyphs_ascii);
}
