/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The lockstep of a stack's trial (issue 33, item 4), pure: the trial of a
 * bio-based top (an LV, an md array, a dm-crypt mapping) gives each
 * candidate to every request-based member below it (stack_resolve()), and
 * an apply is done only when every member's job is back and read back.
 * The daemon's runner (src/daemon/autotune-runner.c) reads the members and
 * their jobs; what they mean for the trial is decided here, so that a unit
 * test can drive the trial engine over fake members.
 *
 * The rules:
 * - a stack's trial starts only from members alike (each carries, for the
 *   knobs the policy tries, the setting of the first member), none in a
 *   trial of its own or of another stack: autotune_lockstep_check_start() refuses,
 *   naming the member and both values;
 * - a member's own trial is refused while the member is in a stack's trial,
 *   or carries what a stack's trial chose (autotune_lockstep_check_own());
 * - a member whose job failed a knob of the candidate, or that does not
 *   carry it once read back, or that had no job, refuses the candidate for
 *   the stack: the engine leaves it out and the next candidate (or the
 *   setting before the trial) goes to every member (autotune_lockstep_back());
 * - the trial's end is checked the same way: a member that does not carry
 *   the chosen setting puts every member back to the setting before the
 *   trial (autotune_lockstep_end()). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "autotune-engine.h"
#include "autotune.h"

/* What the runner read of one member before a stack's trial. */
typedef struct AutotuneLockstepMember {
        const char *name;
        int read_error;       /* its setting could not be read (negative errno), or 0 */
        AutotuneCandidate current; /* its setting now, the knobs of the policy */
        const char *trial_of; /* the device whose trial it is in (its own name: its own trial), or NULL */
} AutotuneLockstepMember;

/* Whether have carries every knob want sets. */
bool autotune_lockstep_carries(const AutotuneCandidate *have, const AutotuneCandidate *want);

/* Whether top's trial may start over its n members: 0, or -EPERM with why
 * naming the member (and both settings where they differ). */
int autotune_lockstep_check_start(const char *top, const AutotuneLockstepMember *m, size_t n, char *why,
                                  size_t why_size);

/* Whether member may have a trial of its own while it is a member of top's
 * stack: running, top's trial is on; choice, it carries what top's trial
 * chose. 0, or -EPERM with why. */
int autotune_lockstep_check_own(const char *member, const char *top, bool running, bool choice, char *why,
                                size_t why_size);

/* One member's job for an apply, read back. */
typedef struct AutotuneLockstepOutcome {
        bool refused;      /* a knob of the candidate failed */
        bool carries;      /* read back, the member carries the candidate */
        bool switched;     /* its scheduler changed */
        bool device_error; /* the member vanished */
        uint64_t usec;     /* the job's time on the worker */
} AutotuneLockstepOutcome;

typedef struct AutotuneLockstep {
        size_t n;
        bool *back;            /* of the n members: its job for this apply came back */
        AutotuneTrialApplied gathered; /* the members' outcomes so far, for the engine */
        char refused_by[64];   /* the first member that refused this apply ("" none) */
} AutotuneLockstep;

int autotune_lockstep_init(AutotuneLockstep *l, size_t n);
void autotune_lockstep_done(AutotuneLockstep *l);
/* An apply to every member begins: none is back. */
void autotune_lockstep_begin(AutotuneLockstep *l);
/* Member i (name) had no job for it (it matches no section, or its apply
 * failed at once): it does not take the candidate. */
void autotune_lockstep_no_job(AutotuneLockstep *l, size_t i, const char *name);
/* Member i's job came back. True when it was the last one: then
 * l->gathered is the stack's outcome (stat and now are the caller's). A
 * member back already (a job that was running before the apply) is
 * ignored. */
bool autotune_lockstep_back(AutotuneLockstep *l, size_t i, const char *name, const AutotuneLockstepOutcome *o);
bool autotune_lockstep_all_back(const AutotuneLockstep *l);
bool autotune_lockstep_is_back(const AutotuneLockstep *l, size_t i);

typedef enum AutotuneLockstepEnd {
        AUTOTUNE_LOCKSTEP_END_DONE,     /* every member carries the trial's setting */
        AUTOTUNE_LOCKSTEP_END_FALL_BACK, /* one does not: every member goes back to the setting before the trial */
        AUTOTUNE_LOCKSTEP_END_DIFFER,   /* one does not carry even the setting before the trial: nothing left to try */
} AutotuneLockstepEnd;

/* After the trial's last apply (its choice, or the setting before it:
 * before): what to do. */
AutotuneLockstepEnd autotune_lockstep_end(const AutotuneLockstep *l, bool before);
