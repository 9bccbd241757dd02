/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The daemon and its devices (io.blkmqd.Manager): status, devices, show,
 * explain, apply, restore, verify; and the per-device results that apply,
 * restore, reload and profile print. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"

/* ---- results of Apply/Restore/Reload/SetProfile/ClearProfile ---- */

static int results_table(json_t *reply, void *userdata) {
        static const char *const h[] = { "DEVICE", ">CHANGED", ">UNCHANGED", ">ADJUSTED", ">SKIPPED", ">FAILED" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *res;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(json_object_get(reply, "results"), i, res)
                if (table_add(t, jstr(res, "device")) < 0 ||
                    table_addf(t, "%lld", jint(res, "changed", 0)) < 0 ||
                    table_addf(t, "%lld", jint(res, "unchanged", 0)) < 0 ||
                    table_addf(t, "%lld", jint(res, "adjusted", 0)) < 0 ||
                    table_addf(t, "%lld", jint(res, "skipped", 0)) < 0 ||
                    table_addf(t, "%lld", jint(res, "failed", 0)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        table_print_counted(t, "managed device", ".");
        return EXIT_OK;
}

int print_results(const char *verb, json_t *reply) {
        int status;
        json_t *res;
        size_t i;

        status = ctl_render(reply, results_table, NULL);
        if (status != EXIT_OK)
                return status;
        json_array_foreach(json_object_get(reply, "results"), i, res) {
                long long failed = jint(res, "failed", 0);
                if (failed > 0)
                        status = fail(EXIT_SETTING_FAILED, "%s: %s: %lld setting%s failed (see blkmqctl show %s)",
                                      verb, dash(jstr(res, "device")), failed, failed == 1 ? "" : "s",
                                      dash(jstr(res, "device")));
        }
        return status;
}

/* ---- status ---- */

static int status_fields(json_t *s, void *userdata) {
        char buf[64];
        size_t i;
        json_t *f;

        field("Version", jstr(s, "version"));
        field("State", jstr(s, "state"));
        format_duration(buf, sizeof buf, jint(s, "uptimeUsec", 0));
        field("Uptime", buf);
        field("Kernel", jstr(s, "kernel"));
        field("Address", arg_address);
        field("Profile", jstr(s, "profile") ? jstr(s, "profile") : "none");
        snprintf(buf, sizeof buf, "%lld known, %lld managed", jint(s, "devices", 0), jint(s, "managed", 0));
        field("Devices", buf);
        snprintf(buf, sizeof buf, "%lld changed, %lld failed", jint(s, "changed", 0), jint(s, "failed", 0));
        field("Settings", buf);
        if (jint(s, "loopIterations", 0) > 0) {
                snprintf(buf, sizeof buf, "%lld iteration%s, p99 %.1f ms, longest %.1f ms", jint(s, "loopIterations", 0), jint(s, "loopIterations", 0) == 1 ? "" : "s",
                         jint(s, "loopP99Usec", 0) / 1000.0, jint(s, "loopMaxUsec", 0) / 1000.0);
                field("Event loop", buf);
        }
        json_array_foreach(json_object_get(s, "configFiles"), i, f)
                printf("%12s%s %s\n", i == 0 ? "Config" : "", i == 0 ? ":" : " ", dash(json_string_value(f)));
        return EXIT_OK;
}

int verb_status(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("status");

        return ctl_query(&c, INTERFACE ".GetStatus", NULL, status_fields, NULL);
}

/* ---- devices ---- */

static int append_device(json_t *p, bool last, void *list) {
        json_t *d = json_object_get(p, "device");

        if (json_is_object(d))
                json_array_append(list, d);
        return EXIT_OK;
}

/* ListDevices: appends each DeviceSummary to list. */
int list_devices(Ctl *c, json_t *list) {
        return ctl_call_more(c, INTERFACE ".ListDevices", NULL, -1, append_device, list);
}

static int devices_table(json_t *list, void *userdata) {
        static const char *const h[] = { "DEVICE", "TRANSPORT", "ZONED", "MANAGED", "SCHEDULER",
                                         ">CHANGED", ">FAILED", "MATCHED" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *d;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(list, i, d) {
                _cleanup_free_ char *matched = join_strings(json_object_get(d, "matched"), ",");
                if (table_add(t, jstr(d, "device")) < 0 || table_add(t, jstr(d, "transport")) < 0 ||
                    table_add(t, jstr(d, "zoned")) < 0 || table_add(t, jbool(d, "managed")) < 0 ||
                    table_add(t, jstr(d, "scheduler")) < 0 || table_addf(t, "%lld", jint(d, "changed", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "failed", 0)) < 0 || table_add(t, matched) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        table_print_counted(t, "device", " listed.");
        return EXIT_OK;
}

int verb_devices(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("devices");
        _cleanup_(json_decrefp) json_t *list = json_array();
        int r;

        if (!list)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = list_devices(&c, list);
        if (r != EXIT_OK)
                return r;
        return ctl_render(list, devices_table, NULL);
}

/* ---- show ---- */

/* "Adopted: 3 originals from blkmqd[1234], recorded 2026-…": one line per
 * earlier instance whose originals this one took over at start. */
static void print_adopted(json_t *list) {
        json_t *a, *b;
        size_t i, k;

        json_array_foreach(list, i, a) {
                long long pid = jint(a, "pid", 0), first = jint(a, "recordedUsec", 0);
                unsigned n = 0;
                bool seen = false;
                char when[64], buf[256];

                json_array_foreach(list, k, b) {
                        if (jint(b, "pid", 0) != pid)
                                continue;
                        if (k < i)
                                seen = true;
                        n++;
                        if (jint(b, "recordedUsec", 0) < first)
                                first = jint(b, "recordedUsec", 0);
                }
                if (seen)
                        continue;
                format_timestamp(when, sizeof when, first, false);
                snprintf(buf, sizeof buf, "%u original%s from an earlier instance, blkmqd[%lld], recorded %s", n,
                         n == 1 ? "" : "s", pid, when);
                field("Adopted", buf);
        }
}

static void print_identity(json_t *d) {
        _cleanup_free_ char *matched = join_strings(json_object_get(d, "matched"), ", ");
        char buf[512];

        if (jstr(d, "devnode"))
                snprintf(buf, sizeof buf, "%s (%s)", dash(jstr(d, "device")), jstr(d, "devnode"));
        else
                snprintf(buf, sizeof buf, "%s", dash(jstr(d, "device")));
        field("Device", buf);
        field("Id", jstr(d, "id"));
        field("Transport", jstr(d, "transport"));
        field("Driver", jstr(d, "driver"));
        field("Model", jstr(d, "model"));
        field("Serial", jstr(d, "serial"));
        field("WWN", jstr(d, "wwn"));
        if (jint(d, "nsid", 0) > 0) {
                snprintf(buf, sizeof buf, "%lld", jint(d, "nsid", 0));
                field("NSID", buf);
        }
        field("Zoned", jstr(d, "zoned"));
        field("Rotational", jbool(d, "rotational"));
        format_bytes(buf, sizeof buf, jint(d, "sizeBytes", 0));
        field("Size", buf);
        if (jstr(d, "backingFile"))
                field("Backing file", jstr(d, "backingFile"));
        if (json_is_true(json_object_get(d, "hidden")) || json_is_true(json_object_get(d, "bioBased")))
                field("Queue", json_is_true(json_object_get(d, "hidden")) ? "hidden (multipath path device)"
                                                                         : "bio-based (no scheduler)");
        field("Managed", jbool(d, "managed"));
        field("Matched", matched);
        field("Profile", jstr(d, "profile"));
        if (jint(d, "lastAppliedUsec", 0) > 0) {
                format_timestamp(buf, sizeof buf, jint(d, "lastAppliedUsec", 0), false);
                field("Last applied", buf);
        }
        snprintf(buf, sizeof buf, "%lld (%lld failed)", jint(d, "jobs", 0), jint(d, "failedJobs", 0));
        field("Jobs", buf);
        field("Originals kept in", jstr(d, "originalsRecord"));
        print_adopted(json_object_get(d, "originalsAdopted"));
}

/* "Drift:" and a line per drifted setting of a VerifiedDevice. */
static void print_drift(json_t *verified) {
        const char *dev = dash(jstr(verified, "device"));
        bool first = true;
        json_t *k;
        size_t i;

        json_array_foreach(json_object_get(verified, "knobs"), i, k) {
                if (!streq_ptr(jstr(k, "state"), "drifted"))
                        continue;
                if (first)
                        printf("\nDrift (read now; something else wrote these since blkmqd did, "
                               "blkmqctl apply %s puts them back):\n", dev);
                first = false;
                printf("  %s: reads %s, blkmqd left %s\n", dash(jstr(k, "attribute")), dash(jstr(k, "found")),
                       dash(jstr(k, "applied")));
        }
}

/* Every setting: original, wanted, current, outcome, section, and with
 * verified (Verify's device, read now) its drift; then the notes of those
 * that have one, and the drifted ones. */
static int print_knobs(json_t *knobs, json_t *verified) {
        static const char *const h[] = { "ATTRIBUTE", "ORIGINAL", "WANTED", "CURRENT", "OUTCOME", "SECTION", "DRIFT" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h) - !verified, h);
        bool notes = false;
        char buf[512];
        json_t *k;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(knobs, i, k) {
                json_t *v = json_array_find(json_object_get(verified, "knobs"), "attribute", jstr(k, "attribute"));
                bool drifted = streq_ptr(jstr(v, "state"), "drifted");

                if (table_add(t, jstr(k, "attribute")) < 0 || table_add(t, jstr(k, "original")) < 0 ||
                    table_add(t, jstr(k, "wanted")) < 0 || table_add(t, jstr(k, "current")) < 0 ||
                    table_add(t, jstr(k, "outcome")) < 0 || table_add(t, jstr(k, "section")) < 0 ||
                    (verified && (drifted ? table_addf(t, "now %s", dash(jstr(v, "found")))
                                          : table_add(t, NULL)) < 0))
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        fputc('\n', stdout);
        if (table_rows(t) > 0)
                table_print(t);
        else
                printf("No settings.\n");

        json_array_foreach(knobs, i, k) {
                const char *note = jstr(k, "note");
                long long e = jint(k, "errno", 0);

                if (!note && e <= 0)
                        continue;
                if (!notes)
                        printf("\nNotes:\n");
                notes = true;
                printf("  %s: %s\n", dash(jstr(k, "attribute")), explain_errno(buf, sizeof buf, note, (int) e));
        }
        print_drift(verified);
        return EXIT_OK;
}

static void print_hctx_map(const char *map, const char *note) {
        _cleanup_free_ char *copy = map ? strdup(map) : NULL;
        char *save = NULL, *tok;
        bool first = true;

        if (!map && !note)
                return;
        printf("\nHardware queues %s CPUs (read-only):\n", arrow());
        if (copy)
                for (tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                        char *colon = strchr(tok, ':');
                        if (colon) {
                                *colon = 0;
                                printf("  hctx%s %s %s\n", tok, arrow(), *colon + 1 ? colon + 1 : "(no CPU)");
                        } else
                                printf("  %s\n", tok);
                        first = false;
                }
        if (note)
                printf("  %s%s\n", first ? "" : "note: ", note);
}

/* The kernel's write streams and atomic write limits, one row: "-" where
 * the kernel has no such attribute (before 6.11, 6.16). */
static int print_write_limits(json_t *limits) {
        _cleanup_(table_freep) Table *t = table_new(WRITE_LIMIT_COLUMNS, write_limit_headers);

        if (!t || table_add_write_limits(t, limits) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        printf("\nWrite limits (queue/, read-only: reported, not tuned):\n");
        table_print(t);
        return EXIT_OK;
}

static int show_device(json_t *reply, void *userdata) {
        json_t *d = json_object_get(reply, "device");
        int r;

        print_identity(d);
        r = print_knobs(json_object_get(d, "knobs"), userdata);
        if (r != EXIT_OK)
                return r;
        print_hctx_map(jstr(d, "hctxCpus"), jstr(d, "affinityNote"));
        return print_write_limits(json_object_get(d, "writeLimits"));
}

/* Verify of one device, read now, for show's DRIFT column: NULL, without
 * a word, when there is none to have (a blkmqd without Verify). */
static json_t *verify_one(Ctl *c, const char *device) {
        _cleanup_(json_decrefp) json_t *params = device_params(device), *reply = NULL;
        const char *error = NULL;

        if (!params || ctl_call_raw(c, INTERFACE ".Verify", params, &reply, &error) < 0 || error)
                return NULL;
        return json_incref(json_array_get(json_object_get(reply, "devices"), 0));
}

int verb_show(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("show");
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]), *reply = NULL, *verified = NULL;
        int r;

        r = ctl_call(&c, INTERFACE ".GetDevice", params, &reply);
        if (r != EXIT_OK)
                return r;
        /* --json is GetDevice's reply, as it always was; the drift is
         * verify --json's. */
        if (!arg_json)
                verified = verify_one(&c, argv[1]);
        return ctl_render(reply, show_device, verified);
}

/* ---- explain ---- */

static int explain_values(json_t *e) {
        static const char *const h[] = { "KEY", "VALUE", "SECTION", "ORIGIN" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *v;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(json_object_get(e, "values"), i, v)
                if (table_add(t, jstr(v, "key")) < 0 || table_add(t, jstr(v, "value")) < 0 ||
                    table_add(t, jstr(v, "section")) < 0 || table_add(t, jstr(v, "origin")) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        printf("\nValues:\n");
        if (table_rows(t) > 0)
                table_print(t);
        else
                printf("  (none: no section sets anything for this device)\n");
        return EXIT_OK;
}

static int explain_device(json_t *e, void *userdata) {
        _cleanup_free_ char *matched = join_strings(json_object_get(e, "matched"), ", ");
        json_t *s;
        size_t i;
        int r;

        field("Device", jstr(e, "device"));
        field("Managed", jbool(e, "managed"));
        field("Matched", matched);
        field("Profile", jstr(e, "profile"));

        printf("\nSections:\n");
        json_array_foreach(json_object_get(e, "sections"), i, s)
                printf("  %s\n", dash(json_string_value(s)));
        if (json_array_size(json_object_get(e, "sections")) == 0)
                printf("  (no [Device] sections)\n");

        r = explain_values(e);
        if (r != EXIT_OK)
                return r;
        json_t *stacks = json_object_get(e, "stacks");
        if (json_array_size(stacks) > 0) {
                printf("\n%s:\n", json_array_size(stacks) == 1 ? "Stack" : "Stacks");
                json_array_foreach(stacks, i, s) {
                        if (i > 0)
                                putchar('\n');
                        stack_tree_print(stdout, s, "  ", utf8);
                }
        }
        if (jstr(e, "autotune"))
                printf("\nAutoTune: %s\n", jstr(e, "autotune"));
        return EXIT_OK;
}

int verb_explain(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("explain");
        _cleanup_(json_decrefp) json_t *params = device_params(argv[1]);

        return ctl_query(&c, INTERFACE ".Explain", params, explain_device, NULL);
}

/* ---- apply, restore ---- */

int verb_apply(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL(argv[0]);
        _cleanup_(json_decrefp) json_t *params = device_params(argc > 1 ? argv[1] : NULL), *reply = NULL;
        bool restore = streq(argv[0], "restore");
        int r;

        r = ctl_call(&c, restore ? INTERFACE ".Restore" : INTERFACE ".Apply", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_results(argv[0], reply);
}

/* ---- verify ---- */

static int verify_table(json_t *devices, void *userdata) {
        static const char *const h[] = { "DEVICE", "ATTRIBUTE", "WANTED", "APPLIED", "FOUND", "STATE" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        long long drifted = 0;
        json_t *d, *k;
        size_t i, j;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(devices, i, d) {
                drifted += jint(d, "drifted", 0);
                json_array_foreach(json_object_get(d, "knobs"), j, k)
                        if (table_add(t, jstr(d, "device")) < 0 || table_add(t, jstr(k, "attribute")) < 0 ||
                            table_add(t, jstr(k, "wanted")) < 0 || table_add(t, jstr(k, "applied")) < 0 ||
                            table_add(t, jstr(k, "found")) < 0 || table_add(t, jstr(k, "state")) < 0)
                                return fail(EXIT_PROTOCOL, "out of memory");
        }
        if (table_rows(t) > 0)
                table_print(t);
        if (arg_legend)
                printf("%s%zu setting%s checked on %zu device%s, %lld drifted.\n", table_rows(t) > 0 ? "\n" : "",
                       table_rows(t), table_rows(t) == 1 ? "" : "s", json_array_size(devices),
                       json_array_size(devices) == 1 ? "" : "s", drifted);
        return EXIT_OK;
}

int verb_verify(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("verify");
        _cleanup_(json_decrefp) json_t *params = device_params(argc > 1 ? argv[1] : NULL), *reply = NULL;
        json_t *devices, *d, *k;
        size_t i, j;
        int r;

        r = ctl_call(&c, INTERFACE ".Verify", params, &reply);
        if (r != EXIT_OK)
                return r;
        devices = json_object_get(reply, "devices");
        /* A list: its items, as devices prints DeviceSummary objects. */
        r = ctl_render(devices, verify_table, NULL);
        if (r != EXIT_OK)
                return r;
        json_array_foreach(devices, i, d) {
                const char *dev = dash(jstr(d, "device"));

                if (json_is_true(json_object_get(d, "busy")))
                        fprintf(stderr, "blkmqctl: verify: %s: being tuned right now, not compared; try again\n",
                                dev);
                else if (!json_is_true(json_object_get(d, "managed")))
                        fprintf(stderr, "blkmqctl: verify: %s: not managed (no [Device] section matches), "
                                "nothing to compare\n", dev);
                json_array_foreach(json_object_get(d, "knobs"), j, k)
                        if (streq_ptr(jstr(k, "state"), "drifted"))
                                r = fail(EXIT_DRIFT, "%s: %s: drifted: reads %s, blkmqd left %s "
                                         "(blkmqctl apply %s puts it back)", dev, dash(jstr(k, "attribute")),
                                         dash(jstr(k, "found")), dash(jstr(k, "applied")), dev);
        }
        return r;
}
