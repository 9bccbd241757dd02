/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "varlink-wire.h"

/* Compiled into libblkmq as well: no logging, no global state. */

void varlink_wire_close_many(int *fds, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -EBADF;
                }
}

int varlink_wire_take_fd(int *fds, size_t n_fds, unsigned index) {
        if (index >= n_fds)
                return -ENXIO;
        if (fds[index] < 0)
                return -EBADF;
        return TAKE_FD(fds[index]);
}

static void batch_pop(VarlinkWireInput *in) {
        memmove(in->batches, in->batches + 1, --in->n_batches * sizeof *in->batches);
}

void varlink_wire_input_free(VarlinkWireInput *in) {
        for (size_t i = 0; i < in->n_batches; i++) {
                varlink_wire_close_many(in->batches[i].fds, in->batches[i].n_fds);
                free(in->batches[i].fds);
        }
        free(in->batches);
        free(in->buf);
        *in = (VarlinkWireInput) {};
}

int varlink_wire_input_reserve(VarlinkWireInput *in, size_t limit, size_t keep_max) {
        /* Compacting moves the stream offset of buf[0], which the fd batches are measured against. */
        if (in->start > 0) {
                memmove(in->buf, in->buf + in->start, in->end - in->start);
                in->base += in->start;
                in->end -= in->start;
                in->start = 0;
        }
        /* One long message should not pin its buffer for the life of the connection. */
        if (in->end == 0 && in->allocated > keep_max) {
                in->buf = mfree(in->buf);
                in->allocated = 0;
        }
        if (in->allocated - in->end < VARLINK_WIRE_READ_SIZE) {
                size_t a = in->end + (in->end > VARLINK_WIRE_READ_SIZE ? in->end : VARLINK_WIRE_READ_SIZE);
                char *p;

                /* Past limit the message is too long anyway; VARLINK_WIRE_READ_SIZE more lets the reader
                 * see that. */
                if (a > limit)
                        a = limit > in->end + VARLINK_WIRE_READ_SIZE ? limit : in->end + VARLINK_WIRE_READ_SIZE;
                p = realloc(in->buf, a);
                if (!p)
                        return -ENOMEM;
                in->buf = p;
                in->allocated = a;
        }
        return 0;
}

int varlink_wire_recv(int fd, VarlinkWireInput *in, size_t fds_max, VarlinkWireRecv *ret) {
        struct iovec iov = { in->buf + in->end, in->allocated - in->end };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ret->control };
        ssize_t n;

        if (fds_max > VARLINK_WIRE_FDS_MAX)
                return -EINVAL;
        /* Room for no more than the caller takes: the kernel closes the rest and says MSG_CTRUNC. */
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds_max);
        /* MSG_CMSG_CLOEXEC: fds of a peer must not leak into what the process executes. */
        n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
                return -errno;

        ret->n = n;
        ret->fds = NULL;
        ret->n_fds = 0;
        ret->truncated = mh.msg_flags & MSG_CTRUNC;
        for (struct cmsghdr *cmsg = CMSG_FIRSTHDR(&mh); cmsg; cmsg = CMSG_NXTHDR(&mh, cmsg))
                if (cmsg->cmsg_level == SOL_SOCKET && cmsg->cmsg_type == SCM_RIGHTS) {
                        ret->fds = (int *) CMSG_DATA(cmsg);
                        ret->n_fds = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                }
        return 0;
}

int varlink_wire_input_add(VarlinkWireInput *in, VarlinkWireRecv *rcv) {
        if (rcv->n_fds > 0) {
                VarlinkFdBatch *b = realloc(in->batches, (in->n_batches + 1) * sizeof *b);
                int *copy = NULL;

                if (b) {
                        in->batches = b;
                        copy = malloc(rcv->n_fds * sizeof(int));
                }
                if (!copy) {
                        varlink_wire_close_many(rcv->fds, rcv->n_fds);
                        return -ENOMEM;
                }
                /* rcv->fds lives in the caller's control buffer, gone once it returns. */
                memcpy(copy, rcv->fds, rcv->n_fds * sizeof(int));
                in->batches[in->n_batches++] = (VarlinkFdBatch) {
                        .start = in->base + in->end,
                        .end = in->base + in->end + rcv->n,
                        .fds = copy,
                        .n_fds = rcv->n_fds,
                };
        }
        in->end += rcv->n;
        return 0;
}

char *varlink_wire_input_find_nul(VarlinkWireInput *in) {
        size_t avail = in->end - in->start;
        char *nul;

        if (avail == in->scanned)
                return NULL;
        nul = memchr(in->buf + in->start + in->scanned, 0, avail - in->scanned);
        /* A long message arrives in many reads: scan each byte once, not once per read. */
        if (!nul)
                in->scanned = avail;
        return nul;
}

int varlink_wire_input_take_message(VarlinkWireInput *in, const char *nul, VarlinkFdBatch *ret_fds) {
        size_t len = nul - (in->buf + in->start);
        uint64_t s = in->base + in->start, e = s + len;
        int r = 0;

        *ret_fds = (VarlinkFdBatch) {};
        while (in->n_batches > 0) {
                VarlinkFdBatch *b = &in->batches[0];

                /* A later message's: their recvmsg() started after this message's NUL, or read on past
                 * it (fds go with the last message starting in that data). */
                if (b->start > e || b->end > e + 1)
                        break;
                /* Within the message, not with its first byte, or a second batch for it: the peer does not
                 * speak the protocol, and which fds it meant for what is anybody's guess. */
                if (b->start > s || ret_fds->fds) {
                        varlink_wire_close_many(b->fds, b->n_fds);
                        free(b->fds);
                        batch_pop(in);
                        r = -EPROTO;
                        break;
                }
                *ret_fds = *b;
                batch_pop(in);
        }

        in->start += len + 1;
        in->scanned = 0;
        return r;
}

ssize_t varlink_wire_send(int fd, const char *p, size_t len, const int *fds, size_t n_fds) {
        union {
                struct cmsghdr cmsghdr;
                uint8_t buf[CMSG_SPACE(sizeof(int) * VARLINK_WIRE_FDS_MAX)];
        } control;
        struct iovec iov = { (void *) p, len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n;

        if (n_fds > VARLINK_WIRE_FDS_MAX)
                return -EINVAL;
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
        /* MSG_NOSIGNAL: a peer that went away is an -EPIPE, not a signal for the whole process. */
        n = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        return n < 0 ? -errno : n;
}
