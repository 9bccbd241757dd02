/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "blkmq/varlink.h"
#include "cleanup.h"
#include "varlink-wire.h"

/* A library: no logging, no global state; errors are returned. The wire
 * mechanics (varlink-wire.c, beside this file) are shared with the daemon's
 * server and not exported. */

_Static_assert(BLKMQ_VARLINK_FDS_MAX <= VARLINK_WIRE_FDS_MAX, "varlink-wire's control buffers must hold them");

struct blkmq_varlink {
        int fd;
        uint64_t timeout_usec;
        bool broken;

        VarlinkWireInput in;

        json_t *last; /* the last reply; owns the error name handed out */
        int *reply_fds;
        size_t n_reply_fds;
};

static uint64_t now_mono(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* Waits for events until deadline (UINT64_MAX: for ever). */
static int wait_for(int fd, short events, uint64_t deadline) {
        for (;;) {
                struct pollfd p = { .fd = fd, .events = events };
                int timeout = -1, r;

                if (deadline != UINT64_MAX) {
                        uint64_t n = now_mono();

                        if (n >= deadline)
                                return -ETIMEDOUT;
                        timeout = (int) ((deadline - n + 999) / 1000);
                        if ((deadline - n + 999) / 1000 > INT32_MAX)
                                timeout = INT32_MAX;
                }
                r = poll(&p, 1, timeout);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (r > 0)
                        return 0;
        }
}

static uint64_t deadline_of(blkmq_varlink *v) {
        if (v->timeout_usec == 0 || v->timeout_usec > UINT64_MAX - now_mono())
                return UINT64_MAX;
        return now_mono() + v->timeout_usec;
}

static void drop_last(blkmq_varlink *v) {
        json_decref(v->last);
        v->last = NULL;
        varlink_wire_close_many(v->reply_fds, v->n_reply_fds);
        free(v->reply_fds);
        v->reply_fds = NULL;
        v->n_reply_fds = 0;
}

blkmq_varlink *blkmq_varlink_free(blkmq_varlink *v) {
        if (!v)
                return NULL;
        drop_last(v);
        varlink_wire_input_free(&v->in);
        if (v->fd >= 0)
                close(v->fd);
        free(v);
        return NULL;
}

int blkmq_varlink_connect_fd(blkmq_varlink **ret, int fd) {
        blkmq_varlink *v;
        int flags;

        if (!ret || fd < 0)
                return -EINVAL;
        flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
                return -errno;
        v = calloc(1, sizeof *v);
        if (!v)
                return -ENOMEM;
        v->fd = fd;
        *ret = v;
        return 0;
}

int blkmq_varlink_connect(blkmq_varlink **ret, const char *address) {
        union {
                struct sockaddr sa;
                struct sockaddr_un un;
        } sa = { .un.sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        socklen_t salen;
        size_t len;
        int r;

        if (!ret || !address)
                return -EINVAL;
        if (strncmp(address, "unix:", 5) == 0)
                address += 5;
        len = strlen(address);
        if (len == 0 || (address[0] != '/' && address[0] != '@'))
                return -EINVAL;
        if (len >= sizeof sa.un.sun_path)
                return -ENAMETOOLONG;
        memcpy(sa.un.sun_path, address, len);
        salen = offsetof(struct sockaddr_un, sun_path) + len + 1;
        if (address[0] == '@') {
                sa.un.sun_path[0] = 0; /* abstract: no trailing NUL */
                salen--;
        }

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, &sa.sa, salen) < 0)
                return -errno;
        r = blkmq_varlink_connect_fd(ret, fd);
        if (r < 0)
                return r;
        TAKE_FD(fd);
        return 0;
}

void blkmq_varlink_set_timeout(blkmq_varlink *v, uint64_t usec) {
        if (v)
                v->timeout_usec = usec;
}

int blkmq_varlink_get_fd(blkmq_varlink *v) {
        return v ? v->fd : -EINVAL;
}

static int write_all(blkmq_varlink *v, const char *p, size_t len, const int *fds, size_t n_fds) {
        uint64_t deadline = deadline_of(v);
        int r;

        while (len > 0) {
                ssize_t n = varlink_wire_send(v->fd, p, len, fds, n_fds);

                if (n == -EINTR)
                        continue;
                if (n == -EAGAIN) {
                        r = wait_for(v->fd, POLLOUT, deadline);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (n < 0)
                        return (int) n;
                /* The fds went with the first byte written. */
                n_fds = 0;
                p += n;
                len -= n;
        }
        return 0;
}

int blkmq_varlink_call(blkmq_varlink *v, const char *method, json_t *parameters, unsigned flags,
                       const int *fds, size_t n_fds) {
        _cleanup_free_ char *text = NULL;
        json_t *m;
        int r;

        if (!v || !method || (parameters && !json_is_object(parameters)) ||
            (flags & ~(unsigned) (BLKMQ_VARLINK_MORE | BLKMQ_VARLINK_ONEWAY)) ||
            (flags & BLKMQ_VARLINK_MORE && flags & BLKMQ_VARLINK_ONEWAY) || n_fds > BLKMQ_VARLINK_FDS_MAX ||
            (n_fds > 0 && !fds))
                return -EINVAL;
        if (v->broken)
                return -ENOTCONN;

        if (parameters)
                m = json_pack("{s:s, s:O}", "method", method, "parameters", parameters);
        else
                m = json_pack("{s:s, s:{}}", "method", method, "parameters");
        if (!m)
                return -ENOMEM;
        if ((flags & BLKMQ_VARLINK_MORE && json_object_set_new(m, "more", json_true()) < 0) ||
            (flags & BLKMQ_VARLINK_ONEWAY && json_object_set_new(m, "oneway", json_true()) < 0)) {
                json_decref(m);
                return -ENOMEM;
        }
        text = json_dumps(m, JSON_COMPACT);
        json_decref(m);
        if (!text)
                return -ENOMEM;

        /* With its NUL. */
        r = write_all(v, text, strlen(text) + 1, fds, n_fds);
        if (r < 0)
                v->broken = true; /* a partial message may be out */
        return r;
}

static int read_some(blkmq_varlink *v, uint64_t deadline) {
        VarlinkWireRecv rcv;
        int r;

        /* No bound: read_reply() stops at BLKMQ_VARLINK_MESSAGE_SIZE_MAX. */
        r = varlink_wire_input_reserve(&v->in, SIZE_MAX, SIZE_MAX);
        if (r < 0)
                return r;
        for (;;) {
                r = varlink_wire_recv(v->fd, &v->in, BLKMQ_VARLINK_FDS_MAX, &rcv);
                if (r >= 0)
                        break;
                if (r == -EINTR)
                        continue;
                if (r != -EAGAIN)
                        return r;
                r = wait_for(v->fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }

        r = varlink_wire_input_add(&v->in, &rcv);
        if (r < 0)
                return r;
        if (rcv.truncated)
                return -EBADMSG;
        if (rcv.n == 0)
                return -ECONNRESET;
        return 0;
}

int blkmq_varlink_read_reply(blkmq_varlink *v, json_t **ret_parameters, const char **ret_error,
                             unsigned *ret_flags) {
        uint64_t deadline;
        json_t *m, *error, *parameters, *continues;
        VarlinkFdBatch fds;
        char *start, *nul;
        size_t len;
        int r;

        if (!v)
                return -EINVAL;
        if (v->broken)
                return -ENOTCONN;
        drop_last(v);

        deadline = deadline_of(v);
        for (;;) {
                nul = varlink_wire_input_find_nul(&v->in);
                if (nul)
                        break;
                if (v->in.end - v->in.start > BLKMQ_VARLINK_MESSAGE_SIZE_MAX) {
                        v->broken = true;
                        return -EMSGSIZE;
                }
                r = read_some(v, deadline);
                if (r < 0) {
                        if (r != -ETIMEDOUT)
                                v->broken = true;
                        return r;
                }
        }

        start = v->in.buf + v->in.start;
        len = nul - start;
        r = varlink_wire_input_take_message(&v->in, nul, &fds);
        v->reply_fds = fds.fds;
        v->n_reply_fds = fds.n_fds;
        if (r < 0) {
                v->broken = true;
                return -EBADMSG; /* fds out of place */
        }

        m = json_loadb(start, len, JSON_REJECT_DUPLICATES, NULL);
        error = json_object_get(m, "error");
        parameters = json_object_get(m, "parameters");
        continues = json_object_get(m, "continues");
        if (!json_is_object(m) || (error && !json_is_string(error)) ||
            (parameters && !json_is_object(parameters) && !json_is_null(parameters)) ||
            (continues && !json_is_boolean(continues))) {
                json_decref(m);
                v->broken = true;
                return -EBADMSG;
        }
        v->last = m;

        if (ret_parameters) {
                json_t *p = json_is_object(parameters) ? json_incref(parameters) : json_object();

                if (!p)
                        return -ENOMEM;
                *ret_parameters = p;
        }
        if (ret_error)
                *ret_error = json_string_value(error);
        if (ret_flags)
                *ret_flags = json_is_true(continues) ? BLKMQ_VARLINK_REPLY_CONTINUES : 0;
        return 0;
}

int blkmq_varlink_take_fd(blkmq_varlink *v, unsigned index) {
        if (!v)
                return -EINVAL;
        return varlink_wire_take_fd(v->reply_fds, v->n_reply_fds, index);
}

int blkmq_varlink_call_sync(blkmq_varlink *v, const char *method, json_t *parameters,
                            json_t **ret_parameters, const char **ret_error) {
        unsigned flags = 0;
        json_t *p = NULL;
        const char *e = NULL;
        int r;

        r = blkmq_varlink_call(v, method, parameters, 0, NULL, 0);
        if (r < 0)
                return r;
        r = blkmq_varlink_read_reply(v, ret_parameters ? &p : NULL, &e, &flags);
        if (r < 0)
                return r;
        if (flags & BLKMQ_VARLINK_REPLY_CONTINUES) {
                /* We did not ask for more: a broken service. */
                json_decref(p);
                v->broken = true;
                return -EBADMSG;
        }
        if (ret_parameters)
                *ret_parameters = p;
        if (ret_error)
                *ret_error = e;
        return 0;
}
