/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Sealed objects of the zone allocator (io.blkmqd.Zones): zones objects,
 * find, cat, verify. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/param.h>
#include <sys/sendfile.h>
#include <unistd.h>

#include "ctl.h"

/* A lease is a UUID; anything else names an object by its label. */
bool looks_like_lease(const char *s) {
        if (strlen(s) != 36)
                return false;
        for (size_t i = 0; i < 36; i++)
                if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-' : !isxdigit((unsigned char) s[i]))
                        return false;
        return true;
}

/* {"lease": X} or {"label": X[, "device": device]} */
static json_t *object_params(const char *what, const char *device) {
        json_t *p = looks_like_lease(what) ? json_pack("{s:s}", "lease", what) : json_pack("{s:s}", "label", what);

        if (p && !looks_like_lease(what) && device && json_object_set_new(p, "device", json_string(device)) < 0)
                return json_decref(p), NULL;
        return p;
}

static const char *scrub_text(json_t *o, char *buf, size_t size) {
        json_t *sc = json_object_get(o, "scrub");

        if (!sc)
                return "-";
        if (streq_ptr(jstr(sc, "result"), "ok")) {
                char ts[64];
                format_timestamp(ts, sizeof ts, jint(sc, "usec", 0), false);
                snprintf(buf, size, "ok %s", ts);
        } else
                snprintf(buf, size, "%s!", jstr(sc, "result") ?: "?");
        return buf;
}

static int objects_table(json_t *objects, void *userdata) {
        static const char *const h[] = { "LABEL", ">SIZE", "SHA256", "DEVICE", ">ZONE", ">START-LBA", "SEALED",
                                         "SCRUB", "LEASE" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *o;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        json_array_foreach(objects, i, o) {
                char size[64], sealed[64], scrub[96];
                format_bytes(size, sizeof size, jint(o, "size", 0));
                format_timestamp(sealed, sizeof sealed, jint(o, "sealedUsec", 0), false);
                if (table_add(t, jstr(o, "label")) < 0 || table_add(t, size) < 0 || table_add(t, jstr(o, "sha256")) < 0 ||
                    table_add(t, jstr(o, "device") ?: jstr(o, "deviceId")) < 0 ||
                    table_addf(t, "%lld", jint(o, "zoneIndex", -1)) < 0 ||
                    table_addf(t, "%lld", jint(o, "startLba", -1)) < 0 || table_add(t, sealed) < 0 ||
                    table_add(t, scrub_text(o, scrub, sizeof scrub)) < 0 || table_add(t, jstr(o, "lease")) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        table_print_counted(t, "object", " listed (START-LBA in 512-byte sectors).");
        return EXIT_OK;
}

/* zones objects [DEVICE]: the sealed objects. */
int zones_objects(const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones objects");
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = device ? json_pack("{s:s}", "device", device) : json_object();
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(&c, ZONES_INTERFACE ".ListObjects", params, &reply);
        if (r != EXIT_OK)
                return r;
        return ctl_render(json_object_get(reply, "objects"), objects_table, NULL);
}

/* The one object of a Find reply, as a table of one. */
static int found_table(json_t *object, void *userdata) {
        _cleanup_(json_decrefp) json_t *one = json_array();

        if (!one || json_array_append(one, object) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        return objects_table(one, NULL);
}

/* Find(label[, device]) */
static int find_label(Ctl *c, const char *label, const char *device, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "label", label);

        if (!params || (device && json_object_set_new(params, "device", json_string(device)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        return ctl_call(c, ZONES_INTERFACE ".Find", params, ret);
}

/* zones find LABEL: the one sealed object with that label. */
int zones_find(const char *label, const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones find");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = find_label(&c, label, device, &reply);
        if (r != EXIT_OK)
                return r;
        return ctl_render(json_object_get(reply, "object"), found_table, NULL);
}

/* The lease of the one sealed object labelled label (device narrows). */
int lease_of_label(const char *label, const char *device, char **ret) {
        _cleanup_ctl_ Ctl c = CTL("zones");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        int r;

        r = find_label(&c, label, device, &reply);
        if (r != EXIT_OK)
                return r;
        *ret = strdup(jstr(json_object_get(reply, "object"), "lease") ?: "");
        return *ret ? EXIT_OK : fail(EXIT_PROTOCOL, "out of memory");
}

/* ---- verify ---- */

/* Whether name is a zoned device of the allocator by its kernel name or ID
 * (zones verify nvme0n1: the device, not a label). */
static bool names_zoned_device(const char *name) {
        _cleanup_ctl_ Ctl c = CTL("zones verify");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *devices;

        if (ctl_call(&c, ZONES_INTERFACE ".ListDevices", NULL, &reply) != EXIT_OK)
                return false;
        devices = json_object_get(reply, "devices");
        return json_array_find(devices, "device", name) || json_array_find(devices, "deviceId", name);
}

static const char *arg_io_class = NULL; /* zones verify: NULL is blkmqd's default, idle */

int objects_opt_io_class(const char *arg) {
        if (!streq(arg, "idle") && !streq(arg, "best-effort"))
                return fail(EXIT_USAGE, "--io-class=%s: idle or best-effort", arg);
        arg_io_class = arg;
        return EXIT_OK;
}

/* Verify's parameters: all, a device, or one object by lease or label
 * (on device, --device, if given). */
static json_t *verify_params(const char *what, const char *device) {
        json_t *p;

        if (!what)
                p = json_object();
        else if (looks_like_lease(what) ||
                 !(strchr(what, '/') || strncmp(what, "emu:", 4) == 0 || device || names_zoned_device(what)))
                /* a lease or a label; a device is named by a path, or with --device */
                p = object_params(what, device);
        else
                p = json_pack("{s:s}", "device", what);
        if (p && arg_io_class && json_object_set_new(p, "ioClass", json_string(arg_io_class)) < 0) {
                json_decref(p);
                return NULL;
        }
        return p;
}

/* zones verify [LEASE|LABEL|DEVICE]: read back and check now. */
int zones_verify(const char *what, const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones verify");
        _cleanup_(json_decrefp) json_t *reply = NULL, *params = verify_params(what, device);
        json_t *objects, *o;
        size_t i;
        int r, bad = 0;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(&c, ZONES_INTERFACE ".Verify", params, &reply);
        if (r != EXIT_OK)
                return r;
        objects = json_object_get(reply, "objects");
        json_array_foreach(objects, i, o) {
                json_t *sc = json_object_get(o, "scrub");
                if (!sc || !streq_ptr(jstr(sc, "result"), "ok"))
                        bad++;
        }
        r = ctl_render(objects, objects_table, NULL);
        if (r != EXIT_OK)
                return r;
        if (bad)
                return fail(EXIT_CHECKSUM, "zones verify: %d of %zu objects do not read back to their SHA-256 "
                                           "(SCRUB column; blkmqd logged each)",
                            bad, json_array_size(objects));
        return EXIT_OK;
}

/* ---- cat ---- */

/* Where blkmqd writes the object: an unnamed file beside out (linked in at
 * the end), or a memfd for standard output. Returns an exit status. */
static int cat_open(const char *out, int *ret_fd) {
        _cleanup_free_ char *dir = NULL;
        int fd;

        if (!out) {
                fd = memfd_create("blkmqctl-cat", MFD_CLOEXEC);
                if (fd < 0)
                        return fail(EXIT_PROTOCOL, "memfd_create: %s", strerror(errno));
                *ret_fd = fd;
                return EXIT_OK;
        }
        const char *slash = strrchr(out, '/');
        dir = slash ? strndup(out, (size_t) (slash - out) + (slash == out)) : strdup(".");
        if (!dir)
                return fail(EXIT_PROTOCOL, "out of memory");
        fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        if (fd < 0)
                return fail(EXIT_USAGE, "%s: cannot create a file in %s: %s", out, dir, strerror(errno));
        *ret_fd = fd;
        return EXIT_OK;
}

/* The first n bytes of fd to standard output. */
static int cat_copy_out(int fd, uint64_t n) {
        off_t off = 0;

        while ((uint64_t) off < n) {
                ssize_t w = sendfile(STDOUT_FILENO, fd, &off, (size_t) MIN(n - (uint64_t) off, (uint64_t) 1 << 30));
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0) {
                        /* not a target sendfile takes (a tty, some pipes): plain copies */
                        uint8_t buf[65536];
                        ssize_t k = pread(fd, buf, sizeof buf, off);
                        if (k <= 0 || write(STDOUT_FILENO, buf, (size_t) k) != k)
                                return fail(EXIT_USAGE, "standard output: %s", strerror(errno ?: EIO));
                        off += k;
                }
        }
        return EXIT_OK;
}

/* Verified: only now does anything reach the reader, in out or on
 * standard output. */
static int cat_deliver(int fd, const char *out, json_t *last) {
        char proc[64];

        if (!out)
                return cat_copy_out(fd, (uint64_t) jint(last, "bytes", 0));
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
        if (fsync(fd) < 0)
                return fail(EXIT_PROTOCOL, "%s: %s", out, strerror(errno));
        (void) unlink(out);
        if (linkat(AT_FDCWD, proc, AT_FDCWD, out, AT_SYMLINK_FOLLOW) < 0)
                return fail(EXIT_USAGE, "%s: %s", out, strerror(errno));
        return EXIT_OK;
}

/* What was read, on stderr when the object went to a file. */
static void cat_report(const char *out, json_t *last) {
        if (arg_json) {
                _cleanup_(json_decrefp) json_t *o = json_pack("{s:I, s:s, s:O}", "bytes", (json_int_t) jint(last, "bytes", 0),
                                                              "sha256", jstr(last, "sha256") ?: "", "object",
                                                              json_object_get(last, "object"));
                if (o && out) {
                        char *txt = json_dumps(o, JSON_COMPACT);
                        if (txt)
                                fprintf(stderr, "%s\n", txt);
                        free(txt);
                }
        } else if (out)
                fprintf(stderr, "%s: %lld bytes, SHA-256 %s verified.\n", out, jint(last, "bytes", 0), jstr(last, "sha256"));
}

/* zones cat LABEL|LEASE [-o FILE]: the object, read back by blkmqd into a
 * descriptor we pass and verified on the way. Nothing reaches FILE or
 * standard output before the SHA-256 matched: blkmqd writes into a file of
 * our own (cat_open()), which is only then linked in or copied out. */
int zones_cat(const char *what, const char *device, const char *out) {
        _cleanup_ctl_ Ctl c = CTL("zones cat");
        _cleanup_(json_decrefp) json_t *params = object_params(what, device), *last = NULL;
        _cleanup_close_ int fd = -EBADF;
        uint64_t total = 0;
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = cat_open(out, &fd);
        if (r != EXIT_OK)
                return r;
        if (!looks_like_lease(what)) {
                /* the size, for the progress bar, asked on a connection of its own */
                _cleanup_ctl_ Ctl size_c = CTL("zones cat");
                _cleanup_(json_decrefp) json_t *found = NULL;
                if (ctl_call(&size_c, ZONES_INTERFACE ".Find", params, &found) == EXIT_OK)
                        total = (uint64_t) jint(json_object_get(found, "object"), "size", 0);
        }
        if (json_object_set_new(params, "fd", json_integer(0)) < 0)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = call_fd_progress(&c, ZONES_INTERFACE ".Read", params, fd, "read", "bytes", total, &last);
        if (r != EXIT_OK)
                return r;
        r = cat_deliver(fd, out, last);
        if (r != EXIT_OK)
                return r;
        cat_report(out, last);
        return EXIT_OK;
}
