/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a trial measures: the candidates inside a policy's bounds and the
 * kernel's guards, the families of knobs a search varies one at a time,
 * and the candidates that tripped the guard rail of late. */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "autotune.h"
#include "knobs.h"
#include "util.h"

/* The kernel's defaults (block/kyber-iosched.c, mq-deadline.c,
 * bfq-iosched.c) and a grid around each: a factor of about 4 either way
 * for the latency targets, the batch and the starvation count; bfq's
 * low_latency off, and slice_idle off or short. */
static const AutotuneTunableInfo tunables[_AUTOTUNE_TUN_MAX] = {
        [AUTOTUNE_TUN_KYBER_READ_LAT] = { "read_lat_nsec", "kyber", KNOB_KYBER_READ_LAT_NSEC, 2000000,
                                      { 500000, 1000000, 8000000 }, 3 },
        [AUTOTUNE_TUN_KYBER_WRITE_LAT] = { "write_lat_nsec", "kyber", KNOB_KYBER_WRITE_LAT_NSEC, 10000000,
                                       { 2000000, 40000000 }, 2 },
        [AUTOTUNE_TUN_DL_FIFO_BATCH] = { "fifo_batch", "mq-deadline", KNOB_DL_FIFO_BATCH, 16, { 1, 4, 64 }, 3 },
        [AUTOTUNE_TUN_DL_WRITES_STARVED] = { "writes_starved", "mq-deadline", KNOB_DL_WRITES_STARVED, 2, { 1, 8 }, 2 },
        [AUTOTUNE_TUN_BFQ_LOW_LATENCY] = { "low_latency", "bfq", KNOB_BFQ_LOW_LATENCY, 1, { 0 }, 1 },
        [AUTOTUNE_TUN_BFQ_SLICE_IDLE] = { "slice_idle", "bfq", KNOB_BFQ_SLICE_IDLE, 8, { 0, 2 }, 2 },
};

const AutotuneTunableInfo *autotune_tunable_info(AutotuneTunable t) {
        return (unsigned) t < _AUTOTUNE_TUN_MAX ? &tunables[t] : NULL;
}

char *autotune_candidate_format(const AutotuneCandidate *c, char *buf, size_t size) {
        int n = snprintf(buf, size, "%s", c->scheduler);
        if (c->nr_requests && n >= 0 && (size_t) n < size)
                n += snprintf(buf + n, size - (size_t) n, " nr_requests=%u", c->nr_requests);
        if (c->wbt_lat_usec != AUTOTUNE_WBT_UNSET && n >= 0 && (size_t) n < size)
                n += snprintf(buf + n, size - (size_t) n, " wbt_lat_usec=%lld", c->wbt_lat_usec);
        if ((c->set & AUTOTUNE_SET_READ_AHEAD) && n >= 0 && (size_t) n < size)
                n += snprintf(buf + n, size - (size_t) n, " read_ahead_kb=%u", c->read_ahead_kb);
        for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                if ((c->set & (1U << t)) && n >= 0 && (size_t) n < size)
                        n += snprintf(buf + n, size - (size_t) n, " %s=%lld", tunables[t].name, c->tun[t]);
        return buf;
}

static void note_add(char *note, size_t size, const char *fmt, const char *arg) {
        size_t n = strlen(note);
        if (n + 1 >= size)
                return;
        if (n)
                note[n++] = ';', note[n++] = ' ', note[n] = 0;
        snprintf(note + n, size - n, fmt, arg);
}

/* Whether scheduler s may be a candidate: a zoned disk before 6.10 takes
 * only mq-deadline, and the kernel must offer s (available_line, the
 * content of queue/scheduler; NULL: unknown, none always is); note says
 * why not. */
static bool scheduler_offered(const char *s, bool zoned_old, const char *available_line, char *note,
                              size_t note_size) {
        if (zoned_old && !streq(s, "mq-deadline")) {
                note_add(note, note_size, "%s left out: a zoned disk before 6.10 needs mq-deadline", s);
                return false;
        }
        if (available_line && !streq(s, "none") && !scheduler_available(available_line, s)) {
                note_add(note, note_size, "%s left out: the kernel does not offer it", s);
                return false;
        }
        return true;
}

int autotune_candidates(const AutotunePolicy *p, const AutotuneCandidate *current, const char *available_line,
                        bool zoned, unsigned kernel_version, unsigned max_nr_requests, AutotuneCandidate *ret,
                        size_t *ret_n, char *note, size_t note_size) {
        size_t n = 0;
        const char *scheds[AUTOTUNE_MAX_SCHEDULERS + 1] = {};
        size_t ns = 0;
        bool zoned_old = zoned && kernel_version && kernel_version < KERNEL_VERSION_CODE(6, 10);

        if (note_size)
                note[0] = 0;
        ret[n] = *current;
        ret[n].baseline = true;
        n++;
        if (zoned_old && !streq(current->scheduler, "mq-deadline")) {
                /* The baseline's epochs would have to write it back, which
                 * the guard refuses: they would measure mq-deadline. */
                note_add(note, note_size,
                         "the current scheduler %s cannot be put back between epochs on a zoned disk before 6.10 "
                         "(only mq-deadline is written there): set Scheduler=mq-deadline to tune it",
                         current->scheduler);
                *ret_n = n;
                return -ENOENT;
        }

        if (p->schedulers[0])
                for (size_t i = 0; p->schedulers[i]; i++)
                        scheds[ns++] = p->schedulers[i];
        else
                scheds[ns++] = current->scheduler;

        for (size_t i = 0; i < ns; i++) {
                const char *s = scheds[i];
                if (!scheduler_offered(s, zoned_old, available_line, note, note_size))
                        continue;
                size_t nnr = streq(s, "none") || p->n_nr_requests == 0 ? 1 : p->n_nr_requests;
                size_t nwbt = p->n_wbt_lat_usec ? p->n_wbt_lat_usec : 1;
                for (size_t a = 0; a < nnr; a++)
                        for (size_t b = 0; b < nwbt; b++) {
                                AutotuneCandidate c = { .wbt_lat_usec = AUTOTUNE_WBT_UNSET };
                                snprintf(c.scheduler, sizeof c.scheduler, "%s", s);
                                if (!streq(s, "none") && p->n_nr_requests) {
                                        c.nr_requests = p->nr_requests[a];
                                        if (max_nr_requests && c.nr_requests > max_nr_requests) {
                                                char v[16];
                                                snprintf(v, sizeof v, "%u", c.nr_requests);
                                                note_add(note, note_size,
                                                         "nr_requests=%s left out: above the kernel's bound", v);
                                                continue;
                                        }
                                }
                                if (p->n_wbt_lat_usec)
                                        c.wbt_lat_usec = p->wbt_lat_usec[b];
                                bool dup = false;
                                for (size_t k = 0; k < n && !dup; k++)
                                        dup = autotune_candidate_equal(&ret[k], &c);
                                if (dup)
                                        continue;
                                if (n >= AUTOTUNE_MAX_CANDIDATES) {
                                        note_add(note, note_size, "%s: more candidates than 16, the rest left out", s);
                                        goto done;
                                }
                                ret[n++] = c;
                        }
        }
done:
        /* The baseline is measured as it is, but with the bounds' values it
         * is also one of the candidates: drop the twin. */
        *ret_n = n;
        return n > 1 ? 0 : -ENOENT;
}

bool autotune_candidate_equal(const AutotuneCandidate *a, const AutotuneCandidate *b) {
        if (!streq(a->scheduler, b->scheduler) || a->nr_requests != b->nr_requests ||
            a->wbt_lat_usec != b->wbt_lat_usec || a->set != b->set)
                return false;
        if ((a->set & AUTOTUNE_SET_READ_AHEAD) && a->read_ahead_kb != b->read_ahead_kb)
                return false;
        for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                if ((a->set & (1U << t)) && a->tun[t] != b->tun[t])
                        return false;
        return true;
}

AutotuneFamily autotune_next_family(const AutotunePolicy *p, int after, bool sequential) {
        for (int f = after < 0 ? 0 : after + 1; f < _AUTOTUNE_FAMILY_MAX; f++) {
                if (!(p->knobs & (1U << f)))
                        continue;
                if (f == AUTOTUNE_FAMILY_READ_AHEAD && !sequential)
                        continue;
                return (AutotuneFamily) f;
        }
        return _AUTOTUNE_FAMILY_MAX;
}

bool autotune_sequential_reads(const AutotuneSignature *sig, double min_iops) {
        return sig->read_share >= AUTOTUNE_SEQ_MIN_READ_SHARE && sig->avg_kb >= AUTOTUNE_SEQ_MIN_KB &&
               sig->iops >= min_iops && sig->depth <= AUTOTUNE_SEQ_MAX_DEPTH;
}

/* The search's values of a family without bounds of its own. */
static const unsigned default_nr_requests[] = { 32, 64, 128, 256 };

static const long long default_wbt[] = { -1, 0, 2000, 75000 };

static const unsigned default_read_ahead[] = { 128, 512, 2048 };

static const char *const default_schedulers[] = { "mq-deadline", "kyber", "bfq", "none", NULL };

static bool push_candidate(AutotuneCandidate *ret, size_t *n, const AutotuneCandidate *c, char *note,
                           size_t note_size) {
        for (size_t k = 0; k < *n; k++)
                if (autotune_candidate_equal(&ret[k], c))
                        return true;
        if (*n >= AUTOTUNE_MAX_CANDIDATES) {
                note_add(note, note_size, "%s: more candidates than 16, the rest left out", c->scheduler);
                return false;
        }
        ret[(*n)++] = *c;
        return true;
}

int autotune_family_candidates(const AutotunePolicy *p, AutotuneFamily f, const AutotuneCandidate *incumbent,
                               const char *available_line, bool zoned, unsigned kernel_version,
                               unsigned max_nr_requests, AutotuneCandidate *ret, size_t *ret_n, char *note,
                               size_t note_size) {
        bool zoned_old = zoned && kernel_version && kernel_version < KERNEL_VERSION_CODE(6, 10);
        AutotuneCandidate inc = *incumbent;
        size_t n = 0;
        char v[32];

        if (note_size)
                note[0] = 0;
        inc.baseline = true;
        if (f == AUTOTUNE_FAMILY_IOSCHED)
                /* the incumbent is written with its values, so that its
                 * epochs after a candidate's measure it and not the
                 * candidate's tunable left behind */
                for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++)
                        if (streq(tunables[t].scheduler, inc.scheduler) && !(inc.set & (1U << t))) {
                                inc.tun[t] = tunables[t].kernel_default;
                                inc.set |= 1U << t;
                        }
        ret[n++] = inc;
        AutotuneCandidate base = inc;
        base.baseline = false;

        switch (f) {
        case AUTOTUNE_FAMILY_SCHEDULER: {
                size_t ns = 0;
                const char *const *l = (const char *const *) p->schedulers;
                if (!l[0])
                        l = default_schedulers;
                for (; *l && ns < AUTOTUNE_MAX_SCHEDULERS; l++, ns++) {
                        const char *s = *l;
                        if (!scheduler_offered(s, zoned_old, available_line, note, note_size))
                                continue;
                        /* at its defaults: the switch resets nr_requests and
                         * iosched/; the read-ahead and wbt stay as they are */
                        AutotuneCandidate c = { .wbt_lat_usec = inc.wbt_lat_usec,
                                                .set = inc.set & AUTOTUNE_SET_READ_AHEAD,
                                                .read_ahead_kb = inc.read_ahead_kb };
                        snprintf(c.scheduler, sizeof c.scheduler, "%s", s);
                        if (streq(s, inc.scheduler))
                                continue; /* that is the incumbent */
                        if (!push_candidate(ret, &n, &c, note, note_size))
                                break;
                }
                break;
        }
        case AUTOTUNE_FAMILY_NR_REQUESTS: {
                if (streq(inc.scheduler, "none")) {
                        /* nr_requests is never written with none */
                        note_add(note, note_size, "%s", "nr_requests left alone: the scheduler is none");
                        break;
                }
                const unsigned *vals = p->n_nr_requests ? p->nr_requests : default_nr_requests;
                size_t nv = p->n_nr_requests ? p->n_nr_requests : ELEMENTSOF(default_nr_requests);
                for (size_t i = 0; i < nv; i++) {
                        AutotuneCandidate c = base;
                        if (vals[i] == inc.nr_requests)
                                continue;
                        if (max_nr_requests && vals[i] > max_nr_requests) {
                                snprintf(v, sizeof v, "%u", vals[i]);
                                note_add(note, note_size, "nr_requests=%s left out: above the kernel's bound", v);
                                continue;
                        }
                        c.nr_requests = vals[i];
                        if (!push_candidate(ret, &n, &c, note, note_size))
                                break;
                }
                break;
        }
        case AUTOTUNE_FAMILY_WBT: {
                const long long *vals = p->n_wbt_lat_usec ? p->wbt_lat_usec : default_wbt;
                size_t nv = p->n_wbt_lat_usec ? p->n_wbt_lat_usec : ELEMENTSOF(default_wbt);
                for (size_t i = 0; i < nv; i++) {
                        AutotuneCandidate c = base;
                        c.wbt_lat_usec = vals[i];
                        if (!push_candidate(ret, &n, &c, note, note_size))
                                break;
                }
                break;
        }
        case AUTOTUNE_FAMILY_IOSCHED:
                for (size_t t = 0; t < _AUTOTUNE_TUN_MAX; t++) {
                        if (!streq(tunables[t].scheduler, inc.scheduler))
                                continue; /* each tunable only under its own scheduler */
                        for (size_t i = 0; i < tunables[t].n_grid; i++) {
                                AutotuneCandidate c = base;
                                c.tun[t] = tunables[t].grid[i];
                                if (!push_candidate(ret, &n, &c, note, note_size))
                                        goto done;
                        }
                }
                if (n == 1)
                        note_add(note, note_size, "%s has no tunables a trial varies", inc.scheduler);
                break;
        case AUTOTUNE_FAMILY_READ_AHEAD: {
                const unsigned *vals = p->n_read_ahead_kb ? p->read_ahead_kb : default_read_ahead;
                size_t nv = p->n_read_ahead_kb ? p->n_read_ahead_kb : ELEMENTSOF(default_read_ahead);
                for (size_t i = 0; i < nv; i++) {
                        AutotuneCandidate c = base;
                        c.read_ahead_kb = vals[i];
                        c.set |= AUTOTUNE_SET_READ_AHEAD;
                        if (!push_candidate(ret, &n, &c, note, note_size))
                                break;
                }
                break;
        }
        default:
                break;
        }
done:
        *ret_n = n;
        return n > 1 ? 0 : -ENOENT;
}

void autotune_tripped_add(AutotuneTripped *t, size_t *n, const AutotuneCandidate *c, uint64_t now_usec) {
        for (size_t i = 0; i < *n; i++)
                if (autotune_candidate_equal(&t[i].cand, c)) {
                        t[i].usec = now_usec;
                        return;
                }
        if (*n == AUTOTUNE_TRIPPED_MAX) {
                size_t oldest = 0;
                for (size_t i = 1; i < *n; i++)
                        if (t[i].usec < t[oldest].usec)
                                oldest = i;
                t[oldest] = t[--*n];
        }
        t[(*n)++] = (AutotuneTripped) { .cand = *c, .usec = now_usec };
}

size_t autotune_drop_tripped(AutotuneCandidate *cand, size_t n, const AutotuneTripped *t, size_t n_t, uint64_t now_usec,
                             char *note, size_t note_size) {
        size_t k = n > 0 ? 1 : 0;

        for (size_t i = 1; i < n; i++) {
                bool drop = false;
                for (size_t j = 0; j < n_t && !drop; j++)
                        drop = autotune_candidate_equal(&t[j].cand, &cand[i]) &&
                               now_usec - t[j].usec < AUTOTUNE_TRIPPED_USEC;
                if (!drop) {
                        cand[k++] = cand[i];
                        continue;
                }
                char buf[AUTOTUNE_CANDIDATE_STRMAX];
                size_t len = strlen(note);
                if (len < note_size)
                        snprintf(note + len, note_size - len,
                                 "%s%s left out: it tripped the guard rail in the last hour",
                                 len ? "; " : "", autotune_candidate_format(&cand[i], buf, sizeof buf));
        }
        return k;
}
