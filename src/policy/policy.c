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

int policy_resolve(const Config *c, const DeviceInfo *d, const char *profile, Resolved *ret) {
        Resolved r = {};

        for (size_t i = 0; i < c->n_devices; i++) {
                const DeviceSection *s = &c->devices[i];
                _cleanup_free_ char *why = NULL, *line = NULL;

                if (policy_match(&s->match, d, &why)) {
                        if (strv_extend(&r.matched, s->name) < 0 ||
                            asprintf(&line, "[Device %s] (%s:%u) matches", s->name, s->file, s->line) < 0)
                                goto oom;
                } else if (asprintf(&line, "[Device %s] (%s:%u) does not match: %s", s->name, s->file,
                                    s->line, strna(why)) < 0)
                        goto oom;
                if (strv_push(&r.explain, TAKE_PTR(line)) < 0)
                        goto oom;
        }

        /* Section labels get storage of their own, so section[] can point
         * into it for as long as the Resolved lives. */
        STRV_FOREACH(m, r.matched) {
                const DeviceSection *s = config_find_device(c, *m);
                _cleanup_free_ char *label = NULL;

                if (asprintf(&label, "Device %s", s->name) < 0)
                        goto oom;
                if (strv_push(&r.labels, TAKE_PTR(label)) < 0)
                        goto oom;
                if (apply_settings(&r, &s->settings, r.labels[strv_length(r.labels) - 1]) < 0)
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
        *ret = r;
        return 0;
oom:
        resolved_done(&r);
        return -ENOMEM;
}
