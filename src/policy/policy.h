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
 * device no [Device] section matches is not managed at all.
 *
 * Stacks (policy_resolve_stacked()): a request-based disk under stacked
 * devices (an LV, an md array, a dm-crypt mapping: every device above it,
 * stack_above(), up to a request-based dm-multipath map, which takes its
 * sections' keys itself) also takes the request-queue settings (knob_request_queue())
 * of each section that matches one of them; those sections count as
 * matched. Its own sections and the stacks' apply in configuration order,
 * as its own do among themselves: a later section overrides an earlier
 * one's key (so a drop-in's stack section overrides the shipped [Device
 * nvme], and a member's own section after a stack's overrides it); explain
 * says which key lost where a stack's section is on either side
 * (Resolved.losses, and a line of explain). Everything else (ReadAheadKB=,
 * probes, alerts) stays with the device the section matched. */

/* A key a section set on a member that a later section overrides, where a
 * stack's section is on either side: the winner is the member's own
 * section (own) or a stack's section (another stack's, or the same
 * stack's through another layer). */
typedef struct ResolvedLoss {
        Knob knob;
        char *value;
        const char *section; /* the section that lost: "Device vault via dm-2", points into labels */
        const char *origin;  /* its file:line, owned by the Config */
        const char *winner;  /* the section in force, points into labels */
        bool own;
} ResolvedLoss;

typedef struct Resolved {
        char *value[_KNOB_MAX];         /* NULL = not set */
        const char *section[_KNOB_MAX]; /* "Device nvme" / "Profile offpeak", points into labels */
        const char *origin[_KNOB_MAX];  /* file:line, owned by the Config */
        char **matched;                 /* names of matched [Device] sections */
        char *profile;                  /* the profile that applied, if any */
        char **explain;                 /* one line per section: matched or why not */
        char **labels;
        char **stacks;                  /* sysnames above d whose sections applied here */
        ResolvedLoss *losses;           /* the stacks' keys not applied here */
        size_t n_losses;
        char **own;                     /* of matched, those that match d itself, not a device above it:
                                         * their Auto* keys are d's trials' (a stack's are its top's) */
} Resolved;

/* true if every Match* key of m matches d; on a mismatch *ret_reason (if
 * non-NULL) says which key failed and why. */
bool policy_match(const Match *m, const DeviceInfo *d, char **ret_reason);
int policy_resolve(const Config *c, const DeviceInfo *d, const char *profile, Resolved *ret);
/* above: the devices stacked above d (NULL entries are skipped). */
int policy_resolve_stacked(const Config *c, const DeviceInfo *d, const DeviceInfo *const *above, size_t n_above,
                           const char *profile, Resolved *ret);
void resolved_done(Resolved *r);
static inline bool resolved_managed(const Resolved *r) {
        return r->matched && r->matched[0];
}
