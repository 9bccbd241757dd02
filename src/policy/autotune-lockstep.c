/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autotune-lockstep.h"
#include "util.h"

bool autotune_lockstep_carries(const AutotuneCandidate *have, const AutotuneCandidate *want) {
        if (!streq(have->scheduler, want->scheduler))
                return false;
        if (want->nr_requests && want->nr_requests != have->nr_requests)
                return false;
        if (want->wbt_lat_usec != AUTOTUNE_WBT_UNSET && want->wbt_lat_usec != have->wbt_lat_usec)
                return false;
        if ((want->set & AUTOTUNE_SET_READ_AHEAD) &&
            (!(have->set & AUTOTUNE_SET_READ_AHEAD) || want->read_ahead_kb != have->read_ahead_kb))
                return false;
        for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                if ((want->set & (1U << t)) && (!(have->set & (1U << t)) || want->tun[t] != have->tun[t]))
                        return false;
        return true;
}

int autotune_lockstep_check_start(const char *top, const AutotuneLockstepMember *m, size_t n, char *why,
                                  size_t why_size) {
        char a[AUTOTUNE_CANDIDATE_STRMAX], b[AUTOTUNE_CANDIDATE_STRMAX];

        if (n == 0) {
                snprintf(why, why_size, "bio-based with no request-based disk under it: no scheduler to try");
                return -EPERM;
        }
        for (size_t i = 0; i < n; i++) {
                if (m[i].trial_of) {
                        if (streq(m[i].trial_of, m[i].name))
                                snprintf(why, why_size, "member %s is in a trial of its own", m[i].name);
                        else
                                snprintf(why, why_size, "member %s is in a trial already (%s's)", m[i].name,
                                         m[i].trial_of);
                        return -EPERM;
                }
                if (m[i].read_error < 0) {
                        snprintf(why, why_size, "cannot read the current setting of member %s: %s", m[i].name,
                                 strerror(-m[i].read_error));
                        return -EPERM;
                }
        }
        /* The lockstep starts from members alike: the setting before the
         * trial is the one every member has. Not made alike here: which
         * one would be the baseline is the operator's to say. */
        for (size_t i = 1; i < n; i++)
                if (!autotune_lockstep_carries(&m[i].current, &m[0].current) ||
                    !autotune_lockstep_carries(&m[0].current, &m[i].current)) {
                        snprintf(why, why_size,
                                 "the members of %s differ: %s has %s, %s has %s (a [Device] section matching the "
                                 "stack puts them alike)",
                                 top, m[i].name, autotune_candidate_format(&m[i].current, a, sizeof a), m[0].name,
                                 autotune_candidate_format(&m[0].current, b, sizeof b));
                        return -EPERM;
                }
        return 0;
}

int autotune_lockstep_check_own(const char *member, const char *top, bool running, bool choice, char *why,
                                size_t why_size) {
        if (running) {
                snprintf(why, why_size,
                         "%s is a member of %s, whose trial is running: its own trial would take the lockstep apart",
                         member, top);
                return -EPERM;
        }
        if (choice) {
                snprintf(why, why_size,
                         "%s is a member of %s and carries what %s's trial chose: try %s, or restore it first",
                         member, top, top, top);
                return -EPERM;
        }
        return 0;
}

int autotune_lockstep_init(AutotuneLockstep *l, size_t n) {
        *l = (AutotuneLockstep) { .n = n };
        l->back = calloc(n ? n : 1, sizeof *l->back);
        return l->back ? 0 : -ENOMEM;
}

void autotune_lockstep_done(AutotuneLockstep *l) {
        free(l->back);
        *l = (AutotuneLockstep) {};
}

void autotune_lockstep_begin(AutotuneLockstep *l) {
        for (size_t i = 0; i < l->n; i++)
                l->back[i] = false;
        l->gathered = (AutotuneTrialApplied) {};
        l->refused_by[0] = 0;
}

static void refused(AutotuneLockstep *l, const char *name) {
        l->gathered.refused = true;
        if (!l->refused_by[0])
                snprintf(l->refused_by, sizeof l->refused_by, "%s", name);
}

void autotune_lockstep_no_job(AutotuneLockstep *l, size_t i, const char *name) {
        if (i >= l->n)
                return;
        l->back[i] = true;
        refused(l, name);
}

bool autotune_lockstep_back(AutotuneLockstep *l, size_t i, const char *name, const AutotuneLockstepOutcome *o) {
        if (i >= l->n || l->back[i])
                return false;
        l->back[i] = true;
        if (o->refused || !o->carries)
                refused(l, name);
        if (o->switched)
                l->gathered.switches = 1; /* one switch of the stack, however many members */
        l->gathered.device_error |= o->device_error;
        if (o->usec > l->gathered.usec)
                l->gathered.usec = o->usec; /* the members' jobs run side by side */
        return autotune_lockstep_all_back(l);
}

bool autotune_lockstep_all_back(const AutotuneLockstep *l) {
        for (size_t i = 0; i < l->n; i++)
                if (!l->back[i])
                        return false;
        return true;
}

bool autotune_lockstep_is_back(const AutotuneLockstep *l, size_t i) {
        return i < l->n && l->back[i];
}

AutotuneLockstepEnd autotune_lockstep_end(const AutotuneLockstep *l, bool before) {
        if (!l->gathered.refused)
                return AUTOTUNE_LOCKSTEP_END_DONE;
        return before ? AUTOTUNE_LOCKSTEP_END_DIFFER : AUTOTUNE_LOCKSTEP_END_FALL_BACK;
}
