/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stack.h"
#include "sysfs.h"
#include "util.h"

/* Deeper than any real stack (a file system on dm-crypt on an LV on md on
 * partitions is five); a tree with a loop in it stops here. */
#define STACK_MAX_DEPTH 16

static StackNode *stack_node_free(StackNode *n) {
        if (!n)
                return NULL;
        for (size_t i = 0; i < n->n_children; i++)
                stack_node_free(n->children[i]);
        free(n->children);
        for (size_t i = 0; i < n->n_paths; i++)
                stack_node_free(n->paths[i]);
        free(n->paths);
        free(n->name);
        free(n->disk);
        free(n);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(StackNode *, stack_node_free)

Stack *stack_free(Stack *s) {
        if (!s)
                return NULL;
        stack_node_free(s->top);
        strv_free(s->members);
        free(s);
        return NULL;
}

static int cmp_str(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

static void strv_sort(char **l) {
        if (l)
                qsort(l, strv_length(l), sizeof *l, cmp_str);
}

/* A directory's entries, sorted; an absent directory is empty. */
static int list_dir(const char *dir, char ***ret) {
        _cleanup_strv_free_ char **l = NULL;
        DIR *d = opendir(dir);

        if (!d) {
                if (errno != ENOENT && errno != ENOTDIR)
                        return -errno;
                *ret = NULL;
                return 0;
        }
        for (struct dirent *e; (e = readdir(d));) {
                if (e->d_name[0] == '.')
                        continue;
                if (strv_extend(&l, e->d_name) < 0) {
                        closedir(d);
                        return -ENOMEM;
                }
        }
        closedir(d);
        strv_sort(l);
        *ret = TAKE_PTR(l);
        return 0;
}

/* Where a slaves/ or holders/ entry points: the device's name and, for a
 * partition, its disk's. The link's target is a directory of /sys/devices
 * (or of the fake tree): a partition's directory sits in its disk's and
 * has a "partition" file. */
static int link_names(const char *dir, const char *entry, char **ret_name, char **ret_disk, bool *ret_partition) {
        _cleanup_free_ char *l = path_join(dir, entry), *pf = NULL;
        char real[PATH_MAX];

        if (!l)
                return -ENOMEM;
        if (!realpath(l, real))
                return -errno;
        pf = path_join(real, "partition");
        if (!pf)
                return -ENOMEM;
        bool part = access(pf, F_OK) == 0;
        char *s = strrchr(real, '/');
        if (!s)
                return -EINVAL;
        _cleanup_free_ char *name = strdup(s + 1);
        if (!name)
                return -ENOMEM;
        if (part) {
                *s = 0;
                s = strrchr(real, '/');
                if (!s)
                        return -EINVAL;
        }
        _cleanup_free_ char *disk = strdup(s + 1);
        if (!disk)
                return -ENOMEM;
        *ret_name = TAKE_PTR(name);
        *ret_disk = TAKE_PTR(disk);
        *ret_partition = part;
        return 0;
}

static bool disk_request_based(const char *root, const char *disk) {
        _cleanup_free_ char *p = NULL, *v = NULL;

        if (asprintf(&p, "%s/block/%s/queue/scheduler", root, disk) < 0)
                return false;
        return sysfs_read(p, &v) >= 0 && strchr(v, '[');
}

/* A node for a slaves/ entry of dir. */
static int slave_node(const char *root, const char *dir, const char *entry, StackNode **ret) {
        _cleanup_(stack_node_freep) StackNode *n = calloc(1, sizeof *n);
        int r;

        if (!n)
                return -ENOMEM;
        r = link_names(dir, entry, &n->name, &n->disk, &n->partition);
        if (r < 0)
                return r;
        n->request_based = disk_request_based(root, n->disk);
        *ret = TAKE_PTR(n);
        return 0;
}

static int node_append(StackNode ***l, size_t *n, StackNode *c) {
        StackNode **a = reallocarray(*l, *n + 1, sizeof *a);

        if (!a) {
                stack_node_free(c);
                return -ENOMEM;
        }
        *l = a;
        (*l)[(*n)++] = c;
        return 0;
}

/* The slaves of a request-based device (the paths of a dm-multipath map),
 * as leaves: its own queue carries the stack, theirs are below it, past
 * its scheduler. */
static int read_paths(const char *root, StackNode *n) {
        _cleanup_strv_free_ char **slaves = NULL;
        _cleanup_free_ char *dir = NULL;
        int r;

        if (asprintf(&dir, "%s/block/%s/slaves", root, n->name) < 0)
                return -ENOMEM;
        r = list_dir(dir, &slaves);
        if (r < 0)
                return r;
        STRV_FOREACH(e, slaves) {
                StackNode *c = NULL;

                r = slave_node(root, dir, *e, &c);
                if (r == -ENOENT)
                        continue; /* gone while we looked */
                if (r < 0)
                        return r;
                r = node_append(&n->paths, &n->n_paths, c);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int walk(const char *root, const char *name, const char *disk, bool partition, unsigned depth,
                char ***members, StackNode **ret) {
        _cleanup_(stack_node_freep) StackNode *n = NULL;
        _cleanup_strv_free_ char **slaves = NULL;
        _cleanup_free_ char *dir = NULL;
        int r;

        if (depth > STACK_MAX_DEPTH)
                return -ELOOP;
        n = calloc(1, sizeof *n);
        if (!n || !(n->name = strdup(name)) || !(n->disk = strdup(disk)))
                return -ENOMEM;
        n->partition = partition;
        n->request_based = disk_request_based(root, disk);
        if (n->request_based || partition) {
                /* The disk's queue carries it: a member if request-based
                 * (a request-based dm-multipath map too: its paths are
                 * listed, not followed); a partition of a bio-based disk
                 * carries nothing here. */
                if (n->request_based && !strv_contains(*members, disk) && strv_extend(members, disk) < 0)
                        return -ENOMEM;
                if (n->request_based && !partition) {
                        r = read_paths(root, n);
                        if (r < 0)
                                return r;
                }
                *ret = TAKE_PTR(n);
                return 0;
        }

        if (asprintf(&dir, "%s/block/%s/slaves", root, name) < 0)
                return -ENOMEM;
        r = list_dir(dir, &slaves);
        if (r < 0)
                return r;
        STRV_FOREACH(e, slaves) {
                _cleanup_free_ char *cn = NULL, *cd = NULL;
                StackNode *c = NULL;
                bool cp;

                r = link_names(dir, *e, &cn, &cd, &cp);
                if (r == -ENOENT)
                        continue; /* gone while we looked */
                if (r < 0)
                        return r;
                r = walk(root, cn, cd, cp, depth + 1, members, &c);
                if (r < 0)
                        return r;
                r = node_append(&n->children, &n->n_children, c);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

int stack_resolve(const char *sysfs_root, const char *top, Stack **ret) {
        _cleanup_(stack_freep) Stack *s = NULL;
        _cleanup_free_ char *dir = NULL;
        int r;

        if (asprintf(&dir, "%s/block/%s", sysfs_root, top) < 0)
                return -ENOMEM;
        if (access(dir, F_OK) < 0)
                return -errno;
        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        r = walk(sysfs_root, top, top, false, 0, &s->members, &s->top);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

bool stack_is_trivial(const Stack *s) {
        return s->top->n_children == 0 && s->top->request_based;
}

static bool path_to(const StackNode *n, const char *member, char ***path) {
        if (strv_extend(path, n->name) < 0)
                return false;
        if (n->request_based && streq(n->disk, member)) {
                if (!streq(n->disk, n->name))
                        return strv_extend(path, n->disk) >= 0;
                return true;
        }
        for (size_t i = 0; i < n->n_children; i++)
                if (path_to(n->children[i], member, path))
                        return true;
        /* not below this one: take it off again */
        size_t k = strv_length(*path);
        free((*path)[k - 1]);
        (*path)[k - 1] = NULL;
        return false;
}

int stack_path_to(const Stack *s, const char *member, char ***ret) {
        _cleanup_strv_free_ char **path = NULL;

        if (!path_to(s->top, member, &path))
                return path ? -ENOENT : -ENOMEM;
        *ret = TAKE_PTR(path);
        return 0;
}

static int tops_of(const char *root, const char *name, const char *blockdir, unsigned depth, bool all, bool through,
                   char ***tops) {
        _cleanup_strv_free_ char **holders = NULL, **entries = NULL;
        _cleanup_free_ char *hdir = path_join(blockdir, "holders");
        int r;

        if (!hdir)
                return -ENOMEM;
        if (depth > STACK_MAX_DEPTH)
                return -ELOOP;
        r = list_dir(hdir, &holders);
        if (r < 0)
                return r;
        /* A disk's partitions are held too (md over partitions). */
        r = list_dir(blockdir, &entries);
        if (r < 0)
                return r;
        STRV_FOREACH(e, entries) {
                _cleanup_free_ char *pd = path_join(blockdir, *e), *pf = NULL;
                if (!pd || !(pf = path_join(pd, "partition")))
                        return -ENOMEM;
                if (access(pf, F_OK) < 0)
                        continue;
                r = tops_of(root, *e, pd, depth + 1, all, through, tops);
                if (r < 0)
                        return r;
        }
        /* a partition counts as its disk: never listed */
        _cleanup_free_ char *pfile = path_join(blockdir, "partition");
        if (!pfile)
                return -ENOMEM;
        bool part = access(pfile, F_OK) == 0;
        if ((!holders || all) && depth > 0 && !part) {
                /* nothing above: a top (all: anything above the start) */
                if (!strv_contains(*tops, name) && strv_extend(tops, name) < 0)
                        return -ENOMEM;
        }
        if (!holders)
                return 0;
        STRV_FOREACH(h, holders) {
                _cleanup_free_ char *hn = NULL, *hd = NULL, *hb = NULL;
                bool hp;

                r = link_names(hdir, *h, &hn, &hd, &hp);
                if (r == -ENOENT)
                        continue;
                if (r < 0)
                        return r;
                /* A request-based holder (a dm-multipath map) is a member
                 * of its own: its queue, not this disk's, carries what is
                 * set on it and on the stacks above it (stack_resolve()
                 * stops there too). Explain's trees go past it (through):
                 * name is drawn there as one of its paths. */
                if (!through && disk_request_based(root, hd))
                        continue;
                if (asprintf(&hb, "%s/block/%s", root, hn) < 0)
                        return -ENOMEM;
                r = tops_of(root, hn, hb, depth + 1, all, through, tops);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int stack_up(const char *sysfs_root, const char *name, bool all, bool through, char ***ret) {
        _cleanup_strv_free_ char **tops = NULL;
        _cleanup_free_ char *dir = NULL;
        int r;

        if (asprintf(&dir, "%s/block/%s", sysfs_root, name) < 0)
                return -ENOMEM;
        r = tops_of(sysfs_root, name, dir, 0, all, through, &tops);
        if (r < 0)
                return r;
        strv_sort(tops);
        *ret = TAKE_PTR(tops);
        return 0;
}

int stack_tops(const char *sysfs_root, const char *name, char ***ret) {
        return stack_up(sysfs_root, name, false, false, ret);
}

int stack_tree_tops(const char *sysfs_root, const char *name, char ***ret) {
        return stack_up(sysfs_root, name, false, true, ret);
}

int stack_above(const char *sysfs_root, const char *name, char ***ret) {
        return stack_up(sysfs_root, name, true, false, ret);
}
