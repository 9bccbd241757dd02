/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* A threshold alert with hysteresis, pure: the caller evaluates a value (say
 * p99 over the 1 min window, in usec) at its own pace and passes it with the
 * time. An episode starts after raise_after consecutive evaluations above
 * threshold and ends after clear_after consecutive evaluations below
 * clear_threshold (< threshold); values in between, or a single evaluation on
 * the wrong side, restart the count. So noise around the threshold raises at
 * most once, and every episode yields exactly one RAISED and, if it ends,
 * one CLEARED. */

#include <stdbool.h>
#include <stdint.h>

#define ALERT_CLEAR_RATIO_DEFAULT 0.8
#define ALERT_RAISE_AFTER_DEFAULT 3
#define ALERT_CLEAR_AFTER_DEFAULT 3

typedef enum AlertEvent {
        ALERT_NONE,
        ALERT_RAISED,
        ALERT_CLEARED,
        _ALERT_EVENT_MAX,
} AlertEvent;

typedef struct AlertConfig {
        double threshold;               /* "above" is value > threshold */
        double clear_threshold;         /* "below" is value < clear_threshold */
        unsigned raise_after;           /* >= 1 */
        unsigned clear_after;           /* >= 1 */
} AlertConfig;

typedef struct Alert {
        AlertConfig config;
        bool active;
        unsigned streak;                /* consecutive evaluations towards the other state */
        uint64_t episodes;              /* RAISED events so far */
        uint64_t evaluations;
        uint64_t since_usec;            /* time of the last RAISED/CLEARED, 0 before any */
        double last_value;
} Alert;

/* threshold, clear at ALERT_CLEAR_RATIO_DEFAULT of it, default counts. */
void alert_config_init(AlertConfig *c, double threshold);
/* -EINVAL unless both thresholds are finite, clear_threshold <= threshold and
 * both counts are >= 1; *a is untouched then. Starts inactive. */
int alert_init(Alert *a, const AlertConfig *c);
/* NaN (no data) is neither above nor below: it resets the streak and returns
 * ALERT_NONE. */
AlertEvent alert_update(Alert *a, double value, uint64_t now_usec);
const char *alert_event_to_string(AlertEvent e);

static inline bool alert_is_active(const Alert *a) {
        return a->active;
}
