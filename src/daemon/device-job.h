/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "tune.h"

/* A device's originals and the log lines of its jobs; see device-job.c. */

void device_forget_originals(Device *d);
Original *device_find_original(Device *d, const char *attr);
/* Records the value before each entry j changed (or adjusted) for its own
 * key, and those it moved as a side effect (a scheduler switch resets
 * nr_requests; both move queue/async_depth: marked implied); drops the
 * originals that a put-back entry of j restored. */
void device_record_originals(Device *d, const TuneJob *j);
/* After a restore: drops the iosched originals of a scheduler no longer
 * active (nothing left to put them back into). */
void device_prune_originals(Device *d);
/* Logs each change, adjustment, failure and skip of j once (a problem the
 * device's previous job reported already goes to debug), and the summary. */
void device_log_results(Device *d, const TuneJob *j);
