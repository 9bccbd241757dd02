/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

#include "conf.h"
#include "device.h"

/* Pure: which sections match a device and what they resolve to.
 *
 * Precedence: every [Device] section whose Match* keys all match applies,
 * in configuration order (the main file, then drop-ins sorted by file
 * name); a key set by a later section overrides the same key from an
 * earlier one. The active [Profile], if its Devices= names one of the
 * matched sections (or is empty), is applied last and overrides both. A
 * device no [Device] section matches is not managed at all. */

typedef struct Resolved {
        char *value[_KNOB_MAX];         /* NULL = not set */
        const char *section[_KNOB_MAX]; /* "Device nvme" / "Profile offpeak", points into labels */
        const char *origin[_KNOB_MAX];  /* file:line, owned by the Config */
        char **matched;                 /* names of matched [Device] sections */
        char *profile;                  /* the profile that applied, if any */
        char **explain;                 /* one line per section: matched or why not */
        char **labels;
} Resolved;

/* true if every Match* key of m matches d; on a mismatch *ret_reason (if
 * non-NULL) says which key failed and why. */
bool policy_match(const Match *m, const DeviceInfo *d, char **ret_reason);
int policy_resolve(const Config *c, const DeviceInfo *d, const char *profile, Resolved *ret);
void resolved_done(Resolved *r);
static inline bool resolved_managed(const Resolved *r) {
        return r->matched && r->matched[0];
}
