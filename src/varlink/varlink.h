/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A varlink server on sd-event (libsystemd 252 has no sd-varlink).
 *
 * Wire protocol (varlink.org, UAPI.20): one JSON object per message, each
 * terminated by a NUL byte. Calls on one connection are served in order:
 * the next call is read only once the previous one got its final reply
 * (oneway calls need none), except behind calls of methods marked
 * VARLINK_METHOD_PIPELINED (and not "more"): up to VARLINK_PIPELINE_MAX of
 * those may be in flight at once on a connection, so that a client that
 * sends several calls without waiting has them served together (the zone
 * service commits their records in one transaction). Replies always go
 * out in the order of the calls: a later call's replies are held until
 * every call before it got its final reply. "more" calls get replies with
 * "continues": true and then one final reply without it; "upgrade" is
 * refused with org.varlink.service.MethodNotImplemented. The server never
 * sends "parameters": null and never "continues" to a caller that did not
 * set "more".
 *
 * Every call is checked against the interface's IDL before the handler
 * runs, in this order: InterfaceNotFound, MethodNotFound, MethodNotImplemented
 * (IDL method without an implementation, or "upgrade"), ExpectedMore,
 * PermissionDenied (VARLINK_METHOD_MUTATING and the peer neither root nor in
 * the admin group), InvalidParameter{parameter: "fileDescriptors"} (fds sent
 * to a method without VARLINK_METHOD_ACCEPTS_FDS; the fds are closed), and
 * InvalidParameter{parameter: path} (parameters not matching the IDL; the
 * path is "field", "field.sub" or "list[2].field").
 *
 * The connection is closed (logged at debug level) on: invalid JSON, a
 * message that is not an object, a missing or non-string "method", a
 * non-boolean flag, "oneway" together with "more", fds that do not come with
 * a message's first byte, more than VARLINK_FDS_MAX fds, and EOF in the middle
 * of a message. A message longer than 16 MiB, an output buffer grown past
 * 17 MiB (a client that does not read), and a handler that returns a negative
 * errno without having sent its final reply also close the connection, with a
 * log at notice/error level.
 *
 * Everything here runs on the event loop's thread; VarlinkCall objects may be
 * kept (ref) for an asynchronous reply, but that reply must be sent from the
 * event loop thread too (worker threads hand results back, e.g. through an
 * eventfd source). */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>
#include <systemd/sd-event.h>

typedef struct VarlinkServer VarlinkServer;
typedef struct VarlinkCall VarlinkCall; /* one method call in flight; refcounted */

/* Called with the validated parameters (borrowed; never NULL, {} if the
 * caller sent none). Reply now, or take a ref and reply later. Return 0, or
 * a negative errno: if no final reply was sent by then, the connection is
 * closed and the error logged. Returning 0 without a reply and without
 * keeping a reference is a bug too: logged, connection closed. */
typedef int (*varlink_method_t)(VarlinkCall *call, json_t *parameters, void *userdata);

enum {
        VARLINK_METHOD_MUTATING = 1 << 0,      /* needs root or the admin group, else PermissionDenied */
        VARLINK_METHOD_ACCEPTS_FDS = 1 << 1,   /* may receive fds (varlink_call_take_fd()) */
        VARLINK_METHOD_REQUIRES_MORE = 1 << 2, /* without "more": ExpectedMore */
        VARLINK_METHOD_PIPELINED = 1 << 3,     /* later calls may be dispatched before its reply */
};

typedef struct VarlinkMethod {
        const char *name; /* short name, "GetStatus" */
        varlink_method_t fn;
        unsigned flags;
} VarlinkMethod;

#define VARLINK_MESSAGE_SIZE_MAX (16U * 1024U * 1024U)
#define VARLINK_OUTPUT_BUFFER_MAX (VARLINK_MESSAGE_SIZE_MAX + 1024U * 1024U)
#define VARLINK_OUTPUT_TOTAL_MAX (128U * 1024U * 1024U)
#define VARLINK_CONNECTIONS_MAX 4096U
#define VARLINK_CONNECTIONS_PER_UID_MAX 1024U
#define VARLINK_FDS_MAX 16U
#define VARLINK_PIPELINE_MAX 64U /* calls in flight on one connection, all pipelined */

#define VARLINK_ERROR_INTERFACE_NOT_FOUND "org.varlink.service.InterfaceNotFound"
#define VARLINK_ERROR_METHOD_NOT_FOUND "org.varlink.service.MethodNotFound"
#define VARLINK_ERROR_METHOD_NOT_IMPLEMENTED "org.varlink.service.MethodNotImplemented"
#define VARLINK_ERROR_INVALID_PARAMETER "org.varlink.service.InvalidParameter"
#define VARLINK_ERROR_PERMISSION_DENIED "org.varlink.service.PermissionDenied"
#define VARLINK_ERROR_EXPECTED_MORE "org.varlink.service.ExpectedMore"

int varlink_server_new(VarlinkServer **ret, sd_event *e, const char *vendor, const char *product,
                       const char *version, const char *url);
/* Besides root, peers whose primary or supplementary group is gid may call
 * VARLINK_METHOD_MUTATING methods. (gid_t) -1 (the default) = root only. */
void varlink_server_set_admin_gid(VarlinkServer *s, gid_t gid);
/* Parses idl_text (kept verbatim for GetInterfaceDescription); every method
 * must be declared in it. IDL methods without an entry in methods answer
 * MethodNotImplemented. -EINVAL (logged) on bad IDL or an undeclared method,
 * -EEXIST if the interface is already there. */
int varlink_server_add_interface(VarlinkServer *s, const char *idl_text, const VarlinkMethod *methods,
                                 size_t n_methods, void *userdata);
/* A listening socket (e.g. from sd_listen_fds()); owned by the server on
 * success only. */
int varlink_server_listen_fd(VarlinkServer *s, int fd);
/* Binds a unix socket at path (creating the parent directory, replacing a
 * stale socket, -EADDRINUSE if something still answers there) and chmods it
 * to mode. */
int varlink_server_listen_address(VarlinkServer *s, const char *path, mode_t mode);
unsigned varlink_server_n_connections(VarlinkServer *s);
/* NULL ok. Closes all connections (disconnect callbacks of pending calls
 * fire) and listeners. Calls still referenced stay valid but disconnected. */
VarlinkServer *varlink_server_free(VarlinkServer *s);
static inline void varlink_server_freep(VarlinkServer **s) {
        varlink_server_free(*s);
}

/* Replies. All steal the params reference, also on failure; NULL means {}.
 * They return 0 and drop the message when the peer went away or the call is
 * oneway, -EBUSY if the final reply was sent already, -EINVAL if params is
 * not an object, -ENOBUFS if the peer does not read (the connection is being
 * dropped). */
int varlink_call_reply(VarlinkCall *c, json_t *params);  /* final */
int varlink_call_notify(VarlinkCall *c, json_t *params); /* "continues": true; -EPROTO unless "more" */
/* The same for many calls: the message serialized once (free() it), then
 * queued as it is on each call's connection. No fds, no IDL check. */
char *varlink_notify_serialize(json_t *params);
int varlink_call_notify_serialized(VarlinkCall *c, const char *text);
int varlink_call_error(VarlinkCall *c, const char *error_name, json_t *params); /* final */
int varlink_call_error_invalid_parameter(VarlinkCall *c, const char *parameter);
/* Passes fd (taken, also on failure) along with the next reply of this call;
 * returns its index for the JSON field, or -ENOBUFS past VARLINK_FDS_MAX. */
int varlink_call_push_fd(VarlinkCall *c, int fd);

bool varlink_call_wants_more(VarlinkCall *c);
bool varlink_call_is_oneway(VarlinkCall *c);
const char *varlink_call_get_method(VarlinkCall *c); /* fully qualified */
int varlink_call_get_peer(VarlinkCall *c, uid_t *ret_uid, gid_t *ret_gid, pid_t *ret_pid);
/* The fd the caller sent at index (owned by the caller from now on);
 * -ENXIO if there is no such index, -EBADF if it was taken already. */
int varlink_call_take_fd(VarlinkCall *c, unsigned index);
VarlinkCall *varlink_call_ref(VarlinkCall *c);
VarlinkCall *varlink_call_unref(VarlinkCall *c);
static inline void varlink_call_unrefp(VarlinkCall **c) {
        varlink_call_unref(*c);
}
/* False once the peer went away (or the server was freed); replies are then
 * dropped silently. */
bool varlink_call_is_connected(VarlinkCall *c);
/* cb runs once, from the event loop, if the connection goes away before the
 * final reply was sent (Monitor streams). NULL cb clears it. */
void varlink_call_set_disconnect_callback(VarlinkCall *c, void (*cb)(VarlinkCall *c, void *userdata),
                                          void *userdata);

/* For tests and the fuzzer. */
typedef struct VarlinkLimits {
        size_t max_message_size;        /* bytes before the NUL */
        size_t max_output_buffer;       /* unsent bytes before a connection is dropped */
        size_t max_output_total;        /* unsent bytes on all connections: past it, the biggest goes */
        unsigned max_connections;
        unsigned max_connections_per_uid;
} VarlinkLimits;
/* Zero fields keep the current value. */
void varlink_server_set_limits(VarlinkServer *s, const VarlinkLimits *limits);
/* Serves an already connected socket (a socketpair() end); takes fd, also on
 * failure. The connection limits apply: -EUSERS if over them. */
int varlink_server_add_connection(VarlinkServer *s, int fd);
