/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libblkmq's blocking varlink client against the varlink server, which runs
 * its sd_event loop on a thread of its own. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "blkmq/varlink.h"
#include "log.h"
#include "varlink.h"
#include "varlink-peer.h"

static const char test_idl[] =
        "interface io.blkmqd.ClientTest\n"
        "method Ping(text: ?string) -> (text: ?string)\n"
        "method Stream(count: int) -> (index: int)\n"
        "method Hang() -> ()\n"
        "method Close() -> ()\n"
        "method TakeFds(fds: []int) -> (contents: []string)\n"
        "method GiveFd() -> (fd: int)\n";

typedef struct Server {
        sd_event *e;
        VarlinkServer *s;
        pthread_t thread;
        int exit_fd;
        char path[108];
        VarlinkCall *hung[8]; /* touched by the server thread only */
        size_t n_hung;
} Server;

static int method_ping(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_t *text = json_object_get(parameters, "text");

        if (!text)
                return varlink_call_reply(call, NULL);
        return varlink_call_reply(call, json_pack("{s:O}", "text", text));
}

static int method_stream(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_int_t count = json_integer_value(json_object_get(parameters, "count"));

        for (json_int_t i = 0; i + 1 < count; i++)
                (void) varlink_call_notify(call, json_pack("{s:I}", "index", i));
        return varlink_call_reply(call, json_pack("{s:I}", "index", count - 1));
}

static int method_hang(VarlinkCall *call, json_t *parameters, void *userdata) {
        Server *srv = userdata;

        if (srv->n_hung >= 8)
                return -ENOBUFS;
        srv->hung[srv->n_hung++] = varlink_call_ref(call);
        return 0;
}

static int method_close(VarlinkCall *call, json_t *parameters, void *userdata) {
        return -ECONNABORTED; /* no reply: the server closes the connection */
}

static int method_take_fds(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_t *contents = peer_read_passed_fds(call, json_object_get(parameters, "fds"));

        if (!contents)
                return varlink_call_error_invalid_parameter(call, "fds");
        return varlink_call_reply(call, json_pack("{s:o}", "contents", contents));
}

static int method_give_fd(VarlinkCall *call, json_t *parameters, void *userdata) {
        int p[2], idx;

        if (pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        if (write(p[1], "hello", 5) != 5) {
                close(p[0]);
                close(p[1]);
                return -EIO;
        }
        close(p[1]);
        idx = varlink_call_push_fd(call, p[0]);
        if (idx < 0)
                return idx;
        return varlink_call_reply(call, json_pack("{s:i}", "fd", idx));
}

static int on_exit_fd(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Server *srv = userdata;
        uint64_t v;

        (void) !read(fd, &v, sizeof v);
        return sd_event_exit(srv->e, 0);
}

static void *server_thread(void *p) {
        Server *srv = p;

        assert_int_equal(sd_event_loop(srv->e), 0);
        for (size_t i = 0; i < srv->n_hung; i++)
                varlink_call_unref(srv->hung[i]);
        srv->n_hung = 0;
        return NULL;
}

static int setup(void **state) {
        static const VarlinkMethod methods[] = {
                { "Ping", method_ping, 0 },
                { "Stream", method_stream, VARLINK_METHOD_REQUIRES_MORE },
                { "Hang", method_hang, 0 },
                { "Close", method_close, 0 },
                { "TakeFds", method_take_fds, VARLINK_METHOD_ACCEPTS_FDS },
                { "GiveFd", method_give_fd, 0 },
        };
        Server *srv = calloc(1, sizeof *srv);

        assert_non_null(srv);
        snprintf(srv->path, sizeof srv->path, "/tmp/test-varlink-client-%d/io.blkmqd.ClientTest", (int) getpid());
        assert_int_equal(sd_event_new(&srv->e), 0);
        assert_int_equal(varlink_server_new(&srv->s, srv->e, "vendor", "product", "1", "url"), 0);
        assert_int_equal(varlink_server_add_interface(srv->s, test_idl, methods, sizeof methods / sizeof methods[0],
                                                      srv),
                         0);
        assert_int_equal(varlink_server_listen_address(srv->s, srv->path, 0600), 0);
        srv->exit_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        assert_true(srv->exit_fd >= 0);
        assert_int_equal(sd_event_add_io(srv->e, NULL, srv->exit_fd, EPOLLIN, on_exit_fd, srv), 0);
        assert_int_equal(pthread_create(&srv->thread, NULL, server_thread, srv), 0);
        *state = srv;
        return 0;
}

static int teardown(void **state) {
        Server *srv = *state;
        uint64_t one = 1;
        char *dir;

        assert_int_equal(write(srv->exit_fd, &one, sizeof one), (ssize_t) sizeof one);
        assert_int_equal(pthread_join(srv->thread, NULL), 0);
        varlink_server_free(srv->s);
        sd_event_unref(srv->e);
        close(srv->exit_fd);
        unlink(srv->path);
        dir = strdup(srv->path);
        *strrchr(dir, '/') = 0;
        rmdir(dir);
        free(dir);
        free(srv);
        return 0;
}

static blkmq_varlink *connect_ok(const char *address) {
        blkmq_varlink *v = NULL;

        assert_int_equal(blkmq_varlink_connect(&v, address), 0);
        assert_non_null(v);
        assert_true(blkmq_varlink_get_fd(v) >= 0);
        return v;
}

static void test_connect_and_get_info(void **state) {
        Server *srv = *state;
        char address[128];
        blkmq_varlink *v;
        json_t *p = NULL;
        const char *error = "unset";

        snprintf(address, sizeof address, "unix:%s", srv->path);
        v = connect_ok(address);
        assert_int_equal(blkmq_varlink_call_sync(v, "org.varlink.service.GetInfo", NULL, &p, &error), 0);
        assert_null(error);
        assert_string_equal(json_string_value(json_object_get(p, "product")), "product");
        assert_string_equal(json_string_value(json_array_get(json_object_get(p, "interfaces"), 1)),
                            "io.blkmqd.ClientTest");
        json_decref(p);
        blkmq_varlink_free(v);

        /* A plain path works too. */
        v = connect_ok(srv->path);
        assert_int_equal(blkmq_varlink_call_sync(v, "io.blkmqd.ClientTest.Ping", NULL, &p, &error), 0);
        assert_null(error);
        assert_int_equal(json_object_size(p), 0);
        json_decref(p);
        blkmq_varlink_free(v);
}

static void test_connect_abstract(void **state) {
        Server *srv = *state;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char address[64];
        blkmq_varlink *v;
        socklen_t len;
        json_t *p = NULL;
        int fd;

        /* An abstract address, served by hand here, raw. */
        snprintf(address, sizeof address, "unix:@blkmqd-client-test-%d", (int) getpid());
        len = offsetof(struct sockaddr_un, sun_path) + strlen(address + 5);
        memcpy(sa.sun_path, address + 5, strlen(address + 5));
        sa.sun_path[0] = 0;
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, len), 0);
        assert_int_equal(listen(fd, 4), 0);

        v = connect_ok(address);
        {
                /* Serve it ourselves: accept and answer one raw call. */
                char buf[256] = {};
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
                ssize_t n;

                assert_true(c >= 0);
                assert_int_equal(blkmq_varlink_call(v, "x.y.Z", NULL, 0, NULL, 0), 0);
                n = recv(c, buf, sizeof buf - 1, 0);
                assert_true(n > 0);
                assert_int_equal(buf[n - 1], 0);
                assert_non_null(strstr(buf, "\"method\":\"x.y.Z\""));
                assert_non_null(strstr(buf, "\"parameters\":{}"));
                assert_null(strstr(buf, "more"));
                assert_int_equal(send(c, "{\"parameters\":{\"ok\":true}}", 27, 0), 27);
                assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), 0);
                assert_true(json_is_true(json_object_get(p, "ok")));
                json_decref(p);

                /* A reply that is not an object breaks the connection. */
                assert_int_equal(send(c, "[1]", 4, 0), 4);
                assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), -EBADMSG);
                assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), -ENOTCONN);
                close(c);
        }
        blkmq_varlink_free(v);
        close(fd);
        (void) srv;
}

static void test_errors(void **state) {
        Server *srv = *state;
        blkmq_varlink *v = connect_ok(srv->path), *w = NULL;
        const char *error = NULL;
        json_t *p = NULL;

        assert_int_equal(blkmq_varlink_call_sync(v, "io.blkmqd.ClientTest.Nope", NULL, &p, &error), 0);
        assert_string_equal(error, "org.varlink.service.MethodNotFound");
        assert_string_equal(json_string_value(json_object_get(p, "method")), "io.blkmqd.ClientTest.Nope");
        json_decref(p);

        p = json_pack("{s:i}", "text", 1);
        assert_int_equal(blkmq_varlink_call_sync(v, "io.blkmqd.ClientTest.Ping", p, NULL, &error), 0);
        json_decref(p);
        assert_string_equal(error, "org.varlink.service.InvalidParameter");

        p = json_pack("{s:i}", "count", 2);
        assert_int_equal(blkmq_varlink_call_sync(v, "io.blkmqd.ClientTest.Stream", p, NULL, &error), 0);
        json_decref(p);
        assert_string_equal(error, "org.varlink.service.ExpectedMore");

        /* Bad arguments. */
        assert_int_equal(blkmq_varlink_call(v, "a.b.C", NULL, BLKMQ_VARLINK_MORE | BLKMQ_VARLINK_ONEWAY, NULL, 0),
                         -EINVAL);
        p = json_array();
        assert_int_equal(blkmq_varlink_call(v, "a.b.C", p, 0, NULL, 0), -EINVAL);
        json_decref(p);
        assert_int_equal(blkmq_varlink_connect(&w, "tcp:localhost:1"), -EINVAL);
        assert_int_equal(blkmq_varlink_connect(&w, "unix:"), -EINVAL);
        assert_int_equal(blkmq_varlink_connect(&w, "/nonexistent/socket"), -ENOENT);
        assert_null(w);
        blkmq_varlink_free(v);
}

static void test_more_oneway_pipelined(void **state) {
        Server *srv = *state;
        blkmq_varlink *v = connect_ok(srv->path);
        unsigned flags = 99;
        json_t *p;

        p = json_pack("{s:i}", "count", 3);
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Stream", p, BLKMQ_VARLINK_MORE, NULL, 0), 0);
        json_decref(p);
        for (int i = 0; i < 3; i++) {
                const char *error = "unset";

                assert_int_equal(blkmq_varlink_read_reply(v, &p, &error, &flags), 0);
                assert_null(error);
                assert_int_equal(json_integer_value(json_object_get(p, "index")), i);
                assert_int_equal(flags, i < 2 ? BLKMQ_VARLINK_REPLY_CONTINUES : 0);
                json_decref(p);
        }

        /* oneway: nothing comes back; then three pipelined calls. */
        p = json_pack("{s:s}", "text", "oneway");
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Ping", p, BLKMQ_VARLINK_ONEWAY, NULL, 0), 0);
        json_decref(p);
        for (int i = 0; i < 3; i++) {
                char text[8];

                snprintf(text, sizeof text, "%d", i);
                p = json_pack("{s:s}", "text", text);
                assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Ping", p, 0, NULL, 0), 0);
                json_decref(p);
        }
        for (int i = 0; i < 3; i++) {
                char text[8];

                snprintf(text, sizeof text, "%d", i);
                assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, &flags), 0);
                assert_string_equal(json_string_value(json_object_get(p, "text")), text);
                assert_int_equal(flags, 0);
                json_decref(p);
        }
        blkmq_varlink_free(v);
}

static void test_fds(void **state) {
        Server *srv = *state;
        blkmq_varlink *v = connect_ok(srv->path);
        int a[2], fd;
        char buf[16] = {};
        json_t *p;

        assert_int_equal(pipe2(a, O_CLOEXEC), 0);
        assert_int_equal(write(a[1], "sent", 4), 4);
        close(a[1]);
        p = json_pack("{s:[i]}", "fds", 0);
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.TakeFds", p, 0, a, 1), 0);
        json_decref(p);
        close(a[0]); /* borrowed: still ours */
        assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), 0);
        assert_string_equal(json_string_value(json_array_get(json_object_get(p, "contents"), 0)), "sent");
        json_decref(p);

        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.GiveFd", NULL, 0, NULL, 0), 0);
        assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), 0);
        assert_int_equal(json_integer_value(json_object_get(p, "fd")), 0);
        json_decref(p);
        fd = blkmq_varlink_take_fd(v, 0);
        assert_true(fd >= 0);
        assert_int_equal(read(fd, buf, sizeof buf), 5);
        assert_string_equal(buf, "hello");
        close(fd);
        assert_int_equal(blkmq_varlink_take_fd(v, 0), -EBADF);
        assert_int_equal(blkmq_varlink_take_fd(v, 1), -ENXIO);

        /* An fd not taken is closed with the next reply. */
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.GiveFd", NULL, 0, NULL, 0), 0);
        assert_int_equal(blkmq_varlink_read_reply(v, NULL, NULL, NULL), 0);
        assert_int_equal(blkmq_varlink_call_sync(v, "io.blkmqd.ClientTest.Ping", NULL, NULL, NULL), 0);
        assert_int_equal(blkmq_varlink_take_fd(v, 0), -ENXIO);
        blkmq_varlink_free(v);
}

static uint64_t now_ms(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static void test_timeout_and_eof(void **state) {
        Server *srv = *state;
        blkmq_varlink *v = connect_ok(srv->path);
        uint64_t t;
        json_t *p = NULL;

        blkmq_varlink_set_timeout(v, 100 * 1000);
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Hang", NULL, 0, NULL, 0), 0);
        t = now_ms();
        assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), -ETIMEDOUT);
        assert_true(now_ms() - t >= 100);
        assert_null(p);
        blkmq_varlink_free(v);

        /* The server closes the connection: ECONNRESET, then ENOTCONN. */
        v = connect_ok(srv->path);
        blkmq_varlink_set_timeout(v, 5 * 1000 * 1000);
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Close", NULL, 0, NULL, 0), 0);
        assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), -ECONNRESET);
        assert_int_equal(blkmq_varlink_read_reply(v, &p, NULL, NULL), -ENOTCONN);
        assert_int_equal(blkmq_varlink_call(v, "io.blkmqd.ClientTest.Ping", NULL, 0, NULL, 0), -ENOTCONN);
        blkmq_varlink_free(v);
}

int main(void) {
        const struct CMUnitTest tests[] = {
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
                T(test_connect_and_get_info),
                T(test_connect_abstract),
                T(test_errors),
                T(test_more_oneway_pipelined),
                T(test_fds),
                T(test_timeout_and_eof),
#undef T
        };

        log_set_max_level(getenv("TEST_VARLINK_DEBUG") ? LOG_DEBUG : LOG_CRIT);
        return cmocka_run_group_tests_name("varlink-client", tests, NULL, NULL);
}
