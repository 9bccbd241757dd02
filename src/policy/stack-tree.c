/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "stack-tree.h"
#include "util.h"

static bool has_prefix(const char *s, const char *p) {
        return s && strncmp(s, p, strlen(p)) == 0;
}

const char *stack_role(const DeviceInfo *d, const char *dm_target, bool partition, bool request_based,
                       char buf[static 64]) {
        const char *uuid = d ? d->dm_uuid : NULL;

        if (partition)
                snprintf(buf, 64, "partition");
        else if (d && d->md_level)
                snprintf(buf, 64, "md %s", d->md_level);
        else if (uuid && has_prefix(uuid, "LVM-")) {
                if (dm_target && !strchr(dm_target, '+'))
                        snprintf(buf, 64, "%s LV", dm_target);
                else if (dm_target)
                        snprintf(buf, 64, "LV (%s)", dm_target);
                else
                        snprintf(buf, 64, "LV");
        } else if (uuid && has_prefix(uuid, "CRYPT-"))
                snprintf(buf, 64, "dm-crypt");
        else if (uuid && has_prefix(uuid, "mpath-"))
                snprintf(buf, 64, "dm-multipath%s", request_based ? ", request-based" : "");
        else if (d && (d->dm_name || d->dm_uuid))
                snprintf(buf, 64, "dm%s%s", dm_target ? " " : "", strempty(dm_target));
        else
                snprintf(buf, 64, "%s disk", request_based ? "request-based" : "bio-based");
        return buf;
}

/* The name operators give it: VG/LV, the crypt mapping, the md array, the dm name. */
static const char *operator_name(const DeviceInfo *d) {
        if (!d)
                return NULL;
        return d->volume ? d->volume : d->crypt ? d->crypt : d->md_name ? d->md_name : d->dm_name;
}

/* What the job read back for knob k, where one entry carries it. */
static const char *applied_value(const TuneJob *j, Knob k) {
        const char *v = NULL;
        unsigned n = 0;

        if (!j || j->restore || j->dry_run)
                return NULL;
        for (size_t i = 0; i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                if (e->knob != k)
                        continue;
                n++;
                if (e->outcome == TUNE_CHANGED || e->outcome == TUNE_UNCHANGED || e->outcome == TUNE_ADJUSTED)
                        v = e->after;
        }
        return n == 1 ? v : NULL;
}

static json_t *values_json(const StackTreeDevice *t, bool member) {
        const Resolved *r = &t->resolved;
        json_t *a = json_array();

        for (int k = 0; a && k < _KNOB_MAX; k++) {
                /* a bio-based layer keeps the keys that are not the queue's */
                if (!r->value[k] || (!member && knob_request_queue(k)))
                        continue;
                json_t *v = json_pack("{s:s, s:s, s:s, s:s}", "key", knob_info(k)->key, "value", r->value[k],
                                      "section", strna(r->section[k]), "origin", strna(r->origin[k]));
                const char *applied = member ? applied_value(t->job, k) : NULL;
                if (v && applied)
                        json_object_set_new(v, "applied", json_string(applied));
                json_array_append_new(a, v);
        }
        return a;
}

static json_t *losses_json(const Resolved *r) {
        json_t *a = json_array();

        for (size_t i = 0; a && i < r->n_losses; i++) {
                const ResolvedLoss *l = &r->losses[i];
                json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "key", knob_info(l->knob)->key,
                                                   "value", l->value, "section", strna(l->section), "origin",
                                                   strna(l->origin), "winner", strna(l->winner), "reason",
                                                   l->own ? "ownSection" : "stackSection"));
        }
        return a;
}

/* path_of: the request-based device (a dm-multipath map) whose path this
 * is, NULL elsewhere. A path is no member: it takes none of the stack's
 * keys (stack_above() stops below the map), only its own sections'. */
static int node_json(const char *name, bool partition, bool request_based, bool top, const char *path_of,
                     const StackNode *n, StackTreeLookupFn lookup, void *userdata, json_t **ret) {
        _cleanup_(json_decrefp) json_t *o = NULL, *children = json_array();
        StackTreeDevice t = {};
        char role[64];
        bool member = request_based && !partition && !path_of;
        int r;

        if (!children)
                return -ENOMEM;
        r = lookup(name, &t, userdata);
        if (r < 0)
                return r;
        if (path_of && !partition)
                snprintf(role, sizeof role, "multipath path");
        else
                stack_role(t.info, t.dm_target, partition, request_based, role);
        o = json_pack("{s:s, s:s, s:b, s:b, s:b}", "device", name, "role", role, "top", top, "member", member,
                      "managed", resolved_managed(&t.resolved));
        if (o && operator_name(t.info))
                json_object_set_new(o, "name", json_string(operator_name(t.info)));
        if (o && path_of)
                json_object_set_new(o, "pathOf", json_string(path_of));
        if (o && !partition) {
                /* a request-based path keeps its own sections' keys, all of them */
                json_object_set_new(o, "values", values_json(&t, request_based));
                if (member)
                        json_object_set_new(o, "notApplied", losses_json(&t.resolved));
        }
        resolved_done(&t.resolved);
        free(t.dm_target);
        if (!o)
                return -ENOMEM;

        if (partition && n) {
                /* the disk whose queue carries it */
                json_t *c = NULL;
                r = node_json(n->disk, false, n->request_based, false, path_of, NULL, lookup, userdata, &c);
                if (r < 0)
                        return r;
                json_array_append_new(children, c);
        }
        /* the layers below it, then (a dm-multipath map) its paths */
        size_t n_below = n && !partition ? n->n_children + n->n_paths : 0;
        for (size_t i = 0; i < n_below; i++) {
                bool is_path = i >= n->n_children;
                const StackNode *cn = is_path ? n->paths[i - n->n_children] : n->children[i];
                json_t *c = NULL;
                r = node_json(cn->name, cn->partition, cn->request_based, false, is_path ? name : NULL, cn, lookup,
                              userdata, &c);
                if (r < 0)
                        return r;
                json_array_append_new(children, c);
        }
        json_object_set_new(o, "children", TAKE_PTR(children));
        *ret = TAKE_PTR(o);
        return 0;
}

int stack_tree_json(const Stack *s, StackTreeLookupFn lookup, void *userdata, json_t **ret) {
        return node_json(s->top->name, s->top->partition, s->top->request_based, true, NULL, s->top, lookup,
                         userdata, ret);
}

int stack_trees_json(const char *sysfs_root, const char *sysname, StackTreeLookupFn lookup, void *userdata,
                     json_t **ret) {
        _cleanup_strv_free_ char **tops = NULL;
        _cleanup_(json_decrefp) json_t *l = json_array();
        int r;

        if (!l)
                return -ENOMEM;
        r = stack_tree_tops(sysfs_root, sysname, &tops);
        if (r < 0)
                log_debug_errno(r, "%s: the stacks above it not read: %m", sysname);
        if (!tops && strv_extend(&tops, sysname) < 0)
                return -ENOMEM;
        STRV_FOREACH(t, tops) {
                _cleanup_(stack_freep) Stack *s = NULL;
                json_t *tree = NULL;

                r = stack_resolve(sysfs_root, *t, &s);
                if (r < 0) {
                        log_debug_errno(r, "%s: the stack of %s not read: %m", sysname, *t);
                        continue;
                }
                if (s->top->n_children == 0 && s->top->n_paths == 0)
                        continue; /* a disk, no stack */
                r = stack_tree_json(s, lookup, userdata, &tree);
                if (r < 0)
                        return r;
                json_array_append_new(l, tree);
        }
        *ret = TAKE_PTR(l);
        return 0;
}
