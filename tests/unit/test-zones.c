/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The allocator's choices and reconcile rules, on zone tables like the
 * QEMU ZNS namespace's: 16 zones of 64 MiB with 60 MiB capacity. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "zones.h"

#define MiB (UINT64_C(1) << 20)
#define N 16

static void table(ZoneSlot s[N]) {
        for (unsigned i = 0; i < N; i++)
                s[i] = (ZoneSlot) {
                        .index = i,
                        .state = ZONE_STATE_FREE,
                        .zone = { .start = i * 64 * MiB, .len = 64 * MiB, .capacity = 60 * MiB,
                                  .wp = i * 64 * MiB, .type = ZONE_TYPE_SEQWRITE_REQ, .cond = ZONE_COND_EMPTY },
                };
}

static const ZbdLimits lim = { .nr_zones = N, .zone_size = 64 * MiB, .max_open = 14, .max_active = 14 };

static void test_state_names(void **state) {
        for (int i = 0; i < _ZONE_STATE_MAX; i++)
                assert_int_equal(zone_state_from_string(zone_state_to_string(i)), i);
        assert_int_equal(zone_state_from_string("open"), -EINVAL);
        assert_int_equal(zone_state_from_string(NULL), -EINVAL);
        assert_null(zone_state_to_string(_ZONE_STATE_MAX));
}

static void test_pick_wear(void **state) {
        ZoneSlot s[N];

        table(s);
        for (unsigned i = 0; i < N; i++)
                s[i].reset_count = 10 + (i * 7) % 5; /* 10, 12, 14, 11, 13, 10, ... */
        s[0].reset_count = 3;
        assert_int_equal(zone_pick(s, N, &lim, 4096), 0);
        s[0].state = ZONE_STATE_SEALED;
        s[0].zone.cond = ZONE_COND_FULL;
        /* Among the rest, the fewest resets, the lowest index on ties. */
        assert_int_equal(zone_pick(s, N, &lim, 4096), 5);
        s[5].lease_held = true;
        assert_int_equal(zone_pick(s, N, &lim, 4096), 10);
}

static void test_pick_capacity(void **state) {
        ZoneSlot s[N];

        table(s);
        assert_int_equal(zone_pick(s, N, &lim, 60 * MiB), 0);
        /* Past capacity, though within the zone size: refused. */
        assert_int_equal(zone_pick(s, N, &lim, 60 * MiB + 1), -EFBIG);
        assert_int_equal(zone_pick(s, N, &lim, 64 * MiB), -EFBIG);
        assert_int_equal(zone_pick(s, N, &lim, 0), -EFBIG);
}

static void test_pick_skips(void **state) {
        ZoneSlot s[N];

        table(s);
        s[0].zone.type = ZONE_TYPE_CONVENTIONAL;
        s[1].zone.cond = ZONE_COND_OFFLINE;
        s[2].zone.cond = ZONE_COND_READONLY;
        s[3].zone.cond = ZONE_COND_CLOSED; /* holds data: needs a reset first */
        s[3].zone.wp += 4096;
        s[4].state = ZONE_STATE_RELEASING;
        s[5].state = ZONE_STATE_FAILED;
        assert_int_equal(zone_pick(s, N, &lim, 4096), 6);
}

static void test_pick_limits(void **state) {
        ZoneSlot s[N];
        ZbdLimits l = lim;

        table(s);
        l.max_active = 3;
        s[0].state = ZONE_STATE_WRITING;
        s[0].zone.cond = ZONE_COND_IMP_OPEN;
        s[1].state = ZONE_STATE_ALLOCATED;
        assert_int_equal(zone_pick(s, N, &l, 4096), 2);
        s[2].state = ZONE_STATE_ALLOCATED;
        assert_int_equal(zone_pick(s, N, &l, 4096), -EUSERS);
        /* A zone someone else left closed also holds an active resource. */
        l.max_active = 0;
        l.max_open = 0;
        assert_int_equal(zone_pick(s, N, &l, 4096), 3);
        l.max_active = 5;
        s[7].zone.cond = ZONE_COND_CLOSED;
        s[7].zone.wp += 4096;
        s[8].zone.cond = ZONE_COND_EXP_OPEN;
        s[8].zone.wp += 4096;
        assert_int_equal(zone_pick(s, N, &l, 4096), -EUSERS);
        /* Sealed zones are FULL: no resource. */
        s[8].zone.cond = ZONE_COND_FULL;
        assert_int_equal(zone_pick(s, N, &l, 4096), 3);
        l.max_active = 0;
        l.max_open = 3;
        assert_int_equal(zone_pick(s, N, &l, 4096), -EUSERS);
}

static void test_pick_none_free(void **state) {
        ZoneSlot s[N];

        table(s);
        for (unsigned i = 0; i < N; i++) {
                s[i].state = i % 2 ? ZONE_STATE_SEALED : ZONE_STATE_RELEASING;
                s[i].zone.cond = ZONE_COND_FULL;
        }
        assert_int_equal(zone_pick(s, N, &lim, 4096), -ENOSPC);
        assert_true(zone_resets_due(s, N, 100, true));
        assert_true(zone_resets_due(s, N, 8, false));
        assert_false(zone_resets_due(s, N, 9, false));
}

static void test_reconcile(void **state) {
        static const struct {
                ZoneState db;
                ZoneCond cond;
                uint64_t wp_off, bytes;
                ZoneState want;
                bool changed;
        } cases[] = {
                { ZONE_STATE_WRITING, ZONE_COND_IMP_OPEN, 8192, 4096, ZONE_STATE_RELEASING, true },
                { ZONE_STATE_WRITING, ZONE_COND_EMPTY, 0, 0, ZONE_STATE_RELEASING, true },
                { ZONE_STATE_ALLOCATED, ZONE_COND_EMPTY, 0, 0, ZONE_STATE_FREE, true },
                { ZONE_STATE_ALLOCATED, ZONE_COND_CLOSED, 4096, 0, ZONE_STATE_RELEASING, true },
                { ZONE_STATE_SEALED, ZONE_COND_FULL, 60 * MiB, 1234567, ZONE_STATE_SEALED, false },
                { ZONE_STATE_SEALED, ZONE_COND_CLOSED, 4096, 4096, ZONE_STATE_FAILED, true },
                { ZONE_STATE_SEALED, ZONE_COND_EMPTY, 0, 4096, ZONE_STATE_FAILED, true },
                { ZONE_STATE_SEALED, ZONE_COND_FULL, 60 * MiB, 0, ZONE_STATE_FAILED, true },
                { ZONE_STATE_SEALED, ZONE_COND_FULL, 60 * MiB, 61 * MiB, ZONE_STATE_FAILED, true },
                { ZONE_STATE_FREE, ZONE_COND_EMPTY, 0, 0, ZONE_STATE_FREE, false },
                { ZONE_STATE_FREE, ZONE_COND_IMP_OPEN, 4096, 0, ZONE_STATE_RELEASING, true },
                { ZONE_STATE_FREE, ZONE_COND_FULL, 60 * MiB, 0, ZONE_STATE_RELEASING, true },
                { ZONE_STATE_RELEASING, ZONE_COND_FULL, 60 * MiB, 0, ZONE_STATE_RELEASING, false },
                { ZONE_STATE_RELEASING, ZONE_COND_EMPTY, 0, 0, ZONE_STATE_RELEASING, false },
                { ZONE_STATE_FAILED, ZONE_COND_EMPTY, 0, 0, ZONE_STATE_FAILED, false },
                { ZONE_STATE_SEALED, ZONE_COND_OFFLINE, 0, 4096, ZONE_STATE_FAILED, true },
                { ZONE_STATE_FREE, ZONE_COND_READONLY, 0, 0, ZONE_STATE_FAILED, true },
        };

        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
                ZoneSlot s[N];
                const char *why = (const char *) 1;
                ZoneState got;

                table(s);
                s[3].state = cases[i].db;
                s[3].zone.cond = cases[i].cond;
                s[3].zone.wp = s[3].zone.start + cases[i].wp_off;
                s[3].bytes_written = cases[i].bytes;
                got = zone_reconcile(&s[3], &why);
                if (got != cases[i].want || (why != NULL) != cases[i].changed)
                        fail_msg("case %zu: %s/%#x → %s (reason %s), expected %s", i,
                                 zone_state_to_string(cases[i].db), cases[i].cond, zone_state_to_string(got),
                                 why ? why : "none", zone_state_to_string(cases[i].want));
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_state_names),   cmocka_unit_test(test_pick_wear),
                cmocka_unit_test(test_pick_capacity), cmocka_unit_test(test_pick_skips),
                cmocka_unit_test(test_pick_limits),   cmocka_unit_test(test_pick_none_free),
                cmocka_unit_test(test_reconcile),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
