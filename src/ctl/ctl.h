/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* blkmqctl's modules: blkmqctl.c (main, the options, the verb table), the
 * helpers every verb uses (ctl-call.c: one call and its error; ctl-error.c:
 * an error reply as a message and an exit status; ctl-output.c and
 * ctl-table.c: what is printed), and one file per verb family. */

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "blkmq/varlink.h"
#include "cleanup.h"

#define INTERFACE "io.blkmqd.Manager"
#define METRICS_INTERFACE "io.blkmqd.Metrics"
#define ZONES_INTERFACE "io.blkmqd.Zones"
#define INLINE_CHUNK (1024U * 1024U)            /* zones append --inline: decoded bytes per call */
#define SECTOR_SIZE 512ULL                      /* LBAs as nvme-cli and blkzone print them */
#define CALL_TIMEOUT_USEC (120ULL * 1000000ULL) /* Apply waits for the writes: be generous */
#define MONITOR_TICK_USEC (200ULL * 1000ULL)    /* how often monitor looks for SIGINT/SIGTERM */

/* Exit status; documented in --help and blkmqctl(8), scripts rely on them. */
enum {
        EXIT_OK = 0,
        EXIT_USAGE = 1,
        EXIT_UNREACHABLE = 2,
        EXIT_NO_SUCH = 3,
        EXIT_PERMISSION = 4,
        EXIT_CONFIG = 5,
        EXIT_SETTING_FAILED = 6,
        EXIT_PROTOCOL = 7,
        EXIT_NO_SPACE = 8,        /* NoFreeZone, ZoneLimitReached, TooLarge */
        EXIT_CHECKSUM = 9,        /* ChecksumMismatch */
        EXIT_ZONE_IO = 10,        /* IOError, DeviceGone, FlushFailed */
        EXIT_LEASE_STATE = 11,    /* LeaseBusy, WrongState */
        EXIT_DRIFT = 12,          /* verify: a setting no longer reads as blkmqd left it */
};

/* ---- options every verb sees (blkmqctl.c) ---- */

extern const char *arg_address;
extern bool arg_json;
extern bool arg_legend;

/* An option's setter (in the file of the verbs it goes with): checks the
 * value and keeps it. Returns EXIT_OK to go on, OPTION_DONE to exit
 * successfully (--help, --version), else the exit status of the usage
 * error it reported. */
#define OPTION_DONE (-1)
typedef int (*OptionFn)(const char *arg);

/* ---- talking to blkmqd (ctl-call.c) ---- */

/* One verb's conversation with blkmqd: the connection, opened by the first
 * call, and the command that error messages name. */
typedef struct Ctl {
        const char *verb;
        blkmq_varlink *link;
} Ctl;

#define CTL(v) { .verb = (v) }
void ctl_close(Ctl *c);
#define _cleanup_ctl_ _cleanup_(ctl_close)

/* A reply, as the verb shows it; returns an exit status. */
typedef int (*CtlShowFn)(json_t *reply, void *userdata);
/* One of the replies of a call with "more" (last: the one without
 * "continues"); returns EXIT_OK to read on, else the exit status. */
typedef int (*CtlReplyFn)(json_t *reply, bool last, void *userdata);

/* Each returns an exit status and has said what went wrong (on stderr, and
 * the error reply on stdout under --json). params is borrowed (NULL: none). */
int ctl_connect(Ctl *c);
int ctl_call(Ctl *c, const char *method, json_t *params, json_t **ret);
/* The reply under --json, else show(reply, userdata) (NULL: nothing). */
int ctl_render(json_t *reply, CtlShowFn show, void *userdata);
/* ctl_call() and ctl_render() of its reply. */
int ctl_query(Ctl *c, const char *method, json_t *params, CtlShowFn show, void *userdata);
/* method with "more" (fd >= 0: passed as fd 0): each reply to fn, until
 * the last one. */
int ctl_call_more(Ctl *c, const char *method, json_t *params, int fd, CtlReplyFn fn, void *userdata);
/* The same for a stream that runs until Ctrl-C (monitor, trial): SIGINT and
 * SIGTERM end it with EXIT_OK, after quit_note (if any) on stdout. */
int ctl_stream(Ctl *c, const char *method, json_t *params, CtlReplyFn fn, void *userdata, const char *quit_note);
/* method(params with "fd": 0) with "more", passing fd: the replies before
 * the last carry key (bytes so far), a progress bar named what on a
 * terminal; *ret is the last reply. */
int call_fd_progress(Ctl *c, const char *method, json_t *params, int fd, const char *what, const char *key,
                     uint64_t total, json_t **ret);

/* Without a word on failure: a negative errno (connecting, the transport),
 * else 0 with *ret the reply and *ret_error its error name or NULL (valid
 * while c is open). For callers that decide what a failure means. */
int ctl_open(Ctl *c);
int ctl_call_raw(Ctl *c, const char *method, json_t *params, json_t **ret, const char **ret_error);

/* SIGINT and SIGTERM set ctl_quit, without SA_RESTART, so that a blocking
 * wait returns and the verb can end cleanly. */
extern volatile sig_atomic_t ctl_quit;
void catch_quit_signals(void);

/* ---- errors (ctl-error.c) ---- */

int transport_error(int r);
/* An error reply: one line on stderr (and the error as JSON on stdout with
 * --json); returns the exit status it maps to. */
int varlink_error(const char *verb, const char *error, json_t *p);

/* ---- output (ctl-output.c) ---- */

extern bool utf8;

_printf_(2, 3) int fail(int status, const char *fmt, ...);
const char *ellipsis(void);
const char *arrow(void);
/* The terminal's width: COLUMNS= first, UINT_MAX when stdout is not a
 * terminal (whole lines for scripts). */
unsigned columns(void);

/* JSON accessors: absent or null fields read as NULL / def. */
const char *jstr(json_t *o, const char *key);
long long jint(json_t *o, const char *key, long long def);
double jreal(json_t *o, const char *key);
const char *jbool(json_t *o, const char *key);
/* The first object of array whose string key equals value, or NULL (array
 * not an array, value NULL: none). */
json_t *json_array_find(json_t *array, const char *key, const char *value);
const char *dash(const char *s);
char *join_strings(json_t *a, const char *sep);
const char *explain_errno(char *buf, size_t size, const char *note, int e);
void print_json(json_t *j);
json_t *device_params(const char *device);

void format_timestamp(char *buf, size_t size, long long usec, bool millis);
void format_duration(char *buf, size_t size, long long usec);
void format_bytes(char *buf, size_t size, long long bytes);
void format_bytes_exact(char *buf, size_t size, long long bytes);
void field(const char *label, const char *value);

/* A progress bar on stderr, only on a terminal; total 0: unknown (a pipe).
 * fail() clears it first. */
void progress(const char *what, uint64_t done, uint64_t total);
void progress_done(void);

/* ---- tables (ctl-table.c): sized to the terminal, the widest column gives way ---- */

#define TABLE_COLUMNS_MAX 12U

typedef struct Table {
        size_t n_columns;
        bool right[TABLE_COLUMNS_MAX];
        bool full_width; /* never cut to the terminal (top: figures, not text) */
        bool fixed[TABLE_COLUMNS_MAX]; /* columns never cut (figures); the others give way */
        char **cells; /* row-major; the first row is the header */
        size_t n_cells, allocated;
} Table;

/* headers: n_columns names; a name starting with '>' is right-aligned. */
Table *table_new(size_t n_columns, const char *const *headers);
Table *table_free(Table *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(Table *, table_free)
int table_add(Table *t, const char *s);
_printf_(2, 3) int table_addf(Table *t, const char *fmt, ...);
int table_add_float(Table *t, json_t *o, const char *key, int decimals, double div);
size_t table_rows(const Table *t);
void table_print(const Table *t);
/* The table (if it has rows) and, with the legend, "N <noun>s<tail>", after
 * a blank line if there were rows. */
void table_print_counted(const Table *t, const char *noun, const char *tail);

/* The kernel's write limits (the WriteLimits of io.blkmqd.Manager and
 * io.blkmqd.Zones: reported, never tuned) as table columns, headed
 * write_limit_headers[]: the figure, "-" where the kernel has no such
 * attribute. */
#define WRITE_LIMIT_COLUMNS 6U
extern const char *const write_limit_headers[WRITE_LIMIT_COLUMNS];
int table_add_write_limits(Table *t, json_t *limits);

/* ---- the verbs: each takes the command line from the verb on ---- */

/* ctl-devices.c */
int verb_status(int argc, char **argv);
int verb_devices(int argc, char **argv);
int verb_show(int argc, char **argv);
int verb_explain(int argc, char **argv);
int verb_apply(int argc, char **argv);
int verb_verify(int argc, char **argv);
int list_devices(Ctl *c, json_t *list);
int print_results(const char *verb, json_t *reply);

/* ctl-profiles.c */
int verb_reload(int argc, char **argv);
int verb_profile(int argc, char **argv);
int verb_profiles(int argc, char **argv);
int verb_log_level(int argc, char **argv);
int profile_opt_clear(const char *arg);
int profiles_options_fit(const char *verb);

/* ctl-latency.c */
int verb_monitor(int argc, char **argv);
int verb_trial(int argc, char **argv);
int verb_latency(int argc, char **argv);
int verb_top(int argc, char **argv);
int latency_opt_window(const char *arg);
int latency_opt_interval(const char *arg);
int latency_opt_count(const char *arg);
int latency_options_fit(const char *verb);

/* ctl-zones.c */
extern const char *arg_device; /* zones alloc, find, cat, verify, release, stage */
extern const char *arg_label;  /* zones alloc, stage */
extern const char *arg_output; /* zones cat */
int verb_zones(int argc, char **argv);
int zones_opt_state(const char *arg);
int zones_opt_device(const char *arg);
int zones_opt_label(const char *arg);
int zones_opt_size(const char *arg);
int zones_opt_inline(const char *arg);
int zones_opt_output(const char *arg);
int objects_opt_io_class(const char *arg);
int zones_options_fit(const char *verb);
int append_fd(Ctl *c, const char *lease, int fd, uint64_t total, json_t **ret);

/* ctl-objects.c: zones objects, find, cat, verify; device (--device=)
 * narrows a label to that device's objects (NULL: any). */
bool looks_like_lease(const char *s);
int lease_of_label(const char *label, const char *device, char **ret);
int zones_objects(const char *device);
int zones_find(const char *label, const char *device);
int zones_verify(const char *what, const char *device);
int zones_cat(const char *what, const char *device, const char *out);

/* ctl-export.c: export, trial --emit-conf */
extern bool arg_emit_conf;
int verb_export(int argc, char **argv);
int export_opt_emit_conf(const char *arg);
int export_options_fit(const char *verb);
/* The section of the trial's choice; p is the trial's last reply. */
int emit_trial_conf(Ctl *c, json_t *p);

/* ctl-stack-tree.c: a StackNode of Explain and the devices below it, each
 * line after indent, box-drawing glyphs if use_utf8 (else ASCII). */
void stack_tree_print(FILE *f, json_t *tree, const char *indent, bool use_utf8);

/* ctl-complete.c: __complete devices|profiles|zoned|leases|labels */
int verb_complete(int argc, char **argv);

/* ctl-stage.c */
int verb_stage(int argc, char **argv);
int stage_opt_settle_timeout(const char *arg);
