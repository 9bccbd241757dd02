/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "base64.h"
#include "io.blkmqd.Zones.varlink.h"
#include "plan-print.h"
#include "util.h"
#include "zone-db.h"
#include "zones-varlink.h"

/* The varlink adapter of the zone service (zone-service.h): the only file
 * of src/zones that speaks the wire. Each method decodes its parameters,
 * calls the service with the peer's uid and a completion, and encodes the
 * result; a call that streams ("more") or takes a while is cancelled when
 * its client goes away. */

/* ---- encoding ---- */

static const char *cond_name(ZoneCond c) {
        switch (c) {
        case ZONE_COND_NOT_WP:
                return "notWritePointer";
        case ZONE_COND_EMPTY:
                return "empty";
        case ZONE_COND_IMP_OPEN:
                return "implicitOpen";
        case ZONE_COND_EXP_OPEN:
                return "explicitOpen";
        case ZONE_COND_CLOSED:
                return "closed";
        case ZONE_COND_READONLY:
                return "readOnly";
        case ZONE_COND_FULL:
                return "full";
        case ZONE_COND_OFFLINE:
                return "offline";
        }
        return "unknown";
}

static json_t *scrub_json(const ZoneSlot *x) {
        json_t *o = json_pack("{s:I, s:s}", "usec", (json_int_t) x->scrub_usec, "result",
                              x->scrub_result == 0          ? "ok"
                              : x->scrub_result == -EBADMSG ? "mismatch"
                                                            : "ioError");
        if (o && x->scrub_result < 0)
                json_object_set_new(o, "message",
                                    json_string(x->scrub_result == -EBADMSG ? "the data does not match its SHA-256"
                                                                            : strerror(-x->scrub_result)));
        return o;
}

static json_t *zone_json(ZoneRef ref) {
        ZoneDeviceInfo d;
        zone_device_get_info(ref.dev, &d);
        const ZoneSlot *x = &d.slots[ref.zone];
        json_t *o = json_pack("{s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:I, s:i}", "deviceId", d.id,
                              "zoneIndex", (int) ref.zone, "startLba", (json_int_t) (x->zone.start / 512), "start",
                              (json_int_t) x->zone.start, "size", (json_int_t) x->zone.len, "capacity",
                              (json_int_t) x->zone.capacity, "writePointer", (json_int_t) x->zone.wp, "condition",
                              cond_name(x->zone.cond), "state", zone_state_to_string(x->state), "bytesWritten",
                              (json_int_t) x->bytes_written, "resetCount", (int) x->reset_count);
        if (d.sysname)
                json_object_set_new(o, "device", json_string(d.sysname));
        if (x->lease)
                json_object_set_new(o, "lease", json_string(x->lease));
        if (x->owner_uid != ZONE_DB_UID_INVALID)
                json_object_set_new(o, "ownerUid", json_integer(x->owner_uid));
        if (x->label)
                json_object_set_new(o, "label", json_string(x->label));
        if (x->sha256)
                json_object_set_new(o, "sha256", json_string(x->sha256));
        if (x->note)
                json_object_set_new(o, "note", json_string(x->note));
        if (x->sealed_usec)
                json_object_set_new(o, "sealedUsec", json_integer((json_int_t) x->sealed_usec));
        if (x->scrub_usec)
                json_object_set_new(o, "scrub", scrub_json(x));
        return o;
}

static json_t *object_json(ZoneRef ref) {
        ZoneDeviceInfo d;
        zone_device_get_info(ref.dev, &d);
        const ZoneSlot *x = &d.slots[ref.zone];
        json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:i, s:I, s:I, s:I}", "size", (json_int_t) x->bytes_written,
                              "sha256", x->sha256, "lease", x->lease, "deviceId", d.id, "zoneIndex", (int) ref.zone,
                              "startLba", (json_int_t) (x->zone.start / 512), "start", (json_int_t) x->zone.start,
                              "sealedUsec", (json_int_t) x->sealed_usec);
        if (!o)
                return NULL;
        if (x->label)
                json_object_set_new(o, "label", json_string(x->label));
        if (x->owner_uid != ZONE_DB_UID_INVALID)
                json_object_set_new(o, "ownerUid", json_integer(x->owner_uid));
        if (d.sysname)
                json_object_set_new(o, "device", json_string(d.sysname));
        if (x->scrub_usec)
                json_object_set_new(o, "scrub", scrub_json(x));
        return o;
}

/* The error a result carries, with its parameters. */
static int reply_error(VarlinkCall *call, const ZoneResult *res) {
        const char *name = zone_error_to_string(res->error);
        json_t *p = NULL;

        switch (res->error) {
        case ZONE_ERROR_NONE:
        case ZONE_ERROR_CANCELLED:
        case _ZONE_ERROR_MAX:
                return 0;
        case ZONE_ERROR_INVALID_PARAMETER:
                return varlink_call_error_invalid_parameter(call, res->parameter);
        case ZONE_ERROR_PERMISSION_DENIED:
                break;
        case ZONE_ERROR_NO_SUCH_DEVICE:
                p = json_pack("{s:s}", "device", res->name);
                break;
        case ZONE_ERROR_DEVICE_GONE:
                p = json_pack("{s:s}", "deviceId", res->name);
                break;
        case ZONE_ERROR_NO_FREE_ZONE:
                p = json_object();
                if (res->name)
                        json_object_set_new(p, "device", json_string(res->name));
                break;
        case ZONE_ERROR_ZONE_LIMIT_REACHED:
                p = json_pack("{s:s, s:i}", "device", res->name, "maxActive", (int) res->max_active);
                break;
        case ZONE_ERROR_LEASE_NOT_FOUND:
        case ZONE_ERROR_LEASE_BUSY:
                p = json_pack("{s:s}", "lease", res->lease);
                break;
        case ZONE_ERROR_WRONG_STATE:
                p = json_pack("{s:s, s:s}", "lease", res->lease, "state", res->state);
                break;
        case ZONE_ERROR_TOO_LARGE:
                p = json_pack("{s:I, s:I}", "size", (json_int_t) res->size, "capacity", (json_int_t) res->capacity);
                break;
        case ZONE_ERROR_CHECKSUM_MISMATCH:
                p = json_pack("{s:s, s:s}", "expected", res->expected, "actual", res->actual);
                break;
        case ZONE_ERROR_IO:
                p = json_pack("{s:i, s:s}", "errno", res->errnum, "message", res->message);
                break;
        case ZONE_ERROR_FLUSH_FAILED:
                p = json_pack("{s:s, s:i, s:s}", "deviceId", res->name, "errno", res->errnum, "message",
                              res->message);
                break;
        case ZONE_ERROR_NOT_REPAIRABLE:
                p = json_pack("{s:s, s:i, s:s}", "deviceId", res->name, "zoneIndex", (int) res->ref.zone, "state",
                              res->state);
                if (p && res->lease)
                        json_object_set_new(p, "lease", json_string(res->lease));
                break;
        case ZONE_ERROR_LABEL_EXISTS:
                p = json_pack("{s:s, s:s}", "label", res->label, "lease", res->lease);
                break;
        case ZONE_ERROR_LABEL_NOT_FOUND:
                p = json_pack("{s:s}", "label", res->label);
                break;
        case ZONE_ERROR_LABEL_NOT_UNIQUE:
                p = json_pack("{s:s, s:i}", "label", res->label, "count", (int) res->count);
                break;
        }
        return varlink_call_error(call, name, p);
}

/* Replies (with reply, taken, or the error) and lets go of the call. */
static void finish(VarlinkCall *call, const ZoneResult *res, json_t *reply) {
        if (res->error != ZONE_ERROR_NONE) {
                json_decref(reply);
                (void) reply_error(call, res);
        } else
                (void) varlink_call_reply(call, reply);
        varlink_call_set_disconnect_callback(call, NULL, NULL);
        varlink_call_unref(call);
}

/* finish() with the zones of res (.objects) as {key: [each as one()]}. */
static void finish_list(VarlinkCall *call, const ZoneResult *res, const char *key, json_t *(*one)(ZoneRef)) {
        json_t *a = NULL;

        if (!res->error) {
                a = json_array();
                for (size_t i = 0; i < res->n_objects; i++)
                        json_array_append_new(a, one(res->objects[i]));
        }
        finish(call, res, a ? json_pack("{s:o}", key, a) : NULL);
}

static void on_client_gone(VarlinkCall *call, void *userdata) {
        zone_op_cancel(userdata);
}

/* The call waits for op (if any): cancelled when the client goes away. */
static void watch(VarlinkCall *call, ZoneOp *op) {
        if (op)
                varlink_call_set_disconnect_callback(call, on_client_gone, op);
}

/* ---- methods ---- */

static int method_list_devices(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const ZoneDevice *dev;
        json_t *a = json_array();

        for (size_t i = 0; (dev = zone_service_device_at(s, i)); i++) {
                unsigned c[_ZONE_STATE_MAX], damaged;
                ZoneDeviceInfo d;
                json_t *o;

                zone_device_get_info(dev, &d);
                zone_device_count(dev, c, &damaged);
                o = json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "deviceId", d.id,
                              "backend", d.backend, "zones", (int) d.n_zones, "zoneSize",
                              (json_int_t) (d.n_zones ? d.slots[0].zone.len : 0), "zoneCapacity",
                              (json_int_t) (d.n_zones ? d.slots[d.n_zones - 1].zone.capacity : 0), "maxOpen",
                              (int) d.max_open, "maxActive", (int) d.max_active, "free", c[ZONE_STATE_FREE],
                              "allocated", c[ZONE_STATE_ALLOCATED], "writing", c[ZONE_STATE_WRITING],
                              "sealed", c[ZONE_STATE_SEALED], "releasing", c[ZONE_STATE_RELEASING],
                              "failed", c[ZONE_STATE_FAILED]);
                if (d.sysname)
                        json_object_set_new(o, "device", json_string(d.sysname));
                json_object_set_new(o, "damaged", json_integer(damaged));
                /* Reported, not tuned: what a stager may use on the zones it is handed. */
                if (d.write_limits)
                        json_object_set_new(o, "writeLimits", write_limits_to_json(d.write_limits));
                json_array_append_new(a, o);
        }
        return varlink_call_reply(call, json_pack("{s:o}", "devices", a));
}

static int error_device(VarlinkCall *call, const char *name) {
        return varlink_call_error(call, "io.blkmqd.Zones.NoSuchDevice", json_pack("{s:s}", "device", name));
}

static int method_list_zones(VarlinkCall *call, json_t *params, void *userdata) {
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *state = json_string_value(json_object_get(params, "state"));
        const ZoneDevice *dev = zone_service_find_device(userdata, name);
        ZoneDeviceInfo d;
        json_t *a;
        int want = -1;

        if (!dev)
                return error_device(call, name);
        if (state && !streq(state, "empty")) {
                want = zone_state_from_string(state);
                if (want < 0)
                        return varlink_call_error_invalid_parameter(call, "state");
        }
        zone_device_get_info(dev, &d);
        a = json_array();
        for (size_t i = 0; i < d.n_zones; i++) {
                if (state && streq(state, "empty") && !zone_is_empty(&d.slots[i].zone))
                        continue;
                if (want >= 0 && (int) d.slots[i].state != want)
                        continue;
                json_array_append_new(a, zone_json((ZoneRef) { dev, (uint32_t) i }));
        }
        return varlink_call_reply(call, json_pack("{s:o}", "zones", a));
}

/* ZONE_ERROR_CANCELLED: the client went away while it waited; nothing is sent. */
static void allocate_done(const ZoneResult *res, void *userdata) {
        finish(userdata, res,
               res->error ? NULL : json_pack("{s:s, s:o}", "lease", res->lease, "zone", zone_json(res->ref)));
}

static int method_allocate(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneAllocRequest req = {
                .device = json_string_value(json_object_get(params, "device")),
                .label = json_string_value(json_object_get(params, "label")),
        };
        json_int_t size = json_integer_value(json_object_get(params, "size"));
        ZoneOp *op;
        uid_t uid = 0;
        int r;

        if (size <= 0)
                return varlink_call_error_invalid_parameter(call, "size");
        if (req.label && strlen(req.label) > 256)
                return varlink_call_error_invalid_parameter(call, "label");
        req.size = (uint64_t) size;
        (void) varlink_call_get_peer(call, &uid, NULL, NULL);
        r = zone_service_allocate(userdata, &req, uid, allocate_done, varlink_call_ref(call), &op);
        if (r < 0) {
                varlink_call_unref(call);
                return r;
        }
        watch(call, op);
        return 0;
}

static void append_progress(const ZoneResult *res, void *userdata) {
        (void) varlink_call_notify(userdata, json_pack("{s:I, s:o}", "bytesWritten", (json_int_t) res->bytes, "zone",
                                                       zone_json(res->ref)));
}

static void append_done(const ZoneResult *res, void *userdata) {
        finish(userdata, res,
               res->error ? NULL
                          : json_pack("{s:I, s:o}", "bytesWritten", (json_int_t) res->bytes, "zone",
                                      zone_json(res->ref)));
}

static int method_append(VarlinkCall *call, json_t *params, void *userdata) {
        json_t *jfd = json_object_get(params, "fd"), *jdata = json_object_get(params, "data");
        ZoneAppendRequest req = { .lease = json_string_value(json_object_get(params, "lease")), .fd = -EBADF };
        ZoneOp *op;
        uid_t uid;
        int r;

        if ((!jfd || json_is_null(jfd)) == (!jdata || json_is_null(jdata)))
                return varlink_call_error_invalid_parameter(call, jfd ? "data" : "fd");
        r = varlink_call_get_peer(call, &uid, NULL, NULL);
        if (r < 0)
                return r;
        /* Refused after the lease checks (the service's), as ever. */
        if (jdata && !json_is_null(jdata)) {
                r = base64_decode(json_string_value(jdata), &req.data, &req.data_len);
                if (r == -ENOMEM)
                        return r;
                if (r < 0)
                        req.bad_parameter = "data";
        } else {
                json_int_t idx = json_integer_value(jfd);
                req.fd = idx < 0 ? -EBADF : varlink_call_take_fd(call, (unsigned) idx);
                if (req.fd < 0)
                        req.bad_parameter = "fd";
        }
        r = zone_service_append(userdata, &req, uid, varlink_call_wants_more(call) ? append_progress : NULL,
                                append_done, varlink_call_ref(call), &op);
        if (r < 0) {
                varlink_call_unref(call);
                return r;
        }
        watch(call, op);
        return 0;
}

static void zone_done_reply(const ZoneResult *res, void *userdata) {
        finish(userdata, res, res->error ? NULL : json_pack("{s:o}", "zone", zone_json(res->ref)));
}

static int method_seal(VarlinkCall *call, json_t *params, void *userdata) {
        const char *lease = json_string_value(json_object_get(params, "lease"));
        const char *sha = json_string_value(json_object_get(params, "sha256"));
        uid_t uid;
        int r;

        if (strlen(sha) != 64 || strspn(sha, "0123456789abcdefABCDEF") != 64)
                return varlink_call_error_invalid_parameter(call, "sha256");
        r = varlink_call_get_peer(call, &uid, NULL, NULL);
        if (r < 0)
                return r;
        r = zone_service_seal(userdata, lease, sha, uid, zone_done_reply, varlink_call_ref(call));
        if (r < 0)
                varlink_call_unref(call);
        return r;
}

static int method_release(VarlinkCall *call, json_t *params, void *userdata) {
        uid_t uid;
        int r;

        r = varlink_call_get_peer(call, &uid, NULL, NULL);
        if (r < 0)
                return r;
        r = zone_service_release(userdata, json_string_value(json_object_get(params, "lease")), uid,
                                 zone_done_reply, varlink_call_ref(call));
        if (r < 0)
                varlink_call_unref(call);
        return r;
}

static void repair_done(const ZoneResult *res, void *userdata) {
        finish_list(userdata, res, "zones", zone_json);
}

static int method_repair(VarlinkCall *call, json_t *params, void *userdata) {
        json_t *jidx = json_object_get(params, "zoneIndex");
        int r;

        if (jidx && json_integer_value(jidx) < 0)
                return varlink_call_error_invalid_parameter(call, "zoneIndex");
        r = zone_service_repair(userdata, json_string_value(json_object_get(params, "device")),
                                jidx ? (int64_t) json_integer_value(jidx) : -1, repair_done, varlink_call_ref(call));
        if (r < 0)
                varlink_call_unref(call);
        return r;
}

static int method_get(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *lease = json_string_value(json_object_get(params, "lease"));
        const char *name = json_string_value(json_object_get(params, "device"));
        json_t *jidx = json_object_get(params, "zoneIndex");
        const ZoneDevice *d;
        ZoneDeviceInfo info;
        uint32_t z;

        if (lease) {
                d = zone_service_find_lease(s, lease, &z);
                if (!d)
                        return varlink_call_error(call, "io.blkmqd.Zones.LeaseNotFound",
                                                  json_pack("{s:s}", "lease", lease));
        } else {
                if (!name)
                        return varlink_call_error_invalid_parameter(call, "lease");
                d = zone_service_find_device(s, name);
                if (!d)
                        return error_device(call, name);
                zone_device_get_info(d, &info);
                if (!jidx || json_integer_value(jidx) < 0 || (size_t) json_integer_value(jidx) >= info.n_zones)
                        return varlink_call_error_invalid_parameter(call, "zoneIndex");
                z = (uint32_t) json_integer_value(jidx);
        }
        return varlink_call_reply(call, json_pack("{s:o}", "zone", zone_json((ZoneRef) { d, z })));
}

static int method_list_objects(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneService *s = userdata;
        const char *name = json_string_value(json_object_get(params, "device"));
        const char *label = json_string_value(json_object_get(params, "label"));
        const ZoneDevice *only = NULL, *d;
        json_t *a;

        if (name && !(only = zone_service_find_device(s, name)))
                return error_device(call, name);
        a = json_array();
        for (size_t i = 0; (d = zone_service_device_at(s, i)); i++) {
                ZoneDeviceInfo info;

                if (only && d != only)
                        continue;
                zone_device_get_info(d, &info);
                for (size_t k = 0; k < info.n_zones; k++)
                        if (zone_device_is_object(d, (uint32_t) k) && (!label || streq_ptr(info.slots[k].label, label)))
                                json_array_append_new(a, object_json((ZoneRef) { d, (uint32_t) k }));
        }
        return varlink_call_reply(call, json_pack("{s:o}", "objects", a));
}

static ZoneObjectRef object_ref(json_t *params) {
        return (ZoneObjectRef) {
                .lease = json_string_value(json_object_get(params, "lease")),
                .label = json_string_value(json_object_get(params, "label")),
                .device = json_string_value(json_object_get(params, "device")),
        };
}

static int method_find(VarlinkCall *call, json_t *params, void *userdata) {
        ZoneObjectRef ref = object_ref(params);
        ZoneResult res;

        zone_service_find_object(userdata, &ref, &res);
        if (res.error)
                return reply_error(call, &res);
        return varlink_call_reply(call, json_pack("{s:o}", "object", object_json(res.ref)));
}

static void read_progress(const ZoneResult *res, void *userdata) {
        (void) varlink_call_notify(userdata, json_pack("{s:I}", "bytes", (json_int_t) res->bytes));
}

static void read_done(const ZoneResult *res, void *userdata) {
        finish(userdata, res,
               res->error ? NULL
                          : json_pack("{s:I, s:s, s:o}", "bytes", (json_int_t) res->bytes, "sha256", res->actual,
                                      "object", object_json(res->ref)));
}

static int method_read(VarlinkCall *call, json_t *params, void *userdata) {
        json_t *jfd = json_object_get(params, "fd");
        ZoneObjectRef ref = object_ref(params);
        ZoneOp *op;
        uid_t uid;
        int fd, r;

        if (!json_is_integer(jfd) || json_integer_value(jfd) < 0 || json_integer_value(jfd) > INT_MAX)
                return varlink_call_error_invalid_parameter(call, "fd");
        fd = varlink_call_take_fd(call, (unsigned) json_integer_value(jfd));
        if (fd < 0)
                return varlink_call_error_invalid_parameter(call, "fd");
        r = varlink_call_get_peer(call, &uid, NULL, NULL);
        if (r < 0) {
                close(fd);
                return r;
        }
        r = zone_service_read(userdata, &ref, uid, fd, varlink_call_wants_more(call) ? read_progress : NULL,
                              read_done, varlink_call_ref(call), &op);
        if (r < 0) {
                varlink_call_unref(call);
                return r;
        }
        watch(call, op);
        return 0;
}

static void verify_done(const ZoneResult *res, void *userdata) {
        finish_list(userdata, res, "objects", object_json);
}

static int method_verify(VarlinkCall *call, json_t *params, void *userdata) {
        bool one = json_object_get(params, "lease") || json_object_get(params, "label");
        ZoneObjectRef ref = object_ref(params);
        const char *io_class = json_string_value(json_object_get(params, "ioClass"));
        int r;

        if (io_class && !streq(io_class, "idle") && !streq(io_class, "best-effort"))
                return varlink_call_error_invalid_parameter(call, "ioClass");
        r = zone_service_verify(userdata, one ? &ref : NULL, ref.device, !io_class || streq(io_class, "idle"),
                                verify_done, varlink_call_ref(call));
        if (r < 0)
                varlink_call_unref(call);
        return r;
}

static const VarlinkMethod methods[] = {
        /* Pipelined: a client may send many calls without waiting; their
         * records go into one transaction (zone-db's group commit). */
        { "ListDevices", method_list_devices, VARLINK_METHOD_PIPELINED },
        { "ListZones", method_list_zones, VARLINK_METHOD_PIPELINED },
        { "Allocate", method_allocate, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Append", method_append, VARLINK_METHOD_MUTATING | VARLINK_METHOD_ACCEPTS_FDS },
        { "Seal", method_seal, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Release", method_release, VARLINK_METHOD_MUTATING | VARLINK_METHOD_PIPELINED },
        { "Repair", method_repair, VARLINK_METHOD_MUTATING },
        { "Get", method_get, VARLINK_METHOD_PIPELINED },
        { "ListObjects", method_list_objects, VARLINK_METHOD_PIPELINED },
        { "Find", method_find, VARLINK_METHOD_PIPELINED },
        { "Read", method_read, VARLINK_METHOD_ACCEPTS_FDS },
        { "Verify", method_verify, 0 },
};

int zones_varlink_add(VarlinkServer *server, ZoneService *s) {
        return varlink_server_add_interface(server, io_blkmqd_Zones_varlink, methods, ELEMENTSOF(methods), s);
}
