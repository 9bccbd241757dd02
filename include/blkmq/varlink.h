/* SPDX-License-Identifier: LGPL-2.1-or-later */
#ifndef BLKMQ_VARLINK_H
#define BLKMQ_VARLINK_H

/* libblkmq: a small blocking varlink client (varlink.org), for blkmqctl and
 * for programs talking to blkmqd (io.blkmqd.*) or any other varlink service.
 *
 *     blkmq_varlink *v;
 *     json_t *reply;
 *     const char *error;
 *     int r = blkmq_varlink_connect(&v, "unix:/run/blkmqd/io.blkmqd");
 *     r = blkmq_varlink_call(v, "io.blkmqd.Manager.GetStatus", NULL, 0, NULL, 0);
 *     r = blkmq_varlink_read_reply(v, &reply, &error, NULL);
 *
 * All functions return 0 (or a non-negative value) on success and a negative
 * errno on failure; outputs are left untouched on failure. A connection is
 * not thread-safe; use one per thread. SIGPIPE is never raised. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct blkmq_varlink blkmq_varlink;

/* Call flags. */
enum {
        BLKMQ_VARLINK_MORE = 1 << 0,   /* ask for several replies ("continues") */
        BLKMQ_VARLINK_ONEWAY = 1 << 1, /* ask for no reply at all */
};

/* Reply flags. */
enum {
        BLKMQ_VARLINK_REPLY_CONTINUES = 1 << 0, /* more replies of this call follow */
};

#define BLKMQ_VARLINK_MESSAGE_SIZE_MAX (16U * 1024U * 1024U)
#define BLKMQ_VARLINK_FDS_MAX 253U

/* address: "unix:/path", "/path", or "unix:@name" / "@name" for an abstract
 * socket. */
int blkmq_varlink_connect(blkmq_varlink **ret, const char *address);
/* Wraps a connected AF_UNIX stream socket; takes fd on success only. */
int blkmq_varlink_connect_fd(blkmq_varlink **ret, int fd);
/* Closes the connection; NULL ok. */
blkmq_varlink *blkmq_varlink_free(blkmq_varlink *v);

/* How long read_reply() (and a blocked call()) waits; 0 (default) = for ever. */
void blkmq_varlink_set_timeout(blkmq_varlink *v, uint64_t usec);
int blkmq_varlink_get_fd(blkmq_varlink *v);

/* Sends one call. method is fully qualified ("org.varlink.service.GetInfo");
 * parameters is borrowed, NULL for none ({} is sent); flags are
 * BLKMQ_VARLINK_MORE/ONEWAY; fds (borrowed, sent along with the message's
 * first byte) are referred to by their index in the parameters. Calls may be
 * pipelined: send several, then read the replies in order. */
int blkmq_varlink_call(blkmq_varlink *v, const char *method, json_t *parameters, unsigned flags,
                       const int *fds, size_t n_fds);

/* Reads the next reply. *ret_parameters gets a new reference ({} if the
 * reply had none); *ret_error the error name or NULL, valid until the next
 * read_reply() or free(); *ret_flags BLKMQ_VARLINK_REPLY_CONTINUES. Any
 * output may be NULL. -ETIMEDOUT after the timeout, -ECONNRESET if the
 * service closed the connection, -EBADMSG on a malformed reply (the
 * connection is then unusable), -EMSGSIZE past 16 MiB. */
int blkmq_varlink_read_reply(blkmq_varlink *v, json_t **ret_parameters, const char **ret_error,
                             unsigned *ret_flags);

/* The fds sent along with the last reply: the one at index, owned by the
 * caller from then on. -ENXIO if there is no such index, -EBADF if taken. */
int blkmq_varlink_take_fd(blkmq_varlink *v, unsigned index);

/* call() + read_reply() for a plain call with exactly one reply. */
int blkmq_varlink_call_sync(blkmq_varlink *v, const char *method, json_t *parameters,
                            json_t **ret_parameters, const char **ret_error);

#ifdef __cplusplus
}
#endif

#endif
