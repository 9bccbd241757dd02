/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "varlink-peer.h"

void peer_pump(sd_event *e) {
        for (unsigned i = 0; i < 100000; i++) {
                int r = sd_event_run(e, 0);
                assert_true(r >= 0);
                if (r == 0)
                        return;
        }
        fail_msg("event loop does not settle");
}

void peer_close_fds(VarlinkPeer *p) {
        for (size_t i = 0; i < p->n_fds; i++)
                close(p->fds[i]);
        p->n_fds = 0;
}

json_t *peer_next(VarlinkPeer *p, bool wait) {
        peer_close_fds(p);
        for (unsigned tries = 0; tries < 2000; tries++) {
                union {
                        struct cmsghdr cmsghdr;
                        uint8_t buf[CMSG_SPACE(sizeof(int) * 16)];
                } control;
                char chunk[65536];
                struct iovec iov = { chunk, sizeof chunk };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                                     .msg_controllen = sizeof control };
                char *nul = p->size > 0 ? memchr(p->buf, 0, p->size) : NULL;
                ssize_t n;

                if (nul) {
                        json_error_t error;
                        json_t *m = json_loads(p->buf, 0, &error);
                        size_t len = nul - p->buf + 1;

                        if (!m)
                                fail_msg("server sent invalid JSON '%s': %s", p->buf, error.text);
                        assert_true(json_is_object(m));
                        memmove(p->buf, p->buf + len, p->size - len);
                        p->size -= len;
                        return m;
                }

                peer_pump(p->e);
                n = recvmsg(p->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EAGAIN) {
                        if (!wait)
                                return NULL;
                        assert_true(sd_event_run(p->e, 5000) >= 0);
                        continue;
                }
                if (n < 0 && errno == ECONNRESET)
                        return NULL;
                assert_true(n >= 0);
                if (n == 0)
                        return NULL;
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                memcpy(p->fds + p->n_fds, CMSG_DATA(c), k * sizeof(int));
                                p->n_fds += k;
                        }
                p->buf = realloc(p->buf, p->size + n);
                assert_non_null(p->buf);
                memcpy(p->buf + p->size, chunk, n);
                p->size += n;
        }
        fail_msg("no message from the server");
        return NULL;
}

void peer_send_raw(VarlinkPeer *p, const void *data, size_t len) {
        const char *d = data;

        while (len > 0) {
                ssize_t n = send(p->fd, d, len, MSG_DONTWAIT | MSG_NOSIGNAL);

                if (n < 0 && errno == EAGAIN) {
                        peer_pump(p->e);
                        continue;
                }
                assert_true(n > 0);
                d += n;
                len -= n;
        }
}

void peer_send(VarlinkPeer *p, const char *text) {
        peer_send_raw(p, text, strlen(text) + 1);
}

void peer_send_with_fds(VarlinkPeer *p, const char *text, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * 32)];
        } control = {};
        struct iovec iov = { (void *) text, strlen(text) + 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * n_fds) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

        assert_true(n_fds <= 32);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
        assert_int_equal(sendmsg(p->fd, &mh, MSG_NOSIGNAL), (ssize_t) iov.iov_len);
}

void peer_done(VarlinkPeer *p) {
        peer_close_fds(p);
        if (p->fd >= 0)
                close(p->fd);
        p->fd = -EBADF;
        free(p->buf);
        p->buf = NULL;
        p->size = 0;
}

json_t *peer_read_passed_fds(VarlinkCall *call, json_t *fds) {
        json_t *contents = json_array(), *idx;
        size_t i;

        if (!contents)
                return NULL;
        json_array_foreach(fds, i, idx) {
                char buf[64] = {};
                int fd = varlink_call_take_fd(call, (unsigned) json_integer_value(idx));
                ssize_t n;

                if (fd < 0) {
                        json_decref(contents);
                        return NULL;
                }
                n = read(fd, buf, sizeof buf - 1);
                close(fd);
                if (n < 0) {
                        json_decref(contents);
                        return NULL;
                }
                json_array_append_new(contents, json_string(buf));
        }
        return contents;
}
