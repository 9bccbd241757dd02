/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* device.c and tune.c on fake sysfs trees built from the captured fixtures
 * (see fake-sysfs.h for what a plain-file tree can and cannot show):
 * DeviceInfo of every fixture; tune_plan(): zoned guard, bio-based heads,
 * CPUAffinity= interrupts; tune_execute(): unchanged values are not
 * written, changed ones land and are read back, missing and read-only
 * attributes and tunables of another scheduler are skipped, `before` is
 * the value from before any write, a dry run writes nothing at all, a
 * vanished device fails the job; tune_job_sort() order.
 *
 * Not covered here, because a plain file cannot show it: the "[kyber]"
 * bracket format the kernel prints after a scheduler switch (and so the
 * CHANGED outcome of a real switch), nr_requests being reset and iosched/
 * being swapped by the switch, and EIO from a managed interrupt. The
 * integration suite does those on real loop devices. */

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "device.h"
#include "fake-sysfs.h"
#include "knobs.h"
#include "plan-print.h"
#include "policy.h"
#include "sysfs.h"
#include "tune.h"
#include "util.h"

#define FX_NVME "guest-6.1-nvme-conventional.tsv"
#define FX_ZNS_HEAD "guest-6.1-nvme-zns-multipath-head.tsv"
#define FX_ZNS_PATH "guest-6.1-nvme-zns-multipath-path.tsv"
#define FX_NULLB "guest-6.1-nullblk-zoned.tsv"
#define FX_LOOP "host-6.18-loop.tsv"
#define FX_VIRTIO "host-6.18-virtio.tsv"
/* Captured on Debian's 7.3 cloud kernel (tests/vm/capture-fixtures.sh): the
 * newest kernels' attributes, queue/async_depth and queue/zoned_qd1_writes. */
#define FX_VIRTIO_7_3 "guest-7.3-virtio-mq-deadline.tsv"
/* trixie's 6.12 (tests/vm/capture-fixtures.sh): a virtio disk switched to
 * mq-deadline (a module there), whose async_depth is still its iosched/'s. */
#define FX_VIRTIO_6_12 "guest-6.12-virtio-mq-deadline.tsv"
#define K_6_12 KERNEL_VERSION_CODE(6, 12)
#define FX_ZNS_7_3 "guest-7.3-nvme-zns.tsv"

#define K_6_1 KERNEL_VERSION_CODE(6, 1)
#define K_6_10 KERNEL_VERSION_CODE(6, 10)
#define K_6_18 KERNEL_VERSION_CODE(6, 18)
#define K_7_3 KERNEL_VERSION_CODE(7, 3)

/* ---- test environment: one fake device, its DeviceInfo, a policy ---- */

typedef struct Env {
        FakeSysfs *f;
        DeviceInfo *d;
        char *proc;
        TuneContext ctx;
        Resolved r;
        TuneJob *j;
} Env;

static void env_done(Env *e) {
        tune_job_free(e->j);
        resolved_done(&e->r);
        device_info_free(e->d);
        fake_sysfs_free(e->f);
        free(e->proc);
        *e = (Env) {};
}

static FakeSysfs *fake(const char *fixture) {
        FakeSysfs *f = NULL;
        int r = fake_sysfs_new(fixture, &f);

        if (r < 0)
                fail_msg("fake_sysfs_new(%s): %s", fixture, strerror(-r));
        return f;
}

static void env_init(Env *e, const char *fixture, unsigned kernel) {
        int r;

        *e = (Env) {};
        e->f = fake(fixture);
        e->proc = path_join(e->f->root, "proc");
        assert_non_null(e->proc);
        e->ctx = (TuneContext) { .sysfs_root = e->f->root, .proc_root = e->proc, .kernel_version = kernel };
        r = device_info_load(e->f->blockdir, NULL, &e->d);
        if (r < 0)
                fail_msg("device_info_load(%s): %s", e->f->blockdir, strerror(-r));
}

/* Sets a resolved value as policy_resolve() would. */
static void want(Env *e, Knob k, const char *value) {
        assert_int_equal(free_and_strdup(&e->r.value[k], value), 0);
        e->r.section[k] = "Device test";
        e->r.origin[k] = "test.conf:1";
}

static TuneJob *plan(Env *e) {
        int r;

        e->j = tune_job_free(e->j);
        r = tune_plan(&e->ctx, e->d, &e->r, &e->j);
        if (r < 0)
                fail_msg("tune_plan: %s", strerror(-r));
        return e->j;
}

static TuneEntry *entry(const TuneJob *j, Knob k) {
        for (size_t i = 0; i < j->n_entries; i++)
                if (j->entries[i].knob == k)
                        return &j->entries[i];
        fail_msg("no entry for %s", knob_info(k)->key);
        return NULL;
}

static bool has_entry(const TuneJob *j, Knob k) {
        for (size_t i = 0; i < j->n_entries; i++)
                if (j->entries[i].knob == k)
                        return true;
        return false;
}

static void check(const TuneEntry *t, TuneOutcome outcome, const char *before, const char *after) {
        const char *key = knob_info(t->knob)->key;

        if (t->outcome != outcome)
                fail_msg("%s (%s): outcome %s, expected %s; note: %s", key, strna(t->attr),
                         tune_outcome_to_string(t->outcome), tune_outcome_to_string(outcome), strna(t->note));
        if (!streq_ptr(t->before, before))
                fail_msg("%s: before \"%s\", expected \"%s\"", key, strna(t->before), strna(before));
        if (!streq_ptr(t->after, after))
                fail_msg("%s: after \"%s\", expected \"%s\"", key, strna(t->after), strna(after));
}

static void check_note(const TuneEntry *t, const char *part) {
        if (!t->note || !strstr(t->note, part))
                fail_msg("%s: note \"%s\" lacks \"%s\"", knob_info(t->knob)->key, strna(t->note), part);
}

/* The attribute as tune would read it back. */
static char *attr(const Env *e, const char *a) {
        _cleanup_free_ char *p = path_join(e->f->blockdir, a);
        char *v = NULL;

        assert_non_null(p);
        if (sysfs_read(p, &v) < 0)
                return NULL;
        return v;
}

static void assert_attr(const Env *e, const char *a, const char *value) {
        _cleanup_free_ char *v = attr(e, a);

        if (!streq_ptr(v, value))
                fail_msg("%s is \"%s\", expected \"%s\"", a, strna(v), strna(value));
}

/* ---- device.c ---- */

static void test_device_info_fixtures(void **state) {
        static const struct {
                const char *fixture, *sysname, *transport, *zoned, *model, *serial, *wwn, *backing, *id;
                uint64_t size;
                unsigned nsid;
                int rotational;
                bool hidden, bio_based;
        } cases[] = {
                { FX_NVME, "nvme1n1", "nvme", "none", "QEMU NVMe Ctrl", "conv0",
                  "nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001", NULL,
                  "wwn:nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001", UINT64_C(1) << 30, 1, 0, false,
                  false },
                { FX_ZNS_HEAD, "nvme0n1", "nvme", "host-managed", "QEMU NVMe Ctrl", "znsA",
                  "nvme.1b36-7a6e7341-51454d55204e564d65204374726c-00000001", NULL,
                  "wwn:nvme.1b36-7a6e7341-51454d55204e564d65204374726c-00000001", UINT64_C(1) << 30, 1, 0, false, true },
                /* The path disk shares the head's WWID: its identity is told apart. */
                { FX_ZNS_PATH, "nvme0c0n1", "nvme", "host-managed", "QEMU NVMe Ctrl", "znsA",
                  "nvme.1b36-7a6e7341-51454d55204e564d65204374726c-00000001", NULL,
                  "wwn:nvme.1b36-7a6e7341-51454d55204e564d65204374726c-00000001:path", UINT64_C(1) << 30, 1, 0, true,
                  false },
                { FX_NULLB, "nullb0", "null_blk", "host-managed", NULL, NULL, NULL, NULL, "name:nullb0",
                  UINT64_C(1) << 30, 0, 0, false, false },
                { FX_LOOP, "loop0", "loop", "none", NULL, NULL, NULL, "/var/tmp/disk.img", "loop:/var/tmp/disk.img",
                  UINT64_C(256) << 20, 0, 1, false, false },
                /* virtio keeps its serial in /sys/block/vda/serial. */
                { FX_VIRTIO, "vda", "virtio", "none", NULL, "overlayblk", NULL, NULL, "serial:overlayblk",
                  UINT64_C(256) << 30, 0, 1, false, false },
                /* 6.12 and 7.3 (the kernel matrix of tests/vm): the same identity. */
                { "guest-6.12-nvme-zns.tsv", "nvme0n1", "nvme", "host-managed", "QEMU NVMe Ctrl", "zns0",
                  "nvme.1b36-7a6e7330-51454d55204e564d65204374726c-00000001", NULL,
                  "wwn:nvme.1b36-7a6e7330-51454d55204e564d65204374726c-00000001", UINT64_C(1) << 30, 1, 0, false,
                  false },
                { "guest-6.12-nullblk-zoned.tsv", "nullb0", "null_blk", "host-managed", NULL, NULL, NULL, NULL,
                  "name:nullb0", UINT64_C(1) << 30, 0, 0, false, false },
                { "guest-7.3-virtio.tsv", "vda", "virtio", "none", NULL, "blkmqd-data", NULL, NULL, "serial:blkmqd-data",
                  UINT64_C(64) << 20, 0, 1, false, false },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_fake_sysfs_ FakeSysfs *f = fake(cases[i].fixture);
                _cleanup_(device_info_freep) DeviceInfo *d = NULL;

                assert_string_equal(f->sysname, cases[i].sysname);
                assert_int_equal(device_info_load(f->blockdir, NULL, &d), 0);
                assert_string_equal(d->sysname, cases[i].sysname);
                assert_string_equal(d->blockdir, f->blockdir);
                assert_null(d->devnode); /* only udev knows it */
                assert_string_equal(d->transport, cases[i].transport);
                assert_string_equal(d->zoned, cases[i].zoned);
                if (!streq_ptr(d->model, cases[i].model) || !streq_ptr(d->serial, cases[i].serial) ||
                    !streq_ptr(d->wwn, cases[i].wwn) || !streq_ptr(d->backing_file, cases[i].backing) ||
                    !streq_ptr(d->id, cases[i].id))
                        fail_msg("%s: model \"%s\" serial \"%s\" wwn \"%s\" backing \"%s\" id \"%s\"", cases[i].fixture,
                                 strna(d->model), strna(d->serial), strna(d->wwn), strna(d->backing_file), strna(d->id));
                assert_true(d->size == cases[i].size);
                assert_int_equal(d->nsid, cases[i].nsid);
                assert_int_equal(d->rotational, cases[i].rotational);
                assert_int_equal(d->hidden, cases[i].hidden);
                assert_int_equal(d->bio_based, cases[i].bio_based);
                /* The fixtures hold no symlinks, so no driver is found. */
                assert_null(d->driver);
                assert_null(d->properties);
        }
}

/* The kernel's write limits (reported by blkmqctl show and the Zones
 * interface, never tuned): each where the fixture's kernel has the
 * attribute, absent (not 0) where it has not. */
static void test_device_info_write_limits(void **state) {
        static const struct {
                const char *fixture;
                int64_t v[_WRITE_LIMIT_MAX]; /* streams, granularity, atomic max, unit min, unit max, boundary */
        } cases[] = {
                /* 6.1: none of them */
                { FX_NVME, { -1, -1, -1, -1, -1, -1 } },
                { FX_ZNS_PATH, { -1, -1, -1, -1, -1, -1 } },
                /* 6.12: atomic writes (512 on QEMU's NVMe), no write streams */
                { "guest-6.12-nvme-conventional.tsv", { -1, -1, 512, 512, 512, 0 } },
                { "guest-6.12-nvme-zns.tsv", { -1, -1, 512, 512, 512, 0 } },
                { "guest-6.12-virtio.tsv", { -1, -1, 0, 0, 0, 0 } },
                /* 7.3: both (QEMU 7.2 offers no write streams: 0) */
                { "guest-7.3-nvme-conventional.tsv", { 0, 0, 512, 512, 512, 0 } },
                { FX_ZNS_7_3, { 0, 0, 512, 512, 512, 0 } },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_fake_sysfs_ FakeSysfs *f = fake(cases[i].fixture);
                _cleanup_(device_info_freep) DeviceInfo *d = NULL;
                _cleanup_(json_decrefp) json_t *o = NULL;
                json_t *wl;
                bool any = false;

                assert_int_equal(device_info_load(f->blockdir, NULL, &d), 0);
                o = device_info_to_json(d);
                assert_non_null(o);
                wl = json_object_get(o, "writeLimits");
                for (WriteLimit l = 0; l < _WRITE_LIMIT_MAX; l++) {
                        json_t *v = json_object_get(wl, write_limit_key(l));

                        if (d->write_limits.v[l] != cases[i].v[l])
                                fail_msg("%s: %s read %lld, expected %lld", cases[i].fixture, write_limit_attr(l),
                                         (long long) d->write_limits.v[l], (long long) cases[i].v[l]);
                        if (cases[i].v[l] < 0 ? v != NULL
                                              : !json_is_integer(v) || json_integer_value(v) != cases[i].v[l])
                                fail_msg("%s: writeLimits.%s is %s, expected %lld", cases[i].fixture,
                                         write_limit_key(l), v ? "another value" : "absent",
                                         (long long) cases[i].v[l]);
                        any = any || cases[i].v[l] >= 0;
                }
                /* None at all (6.1): no writeLimits object either. */
                assert_int_equal(wl != NULL, any);
        }
}

static void test_device_info_path_offers_schedulers(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *line = NULL, *active = NULL;

        /* The head has no blk-mq scheduler; its hidden path disk has them all. */
        env_init(&e, FX_ZNS_PATH, K_6_1);
        line = attr(&e, "queue/scheduler");
        assert_string_equal(line, "[none] mq-deadline kyber");
        active = scheduler_active(line);
        assert_string_equal(active, "none");
        assert_true(scheduler_available(line, "kyber"));
        assert_true(scheduler_available(line, "mq-deadline"));
        assert_true(scheduler_available(line, "none"));
        assert_false(scheduler_available(line, "bfq"));
        env_done(&e);

        env_init(&e, FX_ZNS_HEAD, K_6_1);
        free(line);
        line = attr(&e, "queue/scheduler");
        assert_string_equal(line, "none");
        assert_null(scheduler_active(line));
}

static void test_device_info_udev(void **state) {
        _cleanup_fake_sysfs_ FakeSysfs *f = fake(FX_NVME), *l = fake(FX_LOOP);
        _cleanup_(device_info_freep) DeviceInfo *d = NULL, *dl = NULL;
        char *props[] = {
                (char *) "DEVNAME=/dev/nvme1n1", (char *) "ID_MODEL=Override_Model", (char *) "ID_SERIAL_SHORT=S123",
                (char *) "ID_WWN=0x5000", (char *) "ID_BUS=ata", NULL,
        };
        char *lprops[] = { (char *) "ID_WWN=0x5000c500", (char *) "ID_WWN_VENDOR_EXTENSION=0x1234",
                           (char *) "ID_MODEL=Some_Disk_Model", (char *) "ID_VENDOR=Some_Vendor",
                           (char *) "ID_REVISION=1.0", NULL };

        /* udev's serial wins over sysfs; the kernel's model (blanks kept)
         * wins over ID_MODEL (blanks as '_'); the wwid attribute wins over
         * ID_WWN; the name decides the transport. */
        assert_int_equal(device_info_load(f->blockdir, props, &d), 0);
        assert_string_equal(d->devnode, "/dev/nvme1n1");
        assert_string_equal(d->model, "QEMU NVMe Ctrl");
        /* firmware_rev, space padded in sysfs; NVMe has no vendor string */
        assert_string_equal(d->firmware, "7.2.22");
        assert_null(d->vendor);
        assert_string_equal(d->serial, "S123");
        assert_string_equal(d->wwn, "nvme.1b36-636f6e7630-51454d55204e564d65204374726c-00000001");
        assert_string_equal(d->transport, "nvme");
        assert_string_equal(device_info_property(d, "ID_BUS"), "ata");
        assert_null(device_info_property(d, "ID_BU"));
        assert_null(device_info_property(d, "DEVNAME=/dev"));
        /* The properties are copied. */
        assert_ptr_not_equal(d->properties, props);
        assert_int_equal(strv_length(d->properties), 5);

        /* Without a wwid attribute, ID_WWN + vendor extension. */
        assert_int_equal(device_info_load(l->blockdir, lprops, &dl), 0);
        /* No model in sysfs: udev's, with its '_' turned back into blanks. */
        assert_string_equal(dl->model, "Some Disk Model");
        assert_string_equal(dl->vendor, "Some Vendor");
        assert_string_equal(dl->firmware, "1.0");
        assert_string_equal(dl->wwn, "0x5000c5000x1234");
        assert_string_equal(dl->id, "wwn:0x5000c5000x1234");
}

static void test_device_info_missing(void **state) {
        _cleanup_fake_sysfs_ FakeSysfs *f = fake(FX_NVME);
        _cleanup_free_ char *gone = path_join(f->root, "block", "nvme9n9");
        DeviceInfo *d = NULL;

        assert_int_equal(device_info_load(gone, NULL, &d), -ENOENT);
        assert_null(d);
        /* No queue/: not a request queue we can tune. */
        assert_int_equal(fake_sysfs_remove(f, "queue"), 0);
        assert_int_equal(device_info_load(f->blockdir, NULL, &d), -ENOENT);
        assert_null(d);
}

/* ---- knobs.c: comparing what sysfs prints with what is wanted ---- */

static void test_knob_value_equal(void **state) {
        assert_true(knob_value_equal(KNOB_SCHEDULER, "[none] mq-deadline kyber", "none"));
        assert_false(knob_value_equal(KNOB_SCHEDULER, "[none] mq-deadline kyber", "mq-deadline"));
        assert_true(knob_value_equal(KNOB_SCHEDULER, "none [mq-deadline] kyber bfq", "mq-deadline"));
        assert_true(knob_value_equal(KNOB_SCHEDULER, "kyber", "kyber")); /* plain file after a write */
        assert_true(knob_value_equal(KNOB_NR_REQUESTS, "0064", "64"));
        assert_false(knob_value_equal(KNOB_NR_REQUESTS, "6423", "64"));
        assert_true(knob_value_equal(KNOB_WBT_LAT_USEC, "", "")); /* not numbers: compared as text */
        assert_true(knob_value_equal(KNOB_IO_POLL, "1", "1"));
        assert_true(knob_value_equal(KNOB_CPU_AFFINITY, "0, 1", "0-1"));
        assert_false(knob_value_equal(KNOB_CPU_AFFINITY, "0-2", "0-1"));
        assert_false(knob_value_equal(KNOB_CPU_AFFINITY, "x", "x"));
        assert_false(knob_value_equal(KNOB_NR_REQUESTS, NULL, "64"));
        assert_false(knob_value_equal(KNOB_NR_REQUESTS, "64", NULL));

        {
                _cleanup_free_ char *a = scheduler_active("none [mq-deadline] kyber bfq"),
                                    *b = scheduler_active("[none] mq-deadline"), *c = scheduler_active("none"),
                                    *d = scheduler_active("[none");
                assert_string_equal(a, "mq-deadline");
                assert_string_equal(b, "none");
                assert_null(c);
                assert_null(d);
        }
        assert_false(scheduler_available("[none] mq-deadline", "mq"));
        assert_false(scheduler_available("[none] mq-deadline", "[none]"));
        assert_true(scheduler_available("none", "none"));
}

/* ---- tune_plan() ---- */

static void test_plan_entries(void **state) {
        _cleanup_(env_done) Env e;
        TuneJob *j;
        TuneEntry *t;

        env_init(&e, FX_NVME, K_6_1);
        want(&e, KNOB_SCHEDULER, "kyber none");
        want(&e, KNOB_NR_REQUESTS, "64");
        want(&e, KNOB_KYBER_READ_LAT_NSEC, "2000000");
        want(&e, KNOB_DL_FIFO_BATCH, "8");
        want(&e, KNOB_ZONED_QD1_WRITES, "1");
        want(&e, KNOB_SCHEDULER_FORCE, "1");
        want(&e, KNOB_CPU_AFFINITY, "0-1");
        j = plan(&e);

        assert_string_equal(j->sysname, "nvme1n1");
        assert_string_equal(j->blockdir, e.f->blockdir);
        assert_false(j->dry_run);
        assert_false(j->restore);
        assert_string_equal(j->cpu_affinity, "0-1");
        /* SchedulerForce= steers the plan; it is no attribute. */
        assert_false(has_entry(j, KNOB_SCHEDULER_FORCE));
        assert_int_equal(j->n_entries, 6);

        for (size_t i = 0; i < j->n_entries; i++) {
                t = &j->entries[i];
                if (i > 0)
                        assert_true(j->entries[i - 1].knob < t->knob); /* already in apply order */
                assert_string_equal(t->section, "Device test");
                assert_null(t->before);
                assert_null(t->after);
                assert_int_equal(t->error, 0);
                if (t->knob == KNOB_CPU_AFFINITY)
                        continue;
                {
                        _cleanup_free_ char *p = path_join(e.f->blockdir, knob_info(t->knob)->attribute);
                        assert_string_equal(t->attr, knob_info(t->knob)->attribute);
                        assert_string_equal(t->path, p);
                }
                assert_string_equal(t->wanted, e.r.value[t->knob]);
                assert_true(streq_ptr(t->scheduler, knob_info(t->knob)->scheduler));
                assert_int_equal(t->outcome, TUNE_PENDING);
                assert_null(t->note);
        }
        assert_string_equal(entry(j, KNOB_KYBER_READ_LAT_NSEC)->scheduler, "kyber");
        assert_string_equal(entry(j, KNOB_DL_FIFO_BATCH)->scheduler, "mq-deadline");
        assert_null(entry(j, KNOB_NR_REQUESTS)->scheduler);

        /* No interrupts found below device/: one skipped entry says so. */
        t = entry(j, KNOB_CPU_AFFINITY);
        assert_string_equal(t->attr, "irq");
        assert_null(t->path);
        assert_int_equal(t->outcome, TUNE_SKIPPED);
        check_note(t, "no interrupts of its own");
}

static void test_plan_cpu_affinity_irqs(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *p24 = NULL, *p25 = NULL;
        TuneJob *j;

        env_init(&e, FX_NVME, K_6_1);
        /* The PCI function's MSI vectors, as directories like the kernel's. */
        assert_int_equal(fake_sysfs_set(e.f, "device/msi_irqs/25/mode", "msi", 0444), 0);
        assert_int_equal(fake_sysfs_set(e.f, "device/msi_irqs/24/mode", "msi", 0444), 0);
        want(&e, KNOB_CPU_AFFINITY, "8, 0-1");
        want(&e, KNOB_CPU_AFFINITY, "0-1,8");
        j = plan(&e);
        tune_job_sort(j);

        assert_int_equal(j->n_entries, 2);
        p24 = path_join(e.proc, "irq/24/smp_affinity_list");
        p25 = path_join(e.proc, "irq/25/smp_affinity_list");
        assert_string_equal(j->entries[0].attr, "irq/24");
        assert_string_equal(j->entries[0].path, p24);
        assert_string_equal(j->entries[1].attr, "irq/25");
        assert_string_equal(j->entries[1].path, p25);
        for (size_t i = 0; i < 2; i++) {
                assert_int_equal(j->entries[i].outcome, TUNE_PENDING);
                assert_string_equal(j->entries[i].wanted, "0-1,8");
                assert_null(j->entries[i].scheduler);
        }
}

typedef struct GuardCase {
        const char *fixture;
        unsigned kernel;
        const char *scheduler, *force;
        TuneOutcome outcome;
        const char *wanted, *note; /* note: substring, NULL for none */
} GuardCase;

static const GuardCase guard_cases[] = {
        /* The hidden ZNS path disk on 6.1: only mq-deadline. */
        { FX_ZNS_PATH, K_6_1, "kyber none", NULL, TUNE_SKIPPED, "kyber none", "SchedulerForce=yes" },
        { FX_ZNS_PATH, K_6_1, "none", NULL, TUNE_SKIPPED, "none", "before 6.10" },
        { FX_ZNS_PATH, K_6_1, "none mq-deadline", NULL, TUNE_PENDING, "mq-deadline", "mq-deadline chosen" },
        { FX_ZNS_PATH, K_6_1, "mq-deadline kyber", NULL, TUNE_PENDING, "mq-deadline", "mq-deadline chosen" },
        { FX_ZNS_PATH, K_6_1, "mq-deadline", NULL, TUNE_PENDING, "mq-deadline", NULL },
        { FX_ZNS_PATH, K_6_1, "kyber none", "0", TUNE_SKIPPED, "kyber none", "SchedulerForce=yes" },
        { FX_ZNS_PATH, K_6_1, "kyber none", "1", TUNE_PENDING, "kyber none", NULL },
        /* Zone write plugging (6.10) keeps writes in order with any scheduler. */
        { FX_ZNS_PATH, K_6_10, "kyber none", NULL, TUNE_PENDING, "kyber none", NULL },
        { FX_ZNS_PATH, K_6_18, "none mq-deadline", NULL, TUNE_PENDING, "none mq-deadline", NULL },
        { FX_ZNS_PATH, KERNEL_VERSION_CODE(6, 9), "kyber", NULL, TUNE_SKIPPED, "kyber", "host-managed" },
        /* null_blk zoned=1 is host-managed too. */
        { FX_NULLB, K_6_1, "none", NULL, TUNE_SKIPPED, "none", "SchedulerForce" },
        { FX_NULLB, K_6_1, "kyber mq-deadline", NULL, TUNE_PENDING, "mq-deadline", "mq-deadline chosen" },
        /* A conventional namespace on 6.1 is left alone. */
        { FX_NVME, K_6_1, "kyber none", NULL, TUNE_PENDING, "kyber none", NULL },
};

static void test_plan_zoned_guard(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(guard_cases); i++) {
                const GuardCase *c = &guard_cases[i];
                _cleanup_(env_done) Env e;
                TuneEntry *t;

                env_init(&e, c->fixture, c->kernel);
                want(&e, KNOB_SCHEDULER, c->scheduler);
                want(&e, KNOB_NR_REQUESTS, "64");
                if (c->force)
                        want(&e, KNOB_SCHEDULER_FORCE, c->force);
                plan(&e);
                t = entry(e.j, KNOB_SCHEDULER);
                if (t->outcome != c->outcome || !streq(t->wanted, c->wanted) || (!c->note) != (!t->note) ||
                    (c->note && !strstr(t->note, c->note)))
                        fail_msg("case %zu (%s, %s): %s, wanted \"%s\", note \"%s\"", i, c->fixture, c->scheduler,
                                 tune_outcome_to_string(t->outcome), t->wanted, strna(t->note));
                /* The guard is about the scheduler only. */
                assert_int_equal(entry(e.j, KNOB_NR_REQUESTS)->outcome, TUNE_PENDING);
        }
}

static void test_plan_bio_based_head(void **state) {
        static const Knob skipped[] = { KNOB_SCHEDULER, KNOB_NR_REQUESTS, KNOB_DL_READ_EXPIRE, KNOB_KYBER_READ_LAT_NSEC };
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *snap = NULL;
        TuneJob *j;

        /* On 6.18 the zoned guard is off: what is left is the head being bio-based. */
        env_init(&e, FX_ZNS_HEAD, K_6_18);
        want(&e, KNOB_SCHEDULER, "mq-deadline");
        want(&e, KNOB_NR_REQUESTS, "64");
        want(&e, KNOB_DL_READ_EXPIRE, "100");
        want(&e, KNOB_KYBER_READ_LAT_NSEC, "2000000");
        want(&e, KNOB_READ_AHEAD_KB, "4096");
        want(&e, KNOB_RQ_AFFINITY, "2");
        j = plan(&e);

        for (size_t i = 0; i < ELEMENTSOF(skipped); i++) {
                TuneEntry *t = entry(j, skipped[i]);
                assert_int_equal(t->outcome, TUNE_SKIPPED);
                check_note(t, "bio-based");
                check_note(t, "multipath head");
        }
        assert_int_equal(entry(j, KNOB_READ_AHEAD_KB)->outcome, TUNE_PENDING);
        assert_int_equal(entry(j, KNOB_RQ_AFFINITY)->outcome, TUNE_PENDING);

        /* Only the queue limits are written. */
        tune_execute(j);
        assert_int_equal(j->device_error, 0);
        for (size_t i = 0; i < ELEMENTSOF(skipped); i++)
                assert_int_equal(entry(j, skipped[i])->outcome, TUNE_SKIPPED);
        check(entry(j, KNOB_READ_AHEAD_KB), TUNE_CHANGED, "128", "4096");
        check(entry(j, KNOB_RQ_AFFINITY), TUNE_CHANGED, "0", "2");
        assert_true(fake_sysfs_untouched(e.f, "queue/scheduler"));
        assert_true(fake_sysfs_untouched(e.f, "queue/nr_requests"));
        assert_attr(&e, "queue/read_ahead_kb", "4096");
        assert_attr(&e, "queue/rq_affinity", "2");

        /* Same on 6.1 once executed: the head offers no scheduler to switch. */
        env_done(&e);
        env_init(&e, FX_ZNS_HEAD, K_6_1);
        want(&e, KNOB_SCHEDULER, "none mq-deadline");
        j = plan(&e);
        assert_int_equal(t_tree_snapshot(e.f->root, &snap), 0);
        tune_execute(j);
        check(entry(j, KNOB_SCHEDULER), TUNE_SKIPPED, NULL, NULL);
        check_note(entry(j, KNOB_SCHEDULER), "bio-based");
        {
                _cleanup_free_ char *after = NULL;
                assert_int_equal(t_tree_snapshot(e.f->root, &after), 0);
                assert_string_equal(snap, after);
        }
}

/* Regression: on a kernel before 6.10 the zoned guard is
 * checked before the bio-based test in tune_plan(), so the scheduler entry
 * of the ZNS multipath head (zoned AND bio-based) is planned as if the head
 * had a scheduler: "mq-deadline" stays PENDING with the note "mq-deadline
 * chosen", and "kyber none" is refused with the zoned note (telling the
 * user to set SchedulerForce=yes, which would not help) instead of the
 * bio-based one. tune_execute() later skips the first case, but plan
 * output and the note are wrong. Repro: fixture FX_ZNS_HEAD, kernel 6.1,
 * Scheduler=mq-deadline (or "kyber none"). */
static void test_plan_bio_based_head_zoned_6_1(void **state) {
        static const char *const lists[] = { "mq-deadline", "none mq-deadline", "kyber none" };
        char msg[512] = "";

        for (size_t i = 0; i < ELEMENTSOF(lists) && !*msg; i++) {
                _cleanup_(env_done) Env e;
                TuneEntry *t;

                env_init(&e, FX_ZNS_HEAD, K_6_1);
                want(&e, KNOB_SCHEDULER, lists[i]);
                plan(&e);
                t = entry(e.j, KNOB_SCHEDULER);
                if (t->outcome != TUNE_SKIPPED || !t->note || !strstr(t->note, "bio-based"))
                        snprintf(msg, sizeof msg, "BUG: head on 6.1, Scheduler=%s: planned %s, note \"%s\"", lists[i],
                                 tune_outcome_to_string(t->outcome), strna(t->note));
        }
        if (*msg)
                fail_msg("%s", msg);
}

/* ---- tune_execute() ---- */

static void test_execute_unchanged_writes_nothing(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *snap = NULL, *after = NULL;
        unsigned counts[_TUNE_OUTCOME_MAX];
        TuneJob *j;

        env_init(&e, FX_NVME, K_6_1);
        want(&e, KNOB_SCHEDULER, "none kyber"); /* the first candidate is active */
        want(&e, KNOB_NR_REQUESTS, "1023");
        want(&e, KNOB_WBT_LAT_USEC, "2000");
        want(&e, KNOB_READ_AHEAD_KB, "128");
        want(&e, KNOB_RQ_AFFINITY, "1");
        want(&e, KNOB_IO_POLL, "0");
        want(&e, KNOB_IO_POLL_DELAY, "-1");
        j = plan(&e);
        assert_int_equal(t_tree_snapshot(e.f->root, &snap), 0);

        tune_execute(j);
        assert_int_equal(j->device_error, 0);
        tune_job_count(j, counts);
        assert_int_equal(counts[TUNE_UNCHANGED], 7);
        assert_int_equal(counts[TUNE_UNCHANGED], j->n_entries);

        check(entry(j, KNOB_SCHEDULER), TUNE_UNCHANGED, "none", "none");
        assert_string_equal(entry(j, KNOB_SCHEDULER)->wanted, "none"); /* the candidate that won */
        check(entry(j, KNOB_NR_REQUESTS), TUNE_UNCHANGED, "1023", "1023");
        check(entry(j, KNOB_WBT_LAT_USEC), TUNE_UNCHANGED, "2000", "2000");
        check(entry(j, KNOB_READ_AHEAD_KB), TUNE_UNCHANGED, "128", "128");
        check(entry(j, KNOB_RQ_AFFINITY), TUNE_UNCHANGED, "1", "1");
        check(entry(j, KNOB_IO_POLL), TUNE_UNCHANGED, "0", "0");
        check(entry(j, KNOB_IO_POLL_DELAY), TUNE_UNCHANGED, "-1", "-1");

        /* Not a byte and not an mtime changed anywhere in the tree. */
        assert_int_equal(t_tree_snapshot(e.f->root, &after), 0);
        assert_string_equal(snap, after);
        assert_true(fake_sysfs_untouched(e.f, "queue/scheduler"));
        assert_true(fake_sysfs_untouched(e.f, "queue/nr_requests"));

        /* The hctx map is reported for every apply job. */
        assert_non_null(j->hctx_map);
        assert_non_null(strstr(j->hctx_map, "0:0"));
        assert_non_null(strstr(j->hctx_map, "1:1"));
        assert_null(j->affinity_note);
}

static void test_execute_changes_land(void **state) {
        _cleanup_(env_done) Env e;
        unsigned counts[_TUNE_OUTCOME_MAX];
        TuneJob *j;
        /* Each new value is at least as long as the old one (see fake-sysfs.h). */
        static const struct {
                Knob k;
                const char *attr, *before, *value;
        } cases[] = {
                { KNOB_NR_REQUESTS, "queue/nr_requests", "128", "2048" },
                { KNOB_WBT_LAT_USEC, "queue/wbt_lat_usec", "2000", "75000" },
                { KNOB_READ_AHEAD_KB, "queue/read_ahead_kb", "2560", "4096" },
                { KNOB_RQ_AFFINITY, "queue/rq_affinity", "1", "2" },
                { KNOB_IO_POLL, "queue/io_poll", "0", "1" },
                { KNOB_IO_POLL_DELAY, "queue/io_poll_delay", "-1", "10" },
        };

        env_init(&e, FX_LOOP, K_6_18);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                want(&e, cases[i].k, cases[i].value);
        want(&e, KNOB_SCHEDULER, "none"); /* active: no switch */
        j = plan(&e);
        tune_execute(j);

        assert_int_equal(j->device_error, 0);
        tune_job_count(j, counts);
        assert_int_equal(counts[TUNE_CHANGED], ELEMENTSOF(cases));
        assert_int_equal(counts[TUNE_UNCHANGED], 1);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                TuneEntry *t = entry(j, cases[i].k);
                check(t, TUNE_CHANGED, cases[i].before, cases[i].value);
                assert_null(t->note);
                assert_int_equal(t->error, 0);
                assert_false(fake_sysfs_untouched(e.f, cases[i].attr));
                assert_attr(&e, cases[i].attr, cases[i].value);
        }
        assert_true(fake_sysfs_untouched(e.f, "queue/scheduler"));
        assert_true(fake_sysfs_untouched(e.f, "queue/rotational"));
        assert_string_equal(j->hctx_map, "0:0-1"); /* "0, 1" in the kernel's format */
}

/* Drift: what the job left, read again later, changed by someone else. */
static void test_job_drifted(void **state) {
        _cleanup_(env_done) Env e;
        TuneJob *j;

        env_init(&e, FX_LOOP, K_6_18);
        want(&e, KNOB_NR_REQUESTS, "2048");
        want(&e, KNOB_READ_AHEAD_KB, "4096");
        want(&e, KNOB_SCHEDULER, "none");
        j = plan(&e);
        tune_execute(j);
        assert_int_equal(tune_job_drifted(j), 0);

        assert_int_equal(fake_sysfs_set(e.f, "queue/read_ahead_kb", "128", 0644), 0);
        assert_int_equal(tune_job_drifted(j), 1);
        assert_int_equal(fake_sysfs_set(e.f, "queue/scheduler", "none [mq-deadline] kyber bfq", 0644), 0);
        assert_int_equal(tune_job_drifted(j), 2);
        /* An attribute gone is not a drift. */
        assert_int_equal(fake_sysfs_remove(e.f, "queue/read_ahead_kb"), 0);
        assert_int_equal(tune_job_drifted(j), 1);
        /* Put back as the job left them: none. */
        assert_int_equal(fake_sysfs_set(e.f, "queue/scheduler", "[none] mq-deadline kyber bfq", 0644), 0);
        assert_int_equal(fake_sysfs_set(e.f, "queue/read_ahead_kb", "4096", 0644), 0);
        assert_int_equal(tune_job_drifted(j), 0);
}

static void test_execute_adjusted(void **state) {
        _cleanup_(env_done) Env e;
        TuneEntry *t;

        /* A read-back other than the value written is ADJUSTED with both in
         * the note, as when the kernel clamps nr_requests. The plain file
         * produces it honestly: "64" over "1023\n" leaves "6423". */
        env_init(&e, FX_NVME, K_6_1);
        want(&e, KNOB_NR_REQUESTS, "64");
        tune_execute(plan(&e));
        t = entry(e.j, KNOB_NR_REQUESTS);
        check(t, TUNE_ADJUSTED, "1023", "6423");
        check_note(t, "kept 6423 instead of 64");

        /* WbtLatUsec=-1 asks the kernel for its default: whatever it reads
         * back afterwards counts as done. */
        env_done(&e);
        env_init(&e, FX_NVME, K_6_1);
        want(&e, KNOB_WBT_LAT_USEC, "-1");
        tune_execute(plan(&e));
        assert_int_equal(entry(e.j, KNOB_WBT_LAT_USEC)->outcome, TUNE_CHANGED);
}

static void test_execute_missing_attr(void **state) {
        static const char *const fixtures[] = { FX_NVME, FX_ZNS_PATH, FX_LOOP, FX_VIRTIO };

        for (size_t i = 0; i < ELEMENTSOF(fixtures); i++) {
                _cleanup_(env_done) Env e;
                TuneEntry *t;

                /* queue/zoned_qd1_writes and queue/async_depth are in none
                 * of the captured kernels. */
                env_init(&e, fixtures[i], i < 2 ? K_6_1 : K_6_18);
                want(&e, KNOB_ZONED_QD1_WRITES, "1");
                want(&e, KNOB_ASYNC_DEPTH, "64");
                want(&e, KNOB_READ_AHEAD_KB, "9999");
                tune_execute(plan(&e));
                t = entry(e.j, KNOB_ZONED_QD1_WRITES);
                check(t, TUNE_SKIPPED, NULL, NULL);
                check_note(t, "queue/zoned_qd1_writes is not offered by this kernel");
                /* The ZNS path disk is zoned: the kernel is what lacks it. */
                check_note(t, i == 1 ? "(zoned devices, Linux 7.1 and later)" : "a device that is not zoned");
                assert_int_equal(t->error, 0);
                assert_null(attr(&e, "queue/zoned_qd1_writes")); /* not created */
                t = entry(e.j, KNOB_ASYNC_DEPTH);
                check(t, TUNE_SKIPPED, NULL, NULL);
                check_note(t, "queue/async_depth is not offered by this kernel");
                assert_int_equal(t->error, 0);
                assert_null(attr(&e, "queue/async_depth"));
                assert_null(e.j->async_depth_before);
                /* The rest of the job goes on. */
                assert_int_equal(entry(e.j, KNOB_READ_AHEAD_KB)->outcome, TUNE_CHANGED);
                assert_int_equal(e.j->device_error, 0);
        }
}

static void test_execute_read_only(void **state) {
        _cleanup_(env_done) Env e;
        TuneEntry *t;

        env_init(&e, FX_LOOP, K_6_18);
        /* As root open() would succeed anyway: the mode bits decide. */
        assert_int_equal(fake_sysfs_set(e.f, "queue/read_ahead_kb", "2560", 0444), 0);
        assert_int_equal(fake_sysfs_set(e.f, "queue/rq_affinity", "1", 0444), 0);
        want(&e, KNOB_READ_AHEAD_KB, "4096");
        want(&e, KNOB_RQ_AFFINITY, "1");
        want(&e, KNOB_NR_REQUESTS, "2048");
        tune_execute(plan(&e));

        t = entry(e.j, KNOB_READ_AHEAD_KB);
        check(t, TUNE_SKIPPED, "2560", NULL);
        check_note(t, "queue/read_ahead_kb is read-only");
        assert_true(fake_sysfs_untouched(e.f, "queue/read_ahead_kb"));
        assert_attr(&e, "queue/read_ahead_kb", "2560");
        /* Read-only but already right: unchanged, not skipped. */
        check(entry(e.j, KNOB_RQ_AFFINITY), TUNE_UNCHANGED, "1", "1");
        check(entry(e.j, KNOB_NR_REQUESTS), TUNE_CHANGED, "128", "2048");
}

static void test_execute_iosched(void **state) {
        _cleanup_(env_done) Env e;
        TuneEntry *t;

        /* vda runs mq-deadline. A stale kyber file in iosched/ shows the
         * kyber tunable is skipped for the scheduler, not for a missing file. */
        env_init(&e, FX_VIRTIO, K_6_18);
        assert_int_equal(fake_sysfs_set(e.f, "queue/iosched/read_lat_nsec", "2000000", 0644), 0);
        want(&e, KNOB_KYBER_READ_LAT_NSEC, "5000000");
        want(&e, KNOB_KYBER_WRITE_LAT_NSEC, "10000000");
        want(&e, KNOB_DL_READ_EXPIRE, "1000");
        want(&e, KNOB_DL_FRONT_MERGES, "0");
        want(&e, KNOB_DL_FIFO_BATCH, "16");
        tune_execute(plan(&e));

        t = entry(e.j, KNOB_KYBER_READ_LAT_NSEC);
        check(t, TUNE_SKIPPED, NULL, NULL);
        check_note(t, "ReadLatNsec applies to kyber, the active scheduler is mq-deadline");
        assert_null(t->before_scheduler);
        assert_true(fake_sysfs_untouched(e.f, "queue/iosched/read_lat_nsec"));
        check(entry(e.j, KNOB_KYBER_WRITE_LAT_NSEC), TUNE_SKIPPED, NULL, NULL);

        t = entry(e.j, KNOB_DL_READ_EXPIRE);
        check(t, TUNE_CHANGED, "500", "1000");
        assert_string_equal(t->before_scheduler, "mq-deadline");
        assert_attr(&e, "queue/iosched/read_expire", "1000");
        check(entry(e.j, KNOB_DL_FRONT_MERGES), TUNE_CHANGED, "1", "0");
        check(entry(e.j, KNOB_DL_FIFO_BATCH), TUNE_UNCHANGED, "16", "16");
        assert_true(fake_sysfs_untouched(e.f, "queue/iosched/fifo_batch"));
}

static void test_execute_before_is_original(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *p = NULL;
        TuneJob *j;

        /* Two entries for one attribute, as when the manager adds an
         * original: the second must still see the value from before the
         * job wrote anything, not the first entry's write. */
        env_init(&e, FX_NVME, K_6_1);
        assert_int_equal(tune_job_new(e.d->sysname, e.d->blockdir, &e.j), 0);
        j = e.j;
        p = path_join(e.f->blockdir, "queue/nr_requests");
        assert_int_equal(tune_job_add(j, KNOB_NR_REQUESTS, "queue/nr_requests", p, "2047", "Device a", NULL), 0);
        assert_int_equal(tune_job_add(j, KNOB_NR_REQUESTS, "queue/nr_requests", p, "4095", "Device b", NULL), 0);
        tune_execute(j);
        check(&j->entries[0], TUNE_CHANGED, "1023", "2047");
        check(&j->entries[1], TUNE_CHANGED, "1023", "4095");
        assert_string_equal(j->entries[1].section, "Device b");
        assert_attr(&e, "queue/nr_requests", "4095");
}

static void test_execute_dry_run(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *snap = NULL, *after = NULL;
        TuneJob *j;
        TuneEntry *t;

        env_init(&e, FX_LOOP, K_6_18);
        want(&e, KNOB_SCHEDULER, "kyber none");
        want(&e, KNOB_NR_REQUESTS, "2048");
        want(&e, KNOB_READ_AHEAD_KB, "2560");
        want(&e, KNOB_KYBER_READ_LAT_NSEC, "2000000"); /* kyber's, after the switch */
        want(&e, KNOB_DL_FIFO_BATCH, "8");              /* mq-deadline's: neither active nor planned */
        want(&e, KNOB_ZONED_QD1_WRITES, "1");           /* absent */
        assert_int_equal(fake_sysfs_set(e.f, "queue/rq_affinity", "1", 0444), 0);
        want(&e, KNOB_RQ_AFFINITY, "2"); /* read-only: still only "would be written" */
        j = plan(&e);
        j->dry_run = true;
        assert_int_equal(t_tree_snapshot(e.f->root, &snap), 0);
        tune_execute(j);

        /* Nothing written anywhere. */
        assert_int_equal(t_tree_snapshot(e.f->root, &after), 0);
        assert_string_equal(snap, after);

        t = entry(j, KNOB_SCHEDULER);
        check(t, TUNE_PLANNED, "none", NULL);
        assert_string_equal(t->wanted, "kyber");
        assert_string_equal(j->planned_scheduler, "kyber");
        check(entry(j, KNOB_NR_REQUESTS), TUNE_PLANNED, "128", NULL);
        check(entry(j, KNOB_READ_AHEAD_KB), TUNE_UNCHANGED, "2560", "2560");
        t = entry(j, KNOB_KYBER_READ_LAT_NSEC);
        check(t, TUNE_PLANNED, NULL, NULL);
        check_note(t, "after the scheduler switch");
        t = entry(j, KNOB_DL_FIFO_BATCH);
        check(t, TUNE_SKIPPED, NULL, NULL);
        check_note(t, "the active scheduler is none");
        check(entry(j, KNOB_ZONED_QD1_WRITES), TUNE_SKIPPED, NULL, NULL);
        check(entry(j, KNOB_RQ_AFFINITY), TUNE_PLANNED, "1", NULL);
        assert_int_equal(j->device_error, 0);
}

static void test_execute_dry_run_candidates(void **state) {
        static const struct {
                const char *fixture, *list;
                TuneOutcome outcome;
                const char *wanted, *note;
        } cases[] = {
                { FX_LOOP, "bfq kyber", TUNE_PLANNED, "bfq", NULL },
                { FX_LOOP, "foo kyber", TUNE_PLANNED, "kyber", NULL }, /* not offered: the next one */
                { FX_LOOP, "foo bar", TUNE_SKIPPED, "foo bar",
                  "none of \"foo bar\" is offered by this kernel ([none] mq-deadline kyber bfq)" },
                { FX_LOOP, "none", TUNE_UNCHANGED, "none", NULL },
                { FX_LOOP, "kyber none", TUNE_PLANNED, "kyber", NULL },
                { FX_VIRTIO, "none", TUNE_PLANNED, "none", NULL },
                { FX_VIRTIO, "kyber mq-deadline", TUNE_PLANNED, "kyber", NULL },
                { FX_VIRTIO, "mq-deadline kyber", TUNE_UNCHANGED, "mq-deadline", NULL },
                { FX_ZNS_PATH, "bfq none", TUNE_UNCHANGED, "none", NULL },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_(env_done) Env e;
                _cleanup_free_ char *snap = NULL, *after = NULL;
                TuneEntry *t;

                env_init(&e, cases[i].fixture, K_6_18);
                want(&e, KNOB_SCHEDULER, cases[i].list);
                plan(&e)->dry_run = true;
                assert_int_equal(t_tree_snapshot(e.f->root, &snap), 0);
                tune_execute(e.j);
                assert_int_equal(t_tree_snapshot(e.f->root, &after), 0);
                assert_string_equal(snap, after);
                t = entry(e.j, KNOB_SCHEDULER);
                if (t->outcome != cases[i].outcome || !streq(t->wanted, cases[i].wanted) ||
                    (cases[i].note && !streq_ptr(t->note, cases[i].note)))
                        fail_msg("case %zu (%s on %s): %s, wanted \"%s\", note \"%s\"", i, cases[i].list,
                                 cases[i].fixture, tune_outcome_to_string(t->outcome), t->wanted, strna(t->note));
                assert_true(streq_ptr(e.j->planned_scheduler, cases[i].outcome == TUNE_PLANNED ? cases[i].wanted : NULL));
        }
}

static void test_execute_scheduler_write(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *raw = NULL;

        /* A real switch: the first offered candidate is written. What the
         * kernel prints afterwards ("none mq-deadline [kyber] bfq") cannot
         * be faked by a plain file, so the outcome of the read-back is left
         * to the integration suite; here only the write itself is checked. */
        env_init(&e, FX_LOOP, K_6_18);
        want(&e, KNOB_SCHEDULER, "kyber none");
        tune_execute(plan(&e));
        raw = fake_sysfs_get(e.f, "queue/scheduler");
        assert_non_null(raw);
        assert_true(strncmp(raw, "kyber", 5) == 0);
        assert_string_equal(entry(e.j, KNOB_SCHEDULER)->before, "none");
        assert_string_equal(entry(e.j, KNOB_SCHEDULER)->wanted, "kyber");
}

static void test_execute_vanished(void **state) {
        static const char *const gone[] = { "queue", "" };

        for (size_t i = 0; i < ELEMENTSOF(gone); i++) {
                _cleanup_(env_done) Env e;
                unsigned counts[_TUNE_OUTCOME_MAX];
                TuneJob *j;

                env_init(&e, FX_NVME, K_6_1);
                want(&e, KNOB_SCHEDULER, "kyber");
                want(&e, KNOB_NR_REQUESTS, "2047");
                want(&e, KNOB_READ_AHEAD_KB, "4096");
                want(&e, KNOB_CPU_AFFINITY, "0"); /* skipped at plan time: stays so */
                j = plan(&e);
                assert_int_equal(fake_sysfs_remove(e.f, gone[i]), 0);
                tune_execute(j);

                assert_int_equal(j->device_error, -ENODEV);
                tune_job_count(j, counts);
                assert_int_equal(counts[TUNE_FAILED], 3);
                assert_int_equal(counts[TUNE_SKIPPED], 1);
                for (size_t k = 0; k < j->n_entries; k++) {
                        TuneEntry *t = &j->entries[k];
                        if (t->knob == KNOB_CPU_AFFINITY)
                                continue;
                        assert_int_equal(t->error, -ENODEV);
                        check_note(t, "device vanished");
                        assert_null(t->before);
                }
        }
}

/* A removal in progress (del_gendisk() takes attributes away before
 * queue/ itself): the writes fail, and queue/ goes a little later. The job
 * waits for that and says "device vanished" for every entry, once per
 * entry, not the errors of the half-removed attributes. */
typedef struct RemoveLater {
        const FakeSysfs *f;
        unsigned delay_ms;
} RemoveLater;

static void *remove_queue_later(void *arg) {
        const RemoveLater *rl = arg;

        (void) usleep(rl->delay_ms * 1000);
        assert_int_equal(fake_sysfs_remove(rl->f, "queue"), 0);
        return NULL;
}

static void test_execute_vanishing(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *dir = NULL;
        RemoveLater rl;
        pthread_t t;
        TuneJob *j;

        env_init(&e, FX_NVME, K_6_1);
        want(&e, KNOB_NR_REQUESTS, "2047");
        want(&e, KNOB_READ_AHEAD_KB, "4096");
        j = plan(&e);
        /* The attribute is half gone: reading it fails (EISDIR), not ENOENT. */
        assert_int_equal(fake_sysfs_remove(e.f, "queue/nr_requests"), 0);
        dir = path_join(e.f->blockdir, "queue/nr_requests");
        assert_non_null(dir);
        assert_int_equal(mkdir(dir, 0755), 0);
        rl = (RemoveLater) { .f = e.f, .delay_ms = 30 };
        assert_int_equal(pthread_create(&t, NULL, remove_queue_later, &rl), 0);
        tune_execute(j);
        assert_int_equal(pthread_join(t, NULL), 0);

        assert_int_equal(j->device_error, -ENODEV);
        for (size_t k = 0; k < j->n_entries; k++) {
                TuneEntry *te = &j->entries[k];
                print_message("%s: %s, error %d, note %s\n", knob_info(te->knob)->key,
                              tune_outcome_to_string(te->outcome), te->error, strna(te->note));
                if (te->knob == KNOB_NR_REQUESTS) {
                        assert_int_equal(te->outcome, TUNE_FAILED);
                        assert_int_equal(te->error, -ENODEV);
                        check_note(te, "device vanished");
                }
        }
}

static void test_execute_cpu_affinity(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_free_ char *p24 = NULL, *p25 = NULL, *v = NULL;
        TuneJob *j;

        env_init(&e, FX_NVME, K_6_1);
        assert_int_equal(fake_sysfs_set(e.f, "device/msi_irqs/24/mode", "msi", 0444), 0);
        assert_int_equal(fake_sysfs_set(e.f, "device/msi_irqs/25/mode", "msi", 0444), 0);
        p24 = path_join(e.proc, "irq/24");
        p25 = path_join(e.proc, "irq/25");
        assert_int_equal(t_mkdir_p(p24), 0);
        assert_int_equal(t_mkdir_p(p25), 0);
        free(p24);
        free(p25);
        p24 = path_join(e.proc, "irq/24/smp_affinity_list");
        p25 = path_join(e.proc, "irq/25/smp_affinity_list");
        assert_int_equal(t_write_file(p24, "0\n"), 0);
        assert_int_equal(t_write_file(p25, "1\n"), 0);

        want(&e, KNOB_CPU_AFFINITY, "1");
        j = plan(&e);
        tune_job_sort(j);
        tune_execute(j);

        check(&j->entries[0], TUNE_CHANGED, "0", "1");
        check(&j->entries[1], TUNE_UNCHANGED, "1", "1");
        assert_int_equal(sysfs_read(p24, &v), 0);
        assert_string_equal(v, "1");
        /* mq/0 serves CPU 0 only: reported, nothing the kernel lets us set. */
        assert_string_equal(j->cpu_affinity, "1");
        assert_non_null(j->affinity_note);
        assert_non_null(strstr(j->affinity_note, "hardware queues 0 serve no CPU of CPUAffinity=1"));
        assert_true(fake_sysfs_untouched(e.f, "mq/0/cpu_list"));
}

/* Regression: report_hctx() lists hardware queues in
 * readdir() order, which is not numeric: kernfs keeps a directory's
 * children sorted by name hash, ext4 returns hash order too. hctx_map and
 * the affinity note come out shuffled ("3:3 8:8 5:5 ..." here), unstable
 * output for blkmqctl and JSON. Expected: numeric order of mq/N. */
static void test_execute_hctx_map_order(void **state) {
        _cleanup_(env_done) Env e;
        char expect[512] = "", msg[700] = "";

        env_init(&e, FX_NVME, K_6_1);
        for (unsigned i = 0; i < 12; i++) {
                char a[64], cpu[16];
                snprintf(a, sizeof a, "mq/%u/cpu_list", i);
                snprintf(cpu, sizeof cpu, "%u", i);
                assert_int_equal(fake_sysfs_set(e.f, a, cpu, 0444), 0);
                snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s%u:%u", i ? " " : "", i, i);
        }
        tune_execute(plan(&e));
        assert_non_null(e.j->hctx_map);
        if (!streq(e.j->hctx_map, expect))
                snprintf(msg, sizeof msg, "BUG: hctx_map \"%s\", expected \"%s\"", e.j->hctx_map, expect);
        env_done(&e);
        if (*msg)
                fail_msg("%s", msg);
}


/* ---- the newest kernels' knobs, on the 7.3 fixtures ---- */

static size_t index_of(const TuneJob *j, Knob k) {
        for (size_t i = 0; i < j->n_entries; i++)
                if (j->entries[i].knob == k)
                        return i;
        fail_msg("no entry for %s", knob_info(k)->key);
        return 0;
}

static void test_async_depth_after_nr_requests(void **state) {
        _cleanup_(env_done) Env e;

        /* vda on mq-deadline, nr_requests 256, queue/async_depth 256. */
        env_init(&e, FX_VIRTIO_7_3, K_7_3);
        want(&e, KNOB_ASYNC_DEPTH, "384");
        want(&e, KNOB_READ_AHEAD_KB, "4096");
        want(&e, KNOB_NR_REQUESTS, "512");
        want(&e, KNOB_SCHEDULER, "mq-deadline");
        plan(&e);
        /* Planned in the kernel's order whatever the policy's: the scheduler,
         * then nr_requests, then async_depth (capped at nr_requests). */
        assert_int_equal(index_of(e.j, KNOB_SCHEDULER), 0);
        assert_int_equal(index_of(e.j, KNOB_NR_REQUESTS), 1);
        assert_int_equal(index_of(e.j, KNOB_ASYNC_DEPTH), 2);
        assert_int_equal(index_of(e.j, KNOB_READ_AHEAD_KB), 3);
        tune_execute(e.j);
        check(entry(e.j, KNOB_SCHEDULER), TUNE_UNCHANGED, "mq-deadline", "mq-deadline");
        check(entry(e.j, KNOB_NR_REQUESTS), TUNE_CHANGED, "256", "512");
        check(entry(e.j, KNOB_ASYNC_DEPTH), TUNE_CHANGED, "256", "384");
        assert_attr(&e, "queue/async_depth", "384");
        /* The value from before the job, for the restore: both a scheduler
         * switch and an nr_requests change move it. */
        assert_string_equal(e.j->async_depth_before, "256");
        assert_string_equal(e.j->nr_requests_before, "256");

        /* Already right: read, not written. */
        env_done(&e);
        env_init(&e, FX_VIRTIO_7_3, K_7_3);
        want(&e, KNOB_ASYNC_DEPTH, "256");
        tune_execute(plan(&e));
        check(entry(e.j, KNOB_ASYNC_DEPTH), TUNE_UNCHANGED, "256", "256");
        assert_true(fake_sysfs_untouched(e.f, "queue/async_depth"));

        /* An nr_requests change alone records async_depth's value too. */
        env_done(&e);
        env_init(&e, FX_VIRTIO_7_3, K_7_3);
        want(&e, KNOB_NR_REQUESTS, "128");
        tune_execute(plan(&e));
        assert_string_equal(e.j->async_depth_before, "256");
        assert_false(has_entry(e.j, KNOB_ASYNC_DEPTH));
}

static void test_async_depth_iosched_6_12(void **state) {
        _cleanup_(env_done) Env e;
        TuneEntry *t;

        /* 6.12's mq-deadline keeps async_depth in iosched/ (7.x moved it to
         * queue/): DeadlineAsyncDepth= is written and read back there,
         * AsyncDepth= is not offered, and the other mq-deadline tunables
         * land beside it. */
        env_init(&e, FX_VIRTIO_6_12, K_6_12);
        assert_string_equal(e.d->scheduler, "mq-deadline");
        assert_string_equal(e.d->transport, "virtio");
        want(&e, KNOB_DL_ASYNC_DEPTH, "128");
        want(&e, KNOB_DL_READ_EXPIRE, "250");
        want(&e, KNOB_ASYNC_DEPTH, "128");
        want(&e, KNOB_SCHEDULER, "mq-deadline");
        tune_execute(plan(&e));
        check(entry(e.j, KNOB_SCHEDULER), TUNE_UNCHANGED, "mq-deadline", "mq-deadline");
        check(entry(e.j, KNOB_DL_ASYNC_DEPTH), TUNE_CHANGED, "256", "128");
        assert_attr(&e, "queue/iosched/async_depth", "128");
        check(entry(e.j, KNOB_DL_READ_EXPIRE), TUNE_CHANGED, "500", "250");
        t = entry(e.j, KNOB_ASYNC_DEPTH);
        check(t, TUNE_SKIPPED, NULL, NULL);
        check_note(t, "queue/async_depth is not offered by this kernel");
        assert_null(attr(&e, "queue/async_depth"));
        /* Atomic writes reported (6.11 and later), write streams not (6.16). */
        assert_true(e.d->write_limits.v[WRITE_LIMIT_ATOMIC_MAX] == 0);
        assert_true(e.d->write_limits.v[WRITE_LIMIT_MAX_STREAMS] == -1);
}

static void test_async_depth_restore_order(void **state) {
        _cleanup_(env_done) Env e;
        _cleanup_(tune_job_freep) TuneJob *j = NULL;
        _cleanup_free_ char *pa = NULL, *pn = NULL, *ps = NULL;

        /* A restore job as the manager builds it, originals in the order they
         * were recorded (async_depth may come first: an implied original).
         * Sorted, it writes the scheduler, then nr_requests, then async_depth. */
        env_init(&e, FX_VIRTIO_7_3, K_7_3);
        assert_int_equal(fake_sysfs_set(e.f, "queue/nr_requests", "512", 0644), 0);
        assert_int_equal(fake_sysfs_set(e.f, "queue/async_depth", "384", 0644), 0);
        pa = path_join(e.f->blockdir, "queue/async_depth");
        pn = path_join(e.f->blockdir, "queue/nr_requests");
        ps = path_join(e.f->blockdir, "queue/scheduler");
        assert_int_equal(tune_job_new(e.f->sysname, e.f->blockdir, &j), 0);
        j->restore = true;
        assert_int_equal(tune_job_add(j, KNOB_ASYNC_DEPTH, "queue/async_depth", pa, "256", "original", NULL), 0);
        assert_int_equal(tune_job_add(j, KNOB_NR_REQUESTS, "queue/nr_requests", pn, "256", "original", NULL), 0);
        assert_int_equal(tune_job_add(j, KNOB_SCHEDULER, "queue/scheduler", ps, "mq-deadline", "original", NULL), 0);
        tune_job_sort(j);
        assert_int_equal(j->entries[0].knob, KNOB_SCHEDULER);
        assert_int_equal(j->entries[1].knob, KNOB_NR_REQUESTS);
        assert_int_equal(j->entries[2].knob, KNOB_ASYNC_DEPTH);
        tune_execute(j);
        check(&j->entries[1], TUNE_CHANGED, "512", "256");
        check(&j->entries[2], TUNE_CHANGED, "384", "256");
        assert_attr(&e, "queue/async_depth", "256");
}

static void test_zoned_qd1_writes_where_offered(void **state) {
        _cleanup_(env_done) Env e;

        /* The ZNS namespace of a 7.3 kernel: written and read back. */
        env_init(&e, FX_ZNS_7_3, K_7_3);
        want(&e, KNOB_ZONED_QD1_WRITES, "1");
        want(&e, KNOB_ASYNC_DEPTH, "1000");
        tune_execute(plan(&e));
        check(entry(e.j, KNOB_ZONED_QD1_WRITES), TUNE_CHANGED, "0", "1");
        check(entry(e.j, KNOB_ASYNC_DEPTH), TUNE_CHANGED, "1023", "1000");
        assert_true(e.j->zoned);

        /* A dry run says what it would write and writes nothing. */
        env_done(&e);
        env_init(&e, FX_ZNS_7_3, K_7_3);
        want(&e, KNOB_ZONED_QD1_WRITES, "1");
        plan(&e)->dry_run = true;
        tune_execute(e.j);
        check(entry(e.j, KNOB_ZONED_QD1_WRITES), TUNE_PLANNED, "0", NULL);
        assert_true(fake_sysfs_untouched(e.f, "queue/zoned_qd1_writes"));

        /* The 7.3 virtio disk is not zoned: not offered, nothing created,
         * and the dry run's text says so. */
        env_done(&e);
        env_init(&e, FX_VIRTIO_7_3, K_7_3);
        want(&e, KNOB_ZONED_QD1_WRITES, "1");
        want(&e, KNOB_ASYNC_DEPTH, "128");
        plan(&e)->dry_run = true;
        tune_execute(e.j);
        check(entry(e.j, KNOB_ZONED_QD1_WRITES), TUNE_SKIPPED, NULL, NULL);
        check_note(entry(e.j, KNOB_ZONED_QD1_WRITES), "not offered by this kernel for a device that is not zoned");
        assert_null(attr(&e, "queue/zoned_qd1_writes"));
        check(entry(e.j, KNOB_ASYNC_DEPTH), TUNE_PLANNED, "256", NULL);
        assert_true(fake_sysfs_untouched(e.f, "queue/async_depth"));
        {
                _cleanup_free_ char *text = NULL;
                size_t len = 0;
                FILE *f = open_memstream(&text, &len);

                assert_non_null(f);
                assert_int_equal(strv_extend(&e.r.matched, "Device test"), 0);
                device_plan_print(f, e.d, &e.r, e.j);
                fclose(f);
                if (!strstr(text, "queue/zoned_qd1_writes is not offered by this kernel"))
                        fail_msg("dry-run text lacks the note:\n%s", text);
        }
}

static void test_async_depth_bio_based(void **state) {
        _cleanup_(env_done) Env e;

        /* The multipath head has no blk-mq queue: nothing to cap. */
        env_init(&e, FX_ZNS_HEAD, K_6_1);
        want(&e, KNOB_ASYNC_DEPTH, "64");
        tune_execute(plan(&e));
        check(entry(e.j, KNOB_ASYNC_DEPTH), TUNE_SKIPPED, NULL, NULL);
        check_note(entry(e.j, KNOB_ASYNC_DEPTH), "bio-based");
}

static void test_job_sort_and_count(void **state) {
        _cleanup_(tune_job_freep) TuneJob *j = NULL;
        unsigned counts[_TUNE_OUTCOME_MAX];
        static const struct {
                Knob k;
                const char *attr;
        } add[] = {
                { KNOB_CPU_AFFINITY, "irq/25" },
                { KNOB_DL_FIFO_BATCH, "queue/iosched/fifo_batch" },
                { KNOB_CPU_AFFINITY, "irq/24" },
                { KNOB_READ_AHEAD_KB, "queue/read_ahead_kb" },
                { KNOB_KYBER_READ_LAT_NSEC, "queue/iosched/read_lat_nsec" },
                { KNOB_NR_REQUESTS, "queue/nr_requests" },
                { KNOB_SCHEDULER, "queue/scheduler" },
                { KNOB_ZONED_QD1_WRITES, "queue/zoned_qd1_writes" },
                { KNOB_ASYNC_DEPTH, "queue/async_depth" },
        };
        /* async_depth is capped at nr_requests, which a scheduler switch
         * resets: scheduler, nr_requests, async_depth, in restores too. */
        static const char *const sorted[] = {
                "queue/scheduler", "queue/nr_requests", "queue/async_depth", "queue/read_ahead_kb",
                "queue/iosched/read_lat_nsec",
                "queue/iosched/fifo_batch", "queue/zoned_qd1_writes", "irq/24", "irq/25",
        };

        assert_int_equal(tune_job_new("x", "/sys/block/x", &j), 0);
        for (size_t i = 0; i < ELEMENTSOF(add); i++)
                assert_int_equal(tune_job_add(j, add[i].k, add[i].attr, NULL, "1", "original", NULL), 0);
        tune_job_sort(j);
        assert_int_equal(j->n_entries, ELEMENTSOF(sorted));
        for (size_t i = 0; i < ELEMENTSOF(sorted); i++) {
                if (!streq(j->entries[i].attr, sorted[i]))
                        fail_msg("entry %zu is %s, expected %s", i, j->entries[i].attr, sorted[i]);
                if (i > 0)
                        assert_true(j->entries[i - 1].knob <= j->entries[i].knob);
        }
        /* The scheduler goes first: switching it resets nr_requests and iosched/. */
        assert_int_equal(j->entries[0].knob, KNOB_SCHEDULER);

        tune_job_count(j, counts);
        assert_int_equal(counts[TUNE_PENDING], ELEMENTSOF(add));
        j->entries[0].outcome = TUNE_FAILED;
        j->entries[1].outcome = TUNE_CHANGED;
        tune_job_count(j, counts);
        assert_int_equal(counts[TUNE_PENDING], ELEMENTSOF(add) - 2);
        assert_int_equal(counts[TUNE_FAILED], 1);
        assert_int_equal(counts[TUNE_CHANGED], 1);

        {
                static const char *const names[_TUNE_OUTCOME_MAX] = {
                        "pending", "unchanged", "changed", "adjusted", "skipped", "failed", "planned",
                };
                for (int o = 0; o < _TUNE_OUTCOME_MAX; o++)
                        assert_string_equal(tune_outcome_to_string(o), names[o]);
                assert_null(tune_outcome_to_string(_TUNE_OUTCOME_MAX));
                assert_null(tune_outcome_to_string((TuneOutcome) -1));
        }
        assert_null(tune_job_free(NULL));
}

static void test_fake_sysfs(void **state) {
        _cleanup_fake_sysfs_ FakeSysfs *f = fake(FX_LOOP);
        _cleanup_free_ char *uevent = fake_sysfs_get(f, "uevent"), *sched = fake_sysfs_get(f, "queue/scheduler"),
                            *root = strdup(f->root);
        struct stat st;

        /* The helper itself: 0x1c becomes a newline, trailing "\n", modes. */
        assert_string_equal(uevent, "MAJOR=7\nMINOR=0\nDEVNAME=loop0\nDEVTYPE=disk\nDISKSEQ=181\n");
        assert_string_equal(sched, "[none] mq-deadline kyber bfq \n");
        {
                _cleanup_free_ char *p = path_join(f->blockdir, "mq/0/cpu_list");
                assert_int_equal(stat(p, &st), 0);
                assert_int_equal(st.st_mode & 07777, 0444);
                assert_int_equal(sysfs_writable(p), 0);
        }
        assert_true(fake_sysfs_untouched(f, "queue/nr_requests"));
        assert_false(fake_sysfs_untouched(f, "queue/nope"));
        {
                /* The detectors the execute tests rely on: even a write of
                 * the same bytes shows in the mtime and the snapshot. */
                _cleanup_free_ char *before = NULL, *after = NULL, *p = path_join(f->blockdir, "queue/nr_requests");
                assert_int_equal(t_tree_snapshot(f->root, &before), 0);
                assert_int_equal(sysfs_write(p, "128\n"), 0);
                assert_false(fake_sysfs_untouched(f, "queue/nr_requests"));
                assert_int_equal(t_tree_snapshot(f->root, &after), 0);
                assert_string_not_equal(before, after);
        }
        assert_null(fake_sysfs_get(f, "queue/nope"));
        f = fake_sysfs_free(f);
        assert_false(sysfs_exists(root)); /* removed */
        {
                FakeSysfs *x = NULL;
                assert_int_equal(fake_sysfs_new("no-such-fixture.tsv", &x), -ENOENT);
                assert_null(x);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fake_sysfs),
                cmocka_unit_test(test_device_info_fixtures),
                cmocka_unit_test(test_device_info_write_limits),
                cmocka_unit_test(test_device_info_path_offers_schedulers),
                cmocka_unit_test(test_device_info_udev),
                cmocka_unit_test(test_device_info_missing),
                cmocka_unit_test(test_knob_value_equal),
                cmocka_unit_test(test_plan_entries),
                cmocka_unit_test(test_plan_cpu_affinity_irqs),
                cmocka_unit_test(test_plan_zoned_guard),
                cmocka_unit_test(test_plan_bio_based_head),
                cmocka_unit_test(test_plan_bio_based_head_zoned_6_1),
                cmocka_unit_test(test_execute_unchanged_writes_nothing),
                cmocka_unit_test(test_execute_changes_land),
                cmocka_unit_test(test_job_drifted),
                cmocka_unit_test(test_execute_adjusted),
                cmocka_unit_test(test_execute_missing_attr),
                cmocka_unit_test(test_execute_read_only),
                cmocka_unit_test(test_execute_iosched),
                cmocka_unit_test(test_execute_before_is_original),
                cmocka_unit_test(test_execute_dry_run),
                cmocka_unit_test(test_execute_dry_run_candidates),
                cmocka_unit_test(test_execute_scheduler_write),
                cmocka_unit_test(test_execute_vanished),
                cmocka_unit_test(test_execute_vanishing),
                cmocka_unit_test(test_execute_cpu_affinity),
                cmocka_unit_test(test_execute_hctx_map_order),
                cmocka_unit_test(test_async_depth_after_nr_requests),
                cmocka_unit_test(test_async_depth_restore_order),
                cmocka_unit_test(test_async_depth_iosched_6_12),
                cmocka_unit_test(test_zoned_qd1_writes_where_offered),
                cmocka_unit_test(test_async_depth_bio_based),
                cmocka_unit_test(test_job_sort_and_count),
        };

        if (!t_fixtures_dir()) {
                fprintf(stderr, "FIXTURES_DIR is not set (meson test sets it): skipping.\n");
                return 77;
        }
        return cmocka_run_group_tests(tests, NULL, NULL);
}
