/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The varlink server: framing, dispatch, errors, more/oneway, pipelining,
 * fds, limits, permissions. The client side is raw socket I/O on the other
 * end of a socketpair (or of a listening socket), the server runs on an
 * sd_event loop driven from here with sd_event_run(). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"
#include "varlink.h"
#include "varlink-peer.h"

static const char test_idl[] =
        "# The test interface.\n"
        "interface io.blkmqd.Test\n"
        "\n"
        "type Point (x: int, y: int)\n"
        "type Color (red, green, blue)\n"
        "\n"
        "method Ping(text: ?string) -> (text: ?string)\n"
        "method Echo(b: ?bool, i: ?int, f: ?float, s: ?string, color: ?Color, point: ?Point,\n"
        "            list: ?[]int, map: ?[string]string, nested: ?(inner: (deep: int))) -> (echo: object)\n"
        "method Stream(count: int) -> (index: int)\n"
        "method Async(tag: string) -> (tag: string)\n"
        "method AsyncPipelined(tag: string) -> (tag: string)\n"
        "method Mutate() -> ()\n"
        "method TakeFds(fds: []int) -> (contents: []string)\n"
        "method GiveFd() -> (fd: int)\n"
        "method Fail(errno: int) -> ()\n"
        "method NoReply() -> ()\n"
        "method Unimplemented() -> ()\n"
        "error TestError (reason: string)\n";

/* State the handlers share with the tests. */
static VarlinkCall *pending[VARLINK_PIPELINE_MAX + 8];
static size_t n_pending;
static unsigned n_disconnected;
static unsigned n_oneway_pings;

typedef struct Fixture {
        sd_event *e;
        VarlinkServer *s;
        VarlinkPeer peer;
} Fixture;

static int method_ping(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_t *text = json_object_get(parameters, "text");

        if (varlink_call_is_oneway(call))
                n_oneway_pings++;
        if (!text)
                return varlink_call_reply(call, NULL);
        return varlink_call_reply(call, json_pack("{s:O}", "text", text));
}

static int method_echo(VarlinkCall *call, json_t *parameters, void *userdata) {
        return varlink_call_reply(call, json_pack("{s:O}", "echo", parameters));
}

static int method_stream(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_int_t count = json_integer_value(json_object_get(parameters, "count"));
        int r;

        for (json_int_t i = 0; i + 1 < count; i++) {
                r = varlink_call_notify(call, json_pack("{s:I}", "index", i));
                if (r < 0)
                        return varlink_call_error(call, "io.blkmqd.Test.TestError",
                                                  json_pack("{s:s}", "reason", strerror(-r)));
        }
        return varlink_call_reply(call, json_pack("{s:I}", "index", count - 1));
}

static void on_disconnect(VarlinkCall *call, void *userdata) {
        assert_false(varlink_call_is_connected(call));
        n_disconnected++;
}

static int method_async(VarlinkCall *call, json_t *parameters, void *userdata) {
        assert_true(n_pending < sizeof pending / sizeof pending[0]);
        /* Not a "more" call: no notifications. */
        assert_int_equal(varlink_call_notify(call, NULL), -EPROTO);
        varlink_call_set_disconnect_callback(call, on_disconnect, NULL);
        pending[n_pending++] = varlink_call_ref(call);
        return 0;
}

static int method_mutate(VarlinkCall *call, json_t *parameters, void *userdata) {
        return varlink_call_reply(call, NULL);
}

static int method_take_fds(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_t *contents = peer_read_passed_fds(call, json_object_get(parameters, "fds"));

        if (!contents)
                return varlink_call_error_invalid_parameter(call, "fds");
        /* Taken already, and out of range. */
        assert_int_equal(varlink_call_take_fd(call, 0), -EBADF);
        assert_int_equal(varlink_call_take_fd(call, 99), -ENXIO);
        return varlink_call_reply(call, json_pack("{s:o}", "contents", contents));
}

static int method_give_fd(VarlinkCall *call, json_t *parameters, void *userdata) {
        int p[2], idx;

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        assert_int_equal(write(p[1], "hello", 5), 5);
        close(p[1]);
        idx = varlink_call_push_fd(call, p[0]);
        assert_int_equal(idx, 0);
        return varlink_call_reply(call, json_pack("{s:i}", "fd", idx));
}

static int method_fail(VarlinkCall *call, json_t *parameters, void *userdata) {
        return -(int) json_integer_value(json_object_get(parameters, "errno"));
}

static int method_no_reply(VarlinkCall *call, json_t *parameters, void *userdata) {
        return 0;
}

static const VarlinkMethod test_methods[] = {
        { "Ping", method_ping, 0 },
        { "Echo", method_echo, 0 },
        { "Stream", method_stream, VARLINK_METHOD_REQUIRES_MORE },
        { "Async", method_async, 0 },
        { "AsyncPipelined", method_async, VARLINK_METHOD_PIPELINED },
        { "Mutate", method_mutate, VARLINK_METHOD_MUTATING },
        { "TakeFds", method_take_fds, VARLINK_METHOD_ACCEPTS_FDS },
        { "GiveFd", method_give_fd, 0 },
        { "Fail", method_fail, 0 },
        { "NoReply", method_no_reply, 0 },
};

/* ---- helpers ---- */

static void pump(Fixture *f) {
        peer_pump(f->e);
}

static void close_received_fds(Fixture *f) {
        peer_close_fds(&f->peer);
}

/* The next message from the server, or NULL at EOF. */
static json_t *next_message(Fixture *f) {
        return peer_next(&f->peer, true);
}

static void send_raw(Fixture *f, const void *data, size_t len) {
        peer_send_raw(&f->peer, data, len);
}

/* Sends text and its NUL. */
static void send_msg(Fixture *f, const char *text) {
        peer_send(&f->peer, text);
}

static void send_msg_with_fds(Fixture *f, const char *text, const int *fds, size_t n_fds) {
        peer_send_with_fds(&f->peer, text, fds, n_fds);
}

/* Expects a plain final reply; returns its parameters (a new ref). */
static json_t *expect_reply(Fixture *f) {
        json_t *m = next_message(f), *p;

        assert_non_null(m);
        if (json_object_get(m, "error"))
                fail_msg("unexpected error reply %s", json_string_value(json_object_get(m, "error")));
        assert_null(json_object_get(m, "continues"));
        p = json_object_get(m, "parameters");
        assert_true(json_is_object(p)); /* never null, never missing */
        json_incref(p);
        json_decref(m);
        return p;
}

static void expect_error(Fixture *f, const char *name, const char *key, const char *value) {
        json_t *m = next_message(f), *p;

        assert_non_null(m);
        assert_non_null(json_object_get(m, "error"));
        assert_string_equal(json_string_value(json_object_get(m, "error")), name);
        assert_null(json_object_get(m, "continues"));
        p = json_object_get(m, "parameters");
        assert_true(json_is_object(p));
        if (key)
                assert_string_equal(json_string_value(json_object_get(p, key)), value);
        else
                assert_int_equal(json_object_size(p), 0);
        json_decref(m);
}

/* Sends TEXT and expects the error reply NAME (see expect_error). */
static void expect_refused(Fixture *f, const char *text, const char *name, const char *key, const char *value) {
        send_msg(f, text);
        expect_error(f, name, key, value);
}

static void expect_eof(Fixture *f) {
        json_t *m = next_message(f);

        if (m)
                fail_msg("expected EOF, got %s", json_dumps(m, JSON_COMPACT));
}

static void expect_ping(Fixture *f, const char *text) {
        json_t *p = expect_reply(f);

        assert_string_equal(json_string_value(json_object_get(p, "text")), text);
        json_decref(p);
}

static void server_new(Fixture *f) {
        assert_int_equal(sd_event_new(&f->e), 0);
        f->peer.e = f->e;
        assert_int_equal(varlink_server_new(&f->s, f->e, "blkmqd project", "blkmqd", "9.9", "https://example.org"), 0);
        assert_int_equal(varlink_server_add_interface(f->s, test_idl, test_methods,
                                                      sizeof test_methods / sizeof test_methods[0], f),
                         0);
}

static int setup(void **state) {
        Fixture *f = calloc(1, sizeof *f);
        int p[2];

        server_new(f);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        assert_int_equal(varlink_server_add_connection(f->s, p[1]), 0);
        assert_int_equal(varlink_server_n_connections(f->s), 1);
        f->peer.fd = p[0];
        n_pending = 0;
        n_disconnected = 0;
        n_oneway_pings = 0;
        *state = f;
        return 0;
}

static int teardown(void **state) {
        Fixture *f = *state;

        for (size_t i = 0; i < n_pending; i++)
                varlink_call_unref(pending[i]);
        n_pending = 0;
        close_received_fds(f);
        if (f->peer.fd >= 0)
                close(f->peer.fd);
        varlink_server_free(f->s);
        sd_event_unref(f->e);
        free(f->peer.buf);
        free(f);
        return 0;
}

/* ---- tests ---- */

static void test_get_info(void **state) {
        Fixture *f = *state;
        json_t *p, *ifaces;

        send_msg(f, "{\"method\": \"org.varlink.service.GetInfo\"}");
        p = expect_reply(f);
        assert_string_equal(json_string_value(json_object_get(p, "vendor")), "blkmqd project");
        assert_string_equal(json_string_value(json_object_get(p, "product")), "blkmqd");
        assert_string_equal(json_string_value(json_object_get(p, "version")), "9.9");
        assert_string_equal(json_string_value(json_object_get(p, "url")), "https://example.org");
        ifaces = json_object_get(p, "interfaces");
        assert_int_equal(json_array_size(ifaces), 2);
        assert_string_equal(json_string_value(json_array_get(ifaces, 0)), "org.varlink.service");
        assert_string_equal(json_string_value(json_array_get(ifaces, 1)), "io.blkmqd.Test");
        json_decref(p);
}

static void test_get_interface_description(void **state) {
        Fixture *f = *state;
        json_t *p;

        send_msg(f, "{\"method\": \"org.varlink.service.GetInterfaceDescription\", "
                    "\"parameters\": {\"interface\": \"io.blkmqd.Test\"}}");
        p = expect_reply(f);
        assert_string_equal(json_string_value(json_object_get(p, "description")), test_idl);
        json_decref(p);

        send_msg(f, "{\"method\": \"org.varlink.service.GetInterfaceDescription\", "
                    "\"parameters\": {\"interface\": \"org.varlink.service\"}}");
        p = expect_reply(f);
        assert_non_null(strstr(json_string_value(json_object_get(p, "description")),
                               "method GetInterfaceDescription(interface: string) -> (description: string)"));
        json_decref(p);

        send_msg(f, "{\"method\": \"org.varlink.service.GetInterfaceDescription\", "
                    "\"parameters\": {\"interface\": \"io.nope\"}}");
        expect_error(f, VARLINK_ERROR_INTERFACE_NOT_FOUND, "interface", "io.nope");

        expect_refused(f, "{\"method\": \"org.varlink.service.GetInterfaceDescription\"}",

                       VARLINK_ERROR_INVALID_PARAMETER, "parameter", "interface");
}

static void test_framing_byte_by_byte(void **state) {
        Fixture *f = *state;
        const char msg[] = "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"bytes\"}}";

        /* Including the NUL, one byte per read. */
        for (size_t i = 0; i < sizeof msg; i++) {
                send_raw(f, msg + i, 1);
                pump(f);
        }
        expect_ping(f, "bytes");
}

static void test_framing_coalesced(void **state) {
        Fixture *f = *state;
        const char msgs[] = "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"1\"}}\0"
                            "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"2\"}}\0"
                            "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"3\"}}\0"
                            "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"4\"}}";

        /* Three and a half messages in one write, then the rest. */
        send_raw(f, msgs, sizeof msgs - 20);
        expect_ping(f, "1");
        expect_ping(f, "2");
        expect_ping(f, "3");
        send_raw(f, msgs + sizeof msgs - 20, 20); /* with the final NUL */
        expect_ping(f, "4");
}

static void test_framing_whitespace_and_nul(void **state) {
        Fixture *f = *state;

        /* Whitespace around the object is fine; an empty message is not JSON. */
        send_msg(f, "  \n{\"method\":\"io.blkmqd.Test.Ping\",\"parameters\":{\"text\":\"ws\"}}\n ");
        expect_ping(f, "ws");
        send_raw(f, "\0", 1);
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void test_eof_without_nul(void **state) {
        Fixture *f = *state;

        send_raw(f, "{\"method\": \"io.blkmqd.Test.Ping\"}", 32);
        assert_int_equal(shutdown(f->peer.fd, SHUT_WR), 0);
        expect_eof(f); /* no reply for the unterminated message */
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void test_half_close(void **state) {
        Fixture *f = *state;

        /* What "printf ... | socat - UNIX-CONNECT:" does: call, shut down
         * the writing side, wait for the reply. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"a\"}}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"b\"}}");
        assert_int_equal(shutdown(f->peer.fd, SHUT_WR), 0);
        expect_ping(f, "a");
        expect_ping(f, "b");
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void expect_closed_after(const char *text) {
        void *state = NULL;
        Fixture *f;

        setup(&state);
        f = state;
        send_msg(f, text);
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
        teardown(&state);
}

static void test_protocol_violations(void **state) {
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Ping\"");            /* invalid JSON */
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Ping\"} x");         /* trailing garbage */
        expect_closed_after("[\"io.blkmqd.Test.Ping\"]");                       /* not an object */
        expect_closed_after("\"io.blkmqd.Test.Ping\"");                         /* not an object */
        expect_closed_after("{\"parameters\": {}}");                            /* no method */
        expect_closed_after("{\"method\": 42}");                                /* method not a string */
        expect_closed_after("{\"method\": null}");
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Ping\", \"more\": \"yes\"}");
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Ping\", \"oneway\": 1}");
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Ping\", \"oneway\": true, \"more\": true}");
        expect_closed_after("{\"method\": \"a\", \"method\": \"b\"}");           /* duplicate key */
}

static void test_errors(void **state) {
        Fixture *f = *state;

        expect_refused(f, "{\"method\": \"io.nope.Ping\"}", VARLINK_ERROR_INTERFACE_NOT_FOUND, "interface", "io.nope");
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Nope\"}",
                       VARLINK_ERROR_METHOD_NOT_FOUND, "method", "io.blkmqd.Test.Nope");
        expect_refused(f, "{\"method\": \"Ping\"}", VARLINK_ERROR_METHOD_NOT_FOUND, "method", "Ping");
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.\"}",
                       VARLINK_ERROR_METHOD_NOT_FOUND, "method", "io.blkmqd.Test.");
        /* An IDL type is not a method. */
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Point\"}",
                       VARLINK_ERROR_METHOD_NOT_FOUND, "method", "io.blkmqd.Test.Point");
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Unimplemented\"}",
                       VARLINK_ERROR_METHOD_NOT_IMPLEMENTED, "method", "io.blkmqd.Test.Unimplemented");
        /* upgrade is refused, and the connection goes on. */
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"upgrade\": true}",
                       VARLINK_ERROR_METHOD_NOT_IMPLEMENTED, "method", "io.blkmqd.Test.Ping");
        /* "parameters": null is taken as {}; unknown top-level keys are ignored. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": null, \"future\": 1}");
        json_decref(expect_reply(f));
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": [1]}",
                       VARLINK_ERROR_INVALID_PARAMETER, "parameter", "parameters");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"still here\"}}");
        expect_ping(f, "still here");
        assert_int_equal(varlink_server_n_connections(f->s), 1);
}

static void test_validation(void **state) {
        static const struct {
                const char *params;
                const char *parameter;
        } bad[] = {
                { "{\"bogus\": 1}", "bogus" },
                { "{\"i\": \"1\"}", "i" },
                { "{\"i\": 1.5}", "i" },
                { "{\"b\": 0}", "b" },
                { "{\"f\": \"1\"}", "f" },
                { "{\"s\": []}", "s" },
                { "{\"color\": \"purple\"}", "color" },
                { "{\"point\": {\"x\": 1}}", "point.y" },
                { "{\"point\": {\"x\": 1, \"y\": null}}", "point.y" },
                { "{\"list\": [1, 2, \"3\"]}", "list[2]" },
                { "{\"map\": {\"k\": 2}}", "map.k" },
                { "{\"nested\": {\"inner\": {}}}", "nested.inner.deep" },
                { "{\"nested\": {\"inner\": {\"deep\": 1, \"deeper\": 2}}}", "nested.inner.deeper" },
        };
        Fixture *f = *state;
        json_t *p;

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                char buf[512];

                snprintf(buf, sizeof buf, "{\"method\": \"io.blkmqd.Test.Echo\", \"parameters\": %s}",
                         bad[i].params);
                send_msg(f, buf);
                expect_error(f, VARLINK_ERROR_INVALID_PARAMETER, "parameter", bad[i].parameter);
        }

        /* Missing non-nullable field. */
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"more\": true, \"parameters\": {}}",
                       VARLINK_ERROR_INVALID_PARAMETER, "parameter", "count");

        send_msg(f, "{\"method\": \"io.blkmqd.Test.Echo\", \"parameters\": {\"b\": true, \"i\": -3, \"f\": 2, "
                    "\"s\": \"s\", \"color\": \"blue\", \"point\": {\"x\": 1, \"y\": 2}, \"list\": [], "
                    "\"map\": {}, \"nested\": {\"inner\": {\"deep\": 0}}}}");
        p = expect_reply(f);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "echo"), "i")), -3);
        assert_string_equal(json_string_value(json_object_get(json_object_get(p, "echo"), "color")), "blue");
        json_decref(p);
}

static void test_more(void **state) {
        Fixture *f = *state;
        json_t *m;

        send_msg(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"more\": true, \"parameters\": {\"count\": 3}}");
        for (int i = 0; i < 3; i++) {
                m = next_message(f);
                assert_non_null(m);
                assert_null(json_object_get(m, "error"));
                assert_int_equal(json_integer_value(json_object_get(json_object_get(m, "parameters"), "index")), i);
                if (i < 2)
                        assert_true(json_is_true(json_object_get(m, "continues")));
                else
                        assert_null(json_object_get(m, "continues"));
                json_decref(m);
        }

        /* Required, but not given. */
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"parameters\": {\"count\": 3}}",
                       VARLINK_ERROR_EXPECTED_MORE, NULL, NULL);

        /* Given, but the method replies once: no "continues" either way. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"more\": true, \"parameters\": {\"text\": \"m\"}}");
        expect_ping(f, "m");
}

static void test_oneway(void **state) {
        Fixture *f = *state;

        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"oneway\": true, \"parameters\": {\"text\": \"1\"}}");
        /* Errors of oneway calls are not sent either. */
        send_msg(f, "{\"method\": \"io.nope.Ping\", \"oneway\": true}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"oneway\": true, \"parameters\": {\"count\": 1}}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"oneway\": true, \"parameters\": {\"text\": \"2\"}}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"3\"}}");
        expect_ping(f, "3");
        assert_int_equal(n_oneway_pings, 2);
        /* Nothing else queued. */
        assert_int_equal(f->peer.size, 0);
}

static void test_pipelining_async(void **state) {
        Fixture *f = *state;
        json_t *p;

        static const char three[] = "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"a\"}}\0"
                                    "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"b\"}}\0"
                                    "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"c\"}}";

        /* All three in one write (sizeof includes the last NUL). */
        send_raw(f, three, sizeof three);
        pump(f);
        /* Only the first call is being served. */
        assert_int_equal(n_pending, 1);
        assert_true(varlink_call_is_connected(pending[0]));
        assert_false(varlink_call_wants_more(pending[0]));
        assert_string_equal(varlink_call_get_method(pending[0]), "io.blkmqd.Test.Async");
        pump(f);
        assert_int_equal(n_pending, 1);

        assert_int_equal(varlink_call_reply(pending[0], json_pack("{s:s}", "tag", "a")), 0);
        assert_int_equal(varlink_call_reply(pending[0], NULL), -EBUSY);
        assert_int_equal(varlink_call_error(pending[0], "x.y.Z", NULL), -EBUSY);
        p = expect_reply(f);
        assert_string_equal(json_string_value(json_object_get(p, "tag")), "a");
        json_decref(p);
        assert_int_equal(n_pending, 2);

        /* Errors can be sent asynchronously too. */
        assert_int_equal(varlink_call_error(pending[1], "io.blkmqd.Test.TestError",
                                            json_pack("{s:s}", "reason", "because")), 0);
        expect_error(f, "io.blkmqd.Test.TestError", "reason", "because");
        expect_ping(f, "c");
        assert_int_equal(n_disconnected, 0);
}

static void expect_tag(Fixture *f, const char *tag) {
        json_t *p = expect_reply(f);

        assert_string_equal(json_string_value(json_object_get(p, "tag")), tag);
        json_decref(p);
}

/* Calls of a VARLINK_METHOD_PIPELINED method are dispatched together; their
 * replies, sent in any order, go out in the order of the calls. A
 * non-pipelined call among them is dispatched, but nothing after it. */
static void test_pipelined(void **state) {
        Fixture *f = *state;

        static const char calls[] =
                "{\"method\": \"io.blkmqd.Test.AsyncPipelined\", \"parameters\": {\"tag\": \"a\"}}\0"
                "{\"method\": \"io.blkmqd.Test.AsyncPipelined\", \"parameters\": {\"tag\": \"b\"}}\0"
                "{\"method\": \"io.nope.Ping\"}\0"
                "{\"method\": \"io.blkmqd.Test.AsyncPipelined\", \"parameters\": {\"tag\": \"c\"}}\0"
                "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"d\"}}\0"
                "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"e\"}}";

        send_raw(f, calls, sizeof calls);
        pump(f);
        /* a, b, c and d are in flight (the error was answered at once); e
         * waits behind d, which is not pipelined. */
        assert_int_equal(n_pending, 4);
        assert_string_equal(varlink_call_get_method(pending[3]), "io.blkmqd.Test.Async");

        /* Answered backwards: nothing goes out until a is. */
        assert_int_equal(varlink_call_reply(pending[3], json_pack("{s:s}", "tag", "d")), 0);
        assert_int_equal(varlink_call_reply(pending[2], json_pack("{s:s}", "tag", "c")), 0);
        assert_int_equal(varlink_call_error(pending[1], "io.blkmqd.Test.TestError",
                                            json_pack("{s:s}", "reason", "b")), 0);
        pump(f);
        {
                char byte;
                assert_int_equal(recv(f->peer.fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK), -1);
                assert_int_equal(errno, EAGAIN);
        }
        assert_int_equal(varlink_call_reply(pending[0], json_pack("{s:s}", "tag", "a")), 0);
        expect_tag(f, "a");
        expect_error(f, "io.blkmqd.Test.TestError", "reason", "b");
        expect_error(f, "org.varlink.service.InterfaceNotFound", "interface", "io.nope");
        expect_tag(f, "c");
        expect_tag(f, "d");
        expect_ping(f, "e");
        assert_int_equal(n_disconnected, 0);
}

/* At most VARLINK_PIPELINE_MAX pipelined calls in flight; a disconnect
 * reaches every one not answered yet. */
static void test_pipelined_limit_and_disconnect(void **state) {
        Fixture *f = *state;
        char msg[128];

        for (unsigned i = 0; i < VARLINK_PIPELINE_MAX + 2; i++) {
                snprintf(msg, sizeof msg,
                         "{\"method\": \"io.blkmqd.Test.AsyncPipelined\", \"parameters\": {\"tag\": \"%u\"}}", i);
                send_msg(f, msg);
        }
        pump(f);
        assert_int_equal(n_pending, VARLINK_PIPELINE_MAX);
        assert_int_equal(varlink_call_reply(pending[0], json_pack("{s:s}", "tag", "0")), 0);
        expect_tag(f, "0");
        pump(f);
        assert_int_equal(n_pending, VARLINK_PIPELINE_MAX + 1);
        /* Answered but held behind 1: not told of the disconnect. */
        assert_int_equal(varlink_call_reply(pending[2], json_pack("{s:s}", "tag", "2")), 0);
        close(f->peer.fd);
        f->peer.fd = -EBADF;
        pump(f);
        assert_int_equal(n_disconnected, VARLINK_PIPELINE_MAX - 1);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
        assert_int_equal(varlink_call_reply(pending[1], NULL), 0);
}

static void test_disconnect_callback(void **state) {
        Fixture *f = *state;

        send_msg(f, "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"a\"}}");
        pump(f);
        assert_int_equal(n_pending, 1);
        close(f->peer.fd);
        f->peer.fd = -EBADF;
        pump(f);
        assert_int_equal(n_disconnected, 1);
        assert_false(varlink_call_is_connected(pending[0]));
        assert_int_equal(varlink_server_n_connections(f->s), 0);
        /* Late replies are dropped silently. */
        assert_int_equal(varlink_call_reply(pending[0], NULL), 0);
        pump(f);
        assert_int_equal(n_disconnected, 1);
}

static void test_server_free_with_pending_call(void **state) {
        Fixture *f = *state;

        send_msg(f, "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"a\"}}");
        pump(f);
        assert_int_equal(n_pending, 1);
        f->s = varlink_server_free(f->s);
        assert_int_equal(n_disconnected, 1);
        assert_false(varlink_call_is_connected(pending[0]));
        assert_int_equal(varlink_call_reply(pending[0], NULL), 0);
        expect_eof(f);
}

static void test_fd_passing(void **state) {
        Fixture *f = *state;
        int a[2], b[2];
        json_t *p;
        char buf[16] = {};

        assert_int_equal(pipe2(a, O_CLOEXEC), 0);
        assert_int_equal(pipe2(b, O_CLOEXEC), 0);
        assert_int_equal(write(a[1], "first", 5), 5);
        assert_int_equal(write(b[1], "second", 6), 6);
        close(a[1]);
        close(b[1]);

        /* Referred to by index, in any order. */
        send_msg_with_fds(f, "{\"method\": \"io.blkmqd.Test.TakeFds\", \"parameters\": {\"fds\": [1, 0]}}",
                          (int[]) { a[0], b[0] }, 2);
        p = expect_reply(f);
        assert_string_equal(json_string_value(json_array_get(json_object_get(p, "contents"), 0)), "second");
        assert_string_equal(json_string_value(json_array_get(json_object_get(p, "contents"), 1)), "first");
        json_decref(p);

        /* A method that does not take fds refuses them. */
        send_msg_with_fds(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"x\"}}",
                          (int[]) { a[0] }, 1);
        expect_error(f, VARLINK_ERROR_INVALID_PARAMETER, "parameter", "fileDescriptors");

        /* No fds sent, but an index used. */
        expect_refused(f, "{\"method\": \"io.blkmqd.Test.TakeFds\", \"parameters\": {\"fds\": [0]}}",
                       VARLINK_ERROR_INVALID_PARAMETER, "parameter", "fds");

        /* fds go with the message they arrive with, not the one before. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"t\"}}");
        send_msg_with_fds(f, "{\"method\": \"io.blkmqd.Test.TakeFds\", \"parameters\": {\"fds\": [0]}}",
                          (int[]) { b[0] }, 1);
        pump(f);
        assert_int_equal(n_pending, 1);
        assert_int_equal(varlink_call_take_fd(pending[0], 0), -ENXIO);
        assert_int_equal(varlink_call_reply(pending[0], json_pack("{s:s}", "tag", "t")), 0);
        json_decref(expect_reply(f));
        p = expect_reply(f);
        assert_string_equal(json_string_value(json_array_get(json_object_get(p, "contents"), 0)), "");
        json_decref(p);

        /* Server to client. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.GiveFd\"}");
        p = expect_reply(f);
        assert_int_equal(json_integer_value(json_object_get(p, "fd")), 0);
        assert_int_equal(f->peer.n_fds, 1);
        assert_int_equal(read(f->peer.fds[0], buf, sizeof buf), 5);
        assert_string_equal(buf, "hello");
        json_decref(p);

        close(a[0]);
        close(b[0]);
        assert_int_equal(varlink_server_n_connections(f->s), 1);
}

static void test_fds_out_of_place(void **state) {
        Fixture *f = *state;
        int p[2];

        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        /* fds with a byte in the middle of a message are refused. */
        send_raw(f, "{\"method\": ", 11);
        pump(f);
        send_msg_with_fds(f, "\"io.blkmqd.Test.TakeFds\", \"parameters\": {\"fds\": [0]}}", p, 1);
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
        close(p[0]);
        close(p[1]);
}

static void test_too_many_fds(void **state) {
        Fixture *f = *state;
        int fds[20];

        for (int i = 0; i < 20; i++)
                fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        send_msg_with_fds(f, "{\"method\": \"io.blkmqd.Test.TakeFds\", \"parameters\": {\"fds\": [0]}}", fds, 20);
        expect_eof(f);
        for (int i = 0; i < 20; i++)
                close(fds[i]);
}

static void test_handler_failures(void **state) {
        expect_closed_after("{\"method\": \"io.blkmqd.Test.Fail\", \"parameters\": {\"errno\": 5}}");
        expect_closed_after("{\"method\": \"io.blkmqd.Test.NoReply\"}");
}

static void test_handler_failure_oneway(void **state) {
        Fixture *f = *state;

        /* Nobody waits for a reply: logged, the connection stays. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Fail\", \"oneway\": true, \"parameters\": {\"errno\": 5}}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.NoReply\", \"oneway\": true}");
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"alive\"}}");
        expect_ping(f, "alive");
}

static void test_message_limit(void **state) {
        Fixture *f = *state;
        VarlinkLimits l = { .max_message_size = 64 };
        char msg[128];

        varlink_server_set_limits(f->s, &l);
        /* Exactly 64 bytes before the NUL. */
        snprintf(msg, sizeof msg, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"%s\"}}", "123");
        assert_int_equal(strlen(msg), 64);
        send_msg(f, msg);
        expect_ping(f, "123");
        snprintf(msg, sizeof msg, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"%s\"}}", "1234");
        send_msg(f, msg);
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void test_message_limit_default(void **state) {
        Fixture *f = *state;
        size_t len = VARLINK_MESSAGE_SIZE_MAX + 1;
        char *big = malloc(len);
        size_t off = 0;

        /* One byte over 16 MiB and no NUL: the server gives up on us. */
        memset(big, ' ', len);
        big[0] = '{';
        while (off < len) {
                ssize_t n = send(f->peer.fd, big + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);

                if (n < 0 && errno == EAGAIN) {
                        assert_true(sd_event_run(f->e, 100000) >= 0);
                        continue;
                }
                if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                        break;
                assert_true(n > 0);
                off += n;
        }
        free(big);
        expect_eof(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void test_output_limit(void **state) {
        Fixture *f = *state;
        VarlinkLimits l = { .max_output_buffer = 64 * 1024 };

        varlink_server_set_limits(f->s, &l);
        /* We do not read; after 64 KiB of replies the server drops us. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"more\": true, \"parameters\": {\"count\": 100000}}");
        for (int i = 0; i < 100; i++)
                assert_true(sd_event_run(f->e, 0) >= 0);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

/* The bound across all connections: two clients that do not read, each
 * under its own bound; past the total the one holding the most goes, the
 * other stays. */
static void test_output_total(void **state) {
        Fixture *f = *state;
        VarlinkLimits l = { .max_output_buffer = 64 * 1024 * 1024, .max_output_total = 96 * 1024 };
        int p[2];

        varlink_server_set_limits(f->s, &l);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        assert_int_equal(varlink_server_add_connection(f->s, p[1]), 0);
        /* The second client asks for a little and never reads it. */
        static const char small[] = "{\"method\": \"io.blkmqd.Test.Stream\", \"more\": true, \"parameters\": {\"count\": 10}}";
        assert_int_equal(write(p[0], small, sizeof small), (ssize_t) sizeof small);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 2);
        /* The fixture's client asks for far more, and does not read either. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Stream\", \"more\": true, \"parameters\": {\"count\": 100000}}");
        for (int i = 0; i < 100; i++)
                assert_true(sd_event_run(f->e, 0) >= 0);
        assert_int_equal(varlink_server_n_connections(f->s), 1);
        close(p[0]);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 0);
}

static void test_idle_client_does_not_stall(void **state) {
        Fixture *f = *state;
        int p[2];

        /* A second client that sends half a message and then nothing. */
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        assert_int_equal(varlink_server_add_connection(f->s, p[1]), 0);
        assert_int_equal(write(p[0], "{\"method\": ", 11), 11);
        pump(f);
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"x\"}}");
        expect_ping(f, "x");
        assert_int_equal(varlink_server_n_connections(f->s), 2);
        close(p[0]);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 1);
}

/* A listening abstract socket: accept path, limits, credentials. */
static void listen_abstract(Fixture *f, struct sockaddr_un *ret, socklen_t *ret_len) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        socklen_t len;
        int fd;

        len = offsetof(struct sockaddr_un, sun_path) + 1 +
              snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "blkmqd-test-varlink-%d", (int) getpid());
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, len), 0);
        assert_int_equal(listen(fd, 64), 0);
        assert_int_equal(varlink_server_listen_fd(f->s, fd), 0);
        *ret = sa;
        *ret_len = len;
}

static int connect_to(const struct sockaddr_un *sa, socklen_t len) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (const struct sockaddr *) sa, len), 0);
        return fd;
}

static bool got_eof(Fixture *f, int fd) {
        char c;

        pump(f);
        return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

/* A connection over a limit: its first call is answered with
 * io.blkmqd.TooManyConnections, then it is closed. */
static bool told_refused(Fixture *f, int fd) {
        static const char call[] = "{\"method\":\"org.varlink.service.GetInfo\"}";
        char buf[512] = {};
        ssize_t n, got = 0;

        if (send(fd, call, sizeof call, MSG_NOSIGNAL) != (ssize_t) sizeof call)
                return false;
        for (int i = 0; i < 20 && got < (ssize_t) sizeof buf - 1; i++) {
                pump(f);
                n = recv(fd, buf + got, sizeof buf - 1 - (size_t) got, MSG_DONTWAIT);
                if (n <= 0)
                        break;
                got += n;
        }
        return strstr(buf, "\"error\":\"io.blkmqd.TooManyConnections\"") && got_eof(f, fd);
}

static void test_connection_limits(void **state) {
        Fixture *f = *state;
        VarlinkLimits l = { .max_connections = 4, .max_connections_per_uid = 2 };
        struct sockaddr_un sa;
        socklen_t len;
        int c[4];

        varlink_server_set_limits(f->s, &l);
        listen_abstract(f, &sa, &len);

        /* The fixture's connection is ours (uid 0) already: one more fits. */
        c[0] = connect_to(&sa, len);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 2);
        assert_false(got_eof(f, c[0]));
        c[1] = connect_to(&sa, len);
        c[2] = connect_to(&sa, len);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 2);
        assert_true(told_refused(f, c[1]));
        assert_true(told_refused(f, c[2]));
        close(c[1]);
        close(c[2]);

        /* The total. */
        l = (VarlinkLimits) { .max_connections_per_uid = 100, .max_connections = 3 };
        varlink_server_set_limits(f->s, &l);
        c[1] = connect_to(&sa, len);
        c[2] = connect_to(&sa, len);
        c[3] = connect_to(&sa, len);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 3);
        assert_false(got_eof(f, c[1]));
        assert_true(told_refused(f, c[2]));
        assert_true(told_refused(f, c[3]));

        /* Room again once one leaves. */
        close(c[1]);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 2);
        close(c[2]);
        c[2] = connect_to(&sa, len);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 3);
        assert_false(got_eof(f, c[2]));
        /* A connection from the listener works like any other. */
        {
                Fixture g = { .e = f->e, .s = f->s, .peer = { .e = f->e, .fd = c[2] } };

                send_msg(&g, "{\"method\":\"io.blkmqd.Test.Ping\"}");
                json_decref(expect_reply(&g));
                free(g.peer.buf);
        }

        close(c[0]);
        close(c[2]);
        close(c[3]);
}

/* Connects to sa as uid/gid 65534 from a child and hands the socket back. */
static int connect_as_nobody(const struct sockaddr_un *sa, socklen_t len) {
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int))];
        } control = {};
        char byte = 0;
        struct iovec iov = { &byte, 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                             .msg_controllen = sizeof control };
        int p[2], status, fd;
        pid_t pid;

        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(1);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0 || connect(fd, (const struct sockaddr *) sa, len) < 0)
                        _exit(2);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof(int));
                _exit(sendmsg(p[1], &mh, 0) == 1 ? 0 : 3);
        }
        close(p[1]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
        assert_int_equal(recvmsg(p[0], &mh, MSG_CMSG_CLOEXEC), 1);
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
        close(p[0]);
        return fd;
}

static void test_permissions(void **state) {
        Fixture *f = *state, g = { .e = f->e, .s = f->s, .peer.e = f->e };
        struct sockaddr_un sa;
        socklen_t len;
        json_t *p;

        if (geteuid() != 0)
                skip();

        /* root (the fixture's connection) may. */
        send_msg(f, "{\"method\": \"io.blkmqd.Test.Mutate\"}");
        json_decref(expect_reply(f));

        listen_abstract(f, &sa, &len);
        g.peer.fd = connect_as_nobody(&sa, len);
        pump(f);
        assert_int_equal(varlink_server_n_connections(f->s), 2);

        /* nobody may not, but may call read-only methods. */
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Mutate\"}");
        expect_error(&g, VARLINK_ERROR_PERMISSION_DENIED, NULL, NULL);
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"ro\"}}");
        expect_ping(&g, "ro");

        /* Unless in the admin group. */
        varlink_server_set_admin_gid(f->s, 65534);
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Mutate\"}");
        p = expect_reply(&g);
        json_decref(p);
        varlink_server_set_admin_gid(f->s, 4242);
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Mutate\"}");
        expect_error(&g, VARLINK_ERROR_PERMISSION_DENIED, NULL, NULL);

        /* The peer as seen by a handler. */
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Async\", \"parameters\": {\"tag\": \"peer\"}}");
        pump(f);
        assert_int_equal(n_pending, 1);
        {
                uid_t uid = 1;
                gid_t gid = 1;
                pid_t pid = 0;

                assert_int_equal(varlink_call_get_peer(pending[0], &uid, &gid, &pid), 0);
                assert_int_equal(uid, 65534);
                assert_int_equal(gid, 65534);
                assert_true(pid > 0);
        }
        close(g.peer.fd);
        free(g.peer.buf);
}

static void test_add_interface(void **state) {
        Fixture *f = *state;
        const VarlinkMethod extra[] = { { "Missing", method_ping, 0 } };
        const VarlinkMethod twice[] = { { "A", method_ping, 0 }, { "A", method_ping, 0 } };
        int level = log_get_max_level();

        log_set_max_level(LOG_CRIT); /* the failures below log errors */
        assert_int_equal(varlink_server_add_interface(f->s, "interface io.bad\nmethod a() -> ()", NULL, 0, NULL),
                         -EINVAL);
        assert_int_equal(varlink_server_add_interface(f->s, "interface io.other\nmethod A() -> ()", extra, 1, NULL),
                         -EINVAL);
        assert_int_equal(varlink_server_add_interface(f->s, "interface io.other\nmethod A() -> ()", twice, 2, NULL),
                         -EINVAL);
        assert_int_equal(varlink_server_add_interface(f->s, test_idl, NULL, 0, NULL), -EEXIST);
        log_set_max_level(level);
        assert_int_equal(varlink_server_add_interface(f->s, "interface io.other\nmethod A() -> ()", NULL, 0, NULL), 0);

        expect_refused(f, "{\"method\": \"io.other.A\"}",

                       VARLINK_ERROR_METHOD_NOT_IMPLEMENTED, "method", "io.other.A");
}

static void test_listen_address(void **state) {
        Fixture *f = *state, g = { .e = f->e, .s = f->s, .peer.e = f->e };
        char dir[] = "/tmp/test-varlink-XXXXXX", path[256], sub[64];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct stat st;
        int fd;

        assert_non_null(mkdtemp(dir));
        snprintf(sub, sizeof sub, "%s/run/blkmqd", dir);
        snprintf(path, sizeof path, "%s/io.blkmqd", sub);
        strcpy(sa.sun_path, path);

        assert_int_equal(varlink_server_listen_address(f->s, "relative/path", 0666), -EINVAL);

        /* A stale socket from an earlier run. */
        {
                char run[128];
                snprintf(run, sizeof run, "%s/run", dir);
                assert_int_equal(mkdir(run, 0755), 0);
                assert_int_equal(mkdir(sub, 0755), 0);
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
        close(fd);

        assert_int_equal(varlink_server_listen_address(f->s, path, 0660), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0660);
        /* Somebody answering there is not stale. */
        assert_int_equal(varlink_server_listen_address(f->s, path, 0660), -EADDRINUSE);

        g.peer.fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(g.peer.fd, (struct sockaddr *) &sa, sizeof sa), 0);
        send_msg(&g, "{\"method\": \"io.blkmqd.Test.Ping\", \"parameters\": {\"text\": \"path\"}}");
        expect_ping(&g, "path");
        close(g.peer.fd);
        free(g.peer.buf);

        /* Fresh parent directories are created. */
        snprintf(path, sizeof path, "%s/new/deeper/sock", dir);
        assert_int_equal(varlink_server_listen_address(f->s, path, 0600), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);

        /* Not a socket: left alone. */
        snprintf(path, sizeof path, "%s/file", dir);
        fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
        close(fd);
        assert_int_equal(varlink_server_listen_address(f->s, path, 0600), -EEXIST);

        {
                char cmd[256];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
                assert_int_equal(system(cmd), 0);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
                T(test_get_info),
                T(test_get_interface_description),
                T(test_framing_byte_by_byte),
                T(test_framing_coalesced),
                T(test_framing_whitespace_and_nul),
                T(test_eof_without_nul),
                T(test_half_close),
                cmocka_unit_test(test_protocol_violations),
                T(test_errors),
                T(test_validation),
                T(test_more),
                T(test_oneway),
                T(test_pipelining_async),
                T(test_pipelined),
                T(test_pipelined_limit_and_disconnect),
                T(test_disconnect_callback),
                T(test_server_free_with_pending_call),
                T(test_fd_passing),
                T(test_fds_out_of_place),
                T(test_too_many_fds),
                cmocka_unit_test(test_handler_failures),
                T(test_handler_failure_oneway),
                T(test_message_limit),
                T(test_message_limit_default),
                T(test_output_limit),
                T(test_output_total),
                T(test_idle_client_does_not_stall),
                T(test_connection_limits),
                T(test_permissions),
                T(test_add_interface),
                T(test_listen_address),
#undef T
        };

        /* Quiet unless asked for. */
        if (!getenv("TEST_VARLINK_DEBUG"))
                log_set_max_level(LOG_CRIT);
        else
                log_set_max_level(LOG_DEBUG);
        return cmocka_run_group_tests_name("varlink", tests, NULL, NULL);
}
