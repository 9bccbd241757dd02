/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <string.h>

#include "plan-print.h"
#include "util.h"

static json_t *str_or_null(const char *s) {
        return s ? json_string(s) : json_null();
}

json_t *write_limits_to_json(const WriteLimits *w) {
        json_t *o;

        if (!w || !write_limits_any(w))
                return NULL;
        o = json_object();
        for (WriteLimit l = 0; o && l < _WRITE_LIMIT_MAX; l++)
                if (w->v[l] >= 0)
                        json_object_set_new(o, write_limit_key(l), json_integer((json_int_t) w->v[l]));
        return o;
}

json_t *device_info_to_json(const DeviceInfo *d) {
        json_t *o = json_object();

        if (!o)
                return NULL;
        json_object_set_new(o, "device", json_string(d->sysname));
        json_object_set_new(o, "id", json_string(d->id));
        if (d->devnode)
                json_object_set_new(o, "devnode", json_string(d->devnode));
        json_object_set_new(o, "transport", str_or_null(d->transport));
        json_object_set_new(o, "driver", str_or_null(d->driver));
        json_object_set_new(o, "model", str_or_null(d->model));
        json_object_set_new(o, "vendor", str_or_null(d->vendor));
        json_object_set_new(o, "firmware", str_or_null(d->firmware));
        json_object_set_new(o, "serial", str_or_null(d->serial));
        json_object_set_new(o, "wwn", str_or_null(d->wwn));
        json_object_set_new(o, "zoned", json_string(d->zoned));
        if (d->rotational >= 0)
                json_object_set_new(o, "rotational", json_boolean(d->rotational));
        json_object_set_new(o, "sizeBytes", json_integer((json_int_t) d->size));
        if (d->backing_file)
                json_object_set_new(o, "backingFile", json_string(d->backing_file));
        if (d->nsid)
                json_object_set_new(o, "nsid", json_integer(d->nsid));
        json_object_set_new(o, "hidden", json_boolean(d->hidden));
        json_object_set_new(o, "bioBased", json_boolean(d->bio_based));
        /* a stacked device's names, as its Match* keys take them */
        const char *names[][2] = { { "volume", d->volume }, { "crypt", d->crypt }, { "mdName", d->md_name },
                                   { "multipathWwid", d->mpath_wwid } };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (names[i][1])
                        json_object_set_new(o, names[i][0], json_string(names[i][1]));
        json_t *wl = write_limits_to_json(&d->write_limits);
        if (wl)
                json_object_set_new(o, "writeLimits", wl);
        return o;
}

json_t *tune_entry_to_json(const TuneEntry *e, const Resolved *r) {
        json_t *o = json_object();
        const KnobInfo *ki = knob_info(e->knob);

        if (!o)
                return NULL;
        json_object_set_new(o, "attribute", json_string(e->attr));
        json_object_set_new(o, "key", json_string(ki->key));
        json_object_set_new(o, "current", str_or_null(e->after ? e->after : e->before));
        if (e->before)
                json_object_set_new(o, "before", json_string(e->before));
        json_object_set_new(o, "wanted", str_or_null(e->wanted));
        json_object_set_new(o, "outcome", json_string(tune_outcome_to_string(e->outcome)));
        if (e->section)
                json_object_set_new(o, "section", json_string(e->section));
        if (r && r->origin[e->knob] && e->section && !streq(e->section, "original"))
                json_object_set_new(o, "origin", json_string(r->origin[e->knob]));
        if (e->error)
                json_object_set_new(o, "errno", json_integer(-e->error));
        if (e->note)
                json_object_set_new(o, "note", json_string(e->note));
        return o;
}

static json_t *strv_to_json(char *const *l) {
        json_t *a = json_array();
        STRV_FOREACH(s, l)
                json_array_append_new(a, json_string(*s));
        return a;
}

json_t *device_plan_to_json(const DeviceInfo *d, const Resolved *r, const TuneJob *j) {
        json_t *o = device_info_to_json(d), *plan;

        if (!o)
                return NULL;
        json_object_set_new(o, "managed", json_boolean(r && resolved_managed(r)));
        json_object_set_new(o, "matched", strv_to_json(r ? r->matched : NULL));
        if (r && r->profile)
                json_object_set_new(o, "profile", json_string(r->profile));
        json_object_set_new(o, "explain", strv_to_json(r ? r->explain : NULL));
        plan = json_array();
        for (size_t i = 0; j && i < j->n_entries; i++)
                json_array_append_new(plan, tune_entry_to_json(&j->entries[i], r));
        json_object_set_new(o, "plan", plan);
        if (j && j->hctx_map)
                json_object_set_new(o, "hctxCpus", json_string(j->hctx_map));
        if (j && j->affinity_note)
                json_object_set_new(o, "affinityNote", json_string(j->affinity_note));
        return o;
}

void device_plan_print(FILE *f, const DeviceInfo *d, const Resolved *r, const TuneJob *j) {
        char sz[16];
        size_t w = 0;

        fprintf(f, "%s  %s  %s%s%s, %s, zoned=%s\n", d->sysname, d->id, strna(d->transport),
                d->driver ? "/" : "", strempty(d->driver),
                d->rotational < 0 ? "rotational=?" : d->rotational ? "rotational" : "non-rotational", d->zoned);
        (void) format_size(d->size, sz);
        if (!r || !resolved_managed(r)) {
                fprintf(f, "  size %s, not managed: no [Device] section matches\n", sz);
                return;
        }
        fprintf(f, "  size %s\n", sz);
        STRV_FOREACH(l, r->explain)
                fprintf(f, "  %s\n", *l);
        if (r->profile)
                fprintf(f, "  profile %s is active\n", r->profile);
        for (size_t i = 0; j && i < j->n_entries; i++)
                if (strlen(j->entries[i].attr) > w)
                        w = strlen(j->entries[i].attr);
        for (size_t i = 0; j && i < j->n_entries; i++) {
                const TuneEntry *e = &j->entries[i];
                const char *cur = e->before ? e->before : "-";
                const char *arrow = e->outcome == TUNE_UNCHANGED ? "=" : "→";

                fprintf(f, "  %-*s  %s %s %s  [%s]", (int) w, e->attr, cur, arrow, strna(e->wanted),
                        tune_outcome_to_string(e->outcome));
                if (e->section)
                        fprintf(f, "  (%s%s%s)", e->section, r->origin[e->knob] && !streq(e->section, "original") ? ", " : "",
                                r->origin[e->knob] && !streq(e->section, "original") ? r->origin[e->knob] : "");
                if (e->note)
                        fprintf(f, "  %s", e->note);
                fputc('\n', f);
        }
        if (j && j->hctx_map && j->cpu_affinity)
                fprintf(f, "  hctx→CPUs %s\n", j->hctx_map);
        if (j && j->affinity_note)
                fprintf(f, "  %s\n", j->affinity_note);
}
