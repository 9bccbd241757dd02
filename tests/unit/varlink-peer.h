/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <systemd/sd-event.h>

#include "varlink.h"

/* The client end of a varlink connection in a unit test: one end of a
 * socketpair whose other end the server under test holds, and the server's
 * event loop, run while the peer waits. Shared by the tests that talk to a
 * VarlinkServer (test-varlink, test-varlink-client, test-api-metrics).
 * Failures fail the test. */
typedef struct VarlinkPeer {
        sd_event *e; /* the server's loop; not owned */
        int fd;      /* the client's end */
        char *buf;
        size_t size;
        int fds[16]; /* fds received with the last message */
        size_t n_fds;
} VarlinkPeer;

/* Runs the loop until nothing is pending. */
void peer_pump(sd_event *e);
/* The next message from the server, or NULL at EOF; with wait false, NULL
 * also when none is there once the loop settled. */
json_t *peer_next(VarlinkPeer *p, bool wait);
/* Sends len bytes, running the loop while the socket is full. */
void peer_send_raw(VarlinkPeer *p, const void *data, size_t len);
/* Sends text and its NUL. */
void peer_send(VarlinkPeer *p, const char *text);
void peer_send_with_fds(VarlinkPeer *p, const char *text, const int *fds, size_t n_fds);
void peer_close_fds(VarlinkPeer *p);
/* Closes the fd and frees the buffer. */
void peer_done(VarlinkPeer *p);

/* The server side of a test method that is passed fds: takes each fd whose
 * index the array fds holds, reads what it holds (up to 63 bytes) and
 * closes it. Returns their contents, an array of strings, or NULL if an
 * index names no fd (taken already, or out of range) or a read failed.
 * Asserts nothing: a server thread may call it. */
json_t *peer_read_passed_fds(VarlinkCall *call, json_t *fds);
