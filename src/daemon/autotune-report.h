/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* autotune-report.c: what the trials say of themselves, over the runner's
 * state (autotune-state.h). The runner calls these; they call nothing of
 * the runner. */

#include <jansson.h>

#include "autotune-state.h"
#include "strbuf.h"

/* The trial as Trial, GetDevice and Monitor give it. */
json_t *autotune_trial_json(const AutotuneDevice *a);
/* GetDevice's "autotune" object of d, with p its policy (NULL: none) and
 * a its state (NULL: none); NULL if both are. */
json_t *autotune_report_device(AutotuneRunner *t, const Device *d, const AutotunePolicy *p, const AutotuneDevice *a);
/* explain's sentence, NULL if nothing to say. */
char *autotune_report_explain(AutotuneRunner *t, const Device *d, const AutotunePolicy *p, const AutotuneDevice *a);
/* Prometheus text: blkmqd_autotune_* families. */
void autotune_report_metrics(AutotuneRunner *t, StrBuf *sb);
/* "10:42:05" of a CLOCK_REALTIME time. */
char *autotune_clock_hm(uint64_t realtime_usec, char buf[static 16]);
