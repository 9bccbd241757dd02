/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The varlink wire (varlink.org) on an AF_UNIX stream socket: NUL-terminated JSON messages, fds passed as
 * SCM_RIGHTS. The mechanics shared by the daemon's server (src/varlink/varlink.c) and the client library
 * (lib/varlink-client.c); each side keeps its own policy (limits, what an error closes, whether and how it
 * waits). So nothing here logs, blocks or retries: errors are negative errnos, -EAGAIN and -EINTR included,
 * for the caller to act on. libblkmq compiles this file in too but exports only blkmq_* (libblkmq.sym), so
 * these symbols stay internal to it.
 *
 * Which message fds belong to: the last message starting within the data of the recvmsg() that carried
 * them. The kernel never reads past an skb with fds in one recvmsg(), and a sender puts them on the write
 * with the message's first byte (varlink_wire_send()), so every batch of fds is tied to the stream range it
 * arrived with and matched to a message once its NUL is found. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The kernel's SCM_MAX_FD: the most fds one sendmsg() passes. Control buffers are sized for it so that
 * both sides' limits (VARLINK_FDS_MAX, BLKMQ_VARLINK_FDS_MAX) fit; each passes its own to recv(). */
#define VARLINK_WIRE_FDS_MAX 253U
/* Free space wanted in the input buffer before each recvmsg(). */
#define VARLINK_WIRE_READ_SIZE 65536U

typedef struct VarlinkFdBatch {
        uint64_t start, end; /* stream offsets of the data of the recvmsg() that carried them */
        int *fds;
        size_t n_fds;
} VarlinkFdBatch;

/* Received bytes not consumed yet: buf[start..end). Zero-initialized is empty. */
typedef struct VarlinkWireInput {
        char *buf;
        size_t allocated, start, end;
        size_t scanned; /* bytes after start known to hold no NUL */
        uint64_t base;  /* stream offset of buf[0] */
        VarlinkFdBatch *batches; /* received, not yet matched to a message, in stream order */
        size_t n_batches;
} VarlinkWireInput;

/* What one recvmsg() brought. The data sits after in->end but is not counted yet, and the fds are in
 * control, owned by the caller: it either counts both with varlink_wire_input_add(), or closes the fds
 * (varlink_wire_close_many()) and gives up on the connection. */
typedef struct VarlinkWireRecv {
        size_t n;       /* bytes; 0 at EOF */
        int *fds;       /* into control; the last SCM_RIGHTS message's */
        size_t n_fds;
        bool truncated; /* MSG_CTRUNC: control data did not fit, the kernel closed fds that did not */
        union {
                struct cmsghdr cmsghdr; /* alignment */
                uint8_t buf[CMSG_SPACE(sizeof(int) * VARLINK_WIRE_FDS_MAX)];
        } control;
} VarlinkWireRecv;

/* Closes the fds that are still open and marks them -EBADF. */
void varlink_wire_close_many(int *fds, size_t n);

/* The fd at index (owned by the caller from then on); -ENXIO if there is no such index, -EBADF if taken. */
int varlink_wire_take_fd(int *fds, size_t n_fds, unsigned index);

/* Closes the fds still queued and frees the buffers; in is empty after (its stream offset too). */
void varlink_wire_input_free(VarlinkWireInput *in);

/* Makes room for a recvmsg(): moves the consumed prefix out (base moves on), frees an empty buffer larger
 * than keep_max, and grows the buffer when less than VARLINK_WIRE_READ_SIZE is free, to twice the unconsumed
 * bytes or by VARLINK_WIRE_READ_SIZE, whichever is more, but to no more than limit, unless limit leaves less
 * than VARLINK_WIRE_READ_SIZE free. SIZE_MAX for either: no such bound. -ENOMEM, in unchanged but compacted. */
int varlink_wire_input_reserve(VarlinkWireInput *in, size_t limit, size_t keep_max);

/* One non-blocking recvmsg() (MSG_CMSG_CLOEXEC) into the free space after in->end (reserve() first), with
 * room for fds_max fds (at most VARLINK_WIRE_FDS_MAX; more are dropped by the kernel and set truncated).
 * 0 and *ret filled, or -errno as recvmsg() failed (-EAGAIN, -EINTR included). */
int varlink_wire_recv(int fd, VarlinkWireInput *in, size_t fds_max, VarlinkWireRecv *ret);

/* Counts rcv's bytes into in, and its fds (if any) as a batch tied to their stream range. -ENOMEM: the fds
 * are closed and nothing is counted. */
int varlink_wire_input_add(VarlinkWireInput *in, VarlinkWireRecv *rcv);

/* The NUL ending the next message, or NULL if it has not arrived yet (the bytes looked at are not looked at
 * again). */
char *varlink_wire_input_find_nul(VarlinkWireInput *in);

/* Takes the message ending at nul (from find_nul()) off the input; its text stays where it is until the
 * next reserve(). *ret_fds gets the fds that came with it ({} if none), owned by the caller. -EPROTO if a
 * batch of fds came after the message's first byte, or a second one with it: that batch is closed, *ret_fds
 * holds those taken before (the caller's too). The message is consumed either way. */
int varlink_wire_input_take_message(VarlinkWireInput *in, const char *nul, VarlinkFdBatch *ret_fds);

/* One sendmsg() of len bytes at p, with the n_fds fds (n_fds <= VARLINK_WIRE_FDS_MAX) as SCM_RIGHTS on its
 * first byte; never blocks, never raises SIGPIPE. Bytes written (the fds went with them if any was), or
 * -errno (-EAGAIN, -EINTR included). */
ssize_t varlink_wire_send(int fd, const char *p, size_t len, const int *fds, size_t n_fds);
