/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Talking to blkmqd: every verb connects, calls, says what went wrong (the
 * same way for all: ctl-error.c) and renders the reply through these. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

volatile sig_atomic_t ctl_quit = 0;

void ctl_close(Ctl *c) {
        c->link = blkmq_varlink_free(c->link);
}

int ctl_open(Ctl *c) {
        int r;

        if (c->link)
                return 0;
        r = blkmq_varlink_connect(&c->link, arg_address);
        if (r < 0)
                return r;
        blkmq_varlink_set_timeout(c->link, CALL_TIMEOUT_USEC);
        return 0;
}

int ctl_connect(Ctl *c) {
        int r;

        r = ctl_open(c);
        if (r < 0)
                return fail(EXIT_UNREACHABLE, "cannot connect to %s: %s%s", arg_address, strerror(-r),
                            r == -ENOENT || r == -ECONNREFUSED ? " (is blkmqd running?)"
                            : r == -EINVAL                     ? " (not an absolute path or @abstract name)"
                                                               : "");
        return EXIT_OK;
}

int ctl_call_raw(Ctl *c, const char *method, json_t *params, json_t **ret, const char **ret_error) {
        int r;

        r = ctl_open(c);
        if (r < 0)
                return r;
        return blkmq_varlink_call_sync(c->link, method, params, ret, ret_error);
}

int ctl_call(Ctl *c, const char *method, json_t *params, json_t **ret) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        const char *error = NULL;
        int r;

        r = ctl_connect(c);
        if (r != EXIT_OK)
                return r;
        r = blkmq_varlink_call_sync(c->link, method, params, &reply, &error);
        if (r < 0)
                return transport_error(r);
        if (error)
                return varlink_error(c->verb, error, reply);
        *ret = TAKE_PTR(reply);
        return EXIT_OK;
}

int ctl_render(json_t *reply, CtlShowFn show, void *userdata) {
        if (arg_json) {
                print_json(reply);
                return EXIT_OK;
        }
        return show ? show(reply, userdata) : EXIT_OK;
}

int ctl_query(Ctl *c, const char *method, json_t *params, CtlShowFn show, void *userdata) {
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = ctl_call(c, method, params, &reply);
        if (r != EXIT_OK)
                return r;
        return ctl_render(reply, show, userdata);
}

/* A call with "more"; until_quit: the library comes back within
 * MONITOR_TICK_USEC, so that a signal is seen at once, and ends the wait
 * (quit_note is printed then, if any). */
static int call_more(Ctl *c, const char *method, json_t *params, int fd, bool until_quit, const char *quit_note,
                     CtlReplyFn fn, void *userdata) {
        unsigned flags;
        int r;

        r = ctl_connect(c);
        if (r != EXIT_OK)
                return r;
        r = blkmq_varlink_call(c->link, method, params, BLKMQ_VARLINK_MORE, fd >= 0 ? &fd : NULL, fd >= 0 ? 1 : 0);
        if (r < 0)
                return transport_error(r);
        if (until_quit)
                blkmq_varlink_set_timeout(c->link, MONITOR_TICK_USEC);

        for (;;) {
                _cleanup_(json_decrefp) json_t *p = NULL;
                const char *error = NULL;
                bool last;

                if (until_quit && ctl_quit) {
                        if (quit_note)
                                printf("%s\n", quit_note);
                        return EXIT_OK;
                }
                r = blkmq_varlink_read_reply(c->link, &p, &error, &flags);
                if (r == -ETIMEDOUT && until_quit)
                        continue;
                if (r < 0)
                        return transport_error(r);
                if (error)
                        return varlink_error(c->verb, error, p);
                last = !(flags & BLKMQ_VARLINK_REPLY_CONTINUES);
                r = fn(p, last, userdata);
                if (until_quit)
                        fflush(stdout);
                if (r != EXIT_OK || last)
                        return r;
        }
}

int ctl_call_more(Ctl *c, const char *method, json_t *params, int fd, CtlReplyFn fn, void *userdata) {
        return call_more(c, method, params, fd, false, NULL, fn, userdata);
}

int ctl_stream(Ctl *c, const char *method, json_t *params, CtlReplyFn fn, void *userdata, const char *quit_note) {
        catch_quit_signals();
        return call_more(c, method, params, -1, true, quit_note, fn, userdata);
}

static void on_quit(int sig) {
        ctl_quit = 1;
}

void catch_quit_signals(void) {
        struct sigaction sa = { .sa_handler = on_quit };

        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);
}

typedef struct FdProgress {
        const char *what, *key; /* the bar's name; the bytes so far in each reply */
        uint64_t total;
        json_t **ret;
} FdProgress;

static int fd_progress_reply(json_t *p, bool last, void *userdata) {
        FdProgress *f = userdata;

        if (!last)
                progress(f->what, (uint64_t) jint(p, f->key, 0), f->total);
        else {
                progress_done();
                *f->ret = json_incref(p);
        }
        return EXIT_OK;
}

int call_fd_progress(Ctl *c, const char *method, json_t *params, int fd, const char *what, const char *key,
                     uint64_t total, json_t **ret) {
        FdProgress f = { .what = what, .key = key, .total = total, .ret = ret };

        return ctl_call_more(c, method, params, fd, fd_progress_reply, &f);
}
