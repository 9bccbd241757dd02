/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* zone-read-pool.c: Verify's and the scrub's read engine, through the
 * io_uring pool with the hashing on a work pool. Calls zone-read.c. */

#include <stdint.h>

#include "zone-read.h"

/* Reads j's object through the pool at I/O priority ioprio (0: the
 * default), at most rate bytes/s (0: unpaced), and hashes it on hasher.
 * zone_read_done() follows, as for a Read. */
int zone_read_pool_start(ReadJob *j, WorkPool *hasher, uint16_t ioprio, uint64_t rate);
