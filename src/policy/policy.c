/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "util.h"

void resolved_done(Resolved *r) {
        for (int i = 0; i < _KNOB_MAX; i++)
                free(r->value[i]);
        strv_free(r->matched);
        free(r->profile);
        strv_free(r->explain);
        strv_free(r->labels);
        strv_free(r->stacks);
        for (size_t i = 0; i < r->n_losses; i++)
                free(r->losses[i].value);
        free(r->losses);
        strv_free(r->own);
        *r = (Resolved) {};
}

static bool glob_list(char *const *l, const char *value, const char *key, char **ret_reason) {
        _cleanup_free_ char *j = NULL;

        if (!l)
                return true;
        if (value && strv_fnmatch(l, value))
                return true;
        if (ret_reason) {
                j = strv_join(l, " ");
                if (asprintf(ret_reason, "%s=%s: %s does not match", key, strempty(j),
                             value ? value : "(not set)") < 0)
                        *ret_reason = NULL;
        }
        return false;
}

static bool property_match(char *const *l, const DeviceInfo *d, char **ret_reason) {
        STRV_FOREACH(p, l) {
                const char *eq = strchr(*p, '=');
                char key[256];
                const char *v;

                if (!eq || (size_t) (eq - *p) >= sizeof key)
                        continue;
                memcpy(key, *p, eq - *p);
                key[eq - *p] = 0;
                v = device_info_property(d, key);
                if (!v || fnmatch(eq + 1, v, 0) != 0) {
                        if (ret_reason && asprintf(ret_reason, "MatchProperty=%s: %s is %s", *p, key,
                                                   v ? v : "not set") < 0)
                                *ret_reason = NULL;
                        return false;
                }
        }
        return true;
}

/* mdadm names an array "HOST:NAME" (udev's MD_NAME): a glob matches the
 * whole or the NAME. */
static bool md_name_match(char *const *l, const char *value, char **ret_reason) {
        const char *colon = value ? strchr(value, ':') : NULL;

        if (!l || (colon && strv_fnmatch(l, colon + 1)))
                return true;
        return glob_list(l, value, "MatchMDName", ret_reason);
}

bool policy_match(const Match *m, const DeviceInfo *d, char **ret_reason) {
        if (ret_reason)
                *ret_reason = NULL;
        if (!glob_list(m->kernel, d->sysname, "MatchKernel", ret_reason) ||
            !glob_list(m->backing_file, d->backing_file, "MatchBackingFile", ret_reason) ||
            !glob_list(m->zoned, d->zoned, "MatchZoned", ret_reason) ||
            !glob_list(m->driver, d->driver, "MatchDriver", ret_reason) ||
            !glob_list(m->transport, d->transport, "MatchTransport", ret_reason) ||
            !glob_list(m->model, d->model, "MatchModel", ret_reason) ||
            !glob_list(m->vendor, d->vendor, "MatchVendor", ret_reason) ||
            !glob_list(m->firmware, d->firmware, "MatchFirmware", ret_reason) ||
            !glob_list(m->serial, d->serial, "MatchSerial", ret_reason) ||
            !glob_list(m->wwn, d->wwn, "MatchWWN", ret_reason) ||
            !glob_list(m->volume, d->volume, "MatchVolume", ret_reason) ||
            !glob_list(m->dm_name, d->dm_name, "MatchDMName", ret_reason) ||
            !glob_list(m->dm_uuid, d->dm_uuid, "MatchDMUUID", ret_reason) ||
            !glob_list(m->crypt, d->crypt, "MatchCrypt", ret_reason) ||
            !glob_list(m->mpath_wwid, d->mpath_wwid, "MatchMultipathWWID", ret_reason) ||
            !md_name_match(m->md_name, d->md_name, ret_reason) ||
            !glob_list(m->md_level, d->md_level, "MatchMDLevel", ret_reason))
                return false;
        if (m->rotational >= 0 && m->rotational != d->rotational) {
                if (ret_reason && asprintf(ret_reason, "MatchRotational=%s: device is %s",
                                           m->rotational ? "yes" : "no",
                                           d->rotational < 0 ? "unknown" : d->rotational ? "rotational" : "non-rotational") < 0)
                        *ret_reason = NULL;
                return false;
        }
        if (m->has_size && (d->size < m->size_min || d->size > m->size_max)) {
                if (ret_reason && asprintf(ret_reason, "MatchSize=: size %llu bytes is outside %llu-%llu",
                                           (unsigned long long) d->size, (unsigned long long) m->size_min,
                                           (unsigned long long) m->size_max) < 0)
                        *ret_reason = NULL;
                return false;
        }
        return property_match(m->property, d, ret_reason);
}

static int apply_settings(Resolved *r, const Settings *s, const char *label) {
        for (int k = 0; k < _KNOB_MAX; k++) {
                if (!s->value[k])
                        continue;
                if (free_and_strdup(&r->value[k], s->value[k]) < 0)
                        return -ENOMEM;
                r->section[k] = label;
                r->origin[k] = s->origin[k];
        }
        return 0;
}

static const char *device_names(const DeviceInfo *a, char buf[static 256]) {
        const char *n = a->volume ? a->volume : a->crypt ? a->crypt : a->md_name ? a->md_name : a->dm_name;
        if (n)
                snprintf(buf, 256, "%s (%s)", a->sysname, n);
        else
                snprintf(buf, 256, "%s", a->sysname);
        return buf;
}

static int add_loss(Resolved *r, Knob k, const char *value, const char *section, const char *origin,
                    const char *winner, bool own) {
        ResolvedLoss *a = reallocarray(r->losses, r->n_losses + 1, sizeof *a);

        if (!a)
                return -ENOMEM;
        r->losses = a;
        a[r->n_losses] = (ResolvedLoss) { .knob = k, .section = section, .origin = origin, .winner = winner,
                                          .own = own, .value = strdup(value) };
        if (!a[r->n_losses].value)
                return -ENOMEM;
        r->n_losses++;
        return 0;
}

/* The first device above d that section s matches, or NULL. */
static const DeviceInfo *stack_match(const DeviceSection *s, const DeviceInfo *const *above, size_t n_above) {
        for (size_t k = 0; k < n_above; k++)
                if (above[k] && policy_match(&s->match, above[k], NULL))
                        return above[k];
        return NULL;
}

/* Section s's keys (all of them for one of d's own, the request-queue
 * ones only for a stack's) over what earlier sections set: configuration order, as between a disk's own
 * sections. Where a stack's section is on either side, the key that lost
 * is on record (Resolved.losses, and a line of explain). */
static int apply_in_order(Resolved *r, const DeviceInfo *d, const Settings *s, const char *label, bool own,
                          bool stacked[static _KNOB_MAX]) {
        for (int k = 0; k < _KNOB_MAX; k++) {
                _cleanup_free_ char *line = NULL;

                if (!s->value[k] || (!own && !knob_request_queue(k)))
                        continue;
                if (r->value[k] && (stacked[k] || !own) && !streq(r->value[k], s->value[k]) &&
                    (asprintf(&line, "  %s=%s of [%s] not applied to %s: %s[%s] comes later", knob_info(k)->key,
                              r->value[k], r->section[k], d->sysname, own ? "its own " : "", label) < 0 ||
                     strv_push(&r->explain, TAKE_PTR(line)) < 0 ||
                     add_loss(r, k, r->value[k], r->section[k], r->origin[k], label, own) < 0))
                        return -ENOMEM;
                if (free_and_strdup(&r->value[k], s->value[k]) < 0)
                        return -ENOMEM;
                r->section[k] = label;
                r->origin[k] = s->origin[k];
                stacked[k] = !own; /* whether the value in force now came from a stack */
        }
        return 0;
}

int policy_resolve(const Config *c, const DeviceInfo *d, const char *profile, Resolved *ret) {
        return policy_resolve_stacked(c, d, NULL, 0, profile, ret);
}

int policy_resolve_stacked(const Config *c, const DeviceInfo *d, const DeviceInfo *const *above, size_t n_above,
                           const char *profile, Resolved *ret) {
        Resolved r = {};
        _cleanup_strv_free_ char **own = NULL;
        bool stacked[_KNOB_MAX] = {};

        for (size_t i = 0; i < c->n_devices; i++) {
                const DeviceSection *s = &c->devices[i];
                _cleanup_free_ char *why = NULL, *line = NULL;

                if (policy_match(&s->match, d, &why)) {
                        if (strv_extend(&own, s->name) < 0 ||
                            asprintf(&line, "[Device %s] (%s:%u) matches", s->name, s->file, s->line) < 0)
                                goto oom;
                } else if (asprintf(&line, "[Device %s] (%s:%u) does not match: %s", s->name, s->file,
                                    s->line, strna(why)) < 0)
                        goto oom;
                if (strv_push(&r.explain, TAKE_PTR(line)) < 0)
                        goto oom;
        }

        /* Every section that applies to d, its own and those matching a
         * stack above it (their request-queue keys), in configuration
         * order: a later one overrides an earlier one's key. Section labels
         * get storage of their own, so section[] can point into it for as
         * long as the Resolved lives. */
        for (size_t i = 0; i < c->n_devices; i++) {
                const DeviceSection *s = &c->devices[i];
                bool is_own = strv_contains(own, s->name);
                const DeviceInfo *a = NULL;
                _cleanup_free_ char *label = NULL, *line = NULL;
                char buf[256];

                if (!is_own) {
                        if (n_above == 0 || d->bio_based || !(a = stack_match(s, above, n_above)))
                                continue;
                        if (asprintf(&line, "[Device %s] (%s:%u) matches %s above %s: its request-queue settings apply here",
                                     s->name, s->file, s->line, device_names(a, buf), d->sysname) < 0 ||
                            strv_push(&r.explain, TAKE_PTR(line)) < 0)
                                goto oom;
                        if (!strv_contains(r.stacks, a->sysname) && strv_extend(&r.stacks, a->sysname) < 0)
                                goto oom;
                }
                if (!strv_contains(r.matched, s->name) && strv_extend(&r.matched, s->name) < 0)
                        goto oom;
                if ((a ? asprintf(&label, "Device %s via %s", s->name, a->sysname)
                       : asprintf(&label, "Device %s", s->name)) < 0 ||
                    strv_push(&r.labels, TAKE_PTR(label)) < 0)
                        goto oom;
                if (apply_in_order(&r, d, &s->settings, r.labels[strv_length(r.labels) - 1], is_own, stacked) < 0)
                        goto oom;
        }

        if (profile && r.matched) {
                const ProfileSection *p = config_find_profile(c, profile);
                bool applies = p && (!p->devices || strv_length(p->devices) == 0);

                if (p && !applies)
                        STRV_FOREACH(m, r.matched)
                                if (strv_contains(p->devices, *m))
                                        applies = true;
                if (applies) {
                        _cleanup_free_ char *label = NULL;
                        if (asprintf(&label, "Profile %s", p->name) < 0)
                                goto oom;
                        if (strv_push(&r.labels, TAKE_PTR(label)) < 0)
                                goto oom;
                        if (apply_settings(&r, &p->settings, r.labels[strv_length(r.labels) - 1]) < 0)
                                goto oom;
                        if (!(r.profile = strdup(p->name)))
                                goto oom;
                }
        }
        r.own = TAKE_PTR(own);
        *ret = r;
        return 0;
oom:
        resolved_done(&r);
        return -ENOMEM;
}
