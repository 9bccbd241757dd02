/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The zone allocator (io.blkmqd.Zones): zones, zones DEVICE, zones free,
 * alloc, append, seal, release, get; the objects (zones objects, find,
 * cat, verify) are in ctl-objects.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"
#include "sha256.h" /* basic's SHA-256: SHA256_DIGEST_SIZE, SHA256_HEX_SIZE */

const char *arg_device = NULL;
const char *arg_label = NULL;
const char *arg_output = NULL;
static char arg_device_buf[PATH_MAX + 8];
static const char *arg_state = NULL;  /* zones DEV */
static uint64_t arg_size = 0;         /* zones alloc */
static bool arg_size_set = false;
static bool arg_inline = false;       /* zones append */

static const char *const zone_states[] = { "free", "allocated", "writing", "sealed", "releasing", "failed", "empty" };

static bool zone_state_valid(const char *s) {
        for (size_t i = 0; i < ELEMENTSOF(zone_states); i++)
                if (streq(s, zone_states[i]))
                        return true;
        return false;
}

/* Bytes: an integer with an optional binary suffix (K, M, G, T, or KiB,
 * MiB, GiB, TiB, or B): "4096", "64M", "1GiB". */
static int parse_size(const char *s, uint64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t factor;
        } suffixes[] = {
                { "", 1 },          { "B", 1 },
                { "K", 1ULL << 10 }, { "KiB", 1ULL << 10 }, { "M", 1ULL << 20 }, { "MiB", 1ULL << 20 },
                { "G", 1ULL << 30 }, { "GiB", 1ULL << 30 }, { "T", 1ULL << 40 }, { "TiB", 1ULL << 40 },
        };
        unsigned long long v;
        char *end;

        if (!*s || *s == '-' || *s == '+' || *s == ' ')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s)
                return -EINVAL;
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++)
                if (streq(end, suffixes[i].suffix)) {
                        if (v > (unsigned long long) INT64_MAX / suffixes[i].factor)
                                return -ERANGE;
                        *ret = v * suffixes[i].factor;
                        return 0;
                }
        return -EINVAL;
}

/* A zoned device as a person types it: nvme0n1, /dev/nvme0n1, its ID, or
 * an emulation file by its path (emu:PATH, or just PATH, relative or not).
 * Paths become absolute here, where the working directory is the user's. */
static const char *device_arg(const char *in, char buf[static PATH_MAX + 8]) {
        const char *path = strncmp(in, "emu:", 4) == 0 ? in + 4 : in;
        char real[PATH_MAX];

        struct stat st;

        /* nvme0n1, /dev/nvme0n1, an ID: as they are. A path: only to a file. */
        if (strncmp(in, "/dev/", 5) == 0 || stat(path, &st) < 0 || !S_ISREG(st.st_mode) || !realpath(path, real))
                return in;
        snprintf(buf, PATH_MAX + 8, "emu:%s", real);
        return buf;
}

/* A ZoneInfo, one field a line; lease: from the reply, if the zone has none. */
static void print_zone(json_t *z, const char *lease) {
        char buf[256], a[64], b[64];

        field("Lease", jstr(z, "lease") ? jstr(z, "lease") : lease);
        if (jstr(z, "device"))
                snprintf(buf, sizeof buf, "%s (%s)", jstr(z, "device"), dash(jstr(z, "deviceId")));
        else if (strncmp(dash(jstr(z, "deviceId")), "emu:", 4) == 0)
                /* Emulated zones have no kernel name. */
                snprintf(buf, sizeof buf, "%s (emulated)", jstr(z, "deviceId"));
        else
                snprintf(buf, sizeof buf, "%s (gone)", dash(jstr(z, "deviceId")));
        field("Device", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "zoneIndex", -1));
        field("Zone", buf);
        snprintf(buf, sizeof buf, "%lld", jint(z, "startLba", -1));
        field("Start LBA", buf);
        /* The LBA above counts 512-byte sectors (as blkzone does; nvme-cli
         * counts the namespace's own blocks): the byte offset says it
         * without a unit to get wrong. */
        snprintf(buf, sizeof buf, "%lld", jint(z, "start", -1));
        field("Start byte", buf);
        field("State", jstr(z, "state"));
        field("Condition", jstr(z, "condition"));
        format_bytes_exact(a, sizeof a, jint(z, "bytesWritten", 0));
        format_bytes(b, sizeof b, jint(z, "capacity", 0));
        snprintf(buf, sizeof buf, "%s of %s", a, b);
        field("Written", buf);
        if (jstr(z, "label"))
                field("Label", jstr(z, "label"));
        if (jint(z, "ownerUid", -1) >= 0) {
                snprintf(buf, sizeof buf, "%lld", jint(z, "ownerUid", -1));
                field("Owner UID", buf);
        }
        if (jstr(z, "sha256"))
                field("SHA256", jstr(z, "sha256"));
        if (jint(z, "sealedUsec", 0) > 0) {
                format_timestamp(buf, sizeof buf, jint(z, "sealedUsec", 0), false);
                field("Sealed", buf);
        }
        if (json_object_get(z, "scrub")) {
                json_t *sc = json_object_get(z, "scrub");
                format_timestamp(a, sizeof a, jint(sc, "usec", 0), false);
                snprintf(buf, sizeof buf, "%s at %s%s%s", dash(jstr(sc, "result")), a, jstr(sc, "message") ? ": " : "",
                         jstr(sc, "message") ?: "");
                field("Checked", buf);
        }
        snprintf(buf, sizeof buf, "%lld", jint(z, "resetCount", 0));
        field("Resets", buf);
        if (jstr(z, "note"))
                field("Note", jstr(z, "note"));
}

static int show_zone(json_t *reply, void *lease) {
        print_zone(json_object_get(reply, "zone"), lease);
        return EXIT_OK;
}

/* The reply of a call that returns {zone} (and maybe more): JSON or fields. */
static int print_zone_reply(json_t *reply, const char *lease) {
        return ctl_render(reply, show_zone, (char *) lease);
}

/* ---- zones: the devices ---- */

static int zone_devices_table(json_t *devices, void *userdata) {
        static const char *const h[] = { "DEVICE", "ID",     "BACKEND",  ">ZONES",  ">SIZE",      ">CAP",
                                         ">FREE",  ">ALLOC", ">WRITING", ">SEALED", ">RELEASING", ">FAILED" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        json_t *d;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (size_t c = 0; c < ELEMENTSOF(h); c++)
                t->fixed[c] = c != 1; /* only ID (long: wwn:..., emu:/path) gives way */
        json_array_foreach(devices, i, d) {
                char size[32], cap[32];

                format_bytes(size, sizeof size, jint(d, "zoneSize", 0));
                format_bytes(cap, sizeof cap, jint(d, "zoneCapacity", 0));
                const char *id = jstr(d, "deviceId");
                /* An emulated device has no kernel name: its file is what a person knows it by. */
                const char *dev = jstr(d, "device") ?: (id && strncmp(id, "emu:", 4) == 0 ? id + 4 : NULL);
                if (table_add(t, dev) < 0 || table_add(t, id) < 0 ||
                    table_add(t, jstr(d, "backend")) < 0 || table_addf(t, "%lld", jint(d, "zones", 0)) < 0 ||
                    table_add(t, size) < 0 || table_add(t, cap) < 0 ||
                    table_addf(t, "%lld", jint(d, "free", 0)) < 0 || table_addf(t, "%lld", jint(d, "allocated", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "writing", 0)) < 0 || table_addf(t, "%lld", jint(d, "sealed", 0)) < 0 ||
                    table_addf(t, "%lld", jint(d, "releasing", 0)) < 0 || table_addf(t, "%lld", jint(d, "failed", 0)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        table_print_counted(t, "zoned device", " listed.");
        /* The kernel's write limits of each (reported, not tuned): a
         * second table, with the legend only (a script reading the first
         * without one gets it alone). */
        if (arg_legend && json_array_size(devices) > 0) {
                const char *wh[1 + WRITE_LIMIT_COLUMNS] = { "DEVICE" };
                _cleanup_(table_freep) Table *w = NULL;

                memcpy(wh + 1, write_limit_headers, sizeof write_limit_headers);
                w = table_new(ELEMENTSOF(wh), wh);
                if (!w)
                        return fail(EXIT_PROTOCOL, "out of memory");
                json_array_foreach(devices, i, d) {
                        const char *id = jstr(d, "deviceId");
                        const char *dev = jstr(d, "device") ?: (id && strncmp(id, "emu:", 4) == 0 ? id + 4 : id);
                        if (table_add(w, dev) < 0 || table_add_write_limits(w, json_object_get(d, "writeLimits")) < 0)
                                return fail(EXIT_PROTOCOL, "out of memory");
                }
                printf("\nWrite limits (queue/, read-only: reported, not tuned):\n");
                table_print(w);
        }
        /* Damaged objects are said even without a legend, on stderr: a
         * script reading the table still sees the table alone. */
        json_array_foreach(devices, i, d)
                if (jint(d, "damaged", 0) > 0)
                        fprintf(stderr, "%s: %lld sealed object%s no longer read%s back to %s SHA-256 "
                                "(never repaired; see blkmqctl zones objects).\n",
                                jstr(d, "deviceId"), jint(d, "damaged", 0), jint(d, "damaged", 0) == 1 ? "" : "s",
                                jint(d, "damaged", 0) == 1 ? "s" : "", jint(d, "damaged", 0) == 1 ? "its" : "their");
        return EXIT_OK;
}

static int zones_list_devices(void) {
        _cleanup_ctl_ Ctl c = CTL("zones");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *devices;
        int r;

        r = ctl_call(&c, ZONES_INTERFACE ".ListDevices", NULL, &reply);
        if (r != EXIT_OK)
                return r;
        devices = json_object_get(reply, "devices");
        return ctl_render(devices ?: reply, zone_devices_table, NULL);
}

/* ---- zones DEVICE, zones free DEVICE ---- */

static int list_zones(Ctl *c, const char *device, const char *state, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "device", device);

        if (!params || (state && json_object_set_new(params, "state", json_string(state)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        return ctl_call(c, ZONES_INTERFACE ".ListZones", params, ret);
}

/* A sealed zone whose last check failed is not just "sealed": the table
 * says so in the same column, as one word a script cannot mistake. */
static const char *zone_state_text(json_t *z, char *buf, size_t size) {
        json_t *sc = json_object_get(z, "scrub");
        const char *state = jstr(z, "state");

        if (!sc || streq_ptr(jstr(sc, "result"), "ok") || !streq_ptr(state, "sealed"))
                return state;
        snprintf(buf, size, "sealed!%s", jstr(sc, "result") ?: "?");
        return buf;
}

static int zones_table(json_t *zones, void *userdata) {
        static const char *const h[] = { ">INDEX", ">START-LBA", ">WP", "COND", "STATE", "LEASE", "LABEL", ">BYTES" };
        _cleanup_(table_freep) Table *t = table_new(ELEMENTSOF(h), h);
        char statebuf[64];
        json_t *z;
        size_t i;

        if (!t)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (size_t c = 0; c < ELEMENTSOF(h); c++)
                t->fixed[c] = c != 5 && c != 6; /* LEASE and LABEL give way */
        json_array_foreach(zones, i, z)
                if (table_addf(t, "%lld", jint(z, "zoneIndex", -1)) < 0 ||
                    table_addf(t, "%lld", jint(z, "startLba", -1)) < 0 ||
                    table_addf(t, "%lld", jint(z, "writePointer", 0) / (long long) SECTOR_SIZE) < 0 ||
                    table_add(t, jstr(z, "condition")) < 0 || table_add(t, zone_state_text(z, statebuf, sizeof statebuf)) < 0 ||
                    table_add(t, jstr(z, "lease")) < 0 || table_add(t, jstr(z, "label")) < 0 ||
                    table_addf(t, "%lld", jint(z, "bytesWritten", 0)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        table_print_counted(t, "zone", " listed (START-LBA and WP in 512-byte sectors).");
        return EXIT_OK;
}

static int zones_list_zones(const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *zones;
        int r;

        r = list_zones(&c, device, arg_state, &reply);
        if (r != EXIT_OK)
                return r;
        zones = json_object_get(reply, "zones");
        return ctl_render(zones ?: reply, zones_table, NULL);
}

static int print_start_lba(json_t *z, void *userdata) {
        printf("%lld\n", jint(z, "startLba", -1));
        return EXIT_OK;
}

/* zones free DEV: the start LBA of the first free, empty zone, alone on a
 * line, for $(...) in scripts. */
static int zones_free(const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones free");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        json_t *z;
        size_t i;
        int r;

        r = list_zones(&c, device, "free", &reply);
        if (r != EXIT_OK)
                return r;
        json_array_foreach(json_object_get(reply, "zones"), i, z)
                if (streq_ptr(jstr(z, "state"), "free") && streq_ptr(jstr(z, "condition"), "empty"))
                        return ctl_render(z, print_start_lba, NULL);
        return fail(EXIT_NO_SUCH, "%s: no free empty zone", device);
}

/* ---- alloc, seal, release, get ---- */

static int zones_alloc(void) {
        _cleanup_ctl_ Ctl c = CTL("zones alloc");
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:I}", "size", (json_int_t) arg_size), *reply = NULL;
        int r;

        if (!params || (arg_device && json_object_set_new(params, "device", json_string(arg_device)) < 0) ||
            (arg_label && json_object_set_new(params, "label", json_string(arg_label)) < 0))
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(&c, ZONES_INTERFACE ".Allocate", params, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, jstr(reply, "lease"));
}

static bool sha256_hex_valid(const char *s) {
        size_t n = 0;

        for (; s[n]; n++)
                if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f') || (s[n] >= 'A' && s[n] <= 'F')))
                        return false;
        return n == 2 * SHA256_DIGEST_SIZE;
}

static int zones_lease_call(const char *verb, const char *method, const char *lease, const char *sha) {
        _cleanup_ctl_ Ctl c = CTL(verb);
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease);
        char lower[SHA256_HEX_SIZE];

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        if (sha) {
                if (!sha256_hex_valid(sha))
                        return fail(EXIT_USAGE, "%s: not a SHA-256 (64 hex digits)", sha);
                for (size_t i = 0; i < sizeof lower; i++)
                        lower[i] = (char) (sha[i] >= 'A' && sha[i] <= 'F' ? sha[i] - 'A' + 'a' : sha[i]);
                if (json_object_set_new(params, "sha256", json_string(lower)) < 0)
                        return fail(EXIT_PROTOCOL, "out of memory");
        }
        return ctl_query(&c, method, params, show_zone, (char *) lease);
}

/* zones release LEASE|LABEL: by lease, or by the label of a sealed object */
static int zones_release(const char *what) {
        _cleanup_free_ char *lease = NULL;

        if (!looks_like_lease(what)) {
                int r = lease_of_label(what, arg_device, &lease);
                if (r != EXIT_OK)
                        return r;
        }
        return zones_lease_call("zones release", ZONES_INTERFACE ".Release", lease ?: what, NULL);
}

/* A zone index as typed: decimal digits, 0 to INT32_MAX. */
static int parse_zone_index(const char *s, json_int_t *ret) {
        char *end;
        unsigned long idx;

        errno = 0;
        idx = strtoul(s, &end, 10);
        if (errno != 0 || end == s || *end != 0 || s[0] == '-' || idx > INT32_MAX)
                return -EINVAL;
        *ret = (json_int_t) idx;
        return 0;
}

/* zones get LEASE, or zones get DEVICE INDEX */
static int zones_get(int argc, char **argv) {
        _cleanup_ctl_ Ctl c = CTL("zones get");
        _cleanup_(json_decrefp) json_t *params = NULL;

        if (argc == 3)
                params = json_pack("{s:s}", "lease", argv[2]);
        else {
                json_int_t idx;

                if (parse_zone_index(argv[3], &idx) < 0)
                        return fail(EXIT_USAGE, "%s: not a zone index", argv[3]);
                params = json_pack("{s:s, s:I}", "device", argv[2], "zoneIndex", idx);
        }
        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        return ctl_query(&c, ZONES_INTERFACE ".Get", params, show_zone, argc == 3 ? argv[2] : NULL);
}

/* ---- append: fd passing with progress, or inline base64 ---- */

/* Append(lease, fd) with "more": the daemon reads fd to its end and sends
 * the bytes appended so far as it goes. */
int append_fd(Ctl *c, const char *lease, int fd, uint64_t total, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s, s:i}", "lease", lease, "fd", 0);

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        return call_fd_progress(c, ZONES_INTERFACE ".Append", params, fd, "append", "bytesWritten", total, ret);
}

static char *base64_encode(const uint8_t *p, size_t n) {
        static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
        size_t i;

        if (!out)
                return NULL;
        for (i = 0; i + 2 < n; i += 3) {
                uint32_t v = (uint32_t) p[i] << 16 | (uint32_t) p[i + 1] << 8 | p[i + 2];
                *o++ = table[v >> 18 & 63];
                *o++ = table[v >> 12 & 63];
                *o++ = table[v >> 6 & 63];
                *o++ = table[v & 63];
        }
        if (i < n) {
                uint32_t v = (uint32_t) p[i] << 16 | (i + 1 < n ? (uint32_t) p[i + 1] << 8 : 0);
                *o++ = table[v >> 18 & 63];
                *o++ = table[v >> 12 & 63];
                *o++ = i + 1 < n ? table[v >> 6 & 63] : '=';
                *o++ = '=';
        }
        *o = 0;
        return out;
}

/* Reads up to size bytes, short only at end of file. */
static ssize_t read_full(int fd, uint8_t *buf, size_t size) {
        size_t got = 0;

        while (got < size) {
                ssize_t n = read(fd, buf + got, size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t) n;
        }
        return (ssize_t) got;
}

/* Append(lease, data) per chunk of at most INLINE_CHUNK bytes, for clients
 * that cannot pass fds; the last reply in *ret (its bytesWritten, as
 * blkmqd's, counts the zone's bytes, not this call's). */

/* The zone as it is, shaped as the last reply of an Append: when there was
 * nothing to send. */
static int append_nothing(Ctl *c, const char *lease, json_t **ret) {
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "lease", lease), *reply = NULL;
        json_t *zone;
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        r = ctl_call(c, ZONES_INTERFACE ".Get", params, &reply);
        if (r != EXIT_OK)
                return r;
        zone = json_object_get(reply, "zone");
        *ret = json_pack("{s:I, s:O}", "bytesWritten", (json_int_t) jint(zone, "bytesWritten", 0), "zone", zone);
        return *ret ? EXIT_OK : fail(EXIT_PROTOCOL, "out of memory");
}

/* Append(lease, data) per chunk of at most INLINE_CHUNK bytes, for clients
 * that cannot pass fds; the last reply in *ret (its bytesWritten, as
 * blkmqd's, counts the zone's bytes, not this call's). */
static int append_inline(Ctl *c, const char *lease, const char *path, int fd, uint64_t total, json_t **ret) {
        _cleanup_free_ uint8_t *buf = malloc(INLINE_CHUNK);
        _cleanup_(json_decrefp) json_t *last = NULL;
        uint64_t done = 0;
        int r;

        if (!buf)
                return fail(EXIT_PROTOCOL, "out of memory");
        for (;;) {
                _cleanup_(json_decrefp) json_t *params = NULL, *reply = NULL;
                _cleanup_free_ char *data = NULL;
                ssize_t n = read_full(fd, buf, INLINE_CHUNK);

                if (n < 0)
                        return fail(EXIT_USAGE, "%s: %s", path, strerror((int) -n));
                if (n == 0)
                        break;
                data = base64_encode(buf, (size_t) n);
                params = data ? json_pack("{s:s, s:s}", "lease", lease, "data", data) : NULL;
                if (!params)
                        return fail(EXIT_PROTOCOL, "out of memory");
                r = ctl_call(c, ZONES_INTERFACE ".Append", params, &reply);
                if (r != EXIT_OK)
                        return r;
                done += (uint64_t) n;
                progress("append", done, total);
                json_decref(last);
                last = TAKE_PTR(reply);
                if ((size_t) n < INLINE_CHUNK)
                        break;
        }
        progress_done();
        if (!last)
                return append_nothing(c, lease, ret);
        *ret = TAKE_PTR(last);
        return EXIT_OK;
}

/* zones append LEASE FILE|-: by fd, or --inline */
static int zones_append(const char *lease, const char *path) {
        _cleanup_ctl_ Ctl c = CTL("zones append");
        _cleanup_(json_decrefp) json_t *reply = NULL;
        _cleanup_close_ int opened = -EBADF;
        struct stat st;
        uint64_t total = 0;
        int fd, r;

        if (streq(path, "-"))
                fd = STDIN_FILENO;
        else {
                opened = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                if (opened < 0)
                        return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
                fd = opened;
        }
        if (fstat(fd, &st) < 0)
                return fail(EXIT_USAGE, "%s: %s", path, strerror(errno));
        if (S_ISDIR(st.st_mode))
                return fail(EXIT_USAGE, "%s: is a directory", path);
        if (S_ISREG(st.st_mode))
                total = (uint64_t) st.st_size;

        r = ctl_connect(&c);
        if (r != EXIT_OK)
                return r;
        if (arg_inline)
                r = append_inline(&c, lease, path, fd, total, &reply);
        else
                r = append_fd(&c, lease, fd, total, &reply);
        if (r != EXIT_OK)
                return r;
        return print_zone_reply(reply, lease);
}

/* zones repair DEVICE [INDEX]: failed zones without a lease reset,
 * flushed and free again; exits 10 when one stays failed. */
static int zones_repair(int argc, char **argv, const char *device) {
        _cleanup_ctl_ Ctl c = CTL("zones repair");
        _cleanup_(json_decrefp) json_t *params = json_pack("{s:s}", "device", device), *reply = NULL;
        json_t *zones, *z;
        size_t i, still = 0;
        int r;

        if (!params)
                return fail(EXIT_PROTOCOL, "out of memory");
        if (argc == 4) {
                json_int_t idx;

                if (parse_zone_index(argv[3], &idx) < 0)
                        return fail(EXIT_USAGE, "%s: not a zone index", argv[3]);
                json_object_set_new(params, "zoneIndex", json_integer(idx));
        }
        r = ctl_call(&c, ZONES_INTERFACE ".Repair", params, &reply);
        if (r != EXIT_OK)
                return r;
        zones = json_object_get(reply, "zones");
        json_array_foreach(zones, i, z)
                if (!streq_ptr(jstr(z, "state"), "free"))
                        still++;
        if (!arg_json) {
                if (json_array_size(zones) == 0)
                        printf("%s: no failed zone without a lease; nothing to repair.\n", device);
                json_array_foreach(zones, i, z)
                        printf("zone %lld: %s%s%s\n", jint(z, "zoneIndex", -1),
                               streq_ptr(jstr(z, "state"), "free") ? "reset and flushed, free again"
                                                                   : "still failed",
                               jstr(z, "note") ? ": " : "", jstr(z, "note") ?: "");
        } else {
                r = ctl_render(reply, NULL, NULL);
                if (r != EXIT_OK)
                        return r;
        }
        if (still)
                return fail(EXIT_ZONE_IO, "zones repair: %zu of %zu zones stay failed (the device refused the reset "
                            "or the flush; see blkmqd's log)", still, json_array_size(zones));
        return EXIT_OK;
}

/* ---- the zones verb: its subcommands, their arguments and options ---- */

static const struct {
        const char *name;
        int min_args, max_args; /* including "zones" and the subcommand */
} zones_subs[] = {
        { "free", 3, 3 },    { "alloc", 2, 2 },  { "append", 4, 4 }, { "seal", 4, 4 },
        { "release", 3, 3 }, { "get", 3, 4 },    { "objects", 2, 3 }, { "find", 3, 3 },
        { "cat", 3, 3 },     { "verify", 2, 3 },  { "repair", 3, 4 },
};

/* Whether sub is a zones subcommand (else: zones DEVICE), and its
 * arguments fit it and the options go with it. Returns an exit status. */
static int zones_check(int argc, char **argv, bool *ret_known) {
        const char *sub = argc > 1 ? argv[1] : NULL;
        bool known = false;

        for (size_t i = 0; sub && i < ELEMENTSOF(zones_subs); i++)
                if (streq(sub, zones_subs[i].name)) {
                        known = true;
                        if (argc < zones_subs[i].min_args)
                                return fail(EXIT_USAGE, "zones %s: missing argument (see blkmqctl --help)", sub);
                        if (argc > zones_subs[i].max_args)
                                return fail(EXIT_USAGE, "zones %s: too many arguments (see blkmqctl --help)", sub);
                }
        if (!known && argc > 2)
                return fail(EXIT_USAGE, "zones %s: unknown zones command (free, alloc, append, seal, release, get, "
                                        "objects, find, cat, verify, repair)", sub);

        if (arg_state && (known || argc != 2))
                return fail(EXIT_USAGE, "--state goes with zones DEVICE");
        if (arg_label && !streq_ptr(sub, "alloc"))
                return fail(EXIT_USAGE, "--label goes with zones alloc and stage");
        if (arg_device && !streq_ptr(sub, "alloc") && !streq_ptr(sub, "find") && !streq_ptr(sub, "cat") &&
            !streq_ptr(sub, "verify") && !streq_ptr(sub, "release"))
                return fail(EXIT_USAGE, "--device goes with zones alloc, find, cat, verify, release and stage");
        if (arg_output && !streq_ptr(sub, "cat"))
                return fail(EXIT_USAGE, "--output goes with zones cat");
        if (arg_size_set && !streq_ptr(sub, "alloc"))
                return fail(EXIT_USAGE, "--size goes with zones alloc");
        if (arg_inline && !streq_ptr(sub, "append"))
                return fail(EXIT_USAGE, "--inline goes with zones append");
        *ret_known = known;
        return EXIT_OK;
}

int verb_zones(int argc, char **argv) {
        const char *sub = argc > 1 ? argv[1] : NULL;
        char devbuf[PATH_MAX + 8];
        bool known = false;
        int r;

        r = zones_check(argc, argv, &known);
        if (r != EXIT_OK)
                return r;
        if (argc == 1)
                return zones_list_devices();
        if (!known)
                return zones_list_zones(device_arg(sub, devbuf));
        if (streq(sub, "free"))
                return zones_free(device_arg(argv[2], devbuf));
        if (streq(sub, "alloc")) {
                if (!arg_size_set)
                        return fail(EXIT_USAGE, "zones alloc: --size is required");
                return zones_alloc();
        }
        if (streq(sub, "append"))
                return zones_append(argv[2], argv[3]);
        if (streq(sub, "seal"))
                return zones_lease_call("zones seal", ZONES_INTERFACE ".Seal", argv[2], argv[3]);
        if (streq(sub, "release"))
                return zones_release(argv[2]);
        if (streq(sub, "repair"))
                return zones_repair(argc, argv, device_arg(argv[2], devbuf));
        if (streq(sub, "objects"))
                return zones_objects(argc > 2 ? device_arg(argv[2], devbuf) : NULL);
        if (streq(sub, "find"))
                return zones_find(argv[2], arg_device);
        if (streq(sub, "cat"))
                return zones_cat(argv[2], arg_device, arg_output);
        if (streq(sub, "verify"))
                return zones_verify(argc > 2 ? device_arg(argv[2], devbuf) : NULL, arg_device);
        return zones_get(argc, argv);
}

/* ---- options ---- */

int zones_opt_state(const char *arg) {
        if (!zone_state_valid(arg))
                return fail(EXIT_USAGE, "--state=%s: invalid state (free, allocated, writing, sealed, releasing, failed, empty)",
                            arg);
        arg_state = arg;
        return EXIT_OK;
}

int zones_opt_device(const char *arg) {
        if (!*arg)
                return fail(EXIT_USAGE, "--device: empty name");
        arg_device = device_arg(arg, arg_device_buf);
        return EXIT_OK;
}

int zones_opt_label(const char *arg) {
        arg_label = arg;
        return EXIT_OK;
}

int zones_opt_size(const char *arg) {
        if (parse_size(arg, &arg_size) < 0)
                return fail(EXIT_USAGE, "--size=%s: not a size in bytes (K, M, G suffixes allowed)", arg);
        arg_size_set = true;
        return EXIT_OK;
}

int zones_opt_inline(const char *arg) {
        arg_inline = true;
        return EXIT_OK;
}

int zones_opt_output(const char *arg) {
        if (!*arg)
                return fail(EXIT_USAGE, "--output: empty file name");
        arg_output = arg;
        return EXIT_OK;
}

/* The zone options on a verb other than zones (and stage: --device, --label). */
int zones_options_fit(const char *verb) {
        if ((arg_state || arg_size_set || arg_inline) && !streq(verb, "zones"))
                return fail(EXIT_USAGE, "--%s goes with zones", arg_state ? "state" : arg_size_set ? "size" : "inline");
        if ((arg_device || arg_label) && !streq(verb, "zones") && !streq(verb, "stage"))
                return fail(EXIT_USAGE, "--%s goes with zones alloc and stage", arg_device ? "device" : "label");
        return EXIT_OK;
}
