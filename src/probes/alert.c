/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <math.h>
#include <stddef.h>

#include "alert.h"

void alert_config_init(AlertConfig *c, double threshold) {
        *c = (AlertConfig) {
                .threshold = threshold,
                .clear_threshold = threshold * ALERT_CLEAR_RATIO_DEFAULT,
                .raise_after = ALERT_RAISE_AFTER_DEFAULT,
                .clear_after = ALERT_CLEAR_AFTER_DEFAULT,
        };
}

int alert_init(Alert *a, const AlertConfig *c) {
        if (!isfinite(c->threshold) || !isfinite(c->clear_threshold))
                return -EINVAL;
        if (c->clear_threshold > c->threshold)
                return -EINVAL;
        if (c->raise_after < 1 || c->clear_after < 1)
                return -EINVAL;

        *a = (Alert) {
                .config = *c,
                .last_value = NAN,
        };
        return 0;
}

AlertEvent alert_update(Alert *a, double value, uint64_t now_usec) {
        bool towards;

        a->evaluations++;
        a->last_value = value;

        if (isnan(value)) {
                a->streak = 0;
                return ALERT_NONE;
        }

        towards = a->active ? value < a->config.clear_threshold : value > a->config.threshold;
        if (!towards) {
                a->streak = 0;
                return ALERT_NONE;
        }

        if (++a->streak < (a->active ? a->config.clear_after : a->config.raise_after))
                return ALERT_NONE;

        a->streak = 0;
        a->active = !a->active;
        a->since_usec = now_usec;
        if (a->active) {
                a->episodes++;
                return ALERT_RAISED;
        }
        return ALERT_CLEARED;
}

const char *alert_event_to_string(AlertEvent e) {
        static const char *const table[_ALERT_EVENT_MAX] = {
                [ALERT_NONE] = "none",
                [ALERT_RAISED] = "raised",
                [ALERT_CLEARED] = "cleared",
        };

        if ((unsigned) e >= _ALERT_EVENT_MAX)
                return NULL;
        return table[e];
}
