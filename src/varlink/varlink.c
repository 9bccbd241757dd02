/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The varlink server: listeners, connections, calls, and the
 * org.varlink.service interface, on the sd-event loop. The wire format
 * (framing, fds over SCM_RIGHTS) is varlink-wire.c, shared with libblkmq;
 * the IDL and its checks are varlink-idl.c.
 *
 * Sections, in order: connections (reading, writing, back-pressure), calls
 * (replies, held replies, fds), dispatch (one message to one method),
 * listeners, the server.
 *
 * What a reader must keep in mind, and why this is one file of about 1,500
 * lines rather than three: a connection's buffers, its calls in flight and
 * the server's limits form one state machine, and each of its rules is
 * enforced where another section acts:
 *   - Replies go out in the order of the calls. Calls are read and
 *     dispatched one at a time, except methods marked pipelined, up to
 *     VARLINK_PIPELINE_MAX in flight; a reply to any call but the oldest is
 *     held (call_hold) and sent when those before it are answered
 *     (connection_pop_answered).
 *   - A peer that does not read is dropped, never waited for: its output
 *     plus held replies are bounded per connection, and the output of all
 *     connections together is bounded too (server_drop_biggest_reader).
 *   - Reading stops while a call waits for its reply (connection_wants_read),
 *     so a peer cannot queue unbounded work; input and the number of fds
 *     and connections (per uid and in all) are limited (VarlinkLimits).
 *   - A call outlives its connection: methods that reply later hold a ref,
 *     and learn of the hang-up through their disconnect callback; replies
 *     to a gone peer are dropped.
 *   - Connections are refcounted because a method may free its call (and a
 *     reply may close the connection) while connection_process() is on the
 *     stack; `processing` defers the write to the end of the round.
 * Splitting it would put each rule in one file and its enforcement in
 * another. */
#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "org.varlink.service.varlink.h"
#include "varlink-idl.h"
#include "varlink-wire.h"
#include "varlink.h"

/* Buffers above this are freed once they run empty. */
#define BUFFER_KEEP_MAX (256U * 1024U)
/* Output past this is written at once instead of at the end of the round. */
#define OUTPUT_EAGER_BYTES (64U * 1024U)
/* Batches of fds received but not yet matched to a message. */
#define FD_BATCHES_MAX 16U

#define PID_FMT "%i"
#define UID_FMT "%u"

_Static_assert(VARLINK_FDS_MAX <= VARLINK_WIRE_FDS_MAX, "varlink-wire's control buffers must hold VARLINK_FDS_MAX");

typedef struct OutFds {
        uint64_t offset; /* stream offset of the reply's first byte */
        int *fds;
        size_t n_fds;
} OutFds;

typedef struct HeldMessage {
        struct HeldMessage *next;
        char *text;
        int *fds;
        size_t n_fds;
} HeldMessage;

typedef struct VarlinkInterface {
        VarlinkIdlInterface *idl;
        char *text;
        VarlinkMethod *methods;
        size_t n_methods;
        void *userdata;
} VarlinkInterface;

typedef struct VarlinkListener VarlinkListener;
struct VarlinkListener {
        VarlinkServer *server;
        int fd;
        sd_event_source *source;
        sd_event_source *retry_source;
        VarlinkListener *next;
};

typedef struct VarlinkConnection VarlinkConnection;
struct VarlinkConnection {
        unsigned n_ref;
        VarlinkServer *server; /* NULL once disconnected */
        VarlinkConnection *prev, *next;
        int fd;
        sd_event_source *io_source, *defer_source;
        struct ucred ucred;
        gid_t *groups;
        size_t n_groups;

        VarlinkWireInput in;
        bool read_eof;
        bool processing; /* inside connection_process(): it writes at the end */

        char *output;
        size_t output_allocated, output_start, output_end;
        uint64_t output_base;
        OutFds *out_fds;
        size_t n_out_fds;

        /* Calls awaiting their final reply, oldest first, linked through
         * next_in_flight; we hold a ref on each. Only the oldest (current)
         * writes to output; the replies of the later ones are held until
         * every call before them got its final reply, so replies go out in
         * the order of the calls. More than one is in flight only while
         * every call in flight is VARLINK_METHOD_PIPELINED. */
        VarlinkCall *current, *last;
        unsigned n_in_flight;
        unsigned n_serial;  /* of those, the ones not pipelined and not answered yet */
        size_t held_bytes;  /* replies held for calls behind current */
        bool failed;          /* close at the next chance */
        /* Over a connection limit: its first call is answered with
         * io.blkmqd.TooManyConnections, then it is closed. Not counted in
         * the limits. */
        bool refused;
};

struct VarlinkCall {
        unsigned n_ref;
        VarlinkConnection *connection; /* we hold a ref */
        char *method;
        const VarlinkIdlMember *member; /* valid while connection->server is set */
        bool oneway, more, replied;
        int *fds;
        size_t n_fds;
        int *out_fds;
        size_t n_out_fds;
        void (*disconnect_cb)(VarlinkCall *c, void *userdata);
        void *disconnect_userdata;
        VarlinkCall *next_in_flight;
        bool serial; /* in flight, not pipelined, not answered: counted in n_serial */
        HeldMessage *held, *held_last; /* replies held until the calls before it are answered */
};

struct VarlinkServer {
        sd_event *event;
        char *vendor, *product, *version, *url;
        gid_t admin_gid;
        VarlinkInterface **interfaces;
        size_t n_interfaces;
        VarlinkListener *listeners;
        VarlinkConnection *connections;
        unsigned n_connections;
        unsigned n_refused; /* refused connections waiting to be told why */
        unsigned peak;      /* most connections at once since the last trim */
        size_t output_queued; /* reply bytes queued on all connections, not yet sent */
        sd_event_source *trim_source;
        VarlinkLimits limits;
        bool limit_logged;
};

/* Refused connections kept to be told why, at the most; past that the
 * oldest is closed unanswered (EOF) to make room. */
#define VARLINK_REFUSED_MAX 64U

/* accept(2): errors of a connection that already went away; try again. */
static bool errno_accept_transient(int e) {
        return e == EAGAIN || e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN ||
               e == ENOPROTOOPT || e == EHOSTDOWN || e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP ||
               e == ENETUNREACH || e == EPERM;
}

static int fd_nonblock(int fd) {
        int flags = fcntl(fd, F_GETFL);

        if (flags < 0)
                return -errno;
        if (flags & O_NONBLOCK)
                return 0;
        return fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ? -errno : 0;
}

/* ---- connections ---- */

static void connection_process(VarlinkConnection *c);
static void connection_disconnect(VarlinkConnection *c);

/* After a burst of clients has gone, give the heap their buffers took back
 * to the kernel: malloc_trim() once the connections fell to half of their
 * peak (of 64 or more), a second later, so that a burst of disconnects
 * trims once. */
#define TRIM_PEAK_MIN 64U

static int server_trim_handler(sd_event_source *source, uint64_t usec, void *userdata);

static void server_maybe_trim(VarlinkServer *s) {
        if (s->peak < TRIM_PEAK_MIN || s->n_connections > s->peak / 2 || s->trim_source)
                return;
        if (sd_event_add_time_relative(s->event, &s->trim_source, CLOCK_MONOTONIC, 1000 * 1000, 0,
                                       server_trim_handler, s) < 0)
                s->trim_source = NULL;
}

static VarlinkConnection *connection_ref(VarlinkConnection *c) {
        c->n_ref++;
        return c;
}

static void connection_free_buffers(VarlinkConnection *c) {
        varlink_wire_input_free(&c->in);
        for (size_t i = 0; i < c->n_out_fds; i++) {
                varlink_wire_close_many(c->out_fds[i].fds, c->out_fds[i].n_fds);
                free(c->out_fds[i].fds);
        }
        c->out_fds = mfree(c->out_fds);
        c->n_out_fds = 0;
        c->output = mfree(c->output);
        c->output_allocated = c->output_start = c->output_end = 0;
}

static VarlinkConnection *connection_unref(VarlinkConnection *c) {
        if (!c || --c->n_ref > 0)
                return NULL;
        /* The last ref goes only after connection_disconnect(), which drops
         * the server's. */
        sd_event_source_disable_unref(c->io_source);
        sd_event_source_disable_unref(c->defer_source);
        if (c->fd >= 0)
                close(c->fd);
        connection_free_buffers(c);
        free(c->groups);
        free(c);
        return NULL;
}

static void held_free(VarlinkCall *call) {
        while (call->held) {
                HeldMessage *h = call->held;

                call->held = h->next;
                varlink_wire_close_many(h->fds, h->n_fds);
                free(h->fds);
                free(h->text);
                free(h);
        }
        call->held_last = NULL;
}

static size_t connection_pending_output(VarlinkConnection *c) {
        return c->output_end - c->output_start;
}

/* Whether the next call may be read and dispatched now: no call in flight,
 * or only pipelined ones and fewer than VARLINK_PIPELINE_MAX. */
static bool connection_may_dispatch(VarlinkConnection *c) {
        return !c->current || (c->n_serial == 0 && c->n_in_flight < VARLINK_PIPELINE_MAX);
}

static bool connection_wants_read(VarlinkConnection *c) {
        return c->server && !c->failed && !c->read_eof && connection_may_dispatch(c) &&
               !varlink_wire_input_find_nul(&c->in);
}

static void connection_update(VarlinkConnection *c) {
        uint32_t events = 0;
        int r;

        if (!c->server)
                return;
        if (c->failed) {
                connection_disconnect(c);
                return;
        }
        if (c->read_eof && !c->current && !varlink_wire_input_find_nul(&c->in) && connection_pending_output(c) == 0) {
                if (c->in.end > c->in.start)
                        log_debug("Varlink peer " PID_FMT " closed in the middle of a message, closing.",
                                  c->ucred.pid);
                connection_disconnect(c);
                return;
        }

        /* Nothing to read or send: an idle connection holds no buffer (1,000
         * clients that once got a 256-device ListDevices would otherwise
         * keep 64 KiB of input and up to 256 KiB of output each). */
        if (!c->processing && c->in.start == c->in.end && c->in.n_batches == 0 && c->in.allocated > 0)
                varlink_wire_input_free(&c->in);
        if (connection_pending_output(c) == 0 && c->output_allocated > 0 && c->n_out_fds == 0) {
                c->output_base += c->output_end;
                c->output = mfree(c->output);
                c->output_allocated = c->output_start = c->output_end = 0;
        }

        if (connection_wants_read(c))
                events |= EPOLLIN;
        if (connection_pending_output(c) > 0)
                events |= EPOLLOUT;
        r = sd_event_source_set_io_events(c->io_source, events);
        if (r < 0) {
                log_debug_errno(r, "Failed to update varlink connection events, closing: %m");
                connection_disconnect(c);
        }
}

static void connection_schedule(VarlinkConnection *c) {
        if (c->server && c->defer_source)
                (void) sd_event_source_set_enabled(c->defer_source, SD_EVENT_ONESHOT);
}

static int connection_read(VarlinkConnection *c) {
        VarlinkWireRecv rcv;
        int r;

        r = varlink_wire_input_reserve(&c->in, c->server->limits.max_message_size + 1 + VARLINK_WIRE_READ_SIZE,
                                       BUFFER_KEEP_MAX);
        if (r < 0)
                return r;
        r = varlink_wire_recv(c->fd, &c->in, VARLINK_FDS_MAX, &rcv);
        if (r == -EAGAIN || r == -EINTR)
                return 0;
        if (r < 0)
                return r;

        /* More fds than VARLINK_FDS_MAX (the kernel cut them off), or batches
         * queued without the messages they go with, which would pin them here. */
        if (rcv.n_fds > 0 && (rcv.truncated || c->in.n_batches >= FD_BATCHES_MAX)) {
                varlink_wire_close_many(rcv.fds, rcv.n_fds);
                return log_debug_errno(EPROTO, "Varlink peer " PID_FMT " sent too many fds, closing.",
                                       c->ucred.pid);
        }
        if (rcv.truncated)
                return log_debug_errno(EPROTO, "Varlink peer " PID_FMT " sent truncated control data, closing.",
                                       c->ucred.pid);
        r = varlink_wire_input_add(&c->in, &rcv);
        if (r < 0)
                return r;
        if (rcv.n == 0)
                c->read_eof = true;
        return 0;
}

/* Takes the next complete message off the input buffer: 1 and the NUL
 * terminated text (valid until the next read) with the fds that came with
 * it (varlink-wire.h says which those are), 0 if there is none yet,
 * -EMSGSIZE or -EPROTO. */
static int connection_next_message(VarlinkConnection *c, char **ret, VarlinkFdBatch *ret_fds) {
        size_t max = c->server->limits.max_message_size;
        VarlinkFdBatch fds;
        char *start, *nul;
        int r;

        nul = varlink_wire_input_find_nul(&c->in);
        if (!nul) {
                if (c->in.end - c->in.start > max)
                        return -EMSGSIZE;
                return 0;
        }
        start = c->in.buf + c->in.start;
        if ((size_t) (nul - start) > max)
                return -EMSGSIZE;

        r = varlink_wire_input_take_message(&c->in, nul, &fds);
        if (r < 0) {
                varlink_wire_close_many(fds.fds, fds.n_fds);
                free(fds.fds);
                return r;
        }
        *ret = start;
        *ret_fds = fds;
        return 1;
}

static int connection_write(VarlinkConnection *c) {
        while (c->output_start < c->output_end) {
                uint64_t pos = c->output_base + c->output_start;
                size_t len = c->output_end - c->output_start;
                OutFds *of = c->n_out_fds > 0 ? &c->out_fds[0] : NULL;
                bool with_fds = false;
                ssize_t n;

                if (of && of->offset == pos) {
                        with_fds = true;
                        /* Later fds must start a write of their own. */
                        if (c->n_out_fds > 1 && c->out_fds[1].offset < pos + len)
                                len = c->out_fds[1].offset - pos;
                } else if (of && of->offset < pos + len)
                        len = of->offset - pos;

                n = varlink_wire_send(c->fd, c->output + c->output_start, len, with_fds ? of->fds : NULL,
                                      with_fds ? of->n_fds : 0);
                if (n == -EAGAIN)
                        return 0;
                if (n == -EINTR)
                        continue;
                if (n < 0)
                        return (int) n;
                if (with_fds) {
                        varlink_wire_close_many(of->fds, of->n_fds);
                        free(of->fds);
                        memmove(c->out_fds, c->out_fds + 1, --c->n_out_fds * sizeof *of);
                }
                c->output_start += n;
                if (c->server)
                        c->server->output_queued -= (size_t) n;
        }

        c->output_base += c->output_end;
        c->output_start = c->output_end = 0;
        if (c->output_allocated > BUFFER_KEEP_MAX) {
                c->output = mfree(c->output);
                c->output_allocated = 0;
        }
        return 0;
}

/* Queues message (with fds, taken also on failure) for sending. Drops the
 * connection if the peer does not keep up reading. */
static int connection_enqueue_text(VarlinkConnection *c, const char *text, int *fds, size_t n_fds);

static void server_drop_biggest_reader(VarlinkServer *s) {
        VarlinkConnection *big = NULL;

        for (VarlinkConnection *c = s->connections; c; c = c->next) {
                if (c->failed && connection_pending_output(c) > 0)
                        return; /* one is on its way out already; its bytes go with it */
                if (!c->failed && (!big || connection_pending_output(c) > connection_pending_output(big)))
                        big = c;
        }
        if (!big)
                return;
        log_notice("Varlink: %zu bytes of replies queued on all connections, over the %zu allowed; closing the one "
                   "of peer " PID_FMT ", which does not read its %zu.",
                   s->output_queued, s->limits.max_output_total, big->ucred.pid, connection_pending_output(big));
        big->failed = true;
        connection_schedule(big);
}

static int connection_enqueue(VarlinkConnection *c, json_t *message, int *fds, size_t n_fds) {
        _cleanup_free_ char *text = NULL;

        text = json_dumps(message, JSON_COMPACT);
        if (!text) {
                varlink_wire_close_many(fds, n_fds);
                return -ENOMEM;
        }
        return connection_enqueue_text(c, text, fds, n_fds);
}

/* Room for len more bytes of output: the unsent bytes move to the front,
 * and the buffer grows if that is not enough. */
static int output_reserve(VarlinkConnection *c, size_t len) {
        size_t pending = connection_pending_output(c), a;
        char *p;

        if (c->output_allocated - c->output_end >= len)
                return 0;
        if (c->output_start > 0) {
                memmove(c->output, c->output + c->output_start, pending);
                c->output_base += c->output_start;
                c->output_start = 0;
                c->output_end = pending;
        }
        if (c->output_allocated - c->output_end >= len)
                return 0;
        a = (c->output_end + len) * 2;
        if (a < 4096)
                a = 4096;
        p = realloc(c->output, a);
        if (!p)
                return -ENOMEM;
        c->output = p;
        c->output_allocated = a;
        return 0;
}

/* The fds go with the message that starts at the end of the output now
 * (sent with its first byte). Taken on success only. */
static int output_add_fds(VarlinkConnection *c, int *fds, size_t n_fds) {
        OutFds *of = realloc(c->out_fds, (c->n_out_fds + 1) * sizeof *of);
        int *copy;

        if (!of)
                return -ENOMEM;
        c->out_fds = of;
        copy = malloc(n_fds * sizeof(int));
        if (!copy)
                return -ENOMEM;
        memcpy(copy, fds, n_fds * sizeof(int));
        for (size_t i = 0; i < n_fds; i++)
                fds[i] = -EBADF;
        c->out_fds[c->n_out_fds++] = (OutFds) {
                .offset = c->output_base + c->output_end,
                .fds = copy,
                .n_fds = n_fds,
        };
        return 0;
}

/* Queues a serialized message (with its NUL). */
static int connection_enqueue_text(VarlinkConnection *c, const char *text, int *fds, size_t n_fds) {
        size_t len = strlen(text) + 1;
        int r;

        if (connection_pending_output(c) + len > c->server->limits.max_output_buffer) {
                varlink_wire_close_many(fds, n_fds);
                log_notice("Varlink peer " PID_FMT " does not read its replies (%zu bytes queued), closing.",
                           c->ucred.pid, connection_pending_output(c));
                c->failed = true;
                connection_schedule(c);
                return -ENOBUFS;
        }

        if (output_reserve(c, len) < 0 || (n_fds > 0 && output_add_fds(c, fds, n_fds) < 0)) {
                varlink_wire_close_many(fds, n_fds);
                return -ENOMEM;
        }

        memcpy(c->output + c->output_end, text, len);
        c->output_end += len;
        c->server->output_queued += len;
        /* All connections together: past the total, the one holding the most
         * unread replies goes (it is the one not reading). */
        if (c->server->output_queued > c->server->limits.max_output_total)
                server_drop_biggest_reader(c->server);

        /* Replies are written in batches: once per round of processing
         * (connection_process), or by the EPOLLOUT handler for replies sent
         * later. Past 64 KiB they go out right away, so that a handler
         * sending many notifications in one go does not fill the buffer
         * while the peer reads just fine. Errors only mark the connection,
         * it is closed from the event loop. */
        if (connection_pending_output(c) >= OUTPUT_EAGER_BYTES) {
                r = connection_write(c);
                if (r < 0) {
                        log_debug_errno(r, "Varlink peer " PID_FMT " went away: %m", c->ucred.pid);
                        c->failed = true;
                        connection_schedule(c);
                        return 0;
                }
        }
        if (connection_pending_output(c) > 0 && !c->processing)
                (void) sd_event_source_set_io_events(c->io_source, EPOLLOUT |
                                                     (connection_wants_read(c) ? EPOLLIN : 0));
        return 0;
}

static void connection_disconnect(VarlinkConnection *c) {
        VarlinkServer *s = c->server;
        VarlinkCall *call;

        if (!s)
                return;

        connection_ref(c);
        c->server = NULL;
        if (c->prev)
                c->prev->next = c->next;
        else
                s->connections = c->next;
        if (c->next)
                c->next->prev = c->prev;
        c->prev = c->next = NULL;
        s->output_queued -= connection_pending_output(c);
        if (c->refused)
                s->n_refused--;
        else
                s->n_connections--;
        server_maybe_trim(s);

        c->io_source = sd_event_source_disable_unref(c->io_source);
        c->defer_source = sd_event_source_disable_unref(c->defer_source);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -EBADF;
        connection_free_buffers(c);

        while ((call = c->current)) {
                void (*cb)(VarlinkCall *, void *) = call->replied ? NULL : TAKE_PTR(call->disconnect_cb);

                c->current = call->next_in_flight;
                call->next_in_flight = NULL;
                call->serial = false;
                held_free(call);
                if (cb)
                        cb(call, call->disconnect_userdata);
                varlink_call_unref(call);
        }
        c->last = NULL;
        c->n_in_flight = c->n_serial = 0;
        c->held_bytes = 0;

        connection_unref(c); /* the server's */
        connection_unref(c);
}

/* ---- calls ---- */

VarlinkCall *varlink_call_ref(VarlinkCall *c) {
        if (c)
                c->n_ref++;
        return c;
}

VarlinkCall *varlink_call_unref(VarlinkCall *c) {
        if (!c || --c->n_ref > 0)
                return NULL;
        held_free(c);
        varlink_wire_close_many(c->fds, c->n_fds);
        free(c->fds);
        varlink_wire_close_many(c->out_fds, c->n_out_fds);
        free(c->out_fds);
        free(c->method);
        connection_unref(c->connection);
        free(c);
        return NULL;
}

bool varlink_call_wants_more(VarlinkCall *c) {
        return c && c->more;
}

bool varlink_call_is_oneway(VarlinkCall *c) {
        return c && c->oneway;
}

const char *varlink_call_get_method(VarlinkCall *c) {
        return c ? c->method : NULL;
}

bool varlink_call_is_connected(VarlinkCall *c) {
        return c && c->connection->server;
}

int varlink_call_get_peer(VarlinkCall *c, uid_t *ret_uid, gid_t *ret_gid, pid_t *ret_pid) {
        if (!c)
                return -EINVAL;
        if (ret_uid)
                *ret_uid = c->connection->ucred.uid;
        if (ret_gid)
                *ret_gid = c->connection->ucred.gid;
        if (ret_pid)
                *ret_pid = c->connection->ucred.pid;
        return 0;
}

int varlink_call_take_fd(VarlinkCall *c, unsigned index) {
        if (!c)
                return -EINVAL;
        return varlink_wire_take_fd(c->fds, c->n_fds, index);
}

int varlink_call_push_fd(VarlinkCall *c, int fd) {
        int *p;

        if (!c || fd < 0) {
                if (fd >= 0)
                        close(fd);
                return -EINVAL;
        }
        if (c->n_out_fds >= VARLINK_FDS_MAX) {
                close(fd);
                return -ENOBUFS;
        }
        p = realloc(c->out_fds, (c->n_out_fds + 1) * sizeof *p);
        if (!p) {
                close(fd);
                return -ENOMEM;
        }
        c->out_fds = p;
        p[c->n_out_fds] = fd;
        return (int) c->n_out_fds++;
}

void varlink_call_set_disconnect_callback(VarlinkCall *c, void (*cb)(VarlinkCall *c, void *userdata),
                                          void *userdata) {
        if (!c)
                return;
        c->disconnect_cb = cb;
        c->disconnect_userdata = userdata;
}

/* Keeps a reply of a call that is not the oldest in flight (text copied,
 * fds taken) until the calls before it are answered. */
static int call_hold(VarlinkCall *call, const char *text, int *fds, size_t n_fds) {
        VarlinkConnection *conn = call->connection;
        size_t len = strlen(text) + 1;
        HeldMessage *h;

        if (conn->held_bytes + connection_pending_output(conn) + len > conn->server->limits.max_output_buffer) {
                varlink_wire_close_many(fds, n_fds);
                log_notice("Varlink peer " PID_FMT " does not read its replies (%zu bytes held), closing.",
                           conn->ucred.pid, conn->held_bytes);
                conn->failed = true;
                connection_schedule(conn);
                return -ENOBUFS;
        }
        h = calloc(1, sizeof *h);
        if (h)
                h->text = strdup(text);
        if (h && n_fds > 0)
                h->fds = malloc(n_fds * sizeof(int));
        if (!h || !h->text || (n_fds > 0 && !h->fds)) {
                if (h)
                        free(h->text);
                free(h);
                varlink_wire_close_many(fds, n_fds);
                return -ENOMEM;
        }
        if (n_fds > 0) {
                memcpy(h->fds, fds, n_fds * sizeof(int));
                for (size_t i = 0; i < n_fds; i++)
                        fds[i] = -EBADF;
        }
        h->n_fds = n_fds;
        if (call->held_last)
                call->held_last->next = h;
        else
                call->held = h;
        call->held_last = h;
        conn->held_bytes += len;
        return 0;
}

/* The oldest call in flight got its final reply: drops it, and sends what
 * the next ones held, as long as they are answered too. */
static void connection_pop_answered(VarlinkConnection *conn) {
        while (conn->current && conn->current->replied) {
                VarlinkCall *done = conn->current, *next = done->next_in_flight;

                conn->current = next;
                if (!next)
                        conn->last = NULL;
                conn->n_in_flight--;
                done->next_in_flight = NULL;
                varlink_call_unref(done); /* the connection's; the caller holds another */

                while (next && next->held) {
                        HeldMessage *h = next->held;
                        int r;

                        next->held = h->next;
                        if (!next->held)
                                next->held_last = NULL;
                        conn->held_bytes -= strlen(h->text) + 1;
                        if (conn->server && !conn->failed)
                                r = connection_enqueue_text(conn, h->text, h->fds, h->n_fds);
                        else {
                                varlink_wire_close_many(h->fds, h->n_fds);
                                r = 0;
                        }
                        (void) r; /* a failure marks the connection */
                        free(h->fds);
                        free(h->text);
                        free(h);
                }
        }
        connection_schedule(conn);
}

/* Sends message (taken) as a reply of c; final replies end the call and let
 * the connection go on with the next one. */
static int call_send(VarlinkCall *c, json_t *message, bool final) {
        _cleanup_(json_decrefp) json_t *m = message;
        VarlinkConnection *conn = c->connection;
        int r = 0;

        if (!m) {
                varlink_wire_close_many(c->out_fds, c->n_out_fds);
                c->n_out_fds = 0;
                return -ENOMEM;
        }

        if (c->oneway || !conn->server || conn->failed)
                varlink_wire_close_many(c->out_fds, c->n_out_fds);
        else if (conn->current == c)
                r = connection_enqueue(conn, m, c->out_fds, c->n_out_fds);
        else {
                _cleanup_free_ char *text = json_dumps(m, JSON_COMPACT);
                r = text ? call_hold(c, text, c->out_fds, c->n_out_fds) : -ENOMEM;
                if (!text)
                        varlink_wire_close_many(c->out_fds, c->n_out_fds);
        }
        c->out_fds = mfree(c->out_fds);
        c->n_out_fds = 0;

        if (final) {
                c->replied = true;
                if (c->serial) {
                        /* Answered: no longer holds the calls behind it back. */
                        c->serial = false;
                        conn->n_serial--;
                        connection_schedule(conn);
                }
                if (conn->current == c)
                        connection_pop_answered(conn);
        }
        return r;
}

/* Replies are checked against the IDL at debug log level (the tests run
 * there): the check costs about an eighth of a GetDevice call. */
static void call_check_reply(VarlinkCall *c, json_t *params) {
#ifndef NDEBUG
        _cleanup_free_ char *path = NULL;

        if (log_get_max_level() < LOG_DEBUG)
                return;
        if (!c->connection->server || !c->member || !c->member->output)
                return;
        if (varlink_idl_validate(c->member->output, params, &path) == -EINVAL)
                log_warning("Reply of %s does not match its IDL: bad field '%s'.", c->method,
                            strna(path));
#endif
}

static int call_reply_internal(VarlinkCall *c, json_t *params, bool final) {
        _cleanup_(json_decrefp) json_t *p = params;
        json_t *m;

        if (!c)
                return -EINVAL;
        if (p && !json_is_object(p))
                return -EINVAL;
        if (c->replied)
                return -EBUSY;
        if (!final && !c->more)
                return -EPROTO;
        if (!p) {
                p = json_object();
                if (!p)
                        return -ENOMEM;
        }
        call_check_reply(c, p);

        m = json_pack("{s:O}", "parameters", p);
        if (m && !final && json_object_set_new(m, "continues", json_true()) < 0)
                m = (json_decref(m), NULL);
        return call_send(c, m, final);
}

int varlink_call_reply(VarlinkCall *c, json_t *params) {
        return call_reply_internal(c, params, true);
}

int varlink_call_notify(VarlinkCall *c, json_t *params) {
        return call_reply_internal(c, params, false);
}

char *varlink_notify_serialize(json_t *params) {
        _cleanup_(json_decrefp) json_t *m = json_pack("{s:O, s:b}", "parameters", params, "continues", true);
        return m ? json_dumps(m, JSON_COMPACT) : NULL;
}

int varlink_call_notify_serialized(VarlinkCall *c, const char *text) {
        VarlinkConnection *conn;

        if (!c || !text)
                return -EINVAL;
        if (c->replied)
                return -EBUSY;
        if (!c->more)
                return -EPROTO;
        conn = c->connection;
        if (c->oneway || !conn->server || conn->failed)
                return 0;
        if (conn->current != c)
                return call_hold(c, text, NULL, 0);
        return connection_enqueue_text(conn, text, NULL, 0);
}

int varlink_call_error(VarlinkCall *c, const char *error_name, json_t *params) {
        _cleanup_(json_decrefp) json_t *p = params;

        if (!c || !error_name)
                return -EINVAL;
        if (p && !json_is_object(p))
                return -EINVAL;
        if (c->replied)
                return -EBUSY;
        if (p)
                return call_send(c, json_pack("{s:s, s:O}", "error", error_name, "parameters", p), true);
        return call_send(c, json_pack("{s:s, s:{}}", "error", error_name, "parameters"), true);
}

int varlink_call_error_invalid_parameter(VarlinkCall *c, const char *parameter) {
        return varlink_call_error(c, VARLINK_ERROR_INVALID_PARAMETER,
                                  json_pack("{s:s}", "parameter", strempty(parameter)));
}

/* ---- dispatch ---- */

static VarlinkInterface *server_find_interface(VarlinkServer *s, const char *name, size_t len) {
        for (size_t i = 0; i < s->n_interfaces; i++)
                if (strlen(s->interfaces[i]->idl->name) == len &&
                    strncmp(s->interfaces[i]->idl->name, name, len) == 0)
                        return s->interfaces[i];
        return NULL;
}

static bool connection_is_privileged(VarlinkConnection *c) {
        gid_t admin = c->server->admin_gid;

        if (c->ucred.uid == 0)
                return true;
        if (admin == (gid_t) -1)
                return false;
        if (c->ucred.gid == admin)
                return true;
        for (size_t i = 0; i < c->n_groups; i++)
                if (c->groups[i] == admin)
                        return true;
        return false;
}

static int call_dispatch(VarlinkCall *call, json_t *parameters, bool upgrade) {
        VarlinkServer *s = call->connection->server;
        const char *dot = strrchr(call->method, '.');
        const VarlinkMethod *impl = NULL;
        _cleanup_(json_decrefp) json_t *params = NULL;
        _cleanup_free_ char *path = NULL;
        VarlinkInterface *iface;
        int r;

        if (!dot || dot == call->method || !dot[1])
                return varlink_call_error(call, VARLINK_ERROR_METHOD_NOT_FOUND,
                                          json_pack("{s:s}", "method", call->method));
        iface = server_find_interface(s, call->method, dot - call->method);
        if (!iface)
                return varlink_call_error(call, VARLINK_ERROR_INTERFACE_NOT_FOUND,
                                          json_pack("{s:s%}", "interface", call->method,
                                                    (size_t) (dot - call->method)));
        call->member = varlink_idl_find_member(iface->idl, VARLINK_IDL_MEMBER_METHOD, dot + 1);
        if (!call->member)
                return varlink_call_error(call, VARLINK_ERROR_METHOD_NOT_FOUND,
                                          json_pack("{s:s}", "method", call->method));
        for (size_t i = 0; i < iface->n_methods; i++)
                if (streq(iface->methods[i].name, dot + 1))
                        impl = &iface->methods[i];
        if (!impl || !impl->fn || upgrade)
                return varlink_call_error(call, VARLINK_ERROR_METHOD_NOT_IMPLEMENTED,
                                          json_pack("{s:s}", "method", call->method));
        if ((impl->flags & VARLINK_METHOD_REQUIRES_MORE) && !call->more)
                return varlink_call_error(call, VARLINK_ERROR_EXPECTED_MORE, NULL);
        if ((impl->flags & VARLINK_METHOD_MUTATING) && !connection_is_privileged(call->connection))
                return varlink_call_error(call, VARLINK_ERROR_PERMISSION_DENIED, NULL);
        if (call->n_fds > 0 && !(impl->flags & VARLINK_METHOD_ACCEPTS_FDS)) {
                varlink_wire_close_many(call->fds, call->n_fds);
                return varlink_call_error_invalid_parameter(call, "fileDescriptors");
        }
        if (parameters && !json_is_object(parameters))
                return varlink_call_error_invalid_parameter(call, "parameters");

        params = parameters ? json_incref(parameters) : json_object();
        if (!params)
                return -ENOMEM;
        r = varlink_idl_validate(call->member->type, params, &path);
        if (r == -EINVAL)
                return varlink_call_error_invalid_parameter(call, path ?: "parameters");
        if (r < 0)
                return r;
        if ((impl->flags & VARLINK_METHOD_PIPELINED) && !call->more && call->serial) {
                call->serial = false;
                call->connection->n_serial--;
        }

        return impl->fn(call, params, iface->userdata);
}

static int json_get_flag(json_t *m, const char *name, bool *ret) {
        json_t *v = json_object_get(m, name);

        if (!v || json_is_null(v)) {
                *ret = false;
                return 0;
        }
        if (!json_is_boolean(v))
                return -EBADMSG;
        *ret = json_is_true(v);
        return 0;
}

/* call is now in flight on c (not pipelined until call_dispatch says so). */
static void connection_push_call(VarlinkConnection *c, VarlinkCall *call) {
        if (c->last)
                c->last->next_in_flight = varlink_call_ref(call);
        else
                c->current = varlink_call_ref(call);
        c->last = call;
        c->n_in_flight++;
        c->n_serial++;
        call->serial = true;
}

/* Returns < 0 if the connection is to be closed. */
static int connection_dispatch_message(VarlinkConnection *c, const char *text, VarlinkFdBatch *fds) {
        _cleanup_(json_decrefp) json_t *m = NULL;
        _cleanup_(varlink_call_unrefp) VarlinkCall *call = NULL;
        bool oneway, more, upgrade;
        json_error_t error;
        json_t *method, *parameters;
        int r;

        m = json_loads(text, JSON_REJECT_DUPLICATES, &error);
        if (!m || !json_is_object(m)) {
                varlink_wire_close_many(fds->fds, fds->n_fds);
                free(fds->fds);
                return log_debug_errno(EBADMSG, "Varlink peer " PID_FMT " sent %s, closing: %s", c->ucred.pid,
                                       m ? "a message that is not an object" : "invalid JSON",
                                       m ? "" : error.text);
        }

        call = calloc(1, sizeof *call);
        if (!call) {
                varlink_wire_close_many(fds->fds, fds->n_fds);
                free(fds->fds);
                return log_oom();
        }
        call->n_ref = 1;
        call->connection = connection_ref(c);
        call->fds = TAKE_PTR(fds->fds);
        call->n_fds = fds->n_fds;

        method = json_object_get(m, "method");
        if (!json_is_string(method))
                return log_debug_errno(EBADMSG, "Varlink peer " PID_FMT " sent a message without method, closing.",
                                       c->ucred.pid);
        if (json_get_flag(m, "oneway", &oneway) < 0 || json_get_flag(m, "more", &more) < 0 ||
            json_get_flag(m, "upgrade", &upgrade) < 0 || (oneway && more))
                return log_debug_errno(EBADMSG, "Varlink peer " PID_FMT " sent invalid call flags, closing.",
                                       c->ucred.pid);
        call->method = strdup(json_string_value(method));
        if (!call->method)
                return log_oom();
        call->oneway = oneway;
        call->more = more;

        parameters = json_object_get(m, "parameters");
        if (json_is_null(parameters))
                parameters = NULL;

        if (c->refused) {
                /* Told why, then closed once that reply is out. */
                if (oneway)
                        return -EUSERS;
                connection_push_call(c, call);
                (void) varlink_call_error(call, "io.blkmqd.TooManyConnections",
                                          json_pack("{s:i, s:i}", "max", (int) c->server->limits.max_connections,
                                                    "maxPerUid", (int) c->server->limits.max_connections_per_uid));
                c->read_eof = true;
                c->in.start = c->in.end; /* anything pipelined after it goes unanswered */
                return 0;
        }

        if (!oneway)
                connection_push_call(c, call);

        log_debug("Varlink call %s from pid " PID_FMT "%s%s.", call->method, c->ucred.pid,
                  oneway ? " (oneway)" : "", more ? " (more)" : "");
        r = call_dispatch(call, parameters, upgrade);
        if (r < 0) {
                if (!oneway && !call->replied)
                        return log_error_errno(r, "Varlink method %s failed without a reply, closing connection: %m",
                                               call->method);
                log_debug_errno(r, "Varlink method %s failed: %m", call->method);
        } else if (!oneway && !call->replied && call->n_ref <= 2) {
                log_error("Varlink method %s neither replied nor kept the call, closing connection.", call->method);
                return -EPROTO;
        }
        return 0;
}

/* Serves complete messages until a call waits for its reply or input runs
 * out, then adjusts what we wait for. */
static void connection_process(VarlinkConnection *c) {
        int r;

        connection_ref(c);
        c->processing = true;
        while (c->server && !c->failed && connection_may_dispatch(c)) {
                VarlinkFdBatch fds = {};
                char *text;

                r = connection_next_message(c, &text, &fds);
                if (r == -EMSGSIZE) {
                        log_notice("Varlink peer " PID_FMT " sent a message longer than %zu bytes, closing.",
                                   c->ucred.pid, c->server->limits.max_message_size);
                        connection_disconnect(c);
                        break;
                }
                if (r < 0) {
                        log_debug_errno(r, "Varlink peer " PID_FMT " sent fds out of place, closing: %m",
                                        c->ucred.pid);
                        connection_disconnect(c);
                        break;
                }
                if (r == 0)
                        break;
                r = connection_dispatch_message(c, text, &fds);
                if (r < 0) {
                        connection_disconnect(c);
                        break;
                }
        }
        c->processing = false;
        /* One write for all the replies of this round. */
        if (c->server && !c->failed && connection_pending_output(c) > 0) {
                r = connection_write(c);
                if (r < 0) {
                        log_debug_errno(r, "Varlink peer " PID_FMT " went away: %m", c->ucred.pid);
                        c->failed = true;
                }
        }
        connection_update(c);
        connection_unref(c);
}

static int connection_io_handler(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        VarlinkConnection *c = userdata;
        int r;

        connection_ref(c);
        if (connection_pending_output(c) > 0) {
                r = connection_write(c);
                if (r < 0) {
                        log_debug_errno(r, "Varlink peer " PID_FMT " went away: %m", c->ucred.pid);
                        connection_disconnect(c);
                        goto finish;
                }
        }
        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (connection_wants_read(c)) {
                        r = connection_read(c);
                        if (r < 0) {
                                log_debug_errno(r, "Failed to read from varlink peer " PID_FMT ", closing: %m",
                                                c->ucred.pid);
                                connection_disconnect(c);
                                goto finish;
                        }
                } else if (revents & (EPOLLHUP | EPOLLERR)) {
                        /* Not reading, so nobody else will notice. */
                        log_debug("Varlink peer " PID_FMT " hung up.", c->ucred.pid);
                        connection_disconnect(c);
                        goto finish;
                }
        }
        connection_process(c);
finish:
        connection_unref(c);
        return 0;
}

static int connection_defer_handler(sd_event_source *source, void *userdata) {
        connection_process(userdata);
        return 0;
}

static unsigned server_count_uid(VarlinkServer *s, uid_t uid) {
        unsigned n = 0;

        for (VarlinkConnection *c = s->connections; c; c = c->next)
                if (c->ucred.uid == uid && !c->refused)
                        n++;
        return n;
}

/* Whether a new connection of uid is over a limit: then it is kept only to
 * be told so (its first call is answered TooManyConnections), logged once
 * per episode, and the oldest refused one goes if too many wait. */
static bool server_over_limit(VarlinkServer *s, uid_t uid) {
        if (s->n_connections < s->limits.max_connections &&
            server_count_uid(s, uid) < s->limits.max_connections_per_uid) {
                s->limit_logged = false;
                return false;
        }
        if (!s->limit_logged)
                log_warning("Too many varlink connections (%u in all, limit %u, %u per uid), refusing "
                            "uid " UID_FMT " and further ones for now; each is told so.",
                            s->n_connections, s->limits.max_connections, s->limits.max_connections_per_uid, uid);
        s->limit_logged = true;
        if (s->n_refused >= VARLINK_REFUSED_MAX) {
                /* Make room: the oldest refused one, which has had its
                 * chance to ask, goes unanswered. */
                VarlinkConnection *oldest = NULL;
                for (VarlinkConnection *o = s->connections; o; o = o->next)
                        if (o->refused)
                                oldest = o;
                if (oldest)
                        connection_disconnect(oldest);
        }
        return true;
}

/* The peer's supplementary groups (AdminGroup=); with more than 64
 * (ERANGE), the primary gid must do. */
static void connection_get_groups(VarlinkConnection *c) {
        gid_t buf[64];
        socklen_t glen = sizeof buf;

        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, buf, &glen) < 0 || glen == 0)
                return;
        c->groups = malloc(glen);
        if (c->groups) {
                memcpy(c->groups, buf, glen);
                c->n_groups = glen / sizeof(gid_t);
        }
}

int varlink_server_add_connection(VarlinkServer *s, int fd) {
        _cleanup_close_ int cfd = fd;
        struct ucred ucred = {};
        socklen_t len = sizeof ucred;
        VarlinkConnection *c;
        int r;

        if (!s || fd < 0)
                return -EINVAL;
        if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &ucred, &len) < 0)
                return log_debug_errno(errno, "Failed to get varlink peer credentials: %m");

        bool refused = server_over_limit(s, ucred.uid);

        r = fd_nonblock(cfd);
        if (r < 0)
                return r;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->n_ref = 1;
        c->ucred = ucred;
        c->fd = TAKE_FD(cfd);
        c->refused = refused;

        connection_get_groups(c);

        r = sd_event_add_io(s->event, &c->io_source, c->fd, EPOLLIN, connection_io_handler, c);
        if (r >= 0)
                r = sd_event_add_defer(s->event, &c->defer_source, connection_defer_handler, c);
        if (r >= 0)
                r = sd_event_source_set_enabled(c->defer_source, SD_EVENT_OFF);
        if (r < 0) {
                connection_unref(c);
                return r;
        }
        (void) sd_event_source_set_description(c->io_source, "varlink-connection");
        (void) sd_event_source_set_description(c->defer_source, "varlink-connection-defer");

        c->server = s;
        c->next = s->connections;
        if (c->next)
                c->next->prev = c;
        s->connections = c;
        if (refused)
                s->n_refused++;
        else
                s->n_connections++;
        if (s->n_connections > s->peak)
                s->peak = s->n_connections;
        log_debug("New varlink connection from pid " PID_FMT " uid " UID_FMT "%s.", ucred.pid, ucred.uid,
                  refused ? " (over the limit: refused)" : "");
        return 0;
}

static int server_trim_handler(sd_event_source *source, uint64_t usec, void *userdata) {
        VarlinkServer *s = userdata;

        s->trim_source = sd_event_source_disable_unref(s->trim_source);
        log_debug("Varlink: %u connections, down from %u: returning free heap to the kernel.", s->n_connections,
                  s->peak);
        s->peak = s->n_connections;
        (void) malloc_trim(0);
        return 0;
}

/* ---- listeners ---- */

static int listener_add(VarlinkServer *s, int fd);

static int listener_retry_handler(sd_event_source *source, uint64_t usec, void *userdata) {
        VarlinkListener *l = userdata;

        l->retry_source = sd_event_source_disable_unref(l->retry_source);
        (void) sd_event_source_set_enabled(l->source, SD_EVENT_ON);
        return 0;
}

static int listener_handler(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        VarlinkListener *l = userdata;
        int cfd, r;

        cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
                if (errno_accept_transient(errno))
                        return 0;
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                        /* Level triggered: without a pause we would spin. */
                        log_warning_errno(errno, "Failed to accept varlink connection, pausing for 1s: %m");
                        (void) sd_event_source_set_enabled(l->source, SD_EVENT_OFF);
                        if (!l->retry_source) {
                                r = sd_event_add_time_relative(l->server->event, &l->retry_source,
                                                               CLOCK_MONOTONIC, 1000000, 0,
                                                               listener_retry_handler, l);
                                if (r < 0)
                                        (void) sd_event_source_set_enabled(l->source, SD_EVENT_ON);
                        }
                        return 0;
                }
                log_warning_errno(errno, "Failed to accept varlink connection, ignoring: %m");
                return 0;
        }

        (void) varlink_server_add_connection(l->server, cfd);
        return 0;
}

static int listener_add(VarlinkServer *s, int fd) {
        VarlinkListener *l;
        int r;

        l = calloc(1, sizeof *l);
        if (!l)
                return -ENOMEM;
        r = sd_event_add_io(s->event, &l->source, fd, EPOLLIN, listener_handler, l);
        if (r < 0) {
                free(l);
                return r;
        }
        (void) sd_event_source_set_description(l->source, "varlink-listener");
        l->server = s;
        l->fd = fd;
        l->next = s->listeners;
        s->listeners = l;
        return 0;
}

int varlink_server_listen_fd(VarlinkServer *s, int fd) {
        int r;

        if (!s || fd < 0)
                return -EINVAL;
        r = fd_nonblock(fd);
        if (r < 0)
                return r;
        return listener_add(s, fd);
}

static int mkdir_parents(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);

        if (!p)
                return -ENOMEM;
        for (char *slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
                *slash = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return -errno;
                *slash = '/';
        }
        return 0;
}

int varlink_server_listen_address(VarlinkServer *s, const char *path, mode_t mode) {
        union {
                struct sockaddr sa;
                struct sockaddr_un un;
        } sa = { .un.sun_family = AF_UNIX };
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        int r;

        if (!s || !path || path[0] != '/')
                return -EINVAL;
        if (strlen(path) >= sizeof sa.un.sun_path)
                return -ENAMETOOLONG;
        strcpy(sa.un.sun_path, path);

        r = mkdir_parents(path, 0755);
        if (r < 0)
                return log_error_errno(r, "Failed to create parent directory of %s: %m", path);

        if (lstat(path, &st) >= 0) {
                _cleanup_close_ int probe = -EBADF;

                if (!S_ISSOCK(st.st_mode))
                        return log_error_errno(EEXIST, "%s exists and is not a socket.", path);
                /* Non-blocking: a full backlog (EAGAIN) means alive too. */
                probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (probe < 0)
                        return -errno;
                if (connect(probe, &sa.sa, sizeof sa.un) >= 0 || errno == EAGAIN)
                        return log_error_errno(EADDRINUSE, "%s is in use by a running service.", path);
                log_debug("Removing stale varlink socket %s.", path);
                if (unlink(path) < 0 && errno != ENOENT)
                        return log_error_errno(errno, "Failed to remove stale socket %s: %m", path);
        }

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (bind(fd, &sa.sa, sizeof sa.un) < 0)
                return log_error_errno(errno, "Failed to bind varlink socket %s: %m", path);
        if (chmod(path, mode) < 0)
                return log_error_errno(errno, "Failed to chmod %s: %m", path);
        if (listen(fd, SOMAXCONN) < 0)
                return log_error_errno(errno, "Failed to listen on %s: %m", path);

        r = listener_add(s, fd);
        if (r < 0)
                return r;
        TAKE_FD(fd);
        return 0;
}

/* ---- the server ---- */

static int method_get_info(VarlinkCall *call, json_t *parameters, void *userdata) {
        VarlinkServer *s = userdata;
        json_t *interfaces;

        interfaces = json_array();
        if (!interfaces)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_interfaces; i++)
                if (json_array_append_new(interfaces, json_string(s->interfaces[i]->idl->name)) < 0) {
                        json_decref(interfaces);
                        return -ENOMEM;
                }

        return varlink_call_reply(call, json_pack("{s:s, s:s, s:s, s:s, s:o}", "vendor", s->vendor, "product",
                                                  s->product, "version", s->version, "url", s->url,
                                                  "interfaces", interfaces));
}

static int method_get_interface_description(VarlinkCall *call, json_t *parameters, void *userdata) {
        VarlinkServer *s = userdata;
        const char *name = json_string_value(json_object_get(parameters, "interface"));
        VarlinkInterface *iface = server_find_interface(s, name, strlen(name));

        if (!iface)
                return varlink_call_error(call, VARLINK_ERROR_INTERFACE_NOT_FOUND,
                                          json_pack("{s:s}", "interface", name));
        return varlink_call_reply(call, json_pack("{s:s}", "description", iface->text));
}

static void interface_free(VarlinkInterface *i) {
        if (!i)
                return;
        varlink_idl_free(i->idl);
        free(i->text);
        free(i->methods);
        free(i);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(VarlinkInterface *, interface_free)

int varlink_server_add_interface(VarlinkServer *s, const char *idl_text, const VarlinkMethod *methods,
                                 size_t n_methods, void *userdata) {
        _cleanup_(interface_freep) VarlinkInterface *i = NULL;
        _cleanup_free_ char *error = NULL;
        VarlinkInterface **a;
        int r;

        if (!s || !idl_text || (n_methods > 0 && !methods))
                return -EINVAL;

        i = calloc(1, sizeof *i);
        if (!i)
                return -ENOMEM;
        r = varlink_idl_parse(idl_text, &i->idl, &error);
        if (r == -EINVAL)
                return log_error_errno(r, "Invalid varlink interface definition: %s", strna(error));
        if (r < 0)
                return r;
        if (server_find_interface(s, i->idl->name, strlen(i->idl->name)))
                return log_error_errno(EEXIST, "Varlink interface %s registered twice.", i->idl->name);

        for (size_t k = 0; k < n_methods; k++) {
                if (!methods[k].name ||
                    !varlink_idl_find_member(i->idl, VARLINK_IDL_MEMBER_METHOD, methods[k].name))
                        return log_error_errno(EINVAL, "Method %s.%s is not in the interface definition.",
                                               i->idl->name, strna(methods[k].name));
                for (size_t j = 0; j < k; j++)
                        if (streq(methods[j].name, methods[k].name))
                                return log_error_errno(EINVAL, "Method %s.%s is listed twice.", i->idl->name,
                                                       methods[k].name);
        }

        i->text = strdup(idl_text);
        i->methods = n_methods > 0 ? malloc(n_methods * sizeof *methods) : NULL;
        if (!i->text || (n_methods > 0 && !i->methods))
                return -ENOMEM;
        if (n_methods > 0)
                memcpy(i->methods, methods, n_methods * sizeof *methods);
        i->n_methods = n_methods;
        i->userdata = userdata;

        a = realloc(s->interfaces, (s->n_interfaces + 1) * sizeof *a);
        if (!a)
                return -ENOMEM;
        s->interfaces = a;
        a[s->n_interfaces++] = TAKE_PTR(i);
        return 0;
}

int varlink_server_new(VarlinkServer **ret, sd_event *e, const char *vendor, const char *product,
                       const char *version, const char *url) {
        static const VarlinkMethod service_methods[] = {
                { "GetInfo", method_get_info, 0 },
                { "GetInterfaceDescription", method_get_interface_description, 0 },
        };
        _cleanup_(varlink_server_freep) VarlinkServer *s = NULL;
        int r;

        if (!ret || !e)
                return -EINVAL;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->event = sd_event_ref(e);
        s->admin_gid = (gid_t) -1;
        s->limits = (VarlinkLimits) {
                .max_message_size = VARLINK_MESSAGE_SIZE_MAX,
                .max_output_buffer = VARLINK_OUTPUT_BUFFER_MAX,
                .max_output_total = VARLINK_OUTPUT_TOTAL_MAX,
                .max_connections = VARLINK_CONNECTIONS_MAX,
                .max_connections_per_uid = VARLINK_CONNECTIONS_PER_UID_MAX,
        };
        s->vendor = strdup(strempty(vendor));
        s->product = strdup(strempty(product));
        s->version = strdup(strempty(version));
        s->url = strdup(strempty(url));
        if (!s->vendor || !s->product || !s->version || !s->url)
                return -ENOMEM;

        r = varlink_server_add_interface(s, org_varlink_service_varlink, service_methods,
                                         ELEMENTSOF(service_methods), s);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(s);
        return 0;
}

void varlink_server_set_admin_gid(VarlinkServer *s, gid_t gid) {
        if (s)
                s->admin_gid = gid;
}

void varlink_server_set_limits(VarlinkServer *s, const VarlinkLimits *l) {
        if (!s || !l)
                return;
        if (l->max_message_size > 0)
                s->limits.max_message_size = l->max_message_size;
        if (l->max_output_buffer > 0)
                s->limits.max_output_buffer = l->max_output_buffer;
        if (l->max_output_total > 0)
                s->limits.max_output_total = l->max_output_total;
        if (l->max_connections > 0)
                s->limits.max_connections = l->max_connections;
        if (l->max_connections_per_uid > 0)
                s->limits.max_connections_per_uid = l->max_connections_per_uid;
}

unsigned varlink_server_n_connections(VarlinkServer *s) {
        return s ? s->n_connections : 0;
}

VarlinkServer *varlink_server_free(VarlinkServer *s) {
        if (!s)
                return NULL;

        while (s->connections)
                connection_disconnect(s->connections);
        s->trim_source = sd_event_source_disable_unref(s->trim_source);
        while (s->listeners) {
                VarlinkListener *l = s->listeners;

                s->listeners = l->next;
                sd_event_source_disable_unref(l->source);
                sd_event_source_disable_unref(l->retry_source);
                close(l->fd);
                free(l);
        }
        for (size_t i = 0; i < s->n_interfaces; i++)
                interface_free(s->interfaces[i]);
        free(s->interfaces);
        free(s->vendor);
        free(s->product);
        free(s->version);
        free(s->url);
        sd_event_unref(s->event);
        free(s);
        return NULL;
}
