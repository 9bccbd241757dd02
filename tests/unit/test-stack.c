/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* stack.c over sysfs trees captured in a guest
 * (tests/fixtures/sysfs/guest-6.12-stacks.tsv, tests/vm/capture-stacks.sh):
 * an LV striped over two NVMe namespaces, dm-crypt on an LV, md RAID1 and
 * RAID0 over partitions of the same two disks, a request-based dm-multipath
 * map; down through slaves/ to the request-based members, up through
 * holders/ to every top; the Match keys of stacks (MatchVolume= ...) on the
 * devices as device_info_load() reads them, with the captured udev
 * database and without it (sysfs alone); the trees explain draws of them
 * (policy/stack-tree.c's StackNode, drawn by blkmqctl's ctl-stack-tree.c). */

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* before cmocka.h: its fail() macro would take ctl.h's fail() */
#include "ctl.h"

#include <cmocka.h>

#include "cleanup.h"
#include "conf.h"
#include "device.h"
#include "fake-sysfs.h"
#include "policy.h"
#include "stack.h"
#include "stack-tree.h"
#include "sysfs.h"
#include "util.h"
#include "varlink-idl.h"

#define STACKS "guest-6.12-stacks.tsv"

/* The fixture as a tree below a fresh directory: "block/..." lines with an
 * octal mode are files (value + "\n", 0x1c back to newlines), "link" lines
 * symbolic links to another path of the tree (slaves/, holders/); "udev/"
 * lines (the udev database) are left to the match tests. */
static char *stacks_tree(void) {
        _cleanup_free_ char *fx = NULL;
        char *root = NULL;
        char line[8192];
        FILE *f;

        assert_true(asprintf(&fx, "%s/sysfs/%s", t_fixtures_dir(), STACKS) > 0);
        assert_int_equal(t_mkdtemp("blkmqd-stack", &root), 0);
        f = fopen(fx, "re");
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
                char *path = line, *mode, *value, *nl;

                if (line[0] == '#' || strncmp(line, "block/", 6) != 0)
                        continue;
                if ((nl = strchr(line, '\n')))
                        *nl = 0;
                mode = strchr(path, '\t');
                assert_non_null(mode);
                *mode++ = 0;
                value = strchr(mode, '\t');
                assert_non_null(value);
                *value++ = 0;

                _cleanup_free_ char *p = path_join(root, path), *dir = strdup(p);
                assert_non_null(dir);
                *strrchr(dir, '/') = 0;
                assert_int_equal(t_mkdir_p(dir), 0);
                if (streq(mode, "link")) {
                        _cleanup_free_ char *t = path_join(root, value);
                        assert_int_equal(symlink(t, p), 0);
                        continue;
                }
                for (char *c = value; *c; c++)
                        if (*c == '\034')
                                *c = '\n';
                _cleanup_free_ char *v = NULL;
                assert_true(asprintf(&v, "%s\n", value) >= 0);
                assert_int_equal(t_write_file(p, v), 0);
        }
        fclose(f);
        return root;
}

static void free_tree(char *root) {
        assert_int_equal(t_rm_rf(root), 0);
        free(root);
}

/* The dm-N of a dm name, read from the tree as the daemon would. */
static char *dm_by_name(const char *root, const char *name) {
        for (int i = 0; i < 32; i++) {
                _cleanup_free_ char *p = NULL;
                char buf[256] = "";
                FILE *f;

                assert_true(asprintf(&p, "%s/block/dm-%d/dm/name", root, i) > 0);
                if (!(f = fopen(p, "re")))
                        continue;
                if (fgets(buf, sizeof buf, f))
                        buf[strcspn(buf, "\n")] = 0;
                fclose(f);
                if (streq(buf, name)) {
                        char *r = NULL;
                        assert_true(asprintf(&r, "dm-%d", i) > 0);
                        return r;
                }
        }
        fail_msg("no dm device named %s in the fixture", name);
        return NULL;
}

static char *joined(char *const *l) {
        char *j = strv_join((char **) l, " ");
        assert_non_null(j);
        return j;
}

static void test_lv_striped(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *lv = dm_by_name(root, "vgdata-striped"), *m = NULL;
        _cleanup_(stack_freep) Stack *s = NULL;

        assert_int_equal(stack_resolve(root, lv, &s), 0);
        assert_false(s->top->request_based);          /* an LV is bio-based */
        assert_int_equal(s->top->n_children, 2);
        m = joined(s->members);
        assert_string_equal(m, "nvme0n1 nvme0n2");
        assert_false(stack_is_trivial(s));

        _cleanup_strv_free_ char **path = NULL;
        assert_int_equal(stack_path_to(s, "nvme0n2", &path), 0);
        assert_int_equal(strv_length(path), 2);
        assert_string_equal(path[0], lv);
        assert_string_equal(path[1], "nvme0n2");
        free_tree(root);
}

/* Three layers: the crypt mapping on an LV on a namespace. */
static void test_crypt_on_lv(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *crypt = dm_by_name(root, "secret"), *lv = dm_by_name(root, "vgdata-cryptlv"), *m = NULL;
        _cleanup_(stack_freep) Stack *s = NULL;
        _cleanup_strv_free_ char **path = NULL;

        assert_int_equal(stack_resolve(root, crypt, &s), 0);
        assert_int_equal(s->top->n_children, 1);
        assert_string_equal(s->top->children[0]->name, lv);
        assert_false(s->top->children[0]->request_based);
        m = joined(s->members);
        assert_string_equal(m, "nvme0n1");  /* the linear LV took its extents from the first PV */
        assert_int_equal(stack_path_to(s, s->members[0], &path), 0);
        assert_int_equal(strv_length(path), 3);
        assert_string_equal(path[0], crypt);
        assert_string_equal(path[1], lv);
        assert_int_equal(stack_path_to(s, "nvme0n5", &path), -ENOENT);
        free_tree(root);
}

/* md over partitions: the partitions' disks are the members. */
static void test_md_on_partitions(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_(stack_freep) Stack *s = NULL;
        _cleanup_strv_free_ char **path = NULL;
        _cleanup_free_ char *m = NULL;

        assert_int_equal(stack_resolve(root, "md0", &s), 0);
        assert_false(s->top->request_based);
        assert_int_equal(s->top->n_children, 2);
        assert_true(s->top->children[0]->partition);
        assert_string_equal(s->top->children[0]->name, "nvme0n3p1");
        assert_string_equal(s->top->children[0]->disk, "nvme0n3");
        assert_true(s->top->children[0]->request_based);
        m = joined(s->members);
        assert_string_equal(m, "nvme0n3 nvme0n4");
        assert_int_equal(stack_path_to(s, "nvme0n4", &path), 0);
        assert_int_equal(strv_length(path), 3);
        assert_string_equal(path[1], "nvme0n4p1");
        assert_string_equal(path[2], "nvme0n4");
        free_tree(root);
}

/* The request-based multipath map is its own member: its path's queue
 * is below its scheduler. */
static void test_multipath_request_based(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *mp = dm_by_name(root, "mpatha"), *m = NULL;
        _cleanup_(stack_freep) Stack *s = NULL;

        assert_int_equal(stack_resolve(root, mp, &s), 0);
        assert_true(s->top->request_based);
        assert_int_equal(s->top->n_children, 0);
        m = joined(s->members);
        assert_string_equal(m, mp);
        assert_true(stack_is_trivial(s));
        /* its path listed for explain's tree, not followed: no member, no
         * path to it */
        assert_int_equal(s->top->n_paths, 1);
        assert_string_equal(s->top->paths[0]->name, "nvme0n5");
        assert_true(s->top->paths[0]->request_based);
        assert_false(s->top->paths[0]->partition);
        assert_int_equal(s->top->paths[0]->n_children, 0);
        _cleanup_strv_free_ char **path = NULL;
        assert_int_equal(stack_path_to(s, "nvme0n5", &path), -ENOENT);
        free_tree(root);
}

/* A bare disk is a stack of one; a missing one is -ENOENT. */
static void test_plain_and_missing(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_(stack_freep) Stack *s = NULL, *s2 = NULL;

        assert_int_equal(stack_resolve(root, "nvme0n5", &s), 0);
        assert_true(stack_is_trivial(s));
        assert_string_equal(s->members[0], "nvme0n5");
        assert_null(s->members[1]);
        assert_int_equal(stack_resolve(root, "dm-99", &s2), -ENOENT);
        free_tree(root);
}

/* Up through holders/: the disks of two md arrays (through their
 * partitions) have two tops; a PV has both LVs and the crypt mapping
 * above the LV it carries, not the LV itself. */
/* fn (stack_tops(), stack_tree_tops() or stack_above()) of NAME lists WANT
 * (space-separated; NULL: nothing). A macro: a failure names the caller's line. */
#define assert_tops(fn, root, name, want)                                       \
        do {                                                                    \
                _cleanup_strv_free_ char **_l = NULL;                           \
                assert_int_equal(fn(root, name, &_l), 0);                       \
                if (!(want)) {                                                  \
                        assert_null(_l);                                        \
                        break;                                                  \
                }                                                               \
                _cleanup_free_ char *_t = joined(_l);                           \
                assert_string_equal(_t, want);                                  \
        } while (0)

static void test_tops(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *striped = dm_by_name(root, "vgdata-striped"), *crypt = dm_by_name(root, "secret"),
                            *want = NULL;

        assert_tops(stack_tops, root, "nvme0n3", "md0 md1");
        assert_true(asprintf(&want, "%s %s", striped, crypt) > 0);
        assert_tops(stack_tops, root, "nvme0n1", want);

        /* the path of a request-based multipath map: the map is a member
         * of its own, nothing above the path is its stack */
        assert_tops(stack_tops, root, "nvme0n5", NULL);
        assert_tops(stack_above, root, "nvme0n5", NULL);
        /* ... but explain draws the path in the map's tree */
        assert_tops(stack_tree_tops, root, "nvme0n5", "dm-3");
        /* elsewhere the same tops as stack_tops() */
        assert_tops(stack_tree_tops, root, "nvme0n3", "md0 md1");

        /* stack_above(): the layer between too (the LV under the crypt mapping) */
        assert_tops(stack_above, root, "nvme0n1", "dm-0 dm-1 dm-2");
        assert_tops(stack_above, root, "nvme0n3", "md0 md1"); /* its partitions are not listed */

        /* the top itself has nothing above */
        assert_tops(stack_tops, root, "md0", NULL);
        free_tree(root);
}

/* A loop in the links (no kernel makes one) ends in -ELOOP, not a crash. */
static void test_loop_guard(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *lv = dm_by_name(root, "vgdata-striped"), *l = NULL, *t = NULL;
        _cleanup_(stack_freep) Stack *s = NULL;

        assert_true(asprintf(&l, "%s/block/nvme0n1/queue/scheduler", root) > 0);
        assert_int_equal(t_write_file(l, "none\n"), 0); /* as if bio-based */
        l = mfree(l);
        assert_true(asprintf(&l, "%s/block/nvme0n1/slaves", root) > 0);
        assert_int_equal(t_mkdir_p(l), 0);
        l = mfree(l);
        assert_true(asprintf(&l, "%s/block/nvme0n1/slaves/%s", root, lv) > 0);
        assert_true(asprintf(&t, "%s/block/%s", root, lv) > 0);
        assert_int_equal(symlink(t, l), 0);
        assert_int_equal(stack_resolve(root, lv, &s), -ELOOP);
        free_tree(root);
}

/* The captured udev database of dev (its "udev/DEV" lines). */
static char **udev_props(const char *dev) {
        _cleanup_free_ char *fx = NULL, *prefix = NULL;
        char **l = NULL;
        char line[8192];
        FILE *f;

        assert_true(asprintf(&fx, "%s/sysfs/%s", t_fixtures_dir(), STACKS) > 0);
        assert_true(asprintf(&prefix, "udev/%s\tprop\t", dev) > 0);
        f = fopen(fx, "re");
        assert_non_null(f);
        while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\n")] = 0;
                if (strncmp(line, prefix, strlen(prefix)) == 0)
                        assert_int_equal(strv_extend(&l, line + strlen(prefix)), 0);
        }
        fclose(f);
        assert_non_null(l);
        return l;
}

static DeviceInfo *load_dev(const char *root, const char *dev, bool with_udev) {
        _cleanup_strv_free_ char **props = with_udev ? udev_props(dev) : NULL;
        _cleanup_free_ char *dir = NULL;
        DeviceInfo *d = NULL;

        assert_true(asprintf(&dir, "%s/block/%s", root, dev) > 0);
        assert_int_equal(device_info_load(dir, props, &d), 0);
        return d;
}

static bool matches(const char *match_lines, const DeviceInfo *d, char **ret_reason) {
        _cleanup_free_ char *text = NULL;
        _cleanup_(config_freep) Config *c = NULL;
        ConfigError err;

        assert_true(asprintf(&text, "[Device t]\n%s\nScheduler=none\n", match_lines) > 0);
        if (config_load_string(text, "m.conf", &c, &err) < 0)
                fail_msg("m.conf:%u: %s", err.line, err.message);
        return policy_match(&c->devices[0].match, d, ret_reason);
}

static void test_stack_names(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *striped = dm_by_name(root, "vgdata-striped"), *lv = dm_by_name(root, "vgdata-cryptlv"),
                            *crypt = dm_by_name(root, "secret"), *mp = dm_by_name(root, "mpatha");

        for (int udev = 1; udev >= 0; udev--) {
                _cleanup_(device_info_freep) DeviceInfo *a = load_dev(root, striped, udev), *b = load_dev(root, lv, udev),
                                                        *c = load_dev(root, crypt, udev), *m = load_dev(root, mp, udev),
                                                        *r1 = load_dev(root, "md0", udev), *r0 = load_dev(root, "md1", udev),
                                                        *n = load_dev(root, "nvme0n1", udev);

                assert_string_equal(a->volume, "vgdata/striped");
                assert_string_equal(b->volume, "vgdata/cryptlv");
                assert_null(c->volume);
                assert_string_equal(c->crypt, "secret");
                assert_null(b->crypt);
                assert_string_equal(m->mpath_wwid, "nvme.1b36-73746b30-51454d55204e564d65204374726c-00000005");
                assert_string_equal(r1->md_level, "raid1");
                assert_string_equal(r0->md_level, "raid0");
                if (udev)
                        assert_string_equal(r1->md_name, "any:mirror");
                else
                        assert_null(r1->md_name); /* no name in sysfs */
                assert_null(n->dm_name);
                assert_null(n->volume);
                assert_null(n->md_level);

                assert_true(matches("MatchVolume=vgdata/striped", a, NULL));
                assert_false(matches("MatchVolume=vgdata/striped", b, NULL));
                assert_true(matches("MatchVolume=vgdata/*", b, NULL));
                assert_true(matches("MatchVolume=other/* vg*/crypt*", b, NULL));
                assert_false(matches("MatchVolume=vgdata/*", c, NULL));
                assert_false(matches("MatchVolume=*/*", n, NULL));
                assert_true(matches("MatchDMName=vgdata-*", a, NULL));
                assert_true(matches("MatchDMUUID=CRYPT-*", c, NULL));
                assert_false(matches("MatchDMUUID=CRYPT-*", b, NULL));
                assert_true(matches("MatchCrypt=secret", c, NULL));
                assert_false(matches("MatchCrypt=*", b, NULL));
                assert_true(matches("MatchMultipathWWID=nvme.1b36-*-00000005", m, NULL));
                assert_false(matches("MatchMultipathWWID=*", n, NULL));
                assert_true(matches("MatchMDLevel=raid1", r1, NULL));
                assert_false(matches("MatchMDLevel=raid1", r0, NULL));
                assert_true(matches("MatchMDLevel=raid*", r0, NULL));
                assert_false(matches("MatchMDLevel=raid*", n, NULL));
                assert_int_equal(matches("MatchMDName=mirror", r1, NULL), udev);
                assert_int_equal(matches("MatchMDName=any:mirror", r1, NULL), udev);
                assert_false(matches("MatchMDName=mirror", r0, NULL));
        }

        /* the reason says which key and what the device has */
        _cleanup_(device_info_freep) DeviceInfo *b = load_dev(root, lv, true), *n = load_dev(root, "nvme0n1", true);
        _cleanup_free_ char *why = NULL, *why2 = NULL;
        assert_false(matches("MatchVolume=vgdata/striped", b, &why));
        assert_string_equal(why, "MatchVolume=vgdata/striped: vgdata/cryptlv does not match");
        assert_false(matches("MatchMDLevel=raid1", n, &why2));
        assert_string_equal(why2, "MatchMDLevel=raid1: (not set) does not match");
        free_tree(root);
}

/* LVM doubles a '-' inside a VG or LV name in the dm name; without udev
 * the single one divides them. */
static void test_volume_from_dm_name(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_free_ char *lv = dm_by_name(root, "vgdata-striped"), *p = NULL;
        _cleanup_(device_info_freep) DeviceInfo *d = NULL;

        assert_true(asprintf(&p, "%s/block/%s/dm/name", root, lv) > 0);
        assert_int_equal(t_write_file(p, "my--vg-lv--a--b\n"), 0);
        d = load_dev(root, lv, false);
        assert_string_equal(d->volume, "my-vg/lv-a-b");
        free_tree(root);
}

static void test_match_key_errors(void **state) {
        static const struct { const char *text; unsigned line; const char *message; } bad[] = {
                { "[Device a]\nMatchVolume=vgdata\n", 2, "MatchVolume=: \"vgdata\" is not VG/LV" },
                { "[Device a]\nMatchKernel=dm-*\nMatchVolume=vg/lv /lv\n", 3, "\"/lv\" is not VG/LV" },
                { "[Device a]\nMatchVolume=vg/lv/x\n", 2, "\"vg/lv/x\" is not VG/LV" },
                { "[Device a]\nMatchMDLevel=raid7\n", 2, "MatchMDLevel=: \"raid7\" matches no md level" },
                { "[Profile p]\nMatchCrypt=secret\n", 2, "MatchCrypt= belongs in a [Device] section" },
        };
        (void) state;
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                Config *c = NULL;
                ConfigError err;

                assert_int_equal(config_load_string(bad[i].text, "bad.conf", &c, &err), -EINVAL);
                assert_null(c);
                if (err.line != bad[i].line || !strstr(err.message, bad[i].message))
                        fail_msg("case %zu: got bad.conf:%u: %s", i, err.line, err.message);
        }
}

/* Resolves member with the sections that match the devices above it, as
 * the daemon does: stack_above(), each one's DeviceInfo. */
static void resolve_member(const char *root, const Config *c, const char *member, Resolved *ret) {
        _cleanup_strv_free_ char **above = NULL;
        _cleanup_(device_info_freep) DeviceInfo *d = load_dev(root, member, true);
        DeviceInfo *infos[16] = {};
        size_t n = 0;

        assert_int_equal(stack_above(root, member, &above), 0);
        STRV_FOREACH(a, above) {
                assert_true(n < ELEMENTSOF(infos));
                infos[n++] = load_dev(root, *a, true);
        }
        assert_int_equal(policy_resolve_stacked(c, d, (const DeviceInfo *const *) infos, n, NULL, ret), 0);
        for (size_t i = 0; i < n; i++)
                device_info_free(infos[i]);
}

static bool explain_has(const Resolved *r, const char *needle) {
        STRV_FOREACH(l, r->explain)
                if (strstr(*l, needle))
                        return true;
        return false;
}

static const char STACK_CONF[] =
        "[Device lvm]\n"
        "MatchVolume=vgdata/*\n"
        "Scheduler=kyber none\n"
        "NrRequests=64\n"
        "ReadAheadKB=4096\n"
        "[Device mirror]\n"
        "MatchMDLevel=raid1\n"
        "NrRequests=128\n"
        "WbtLatUsec=0\n"
        "[Device stripe]\n"
        "MatchMDLevel=raid0\n"
        "NrRequests=32\n"
        "RqAffinity=2\n"
        "ReadAheadKB=8192\n"
        "[Device ns4]\n"
        "MatchKernel=nvme0n4\n"
        "NrRequests=256\n"
        "[Device mpath]\n"
        "MatchMultipathWWID=nvme.1b36-*-00000005\n"
        "Scheduler=mq-deadline\n"
        "NrRequests=96\n";

static void test_stack_settings(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_(config_freep) Config *c = NULL;
        _cleanup_free_ char *striped = dm_by_name(root, "vgdata-striped"), *via = NULL;
        ConfigError err;
        Resolved r = {};

        if (config_load_string(STACK_CONF, "s.conf", &c, &err) < 0)
                fail_msg("s.conf:%u: %s", err.line, err.message);

        /* a PV of the LVs: the volume's request-queue keys, not its read-ahead */
        resolve_member(root, c, "nvme0n1", &r);
        assert_true(resolved_managed(&r));
        assert_string_equal(r.value[KNOB_SCHEDULER], "kyber none");
        assert_string_equal(r.value[KNOB_NR_REQUESTS], "64");
        assert_null(r.value[KNOB_READ_AHEAD_KB]);
        assert_true(asprintf(&via, "Device lvm via %s", striped) > 0);
        assert_string_equal(r.section[KNOB_NR_REQUESTS], via);
        assert_string_equal(r.origin[KNOB_NR_REQUESTS], "s.conf:4");
        assert_true(strv_contains(r.stacks, striped));
        assert_true(explain_has(&r, "(vgdata/striped) above nvme0n1: its request-queue settings apply here"));
        /* the volume's section is matched, but not its own: the Auto*
         * keys of a stack's section start the top's trials, never a
         * member's (issue 33, item 4) */
        assert_true(strv_contains(r.matched, "lvm"));
        assert_null(r.own);
        resolved_done(&r);

        /* a disk under two arrays (through its partitions): configuration
         * order, the later section wins each key, explain names the loser */
        resolve_member(root, c, "nvme0n3", &r);
        assert_string_equal(r.value[KNOB_NR_REQUESTS], "32");
        assert_string_equal(r.section[KNOB_NR_REQUESTS], "Device stripe via md1");
        assert_string_equal(r.value[KNOB_WBT_LAT_USEC], "0");
        assert_string_equal(r.value[KNOB_RQ_AFFINITY], "2");
        assert_string_equal(r.section[KNOB_RQ_AFFINITY], "Device stripe via md1");
        assert_null(r.value[KNOB_READ_AHEAD_KB]);
        assert_true(explain_has(&r, "NrRequests=128 of [Device mirror via md0] not applied to nvme0n3: [Device stripe via md1] comes later"));
        resolved_done(&r);

        /* its own section, later in the configuration, over both stacks' */
        resolve_member(root, c, "nvme0n4", &r);
        assert_string_equal(r.value[KNOB_NR_REQUESTS], "256");
        assert_string_equal(r.section[KNOB_NR_REQUESTS], "Device ns4");
        assert_string_equal(r.value[KNOB_WBT_LAT_USEC], "0");
        assert_true(explain_has(&r, "NrRequests=128 of [Device mirror via md0] not applied to nvme0n4: [Device stripe via md1] comes later"));
        assert_true(explain_has(&r, "NrRequests=32 of [Device stripe via md1] not applied to nvme0n4: its own [Device ns4] comes later"));
        assert_int_equal(r.n_losses, 2); /* mirror's NrRequests= to stripe's, stripe's to ns4 */
        assert_false(r.losses[0].own);
        assert_true(r.losses[1].own);
        assert_string_equal(r.losses[1].winner, "Device ns4");
        assert_string_equal(r.losses[1].origin, "s.conf:12");
        assert_int_equal(strv_length(r.own), 1);
        assert_string_equal(r.own[0], "ns4");
        assert_true(strv_contains(r.matched, "mirror"));
        resolved_done(&r);

        /* the path of a request-based multipath map whose section sets
         * queue keys: the map carries them, the path is not managed */
        resolve_member(root, c, "nvme0n5", &r);
        assert_false(resolved_managed(&r));
        assert_null(r.stacks);
        resolved_done(&r);
        _cleanup_free_ char *mp = dm_by_name(root, "mpatha");
        _cleanup_(device_info_freep) DeviceInfo *map = load_dev(root, mp, true);
        assert_int_equal(policy_resolve(c, map, NULL, &r), 0);
        assert_string_equal(r.value[KNOB_NR_REQUESTS], "96");
        assert_string_equal(r.value[KNOB_SCHEDULER], "mq-deadline");
        resolved_done(&r);

        /* the top: its own section whole (the plan skips what a bio-based
         * queue does not have); read-ahead is its */
        _cleanup_(device_info_freep) DeviceInfo *top = load_dev(root, "md1", true);
        assert_int_equal(policy_resolve(c, top, NULL, &r), 0);
        assert_string_equal(r.value[KNOB_READ_AHEAD_KB], "8192");
        assert_null(r.stacks);
        resolved_done(&r);

        /* the packaged configuration's [Device nvme] first, an operator's
         * drop-in for the volume after it: the drop-in's queue keys reach
         * the namespaces (configuration order, as between a disk's own
         * sections); the disk's own read-ahead stays its own */
        _cleanup_(config_freep) Config *shipped = NULL;
        if (config_load_string("[Device nvme]\nMatchTransport=nvme\nScheduler=kyber none\nNrRequests=256\n"
                               "ReadAheadKB=4096\n[Device pg]\nMatchVolume=vgdata/striped\n"
                               "Scheduler=mq-deadline\nNrRequests=64\n", "d.conf", &shipped, &err) < 0)
                fail_msg("d.conf:%u: %s", err.line, err.message);
        resolve_member(root, shipped, "nvme0n1", &r);
        assert_string_equal(r.value[KNOB_SCHEDULER], "mq-deadline");
        assert_string_equal(r.value[KNOB_NR_REQUESTS], "64");
        assert_non_null(strstr(r.section[KNOB_NR_REQUESTS], "Device pg via dm-"));
        assert_string_equal(r.value[KNOB_READ_AHEAD_KB], "4096");
        assert_true(explain_has(&r, "NrRequests=256 of [Device nvme] not applied to nvme0n1: [Device pg via "));
        assert_int_equal(r.n_losses, 2);
        assert_false(r.losses[1].own);
        resolved_done(&r);
        free_tree(root);
}

/* explain's tree: every device of the fixture as the daemon would look it
 * up, resolved with the sections of the devices above it. The dm tables'
 * target types are those tests/vm/guest/stacks-capture.sh built (the
 * fixture has no table: the daemon asks the kernel, see
 * src/daemon/dm-table.c): lvcreate -i 2 (striped), lvcreate -L (linear),
 * cryptsetup open --type plain (crypt), dmsetup's multipath table. */
typedef struct TreeLookup {
        const char *root;
        const Config *config;
        DeviceInfo *infos[16]; /* each device loaded once */
        size_t n;
} TreeLookup;

static DeviceInfo *tree_info(TreeLookup *t, const char *sysname) {
        for (size_t i = 0; i < t->n; i++)
                if (streq(t->infos[i]->sysname, sysname))
                        return t->infos[i];
        assert_true(t->n < ELEMENTSOF(t->infos));
        return t->infos[t->n++] = load_dev(t->root, sysname, true);
}

static int tree_lookup(const char *sysname, StackTreeDevice *ret, void *userdata) {
        static const char *const tables[][2] = {
                { "vgdata-striped", "striped" }, { "vgdata-cryptlv", "linear" },
                { "secret", "crypt" },           { "mpatha", "multipath" },
        };
        TreeLookup *t = userdata;
        _cleanup_free_ char *dir = NULL;
        _cleanup_strv_free_ char **above = NULL;
        const DeviceInfo *infos[16] = {};
        size_t n = 0;

        /* a partition is no device of blkmqd's: its name and role only */
        assert_true(asprintf(&dir, "%s/block/%s", t->root, sysname) > 0);
        if (access(dir, F_OK) < 0)
                return 0;
        /* as resolve_member(), over the devices loaded once */
        DeviceInfo *d = tree_info(t, sysname);
        assert_int_equal(stack_above(t->root, sysname, &above), 0);
        STRV_FOREACH(a, above) {
                assert_true(n < ELEMENTSOF(infos));
                infos[n++] = tree_info(t, *a);
        }
        ret->info = d;
        assert_int_equal(policy_resolve_stacked(t->config, d, infos, n, NULL, &ret->resolved), 0);
        for (size_t i = 0; d->dm_name && i < ELEMENTSOF(tables); i++)
                if (streq(d->dm_name, tables[i][0]))
                        assert_non_null(ret->dm_target = strdup(tables[i][1]));
        return 0;
}

/* The tree of top, drawn as blkmqctl explain draws it. */
static char *draw(const char *root, const Config *c, const char *top, bool use_utf8, json_t **ret_json) {
        _cleanup_(stack_freep) Stack *s = NULL;
        TreeLookup t = { .root = root, .config = c };
        json_t *tree = NULL;
        char *text = NULL;
        size_t size = 0;
        FILE *f;

        assert_int_equal(stack_resolve(root, top, &s), 0);
        assert_int_equal(stack_tree_json(s, tree_lookup, &t, &tree), 0);
        for (size_t i = 0; i < t.n; i++)
                device_info_free(t.infos[i]);
        assert_non_null(f = open_memstream(&text, &size));
        stack_tree_print(f, tree, "", use_utf8);
        assert_int_equal(fclose(f), 0);
        if (ret_json)
                *ret_json = tree;
        else
                json_decref(tree);
        return text;
}

/* tree as Explain replies it: a StackNode of io.blkmqd.Manager's IDL (the
 * source file, as the daemon embeds it) */
static void check_stack_node_idl(json_t *tree) {
        _cleanup_(varlink_idl_freep) VarlinkIdlInterface *idl = NULL;
        _cleanup_free_ char *p = NULL, *text = NULL, *error = NULL, *path = NULL;
        const VarlinkIdlMember *m;

        assert_true(asprintf(&p, "%s/../../src/varlink/io.blkmqd.Manager.varlink", t_fixtures_dir()) > 0);
        FILE *f = fopen(p, "re");
        size_t size = 0;
        assert_non_null(f);
        assert_true(getdelim(&text, &size, 0, f) > 0);
        fclose(f);
        if (varlink_idl_parse(text, &idl, &error) < 0)
                fail_msg("%s: %s", p, strna(error));
        assert_non_null(m = varlink_idl_find_member(idl, VARLINK_IDL_MEMBER_TYPE, "StackNode"));
        if (varlink_idl_validate(m->type, tree, &path) != 0)
                fail_msg("the tree does not match StackNode at '%s': %s", strna(path), json_dumps(tree, JSON_COMPACT));
}

static const char TREE_CONF[] =
        "[Device pg]\n"
        "MatchVolume=vgdata/striped\n"
        "Scheduler=mq-deadline\n"
        "NrRequests=64\n"
        "ReadAheadKB=4096\n"
        "[Device vault]\n"
        "MatchCrypt=secret\n"
        "Scheduler=kyber\n"
        "WbtLatUsec=7000\n"
        "ReadAheadKB=1024\n"
        "[Device ns2]\n"
        "MatchKernel=nvme0n2\n"
        "NrRequests=256\n";

/* An LV striped over two namespaces: its read-ahead on it, the queue keys
 * on both; nvme0n1 takes the crypt mapping's WbtLatUsec= (pg does not set
 * it) and its Scheduler= (vault comes later than pg); nvme0n2's own
 * NrRequests= (ns2 comes later still) wins. */
static void tree_striped(const char *root, const Config *c) {
        _cleanup_free_ char *ascii = NULL, *utf = NULL;
        _cleanup_(json_decrefp) json_t *tree = NULL;

        ascii = draw(root, c, "dm-0", false, &tree);
        assert_string_equal(ascii,
                "dm-0 (vgdata/striped): top, striped LV\n"
                "| ReadAheadKB=4096 ([Device pg], t.conf:5)\n"
                "|-nvme0n1: request-based disk\n"
                "|   Scheduler=kyber ([Device vault via dm-2], t.conf:8)\n"
                "|   NrRequests=64 ([Device pg via dm-0], t.conf:4)\n"
                "|   WbtLatUsec=7000 ([Device vault via dm-2], t.conf:9)\n"
                "|   Scheduler=mq-deadline not applied ([Device pg via dm-0], t.conf:3): "
                "[Device vault via dm-2] comes later\n"
                "`-nvme0n2: request-based disk\n"
                "    Scheduler=mq-deadline ([Device pg via dm-0], t.conf:3)\n"
                "    NrRequests=256 ([Device ns2], t.conf:13)\n"
                "    NrRequests=64 not applied ([Device pg via dm-0], t.conf:4): its own [Device ns2] comes later\n");
        utf = draw(root, c, "dm-0", true, NULL);
        assert_non_null(strstr(utf, "\n│ ReadAheadKB=4096"));
        assert_non_null(strstr(utf, "\n├─nvme0n1: request-based disk\n│   Scheduler=kyber"));
        assert_non_null(strstr(utf, "\n└─nvme0n2: request-based disk\n    Scheduler=mq-deadline"));

        /* --json: the same tree, nested */
        json_t *kids = json_object_get(tree, "children");
        assert_int_equal(json_array_size(kids), 2);
        assert_true(json_is_true(json_object_get(tree, "top")));
        assert_string_equal(json_string_value(json_object_get(tree, "role")), "striped LV");
        assert_string_equal(json_string_value(json_object_get(json_array_get(kids, 1), "device")), "nvme0n2");
        assert_true(json_is_true(json_object_get(json_array_get(kids, 1), "member")));
        json_t *loss = json_array_get(json_object_get(json_array_get(kids, 1), "notApplied"), 0);
        assert_string_equal(json_string_value(json_object_get(loss, "reason")), "ownSection");
        check_stack_node_idl(tree);
}

/* dm-crypt on a linear LV on a namespace: three layers, the LV between
 * matched by nothing; md RAID1 over partitions, matched by nothing. */
static void tree_crypt_on_lv(const char *root, const Config *c) {
        _cleanup_free_ char *text = NULL, *md = NULL;
        _cleanup_(json_decrefp) json_t *tree = NULL, *mdtree = NULL;

        text = draw(root, c, "dm-2", false, &tree);
        assert_string_equal(text,
                "dm-2 (secret): top, dm-crypt\n"
                "| ReadAheadKB=1024 ([Device vault], t.conf:10)\n"
                "`-dm-1 (vgdata/cryptlv): linear LV\n"
                "  | (not managed: no section matches it)\n"
                "  `-nvme0n1: request-based disk\n"
                "      Scheduler=kyber ([Device vault via dm-2], t.conf:8)\n"
                "      NrRequests=64 ([Device pg via dm-0], t.conf:4)\n"
                "      WbtLatUsec=7000 ([Device vault via dm-2], t.conf:9)\n"
                "      Scheduler=mq-deadline not applied ([Device pg via dm-0], t.conf:3): "
                "[Device vault via dm-2] comes later\n");
        check_stack_node_idl(tree);

        /* md over partitions: each partition's disk below it */
        md = draw(root, c, "md0", false, &mdtree);
        assert_string_equal(md,
                "md0 (any:mirror): top, md raid1\n"
                "| (not managed: no section matches it)\n"
                "|-nvme0n3p1: partition\n"
                "| `-nvme0n3: request-based disk\n"
                "|     (not managed: no section matches it or a stack above it)\n"
                "`-nvme0n4p1: partition\n"
                "  `-nvme0n4: request-based disk\n"
                "      (not managed: no section matches it or a stack above it)\n");
        check_stack_node_idl(mdtree);
}

/* Explain's stacks of sysname (what the daemon replies, drawn as blkmqctl
 * draws them: a blank line between two). */
static char *draw_explain(const char *root, const Config *c, const char *sysname, json_t **ret_json) {
        TreeLookup t = { .root = root, .config = c };
        json_t *trees = NULL, *tree;
        char *text = NULL;
        size_t size = 0, i;
        FILE *f;

        assert_int_equal(stack_trees_json(root, sysname, tree_lookup, &t, &trees), 0);
        for (size_t k = 0; k < t.n; k++)
                device_info_free(t.infos[k]);
        assert_non_null(f = open_memstream(&text, &size));
        json_array_foreach(trees, i, tree) {
                if (i > 0)
                        fputc('\n', f);
                stack_tree_print(f, tree, "", false);
                check_stack_node_idl(tree);
        }
        assert_int_equal(fclose(f), 0);
        *ret_json = trees;
        return text;
}

static const char MPATH_CONF[] =
        "[Device mpath]\n"
        "MatchMultipathWWID=nvme.1b36-*-00000005\n"
        "Scheduler=mq-deadline\n"
        "NrRequests=96\n"
        "ReadAheadKB=2048\n"
        "[Device ns5]\n"
        "MatchKernel=nvme0n5\n"
        "WbtLatUsec=2000\n";

/* A request-based multipath map (mpatha, dm-3) is its own member: the tree
 * has the map at the top with every key of its section (apply sets them on
 * the map's queue), its path below it as a path that takes none of them
 * (stack_above() stops below the map: apply gives the path its own
 * sections' keys only); explain on the path draws the map's tree too. */
/* The map's tree down to its path's note, drawn by both cases below. */
#define MPATH_TREE                                                                              \
        "dm-3 (mpatha): top, dm-multipath, request-based: takes the queue keys itself\n"        \
        "| Scheduler=mq-deadline ([Device mpath], m.conf:3)\n"                                  \
        "| NrRequests=96 ([Device mpath], m.conf:4)\n"                                          \
        "| ReadAheadKB=2048 ([Device mpath], m.conf:5)\n"                                       \
        "`-nvme0n5: multipath path\n"                                                           \
        "    (a path of dm-3: the stack's keys stay on dm-3, none go here)\n"

static void tree_multipath(const char *root) {
        static const char map_only[] = MPATH_TREE "    (not managed: no section matches it)\n";
        _cleanup_(config_freep) Config *c = NULL, *c5 = NULL;
        _cleanup_free_ char *mp = dm_by_name(root, "mpatha"), *text = NULL;
        _cleanup_(json_decrefp) json_t *trees = NULL, *trees5 = NULL;
        ConfigError err;

        assert_string_equal(mp, "dm-3");
        /* the map's section alone (MPATH_CONF without [Device ns5]) */
        if (config_load_string(MPATH_CONF, "m.conf", &c5, &err) < 0)
                fail_msg("m.conf:%u: %s", err.line, err.message);
        _cleanup_free_ char *map_conf = strndup(MPATH_CONF, strstr(MPATH_CONF, "[Device ns5]") - MPATH_CONF);
        assert_non_null(map_conf);
        if (config_load_string(map_conf, "m.conf", &c, &err) < 0)
                fail_msg("m.conf:%u: %s", err.line, err.message);

        text = draw_explain(root, c, mp, &trees);
        assert_string_equal(text, map_only);
        assert_int_equal(json_array_size(trees), 1);
        json_t *map = json_array_get(trees, 0), *kids = json_object_get(map, "children");
        assert_string_equal(json_string_value(json_object_get(map, "device")), "dm-3");
        assert_true(json_is_true(json_object_get(map, "top")));
        assert_true(json_is_true(json_object_get(map, "member")));
        assert_string_equal(json_string_value(json_object_get(map, "role")), "dm-multipath, request-based");
        assert_null(json_object_get(map, "pathOf"));
        assert_int_equal(json_array_size(json_object_get(map, "values")), 3);
        assert_int_equal(json_array_size(json_object_get(map, "notApplied")), 0);
        assert_int_equal(json_array_size(kids), 1);
        json_t *path = json_array_get(kids, 0);
        assert_string_equal(json_string_value(json_object_get(path, "device")), "nvme0n5");
        assert_string_equal(json_string_value(json_object_get(path, "role")), "multipath path");
        assert_string_equal(json_string_value(json_object_get(path, "pathOf")), "dm-3");
        assert_false(json_is_true(json_object_get(path, "member")));
        assert_false(json_is_true(json_object_get(path, "managed")));
        assert_int_equal(json_array_size(json_object_get(path, "values")), 0);
        assert_null(json_object_get(path, "notApplied"));
        assert_int_equal(json_array_size(json_object_get(path, "children")), 0);

        /* explain on the path: the same tree, the map's */
        text = mfree(text);
        trees = (json_decref(trees), NULL);
        text = draw_explain(root, c, "nvme0n5", &trees);
        assert_string_equal(text, map_only);

        /* a section of the path's own: its keys, every one (its queue is
         * request-based), and still none of the map's */
        text = mfree(text);
        text = draw_explain(root, c5, "nvme0n5", &trees5);
        assert_string_equal(text, MPATH_TREE "    WbtLatUsec=2000 ([Device ns5], m.conf:8)\n");
        path = json_array_get(json_object_get(json_array_get(trees5, 0), "children"), 0);
        assert_true(json_is_true(json_object_get(path, "managed")));
        assert_false(json_is_true(json_object_get(path, "member")));
}

/* Explain's stacks elsewhere, as before the maps' paths were drawn: a PV
 * of two LVs has the tree of each, a top its own. */
static void trees_of_disks(const char *root, const Config *c) {
        _cleanup_(json_decrefp) json_t *trees = NULL;
        _cleanup_free_ char *text = NULL;

        text = draw_explain(root, c, "nvme0n1", &trees);
        assert_int_equal(json_array_size(trees), 2);
        assert_string_equal(json_string_value(json_object_get(json_array_get(trees, 0), "device")), "dm-0");
        assert_string_equal(json_string_value(json_object_get(json_array_get(trees, 1), "device")), "dm-2");
        assert_non_null(strstr(text, "\n\ndm-2 (secret): top, dm-crypt\n"));
        trees = (json_decref(trees), NULL);
        text = mfree(text);
        text = draw_explain(root, c, "md0", &trees);
        assert_int_equal(json_array_size(trees), 1);
        const char *md0 = "md0 (any:mirror): top, md raid1\n";
        assert_true(strncmp(text, md0, strlen(md0)) == 0);
}

/* The trees over one copy of the fixture. */
static void test_trees(void **state) {
        (void) state;
        char *root = stacks_tree();
        _cleanup_(config_freep) Config *c = NULL;
        ConfigError err;

        if (config_load_string(TREE_CONF, "t.conf", &c, &err) < 0)
                fail_msg("t.conf:%u: %s", err.line, err.message);
        tree_striped(root, c);
        tree_crypt_on_lv(root, c);
        tree_multipath(root);
        trees_of_disks(root, c);
        free_tree(root);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_lv_striped),
                cmocka_unit_test(test_crypt_on_lv),
                cmocka_unit_test(test_md_on_partitions),
                cmocka_unit_test(test_multipath_request_based),
                cmocka_unit_test(test_plain_and_missing),
                cmocka_unit_test(test_tops),
                cmocka_unit_test(test_loop_guard),
                cmocka_unit_test(test_stack_names),
                cmocka_unit_test(test_volume_from_dm_name),
                cmocka_unit_test(test_match_key_errors),
                cmocka_unit_test(test_stack_settings),
                cmocka_unit_test(test_trees),
        };

        if (!t_fixtures_dir()) {
                fprintf(stderr, "FIXTURES_DIR is not set (meson test sets it): skipping.\n");
                return 77;
        }
        return cmocka_run_group_tests(tests, NULL, NULL);
}
