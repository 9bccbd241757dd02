/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Hysteresis: noise around the threshold gives one episode, clearing needs
 * clear_after evaluations below the clear threshold, episodes are counted. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "alert.h"
#include "cleanup.h"

static uint64_t rng_next(uint64_t *s) {
        uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* [lo, hi) */
static double rng_range(uint64_t *s, double lo, double hi) {
        return lo + (hi - lo) * ((double) (rng_next(s) >> 11) / 9007199254740992.0);
}

static Alert make(double threshold, double clear, unsigned raise_after, unsigned clear_after) {
        AlertConfig c = {
                .threshold = threshold,
                .clear_threshold = clear,
                .raise_after = raise_after,
                .clear_after = clear_after,
        };
        Alert a;

        assert_int_equal(alert_init(&a, &c), 0);
        return a;
}

/* Feeds values, one per second from *t, and returns the events as a string:
 * '.' none, 'R' raised, 'C' cleared. */
static void feed(Alert *a, uint64_t *t, const double *v, size_t n, char *ret) {
        for (size_t i = 0; i < n; i++) {
                AlertEvent e = alert_update(a, v[i], *t);

                ret[i] = e == ALERT_RAISED ? 'R' : e == ALERT_CLEARED ? 'C' : '.';
                *t += 1000000;
        }
        ret[n] = 0;
}

#define FEED(a, t, ...)                                                 \
        ({                                                              \
                static const double _v_[] = { __VA_ARGS__ };            \
                static char _s_[ELEMENTSOF(_v_) + 1];                   \
                feed(a, t, _v_, ELEMENTSOF(_v_), _s_);                  \
                (const char *) _s_;                                     \
        })

static void test_config(void **state) {
        AlertConfig c;
        Alert a, before;

        alert_config_init(&c, 1000);
        assert_true(c.threshold == 1000);
        assert_true(c.clear_threshold == 800);
        assert_int_equal(c.raise_after, ALERT_RAISE_AFTER_DEFAULT);
        assert_int_equal(c.clear_after, ALERT_CLEAR_AFTER_DEFAULT);
        assert_int_equal(alert_init(&a, &c), 0);
        assert_false(alert_is_active(&a));
        assert_int_equal(a.episodes, 0);

        memset(&before, 0x5a, sizeof(before));
        a = before;
        c.clear_threshold = 1001;
        assert_int_equal(alert_init(&a, &c), -EINVAL);
        c.clear_threshold = 800;
        c.raise_after = 0;
        assert_int_equal(alert_init(&a, &c), -EINVAL);
        c.raise_after = 1;
        c.clear_after = 0;
        assert_int_equal(alert_init(&a, &c), -EINVAL);
        c.clear_after = 1;
        c.threshold = __builtin_inf();
        assert_int_equal(alert_init(&a, &c), -EINVAL);
        c.threshold = __builtin_nan("");
        assert_int_equal(alert_init(&a, &c), -EINVAL);
        assert_memory_equal(&a, &before, sizeof(a));

        /* No band at all is allowed: counts alone debounce. */
        c.threshold = c.clear_threshold = 500;
        assert_int_equal(alert_init(&a, &c), 0);

        assert_string_equal(alert_event_to_string(ALERT_RAISED), "raised");
        assert_string_equal(alert_event_to_string(ALERT_CLEARED), "cleared");
        assert_string_equal(alert_event_to_string(ALERT_NONE), "none");
        assert_null(alert_event_to_string(_ALERT_EVENT_MAX));
}

static void test_raise_needs_consecutive(void **state) {
        Alert a = make(1000, 800, 3, 3);
        uint64_t t = 1000000;

        /* Equal is not above; a dip restarts the count. */
        assert_string_equal(FEED(&a, &t, 1000, 1001, 1001, 999, 1001, 1001, 1000), ".......");
        assert_false(alert_is_active(&a));
        assert_string_equal(FEED(&a, &t, 1001, 1001, 5000), "..R");
        assert_true(alert_is_active(&a));
        assert_int_equal(a.episodes, 1);
        assert_int_equal(a.since_usec, 1000000 + 9 * 1000000);
        assert_int_equal(a.evaluations, 10);
        assert_true(a.last_value == 5000);
}

static void test_clear_needs_below_clear_threshold(void **state) {
        Alert a = make(1000, 800, 2, 3);
        uint64_t t = 0;

        assert_string_equal(FEED(&a, &t, 2000, 2000), ".R");
        /* In the band [800, 1000] it stays raised however long. */
        assert_string_equal(FEED(&a, &t, 999, 900, 800, 800, 800, 850, 999), ".......");
        assert_true(alert_is_active(&a));
        /* Below, but interrupted by the band or by NaN (no data). */
        assert_string_equal(FEED(&a, &t, 799, 799, 800, 799, 799, __builtin_nan(""), 700), ".......");
        assert_true(alert_is_active(&a));
        assert_string_equal(FEED(&a, &t, 700, 100), ".C");
        assert_false(alert_is_active(&a));
        assert_int_equal(a.since_usec, 17 * 1000000);
        assert_int_equal(a.episodes, 1);
        /* Not re-raised by values in the band. */
        assert_string_equal(FEED(&a, &t, 900, 1000, 999, 950), "....");
        assert_int_equal(a.episodes, 1);
}

static void test_nan_resets_raise_streak(void **state) {
        Alert a = make(10, 5, 2, 1);
        uint64_t t = 0;

        assert_string_equal(FEED(&a, &t, 11, __builtin_nan(""), 11, 11, 4, 11, 11, 4), "...RC.RC");
        assert_int_equal(a.episodes, 2);
}

static void test_immediate(void **state) {
        Alert a = make(10, 10, 1, 1);
        uint64_t t = 0;

        assert_string_equal(FEED(&a, &t, 11, 11, 10, 9, 9, 11, 10, 9), "R..C.R.C");
        assert_int_equal(a.episodes, 2);
}

/* Noise of +-15 % around the threshold: one episode, never cleared, since
 * nothing goes below 80 %. */
static void test_noise_single_episode(void **state) {
        uint64_t seed = 42, t = 0;
        unsigned raised = 0, cleared = 0;
        AlertConfig c;
        Alert a;

        alert_config_init(&c, 1000);
        assert_int_equal(alert_init(&a, &c), 0);

        for (int i = 0; i < 10000; i++) {
                AlertEvent e = alert_update(&a, rng_range(&seed, 850, 1150), t);

                raised += e == ALERT_RAISED;
                cleared += e == ALERT_CLEARED;
                t += 1000000;
        }
        assert_int_equal(raised, 1);
        assert_int_equal(cleared, 0);
        assert_int_equal(a.episodes, 1);
        assert_true(alert_is_active(&a));

        /* Then it calms down: exactly one CLEARED, after clear_after samples. */
        for (int i = 0; i < 1000; i++) {
                AlertEvent e = alert_update(&a, rng_range(&seed, 100, 799), t);

                if (e == ALERT_CLEARED)
                        assert_int_equal(i, ALERT_CLEAR_AFTER_DEFAULT - 1);
                cleared += e == ALERT_CLEARED;
                raised += e == ALERT_RAISED;
        }
        assert_int_equal(cleared, 1);
        assert_int_equal(raised, 1);
}

/* Random walk over all regions; the events must satisfy the definition,
 * checked from the history rather than by a second implementation. */
static void test_random_properties(void **state) {
        for (uint64_t seed = 1; seed <= 20; seed++) {
                unsigned ra = 1 + seed % 4, ca = 1 + (seed / 4) % 5;
                Alert a = make(100, 70, ra, ca);
                double hist[4000];
                unsigned raised = 0, cleared = 0;
                char expect = 'R';
                uint64_t s = seed;
                double level = 50;

                for (size_t i = 0; i < ELEMENTSOF(hist); i++) {
                        AlertEvent e;

                        level += rng_range(&s, -12, 12);
                        if (level < 0)
                                level = 0;
                        if (level > 200)
                                level = 200;
                        hist[i] = level;
                        e = alert_update(&a, level, i);
                        if (e == ALERT_NONE)
                                continue;

                        /* Alternating, starting with RAISED. */
                        assert_int_equal(e == ALERT_RAISED ? 'R' : 'C', expect);
                        expect = expect == 'R' ? 'C' : 'R';
                        raised += e == ALERT_RAISED;
                        cleared += e == ALERT_CLEARED;

                        /* The last ra (ca) values were all above (below). */
                        for (size_t k = 0; k < (e == ALERT_RAISED ? ra : ca); k++) {
                                assert_true(k <= i);
                                if (e == ALERT_RAISED)
                                        assert_true(hist[i - k] > 100);
                                else
                                        assert_true(hist[i - k] < 70);
                        }
                }

                assert_int_equal(a.episodes, raised);
                assert_int_equal(raised - cleared, alert_is_active(&a) ? 1 : 0);
                assert_true(raised >= 3);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_config),
                cmocka_unit_test(test_raise_needs_consecutive),
                cmocka_unit_test(test_clear_needs_below_clear_threshold),
                cmocka_unit_test(test_nan_resets_raise_streak),
                cmocka_unit_test(test_immediate),
                cmocka_unit_test(test_noise_single_episode),
                cmocka_unit_test(test_random_properties),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
