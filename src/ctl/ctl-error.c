/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What went wrong, in one line on stderr, and the exit status it maps to
 * (blkmqctl(8) documents them; scripts rely on them): the transport, then
 * the error replies of io.blkmqd.Manager, .Metrics, .Zones and
 * org.varlink.service. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* An error mapping's answer when it does not know the error. */
#define NOT_MINE (-1)

int transport_error(int r) {
        switch (r) {
        case -ECONNRESET:
        case -EPIPE:
        case -ENOTCONN:
                return fail(EXIT_UNREACHABLE, "%s: blkmqd closed the connection", arg_address);
        case -ETIMEDOUT:
                return fail(EXIT_PROTOCOL, "%s: no reply from blkmqd within %llu s", arg_address,
                            CALL_TIMEOUT_USEC / 1000000ULL);
        case -EBADMSG:
                return fail(EXIT_PROTOCOL, "%s: malformed reply from blkmqd", arg_address);
        default:
                return fail(EXIT_PROTOCOL, "%s: %s", arg_address, strerror(-r));
        }
}

/* The errors said as "<the named thing>: <what is wrong>". */
static const struct {
        const char *error, *key, *text;
        int status;
} named_errors[] = {
        { INTERFACE ".NoSuchDevice", "device", "no such device", EXIT_NO_SUCH },
        { INTERFACE ".NoSuchProfile", "profile", "no such profile", EXIT_NO_SUCH },
        { METRICS_INTERFACE ".NoSuchDevice", "device", "no such device, or not probed", EXIT_NO_SUCH },
        { ZONES_INTERFACE ".NoSuchDevice", "device", "no such zoned device", EXIT_NO_SUCH },
        { ZONES_INTERFACE ".NotZoned", "device",
          "not a zoned device of the allocator (see ZoneAllocator= in blkmqd.conf(5))", EXIT_NO_SUCH },
        { ZONES_INTERFACE ".LeaseNotFound", "lease", "no such lease", EXIT_NO_SUCH },
        { ZONES_INTERFACE ".DeviceGone", "deviceId", "the device is gone", EXIT_ZONE_IO },
        { ZONES_INTERFACE ".LeaseBusy", "lease", "lease busy (an append, seal, release or read is in progress)",
          EXIT_LEASE_STATE },
        { ZONES_INTERFACE ".LabelNotFound", "label", "no sealed object with this label", EXIT_NO_SUCH },
};

static int named_error(const char *error, json_t *p) {
        for (size_t i = 0; i < ELEMENTSOF(named_errors); i++)
                if (streq(error, named_errors[i].error))
                        return fail(named_errors[i].status, "%s: %s", dash(jstr(p, named_errors[i].key)),
                                    named_errors[i].text);
        return NOT_MINE;
}

static int manager_error(const char *verb, const char *name, json_t *p) {
        char buf[512];

        if (streq(name, "Timeout"))
                return fail(EXIT_SETTING_FAILED, "%s: %s is still being tuned after %lld s (CallTimeoutSec=); "
                            "blkmqd goes on, see blkmqctl show", verb, dash(jstr(p, "device")),
                            jint(p, "seconds", 0));
        if (streq(name, "TrialRefused"))
                return fail(EXIT_SETTING_FAILED, "%s: %s: no trial: %s", verb, dash(jstr(p, "device")),
                            dash(jstr(p, "reason")));
        if (streq(name, "ConfigInvalid")) {
                long long line = jint(p, "line", 0);
                if (line > 0)
                        return fail(EXIT_CONFIG, "%s:%lld: %s", dash(jstr(p, "file")), line,
                                    dash(jstr(p, "message")));
                return fail(EXIT_CONFIG, "%s: %s", dash(jstr(p, "file")), dash(jstr(p, "message")));
        }
        if (streq(name, "AttributeNotWritable")) {
                const char *msg = jstr(p, "message");

                if (msg && streq(msg, "n/a")) /* the daemon's placeholder for no note */
                        msg = NULL;
                return fail(EXIT_SETTING_FAILED, "%s: %s: %s", dash(jstr(p, "device")),
                            dash(jstr(p, "attribute")),
                            explain_errno(buf, sizeof buf, msg, (int) jint(p, "errno", 0)));
        }
        return NOT_MINE;
}

/* NoFreeZone, ZoneLimitReached, TooLarge: EXIT_NO_SPACE. */
static int zones_space_error(const char *name, json_t *p) {
        if (streq(name, "NoFreeZone")) {
                if (jstr(p, "device"))
                        return fail(EXIT_NO_SPACE, "%s: no free zone (released zones become free after their reset)",
                                    jstr(p, "device"));
                return fail(EXIT_NO_SPACE, "no free zone on any device (released zones become free after their reset)");
        }
        if (streq(name, "ZoneLimitReached")) {
                const char *device = jstr(p, "device");
                long long max = jint(p, "maxActive", 0);

                if (!device || streq(device, "any"))
                        return fail(EXIT_NO_SPACE, "every device is at its active zone limit: seal or release a lease first");
                if (max > 0)
                        return fail(EXIT_NO_SPACE, "%s: active zone limit reached (max %lld): seal or release a lease first",
                                    device, max);
                return fail(EXIT_NO_SPACE, "%s: active zone limit reached: seal or release a lease first", device);
        }
        if (streq(name, "TooLarge"))
                return fail(EXIT_NO_SPACE, "%lld bytes do not fit in a zone (capacity %lld bytes, one object per zone)",
                            jint(p, "size", 0), jint(p, "capacity", 0));
        return NOT_MINE;
}

static int zones_error(const char *verb, const char *name, json_t *p) {
        char buf[512];

        if (streq(name, "ChecksumMismatch"))
                return fail(EXIT_CHECKSUM, "checksum mismatch: expected %s, the zone holds %s",
                            dash(jstr(p, "expected")), dash(jstr(p, "actual")));
        if (streq(name, "IOError"))
                return fail(EXIT_ZONE_IO, "%s: I/O error: %s", verb,
                            explain_errno(buf, sizeof buf, jstr(p, "message"), (int) jint(p, "errno", 0)));
        if (streq(name, "FlushFailed"))
                return fail(EXIT_ZONE_IO, "%s: %s could not flush its write cache: %s; the data is not known "
                            "to be on stable media; the zone is failed until its lease is released", verb,
                            dash(jstr(p, "deviceId")),
                            explain_errno(buf, sizeof buf, jstr(p, "message"), (int) jint(p, "errno", 0)));
        if (streq(name, "LabelExists"))
                return fail(EXIT_LEASE_STATE, "%s: label already used on this device, by lease %s "
                            "(labels are unique per device; see UniqueLabels= in blkmqd.conf(5))",
                            dash(jstr(p, "label")), dash(jstr(p, "lease")));
        if (streq(name, "LabelNotUnique"))
                return fail(EXIT_LEASE_STATE, "%s: %lld sealed objects have this label: name the device "
                            "(--device=) or the lease", dash(jstr(p, "label")), jint(p, "count", 0));
        if (streq(name, "NotRepairable")) {
                if (jstr(p, "lease"))
                        return fail(EXIT_LEASE_STATE, "%s: %s zone %lld is held by lease %s: release it (zones "
                                    "release %s) instead of repairing it", verb, dash(jstr(p, "deviceId")),
                                    jint(p, "zoneIndex", -1), jstr(p, "lease"), jstr(p, "lease"));
                return fail(EXIT_LEASE_STATE, "%s: %s zone %lld is %s, not failed: nothing to repair", verb,
                            dash(jstr(p, "deviceId")), jint(p, "zoneIndex", -1), dash(jstr(p, "state")));
        }
        if (streq(name, "WrongState"))
                return fail(EXIT_LEASE_STATE, "%s: %s: not possible while the zone is %s", verb,
                            dash(jstr(p, "lease")), dash(jstr(p, "state")));
        return zones_space_error(name, p);
}

/* org.varlink.service's errors, and a parameter a verb's user typed. */
static int service_error(const char *verb, const char *error, json_t *p) {
        const char *parameter = jstr(p, "parameter");

        if (streq(error, "org.varlink.service.PermissionDenied")) {
                if (streq(verb, "zones append") || streq(verb, "zones seal") || streq(verb, "zones release"))
                        return fail(EXIT_PERMISSION, "permission denied: %s: the lease belongs to another user (only its owner or root)",
                                    verb);
                return fail(EXIT_PERMISSION, "permission denied: %s needs root or the AdminGroup", verb);
        }
        if (streq(error, "org.varlink.service.InterfaceNotFound") && streq_ptr(jstr(p, "interface"), ZONES_INTERFACE))
                return fail(EXIT_PROTOCOL, "%s: this blkmqd has no zone allocator (" ZONES_INTERFACE ")", verb);
        if (!streq(error, "org.varlink.service.InvalidParameter"))
                return NOT_MINE;
        if (streq(verb, "zones") && streq_ptr(parameter, "state"))
                return fail(EXIT_USAGE, "invalid state (free, allocated, writing, sealed, releasing, failed, empty)");
        if (streq(verb, "log-level") && streq_ptr(parameter, "level"))
                return fail(EXIT_USAGE, "invalid log level (emerg, alert, crit, err, warning, notice, info, debug)");
        if (streq(verb, "latency") && streq_ptr(parameter, "window"))
                return fail(EXIT_USAGE, "invalid window (1m, 10m, total)");
        return NOT_MINE;
}

static bool in_interface(const char *error, const char *interface) {
        size_t n = strlen(interface);

        return strncmp(error, interface, n) == 0 && error[n] == '.';
}

static int mapped_error(const char *verb, const char *error, json_t *p) {
        const char *name = strrchr(error, '.') ? strrchr(error, '.') + 1 : error;
        int r;

        if (streq(error, "io.blkmqd.TooManyConnections"))
                return fail(EXIT_UNREACHABLE, "blkmqd refuses more connections (%lld in all, %lld per user are open): "
                            "try again when some have closed",
                            jint(p, "max", 0), jint(p, "maxPerUid", 0));
        r = named_error(error, p);
        if (r != NOT_MINE)
                return r;
        if (in_interface(error, INTERFACE))
                return manager_error(verb, name, p);
        if (in_interface(error, ZONES_INTERFACE))
                return zones_error(verb, name, p);
        return service_error(verb, error, p);
}

int varlink_error(const char *verb, const char *error, json_t *p) {
        int r;

        if (arg_json) {
                json_t *o = json_pack("{s:s, s:O}", "error", error, "parameters", p);
                if (o)
                        print_json(o);
                json_decref(o);
        }

        r = mapped_error(verb, error, p);
        if (r != NOT_MINE)
                return r;
        _cleanup_free_ char *text = json_object_size(p) > 0 ? json_dumps(p, JSON_COMPACT) : NULL;
        return fail(EXIT_PROTOCOL, "%s: %s%s%s", verb, error, text ? " " : "", text ? text : "");
}
