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

/* A library: no logging, no global state; errors are returned. */

#define READ_SIZE 65536U

struct fd_batch {
        uint64_t start, end; /* stream offsets of the data of the recvmsg() that carried them */
        int *fds;
        size_t n_fds;
};

struct blkmq_varlink {
        int fd;
        uint64_t timeout_usec;
        bool broken;

        char *input;
        size_t input_allocated, input_start, input_end, input_scanned;
        uint64_t input_base;
        struct fd_batch *batches;
        size_t n_batches;

        json_t *last; /* the last reply; owns the error name handed out */
        int *reply_fds;
        size_t n_reply_fds;
};

static void close_many(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -EBADF;
                }
}

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
        close_many(v->reply_fds, v->n_reply_fds);
        free(v->reply_fds);
        v->reply_fds = NULL;
        v->n_reply_fds = 0;
}

blkmq_varlink *blkmq_varlink_free(blkmq_varlink *v) {
        if (!v)
                return NULL;
        drop_last(v);
        for (size_t i = 0; i < v->n_batches; i++) {
                close_many(v->batches[i].fds, v->batches[i].n_fds);
                free(v->batches[i].fds);
        }
        free(v->batches);
        free(v->input);
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
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * BLKMQ_VARLINK_FDS_MAX)];
        } control;
        int r;

        while (len > 0) {
                struct iovec iov = { (void *) p, len };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
                ssize_t n;

                if (n_fds > 0) {
                        struct cmsghdr *cmsg;

                        memset(&control, 0, sizeof control);
                        mh.msg_control = &control;
                        mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
                        cmsg = CMSG_FIRSTHDR(&mh);
                        cmsg->cmsg_level = SOL_SOCKET;
                        cmsg->cmsg_type = SCM_RIGHTS;
                        cmsg->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
                        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * n_fds);
                }
                n = sendmsg(v->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -errno;
                        r = wait_for(v->fd, POLLOUT, deadline);
                        if (r < 0)
                                return r;
                        continue;
                }
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
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * BLKMQ_VARLINK_FDS_MAX)];
        } control;
        struct iovec iov;
        struct msghdr mh = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = &control,
                .msg_controllen = sizeof control,
        };
        int *fds = NULL;
        size_t n_fds = 0;
        ssize_t n;
        int r;

        if (v->input_start > 0) {
                memmove(v->input, v->input + v->input_start, v->input_end - v->input_start);
                v->input_base += v->input_start;
                v->input_end -= v->input_start;
                v->input_start = 0;
        }
        if (v->input_allocated - v->input_end < READ_SIZE) {
                size_t a = v->input_end + (v->input_end > READ_SIZE ? v->input_end : READ_SIZE);
                char *p = realloc(v->input, a);

                if (!p)
                        return -ENOMEM;
                v->input = p;
                v->input_allocated = a;
        }

        for (;;) {
                iov = (struct iovec) { v->input + v->input_end, v->input_allocated - v->input_end };
                n = recvmsg(v->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n >= 0)
                        break;
                if (errno == EINTR)
                        continue;
                if (errno != EAGAIN)
                        return -errno;
                r = wait_for(v->fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }

        for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh); cmsg; cmsg = CMSG_NXTHDR(&mh, cmsg))
                if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
                        fds = (int *) CMSG_DATA(cmsg);
                        n_fds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                }
        if (n_fds > 0) {
                struct fd_batch *b = realloc(v->batches, (v->n_batches + 1) * sizeof *b);
                int *copy = NULL;

                if (b) {
                        v->batches = b;
                        copy = malloc(n_fds * sizeof(int));
                }
                if (!copy) {
                        close_many(fds, n_fds);
                        return -ENOMEM;
                }
                memcpy(copy, fds, n_fds * sizeof(int));
                v->batches[v->n_batches++] = (struct fd_batch) {
                        .start = v->input_base + v->input_end,
                        .end = v->input_base + v->input_end + n,
                        .fds = copy,
                        .n_fds = n_fds,
                };
        }
        if (mh.msg_flags & MSG_CTRUNC)
                return -EBADMSG;
        if (n == 0)
                return -ECONNRESET;
        v->input_end += n;
        return 0;
}

/* The fds belong to the last message starting within the data of the
 * recvmsg() that carried them (see src/varlink.c). */
static int take_message_fds(blkmq_varlink *v, uint64_t s, uint64_t e) {
        while (v->n_batches > 0) {
                struct fd_batch *b = &v->batches[0];

                if (b->start > e || b->end > e + 1)
                        break;
                if (b->start > s || v->reply_fds) {
                        close_many(b->fds, b->n_fds);
                        free(b->fds);
                        memmove(v->batches, v->batches + 1, --v->n_batches * sizeof *b);
                        return -EBADMSG;
                }
                v->reply_fds = b->fds;
                v->n_reply_fds = b->n_fds;
                memmove(v->batches, v->batches + 1, --v->n_batches * sizeof *b);
        }
        return 0;
}

int blkmq_varlink_read_reply(blkmq_varlink *v, json_t **ret_parameters, const char **ret_error,
                             unsigned *ret_flags) {
        uint64_t deadline;
        json_t *m, *error, *parameters, *continues;
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
                size_t avail = v->input_end - v->input_start;

                if (avail > v->input_scanned) {
                        start = v->input + v->input_start;
                        nul = memchr(start + v->input_scanned, 0, avail - v->input_scanned);
                        if (nul)
                                break;
                }
                v->input_scanned = avail;
                if (avail > BLKMQ_VARLINK_MESSAGE_SIZE_MAX) {
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

        len = nul - start;
        r = take_message_fds(v, v->input_base + v->input_start, v->input_base + v->input_start + len);
        v->input_start += len + 1;
        v->input_scanned = 0;
        if (r < 0) {
                v->broken = true;
                return r;
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
        if (index >= v->n_reply_fds)
                return -ENXIO;
        if (v->reply_fds[index] < 0)
                return -EBADF;
        return TAKE_FD(v->reply_fds[index]);
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
