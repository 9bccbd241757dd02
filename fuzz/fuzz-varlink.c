/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Feeds the input, as a client would send it, into a varlink server
 * connection over a socketpair, and runs the event loop until the server is
 * done with it: framing, JSON, dispatch, IDL validation, replies, closing.
 * An input starting with byte 0x01 sends that byte's place as an fd
 * (/dev/null) along with the first write instead. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "varlink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fuzz_idl[] =
        "interface io.blkmqd.Fuzz\n"
        "type Point (x: int, y: int)\n"
        "type Color (red, green, blue)\n"
        "method Ping(text: ?string) -> (text: ?string)\n"
        "method Echo(b: ?bool, i: ?int, f: ?float, s: ?string, o: ?object, color: ?Color, point: ?Point,\n"
        "            list: ?[]?int, map: ?[string]Point, nested: ?(inner: ?(deep: int, mode: (a, b)))) -> (echo: object)\n"
        "method Stream(count: int) -> (index: int)\n"
        "method Async() -> ()\n"
        "method Later() -> ()\n"
        "method Mutate() -> ()\n"
        "method TakeFds(fds: []int) -> (n: int)\n"
        "method GiveFd() -> (fd: int)\n"
        "method Fail() -> ()\n"
        "method Unimplemented() -> ()\n"
        "error Oops (why: string)\n";

static VarlinkCall *held[64];
static size_t n_held;

static int method_ping(VarlinkCall *call, json_t *parameters, void *userdata) {
        return varlink_call_reply(call, json_pack("{s:O?}", "text", json_object_get(parameters, "text")));
}

static int method_echo(VarlinkCall *call, json_t *parameters, void *userdata) {
        /* "echo" is an object: the reply validates. */
        return varlink_call_reply(call, json_pack("{s:O}", "echo", parameters));
}

static int method_stream(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_int_t count = json_integer_value(json_object_get(parameters, "count"));

        if (count > 100)
                return varlink_call_error(call, "io.blkmqd.Fuzz.Oops", json_pack("{s:s}", "why", "too many"));
        for (json_int_t i = 0; i + 1 < count; i++)
                if (varlink_call_notify(call, json_pack("{s:I}", "index", i)) < 0)
                        break;
        return varlink_call_reply(call, json_pack("{s:I}", "index", count - 1));
}

static void on_disconnect(VarlinkCall *call, void *userdata) {
}

static int method_async(VarlinkCall *call, json_t *parameters, void *userdata) {
        if (n_held >= 64)
                return varlink_call_reply(call, NULL);
        varlink_call_set_disconnect_callback(call, on_disconnect, NULL);
        held[n_held++] = varlink_call_ref(call);
        return 0;
}

static int method_mutate(VarlinkCall *call, json_t *parameters, void *userdata) {
        return varlink_call_reply(call, NULL);
}

static int method_take_fds(VarlinkCall *call, json_t *parameters, void *userdata) {
        json_t *idx;
        size_t i;
        int n = 0;

        json_array_foreach(json_object_get(parameters, "fds"), i, idx) {
                json_int_t k = json_integer_value(idx);
                int fd;

                if (k < 0 || k > 1000)
                        return varlink_call_error_invalid_parameter(call, "fds");
                fd = varlink_call_take_fd(call, (unsigned) k);
                if (fd >= 0) {
                        close(fd);
                        n++;
                }
        }
        return varlink_call_reply(call, json_pack("{s:i}", "n", n));
}

static int method_give_fd(VarlinkCall *call, json_t *parameters, void *userdata) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC), idx;

        if (fd < 0)
                return -errno;
        idx = varlink_call_push_fd(call, fd);
        if (idx < 0)
                return idx;
        return varlink_call_reply(call, json_pack("{s:i}", "fd", idx));
}

static int method_fail(VarlinkCall *call, json_t *parameters, void *userdata) {
        return -EIO;
}

static const VarlinkMethod methods[] = {
        { "Ping", method_ping, 0 },
        { "Echo", method_echo, 0 },
        { "Stream", method_stream, VARLINK_METHOD_REQUIRES_MORE },
        { "Async", method_async, 0 },
        /* Pipelined: later calls are served before its reply, and their
         * replies are held until it is answered. */
        { "Later", method_async, VARLINK_METHOD_PIPELINED },
        { "Mutate", method_mutate, VARLINK_METHOD_MUTATING },
        { "TakeFds", method_take_fds, VARLINK_METHOD_ACCEPTS_FDS },
        { "GiveFd", method_give_fd, 0 },
        { "Fail", method_fail, 0 },
};

static void drain(int fd) {
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * 16)];
        } control;
        char buf[65536];

        for (;;) {
                struct iovec iov = { buf, sizeof buf };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                                     .msg_controllen = sizeof control };
                ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

                if (n <= 0)
                        return;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                                for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                                        close(((int *) CMSG_DATA(c))[i]);
        }
}

static void settle(sd_event *e, int fd) {
        for (unsigned i = 0; i < 10000; i++) {
                drain(fd);
                if (sd_event_run(e, 0) <= 0)
                        return;
        }
}

static void release_held(void) {
        for (size_t i = 0; i < n_held; i++) {
                (void) varlink_call_reply(held[i], NULL);
                varlink_call_unref(held[i]);
        }
        n_held = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* The limits scaled down, so that inputs of a few KiB reach them:
         * the message bound, and the output bound through Stream and Echo. */
        VarlinkLimits limits = {
                .max_message_size = 2 * 1024,
                .max_output_buffer = 16 * 1024,
        };
        /* One server for the whole run, as in the daemon: each input is a
         * new connection to it, which must be gone when the input ends.
         * (Building the server per input parsed the IDLs every time and
         * made this target ~10 times slower than the others.) */
        static sd_event *e = NULL;
        static VarlinkServer *s = NULL;
        int p[2], devnull = -EBADF;
        size_t off = 0;

        if (!s) {
                if (!getenv("FUZZ_VARLINK_DEBUG"))
                        log_set_max_level(-1);
                if (sd_event_new(&e) < 0)
                        abort();
                if (varlink_server_new(&s, e, "fuzz", "fuzz", "0", "none") < 0 ||
                    varlink_server_add_interface(s, fuzz_idl, methods, sizeof methods / sizeof methods[0], NULL) < 0)
                        abort();
                varlink_server_set_limits(s, &limits);
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, p) < 0)
                abort();
        if (varlink_server_add_connection(s, p[1]) < 0)
                abort();

        if (size > 1 && data[0] == 0x01) {
                devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
                data++;
                size--;
        }

        while (off < size) {
                union {
                        struct cmsghdr cmsghdr;
                        uint8_t buf[CMSG_SPACE(sizeof(int))];
                } control = {};
                struct iovec iov = { (void *) (data + off), size - off };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t n;

                if (devnull >= 0) {
                        struct cmsghdr *c;

                        mh.msg_control = &control;
                        mh.msg_controllen = sizeof control;
                        c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &devnull, sizeof(int));
                }
                n = sendmsg(p[0], &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN)
                        break; /* the server closed on us */
                if (n > 0) {
                        off += n;
                        if (devnull >= 0)
                                close(devnull);
                        devnull = -EBADF;
                }
                settle(e, p[0]);
                if (varlink_server_n_connections(s) == 0)
                        break;
        }
        if (devnull >= 0)
                close(devnull);

        /* EOF from the client, answer what waits, let the server finish. */
        (void) shutdown(p[0], SHUT_WR);
        settle(e, p[0]);
        for (unsigned round = 0; round < 64 && n_held > 0; round++) {
                release_held();
                settle(e, p[0]);
        }
        close(p[0]);
        settle(e, -1);
        release_held();
        settle(e, -1);
        /* A connection that outlives its peer is a leak. */
        if (varlink_server_n_connections(s) != 0)
                abort();
        return 0;
}
