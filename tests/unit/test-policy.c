/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* policy.c: each Match* key against a hand-built device, positive and
 * negative with the reason given; precedence of matching [Device] sections
 * (configuration order, later keys win) and of the active profile; the
 * section and file:line each resolved value came from; explain lines. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cleanup.h"
#include "conf.h"
#include "device.h"
#include "policy.h"
#include "util.h"

#define GIB (UINT64_C(1) << 30)

static void set(char **field, const char *value) {
        assert_int_equal(free_and_strdup(field, value), 0);
}

/* The QEMU NVMe namespace of tests/fixtures/sysfs/guest-6.1-nvme-conventional.tsv
 * as device_info_load() sees it, plus the udev properties of a real one. */
static DeviceInfo *nvme_device(void) {
        DeviceInfo *d = calloc(1, sizeof *d);

        assert_non_null(d);
        d->stat_fd = -EBADF;
        set(&d->sysname, "nvme1n1");
        set(&d->blockdir, "/sys/block/nvme1n1");
        set(&d->devnode, "/dev/nvme1n1");
        set(&d->id, "wwn:nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001");
        set(&d->zoned, "none");
        set(&d->driver, "nvme");
        set(&d->transport, "nvme");
        set(&d->model, "QEMU NVMe Ctrl");
        set(&d->firmware, "7.2.22");
        set(&d->serial, "conv0");
        set(&d->wwn, "nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001");
        assert_int_equal(strv_extend(&d->properties, "DEVNAME=/dev/nvme1n1"), 0);
        assert_int_equal(strv_extend(&d->properties, "DEVTYPE=disk"), 0);
        assert_int_equal(strv_extend(&d->properties, "ID_BUS_EXTRA=ata"), 0);
        assert_int_equal(strv_extend(&d->properties, "ID_BUS=nvme"), 0);
        assert_int_equal(strv_extend(&d->properties, "ID_PATH=pci-0000:02:00.0-nvme-1"), 0);
        assert_int_equal(strv_extend(&d->properties, "EMPTY="), 0);
        d->size = GIB;
        d->nsid = 1;
        d->rotational = 0;
        return d;
}

static DeviceInfo *loop_device(void) {
        DeviceInfo *d = calloc(1, sizeof *d);

        assert_non_null(d);
        d->stat_fd = -EBADF;
        set(&d->sysname, "loop0");
        set(&d->blockdir, "/sys/block/loop0");
        set(&d->id, "loop:/var/tmp/disk.img");
        set(&d->zoned, "none");
        set(&d->transport, "loop");
        set(&d->backing_file, "/var/tmp/disk.img");
        d->size = UINT64_C(256) << 20;
        d->rotational = 1;
        return d;
}

static Config *load(const char *text) {
        Config *c = NULL;
        ConfigError err;

        if (config_load_string(text, "p.conf", &c, &err) < 0)
                fail_msg("p.conf:%u: %s\n%s", err.line, err.message, text);
        return c;
}

/* One [Device t] section holding the given Match* lines. */
static bool match_one(const char *match_lines, const DeviceInfo *d, char **ret_reason) {
        _cleanup_free_ char *text = NULL;
        _cleanup_(config_freep) Config *c = NULL;

        assert_true(asprintf(&text, "[Device t]\n%s\n", match_lines) > 0);
        c = load(text);
        assert_int_equal(c->n_devices, 1);
        return policy_match(&c->devices[0].match, d, ret_reason);
}

typedef enum { NVME, NVME_UNKNOWN_ROT, NVME_NO_DRIVER, LOOP, VENDOR } Dev;

static const struct {
        Dev dev;
        const char *match;
        bool expect;
        const char *reason; /* exact, on a mismatch */
} match_cases[] = {
        { NVME, "", true, NULL },
        /* MatchKernel= */
        { NVME, "MatchKernel=nvme*", true, NULL },
        { NVME, "MatchKernel=sd* nvme?n1", true, NULL },
        { NVME, "MatchKernel=sd* vd[a-z]", false, "MatchKernel=sd* vd[a-z]: nvme1n1 does not match" },
        { NVME, "MatchKernel=NVME*", false, "MatchKernel=NVME*: nvme1n1 does not match" },
        { NVME, "MatchKernel=nvme1", false, "MatchKernel=nvme1: nvme1n1 does not match" },
        /* MatchBackingFile= */
        { LOOP, "MatchBackingFile=/var/tmp/*.img", true, NULL },
        { LOOP, "MatchBackingFile=/srv/*", false, "MatchBackingFile=/srv/*: /var/tmp/disk.img does not match" },
        { NVME, "MatchBackingFile=*", false, "MatchBackingFile=*: (not set) does not match" },
        /* MatchZoned= */
        { NVME, "MatchZoned=none", true, NULL },
        { NVME, "MatchZoned=host-aware host-managed", false,
          "MatchZoned=host-aware host-managed: none does not match" },
        /* MatchRotational= */
        { NVME, "MatchRotational=no", true, NULL },
        { NVME, "MatchRotational=yes", false, "MatchRotational=yes: device is non-rotational" },
        { LOOP, "MatchRotational=yes", true, NULL },
        { LOOP, "MatchRotational=false", false, "MatchRotational=no: device is rotational" },
        { NVME_UNKNOWN_ROT, "MatchRotational=no", false, "MatchRotational=no: device is unknown" },
        { NVME_UNKNOWN_ROT, "MatchRotational=", true, NULL },
        /* MatchSize=, inclusive on both ends */
        { NVME, "MatchSize=1G-1G", true, NULL },
        { NVME, "MatchSize=-1G", true, NULL },
        { NVME, "MatchSize=1G-", true, NULL },
        { NVME, "MatchSize=512M-2G", true, NULL },
        { NVME, "MatchSize=1.5G-", false, "MatchSize=: size 1073741824 bytes is outside 1610612736-18446744073709551615" },
        { NVME, "MatchSize=-1023M", false, "MatchSize=: size 1073741824 bytes is outside 0-1072693248" },
        { LOOP, "MatchSize=-256M", true, NULL },
        /* MatchProperty=KEY=GLOB: every one must match */
        { NVME, "MatchProperty=ID_BUS=nvme", true, NULL },
        { NVME, "MatchProperty=ID_PATH=pci-*", true, NULL },
        { NVME, "MatchProperty=ID_BUS=nvme DEVTYPE=disk", true, NULL },
        { NVME, "MatchProperty=ID_BUS=ata", false, "MatchProperty=ID_BUS=ata: ID_BUS is nvme" },
        { NVME, "MatchProperty=ID_BUS=nvme DEVTYPE=partition", false,
          "MatchProperty=DEVTYPE=partition: DEVTYPE is disk" },
        { NVME, "MatchProperty=ID_FOO=*", false, "MatchProperty=ID_FOO=*: ID_FOO is not set" },
        { NVME, "MatchProperty=ID_BUS_EXTRA=nvme", false, "MatchProperty=ID_BUS_EXTRA=nvme: ID_BUS_EXTRA is ata" },
        { NVME, "MatchProperty=ID_BU=*", false, "MatchProperty=ID_BU=*: ID_BU is not set" },
        { NVME, "MatchProperty=EMPTY=", true, NULL },
        { NVME, "MatchProperty=EMPTY=?*", false, "MatchProperty=EMPTY=?*: EMPTY is " },
        { LOOP, "MatchProperty=ID_BUS=*", false, "MatchProperty=ID_BUS=*: ID_BUS is not set" },
        /* MatchDriver= */
        { NVME, "MatchDriver=nvme", true, NULL },
        { NVME, "MatchDriver=ahci virtio_blk", false, "MatchDriver=ahci virtio_blk: nvme does not match" },
        { NVME_NO_DRIVER, "MatchDriver=*", false, "MatchDriver=*: (not set) does not match" },
        /* MatchTransport= */
        { NVME, "MatchTransport=nvme", true, NULL },
        { NVME, "MatchTransport=scsi ata", false, "MatchTransport=scsi ata: nvme does not match" },
        { LOOP, "MatchTransport=loop", true, NULL },
        /* MatchModel= (the whole value is one glob: models contain blanks) */
        { NVME, "MatchModel=QEMU*", true, NULL },
        { NVME, "MatchModel=QEMU?NVMe?Ctrl", true, NULL },
        { NVME, "MatchModel=QEMU NVMe Ctrl", true, NULL },
        { NVME, "MatchModel=QEMU NVMe", false, "MatchModel=QEMU NVMe: QEMU NVMe Ctrl does not match" },
        { NVME, "MatchModel=Samsung*", false, "MatchModel=Samsung*: QEMU NVMe Ctrl does not match" },
        { LOOP, "MatchModel=*", false, "MatchModel=*: (not set) does not match" },
        /* MatchFirmware= (a list of globs), MatchVendor= (one glob, like MatchModel=) */
        { NVME, "MatchFirmware=7.2.22", true, NULL },
        { NVME, "MatchFirmware=7.1.* 7.2.*", true, NULL },
        { NVME, "MatchFirmware=7.2.2", false, "MatchFirmware=7.2.2: 7.2.22 does not match" },
        { LOOP, "MatchFirmware=*", false, "MatchFirmware=*: (not set) does not match" },
        { NVME, "MatchVendor=*", false, "MatchVendor=*: (not set) does not match" },
        { VENDOR, "MatchVendor=WD Blue", true, NULL },
        { VENDOR, "MatchVendor=SEAGATE", false, "MatchVendor=SEAGATE: WD Blue does not match" },
        /* A model with glob characters, escaped as blkmqctl export writes it */
        { VENDOR, "MatchModel=Disk \\[v2\\] \\*", true, NULL },
        { VENDOR, "MatchModel=Disk [v2] *", false, "MatchModel=Disk [v2] *: Disk [v2] * does not match" },
        /* MatchSerial= */
        { NVME, "MatchSerial=conv0", true, NULL },
        { NVME, "MatchSerial=znsA", false, "MatchSerial=znsA: conv0 does not match" },
        /* MatchWWN= */
        { NVME, "MatchWWN=nvme.1b36-636f*", true, NULL },
        { NVME, "MatchWWN=eui.* naa.*", false,
          "MatchWWN=eui.* naa.*: nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001 does not match" },
        /* All keys must match; the reason names one that does not. */
        { NVME, "MatchKernel=nvme*\nMatchTransport=nvme\nMatchSize=1G-\nMatchRotational=no\nMatchProperty=ID_BUS=nvme",
          true, NULL },
        { NVME, "MatchKernel=nvme*\nMatchTransport=nvme\nMatchSize=2G-", false,
          "MatchSize=: size 1073741824 bytes is outside 2147483648-18446744073709551615" },
        { NVME, "MatchKernel=nvme*\nMatchSerial=nope\nMatchSize=2G-", false, "MatchSerial=nope: conv0 does not match" },
};

static void test_match_keys(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(match_cases); i++) {
                _cleanup_(device_info_freep) DeviceInfo *d = NULL;
                _cleanup_free_ char *reason = NULL;
                bool m;

                d = match_cases[i].dev == LOOP ? loop_device() : nvme_device();
                if (match_cases[i].dev == NVME_UNKNOWN_ROT)
                        d->rotational = -1;
                if (match_cases[i].dev == NVME_NO_DRIVER)
                        d->driver = mfree(d->driver);
                if (match_cases[i].dev == VENDOR) { /* a SATA disk with glob characters in its model */
                        set(&d->vendor, "WD Blue");
                        set(&d->model, "Disk [v2] *");
                }

                reason = (char *) 0x1; /* must be reset */
                m = match_one(match_cases[i].match, d, &reason);
                if (m != match_cases[i].expect)
                        fail_msg("case %zu (%s): matched=%d, expected %d; reason: %s", i, match_cases[i].match, m,
                                 match_cases[i].expect, m ? "-" : strna(reason));
                if (m) {
                        if (reason)
                                fail_msg("case %zu: a match left a reason", i);
                } else {
                        assert_non_null(reason);
                        if (!streq(reason, match_cases[i].reason))
                                fail_msg("case %zu (%s): reason \"%s\", expected \"%s\"", i, match_cases[i].match,
                                         reason, match_cases[i].reason);
                }
                /* The verdict does not depend on asking for a reason. */
                assert_true(match_one(match_cases[i].match, d, NULL) == m);
        }
}

static const char prec_conf[] =
        "[Device all]\n"          /* 1 */
        "MatchKernel=*\n"         /* 2 */
        "NrRequests=64\n"         /* 3 */
        "ReadAheadKB=128\n"       /* 4 */
        "Scheduler=mq-deadline\n" /* 5 */
        "[Device nvme]\n"         /* 6 */
        "MatchTransport=nvme\n"   /* 7 */
        "NrRequests=256\n"        /* 8 */
        "IOPoll=yes\n"            /* 9 */
        "[Device sata]\n"         /* 10 */
        "MatchTransport=ata\n"    /* 11 */
        "NrRequests=32\n"         /* 12 */
        "[Profile night]\n"       /* 13 */
        "Devices=sata nvme\n"     /* 14 */
        "NrRequests=1023\n"       /* 15 */
        "[Profile day]\n"         /* 16 */
        "Devices=sata\n"          /* 17 */
        "ReadAheadKB=4096\n"      /* 18 */
        "[Profile any]\n"         /* 19 */
        "WbtLatUsec=0\n"          /* 20 */
        "ReadAheadKB=8\n";        /* 21 */

static void assert_value(const Resolved *r, Knob k, const char *value, const char *section, const char *origin) {
        if (!value) {
                if (r->value[k])
                        fail_msg("%s=%s from %s, expected unset", knob_info(k)->key, r->value[k], strna(r->section[k]));
                assert_null(r->section[k]);
                assert_null(r->origin[k]);
                return;
        }
        if (!r->value[k])
                fail_msg("%s unset, expected %s", knob_info(k)->key, value);
        if (!streq(r->value[k], value) || !streq_ptr(r->section[k], section) || !streq_ptr(r->origin[k], origin))
                fail_msg("%s=%s from [%s] %s, expected %s from [%s] %s", knob_info(k)->key, r->value[k],
                         strna(r->section[k]), strna(r->origin[k]), value, section, origin);
}

static void test_precedence(void **state) {
        _cleanup_(config_freep) Config *c = load(prec_conf);
        _cleanup_(device_info_freep) DeviceInfo *d = nvme_device();
        Resolved r;

        /* Both matching sections apply in order: the later one's keys win,
         * keys only the earlier one sets survive. */
        assert_int_equal(policy_resolve(c, d, NULL, &r), 0);
        assert_true(resolved_managed(&r));
        assert_int_equal(strv_length(r.matched), 2);
        assert_string_equal(r.matched[0], "all");
        assert_string_equal(r.matched[1], "nvme");
        assert_null(r.profile);
        assert_value(&r, KNOB_NR_REQUESTS, "256", "Device nvme", "p.conf:8");
        assert_value(&r, KNOB_READ_AHEAD_KB, "128", "Device all", "p.conf:4");
        assert_value(&r, KNOB_SCHEDULER, "mq-deadline", "Device all", "p.conf:5");
        assert_value(&r, KNOB_IO_POLL, "1", "Device nvme", "p.conf:9");
        assert_value(&r, KNOB_WBT_LAT_USEC, NULL, NULL, NULL);

        assert_int_equal(strv_length(r.explain), 3);
        assert_string_equal(r.explain[0], "[Device all] (p.conf:1) matches");
        assert_string_equal(r.explain[1], "[Device nvme] (p.conf:6) matches");
        assert_string_equal(r.explain[2],
                            "[Device sata] (p.conf:10) does not match: MatchTransport=ata: nvme does not match");
        resolved_done(&r);
        assert_null(r.matched);
        assert_null(r.value[KNOB_NR_REQUESTS]);

        /* The active profile applies last when Devices= names a matched section. */
        assert_int_equal(policy_resolve(c, d, "night", &r), 0);
        assert_string_equal(r.profile, "night");
        assert_value(&r, KNOB_NR_REQUESTS, "1023", "Profile night", "p.conf:15");
        assert_value(&r, KNOB_READ_AHEAD_KB, "128", "Device all", "p.conf:4");
        assert_value(&r, KNOB_IO_POLL, "1", "Device nvme", "p.conf:9");
        resolved_done(&r);

        /* Devices= names only sections that did not match: no effect. */
        assert_int_equal(policy_resolve(c, d, "day", &r), 0);
        assert_null(r.profile);
        assert_value(&r, KNOB_READ_AHEAD_KB, "128", "Device all", "p.conf:4");
        assert_value(&r, KNOB_NR_REQUESTS, "256", "Device nvme", "p.conf:8");
        resolved_done(&r);

        /* No Devices=: applies to every managed device. */
        assert_int_equal(policy_resolve(c, d, "any", &r), 0);
        assert_string_equal(r.profile, "any");
        assert_value(&r, KNOB_WBT_LAT_USEC, "0", "Profile any", "p.conf:20");
        assert_value(&r, KNOB_READ_AHEAD_KB, "8", "Profile any", "p.conf:21");
        assert_value(&r, KNOB_NR_REQUESTS, "256", "Device nvme", "p.conf:8");
        resolved_done(&r);

        /* An unknown profile name applies nothing. */
        assert_int_equal(policy_resolve(c, d, "nope", &r), 0);
        assert_null(r.profile);
        assert_value(&r, KNOB_NR_REQUESTS, "256", "Device nvme", "p.conf:8");
        resolved_done(&r);
}

static void test_order_not_specificity(void **state) {
        /* The catch-all comes second here, so it wins over the narrower
         * section: order decides, not how specific a match is. */
        _cleanup_(config_freep) Config *c = load("[Device nvme]\n"
                                                 "MatchTransport=nvme\n"
                                                 "NrRequests=256\n"
                                                 "[Device all]\n"
                                                 "NrRequests=64\n");
        _cleanup_(device_info_freep) DeviceInfo *d = nvme_device();
        Resolved r;

        assert_int_equal(policy_resolve(c, d, NULL, &r), 0);
        assert_value(&r, KNOB_NR_REQUESTS, "64", "Device all", "p.conf:5");
        assert_int_equal(strv_length(r.labels), 2);
        resolved_done(&r);
}

static void test_unmanaged(void **state) {
        _cleanup_(config_freep) Config *c = load("[Device sata]\n"
                                                 "MatchTransport=ata\n"
                                                 "NrRequests=32\n"
                                                 "[Profile any]\n"
                                                 "NrRequests=1\n");
        _cleanup_(device_info_freep) DeviceInfo *d = nvme_device();
        _cleanup_(config_freep) Config *empty = load("");
        Resolved r;

        /* Not matched by any [Device]: not managed, and a profile without
         * Devices= does not make it managed. */
        assert_int_equal(policy_resolve(c, d, "any", &r), 0);
        assert_false(resolved_managed(&r));
        assert_null(r.profile);
        for (int k = 0; k < _KNOB_MAX; k++)
                assert_value(&r, k, NULL, NULL, NULL);
        assert_int_equal(strv_length(r.explain), 1);
        assert_string_equal(r.explain[0], "[Device sata] (p.conf:1) does not match: MatchTransport=ata: nvme does not match");
        resolved_done(&r);

        assert_int_equal(policy_resolve(empty, d, NULL, &r), 0);
        assert_false(resolved_managed(&r));
        assert_null(r.explain);
        resolved_done(&r);
}

static void test_matched_without_settings(void **state) {
        /* A section with only Match* keys still makes the device managed. */
        _cleanup_(config_freep) Config *c = load("[Device loops]\nMatchKernel=loop*\n");
        _cleanup_(device_info_freep) DeviceInfo *d = loop_device();
        Resolved r;

        assert_int_equal(policy_resolve(c, d, NULL, &r), 0);
        assert_true(resolved_managed(&r));
        for (int k = 0; k < _KNOB_MAX; k++)
                assert_null(r.value[k]);
        resolved_done(&r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_match_keys),
                cmocka_unit_test(test_precedence),
                cmocka_unit_test(test_order_not_specificity),
                cmocka_unit_test(test_unmanaged),
                cmocka_unit_test(test_matched_without_settings),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
