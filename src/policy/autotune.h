/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Closed-loop tuning: the decision logic, as pure functions (no I/O, no
 * clock). The daemon's trial runner (autotune-runner.c) feeds it the
 * figures it samples; the unit tests feed it synthetic and recorded series.
 *
 * Method. A trial measures the candidates on the live workload in short
 * epochs, in rounds over those still in the race: grouped by scheduler,
 * forward then backward (autotune_round_order()), so that a workload
 * drifting linearly during the trial favours no position, and within a
 * group the deepest queue first (a shallow one, which may starve the
 * reads, meets the far-worse limit of several settings); after each round
 * the race drops the candidates beaten with confidence (autotune_race()),
 * and one far worse than the best so far leaves after its epoch
 * (autotune_far_worse()). Each epoch yields figures from the deltas of
 * /sys/block/X/stat. The decision compares per-epoch figures with a
 * one-sided Mann-Whitney rank test (exact null distribution, ties count a
 * half) between the best admissible candidate and the current setting: it
 * changes only if p <= 1 - confidence AND the medians differ by at least
 * the minimum improvement (hysteresis). Otherwise it keeps the current
 * setting and says why. */

#define AUTOTUNE_MAX_CANDIDATES 16
#define AUTOTUNE_MAX_EPOCHS 32     /* per candidate */
#define AUTOTUNE_MAX_SCHEDULERS 8
#define AUTOTUNE_MAX_VALUES 16
#define AUTOTUNE_GUARD_FLOOR_MS 1.0 /* the guard rail ignores latencies below this */
#define AUTOTUNE_MIN_WRITE_MBPS 1.0 /* below this, the write-throughput bound is moot */

typedef enum AutotuneObjective {
        AUTOTUNE_OBJECTIVE_READ_LATENCY, /* lowest read await, write throughput within tolerance of the best */
        AUTOTUNE_OBJECTIVE_THROUGHPUT,   /* highest read+write throughput, read await under a target */
        AUTOTUNE_OBJECTIVE_SEQ_READ,     /* highest read MB/s: the read-ahead family on sequential readers
                                      * (not a value of AutoObjective=) */
        _AUTOTUNE_OBJECTIVE_MAX,
} AutotuneObjective;

const char *autotune_objective_to_string(AutotuneObjective o);
int autotune_objective_from_string(const char *s);

/* The bounds and the goal of one [Device] section (its Auto* keys). */
typedef struct AutotunePolicy {
        bool enabled;                   /* AutoTune= */
        bool set;                       /* any Auto* key seen */
        char *schedulers[AUTOTUNE_MAX_SCHEDULERS + 1]; /* AutoScheduler=, NULL-terminated */
        unsigned nr_requests[AUTOTUNE_MAX_VALUES];     /* AutoNrRequests= */
        size_t n_nr_requests;
        long long wbt_lat_usec[AUTOTUNE_MAX_VALUES];   /* AutoWbtLatUsec= */
        size_t n_wbt_lat_usec;
        AutotuneObjective objective;        /* AutoObjective= */
        unsigned write_tolerance_pct;   /* AutoWriteTolerance= (read-latency form) */
        uint64_t read_target_usec;      /* AutoReadLatencyTargetUSec= (throughput form) */
        uint64_t epoch_usec;            /* AutoEpochSec= */
        unsigned rounds;                /* AutoRounds= */
        unsigned confidence_pct;        /* AutoConfidence= */
        unsigned min_improvement_pct;   /* AutoMinImprovement= */
        unsigned guard_factor;          /* AutoGuardFactor= */
        uint64_t dwell_usec;            /* AutoMinDwellSec= */
        uint64_t interval_usec;         /* AutoTrialIntervalSec= (0: only on demand and events) */
        unsigned trials_per_hour;       /* AutoTrialsPerHour= (this device) */
        double min_iops;                /* AutoMinIOPS=: below, the disk is idle: no trial */
        bool on_hotplug;                /* AutoTrialOnHotplug= */
        bool on_workload_change;        /* AutoTrialOnWorkloadChange= */
        unsigned max_switches;          /* AutoMaxSwitches=: scheduler switches a trial may make */
        bool remember;                  /* AutoRemember=: workloads seen get their setting back at once */
        unsigned knobs;                 /* AutoKnobs=: a mask of 1 << AutotuneFamily; 0: one race over the
                                         * product of the bounds (as before AutoKnobs=) */
        unsigned read_ahead_kb[AUTOTUNE_MAX_VALUES]; /* AutoReadAheadKB= */
        size_t n_read_ahead_kb;
        /* Not a key: how many decisions share the trial's error rate. A
         * search by families decides once per phase, and each phase may
         * change the setting: every test of every phase then runs at
         * (1 - confidence) / looks, so that the whole search changes a
         * setting without cause at most 1 - confidence of the time
         * (Bonferroni across the phases, as within one over the
         * challengers). 0 or 1: one decision. */
        unsigned looks;
        /* Not a key: the best median write MB/s that the earlier phases of
         * a search measured (0: none). The write bound is against the best
         * writer of every candidate measured, those of the phases before
         * included: the decision, the race, the far-worse reference and
         * the promise take the larger of it and their own. */
        double write_seen_mbps;
} AutotunePolicy;

/* A trial makes at most this many scheduler switches by default (each
 * freezes the queue): 3 schedulers grouped per round cost 2 a round, so 6
 * rounds fit with room for the chosen setting. */
#define AUTOTUNE_DEFAULT_MAX_SWITCHES 16

void autotune_policy_init(AutotunePolicy *p);
void autotune_policy_done(AutotunePolicy *p);
int autotune_policy_copy(AutotunePolicy *dst, const AutotunePolicy *src);
/* Parses one [Device] key; -ENOENT if key is not an Auto* key, -EINVAL with
 * *ret_message (static or in msgbuf) on a bad value. */
int autotune_policy_parse(AutotunePolicy *p, const char *key, const char *value, char *msgbuf, size_t msgsize,
                          const char **ret_message);
/* Parses "64..1024" (every power of two in the range, and both ends) or a
 * list "64 128 256"; values 4..100000. */
int autotune_parse_nr_requests(const char *value, unsigned *ret, size_t *ret_n);

/* The schedulers' own tunables a trial may set, each only under its
 * scheduler (iosched/ of that scheduler; a switch resets them to the
 * kernel's defaults). */
typedef enum AutotuneTunable {
        AUTOTUNE_TUN_KYBER_READ_LAT,
        AUTOTUNE_TUN_KYBER_WRITE_LAT,
        AUTOTUNE_TUN_DL_FIFO_BATCH,
        AUTOTUNE_TUN_DL_WRITES_STARVED,
        AUTOTUNE_TUN_BFQ_LOW_LATENCY,
        AUTOTUNE_TUN_BFQ_SLICE_IDLE,
        _AUTOTUNE_TUN_MAX,
} AutotuneTunable;

typedef struct AutotuneTunableInfo {
        const char *name;      /* the iosched/ attribute */
        const char *scheduler; /* the only scheduler it is set under */
        int knob;              /* Knob of the same attribute */
        long long kernel_default;
        long long grid[3];     /* the values a search tries (besides the one in force) */
        size_t n_grid;
} AutotuneTunableInfo;

const AutotuneTunableInfo *autotune_tunable_info(AutotuneTunable t);

/* The families of knobs a search varies one at a time (AutoKnobs=). */
typedef enum AutotuneFamily {
        AUTOTUNE_FAMILY_SCHEDULER,   /* "scheduler": the schedulers at their defaults */
        AUTOTUNE_FAMILY_NR_REQUESTS, /* "nr_requests" */
        AUTOTUNE_FAMILY_WBT,         /* "wbt_lat_usec" */
        AUTOTUNE_FAMILY_IOSCHED,     /* "iosched": the tunables of the scheduler in force */
        AUTOTUNE_FAMILY_READ_AHEAD,  /* "read_ahead_kb": only on sequential readers, by read MB/s */
        _AUTOTUNE_FAMILY_MAX,
} AutotuneFamily;

const char *autotune_family_to_string(AutotuneFamily f);
int autotune_family_from_string(const char *s);

/* One setting to try. nr_requests 0 / wbt AUTOTUNE_WBT_UNSET / a bit of `set`
 * clear: left as they are. */
#define AUTOTUNE_SET_READ_AHEAD (1U << _AUTOTUNE_TUN_MAX) /* bits 0.._AUTOTUNE_TUN_MAX-1: tun[] */
typedef struct AutotuneCandidate {
        char scheduler[32];
        unsigned nr_requests;
        long long wbt_lat_usec;
        bool baseline; /* the setting in force when the trial began */
        unsigned set;  /* which of read_ahead_kb and tun[] it sets */
        unsigned read_ahead_kb;
        long long tun[_AUTOTUNE_TUN_MAX];
} AutotuneCandidate;

#define AUTOTUNE_WBT_UNSET (-(1LL << 62))
#define AUTOTUNE_CANDIDATE_STRMAX 224 /* autotune_candidate_format()'s longest, with its NUL */

/* "kyber nr_requests=64 wbt_lat_usec=2000 read_ahead_kb=512 read_lat_nsec=500000" */
char *autotune_candidate_format(const AutotuneCandidate *c, char *buf, size_t size);

/* Builds the candidates inside the policy's bounds, the current setting
 * first (always measured: the baseline). Kernel guards: a zoned disk before
 * 6.10 gets only mq-deadline; a scheduler not in available_line (the
 * content of queue/scheduler) is dropped; nr_requests is never set with
 * `none` (lowering it there shrinks the driver tags for good on 6.x
 * loop devices), nor above max_nr_requests (0: no limit). At most
 * AUTOTUNE_MAX_CANDIDATES; *ret_note says what was dropped. */
int autotune_candidates(const AutotunePolicy *p, const AutotuneCandidate *current, const char *available_line,
                        bool zoned, unsigned kernel_version, unsigned max_nr_requests, AutotuneCandidate *ret,
                        size_t *ret_n, char *note, size_t note_size);

typedef struct AutotuneSignature AutotuneSignature;

/* ---- searching by families ----
 *
 * With AutoKnobs= a trial is a search in phases, one family of knobs per
 * phase, in the order of AutotuneFamily: the schedulers at their defaults,
 * then the winner's nr_requests, then wbt_lat_usec, then the winner's own
 * iosched tunables (each varied alone from the winner's value), then
 * read_ahead_kb where the workload is a sequential reader. Each phase is
 * a race as a trial without AutoKnobs= is, against the winner of the
 * phase before (its candidate 0); the product of the families is never
 * built: a space of 4 schedulers x 5 depths x 9 tunable pairs x 4
 * read-aheads (720 settings) costs at most 4 + 4 + 6 + 3 candidates. */

/* The families of p->knobs after `after` (-1: the first), skipping the
 * read-ahead family unless sequential. _AUTOTUNE_FAMILY_MAX: none left. */
AutotuneFamily autotune_next_family(const AutotunePolicy *p, int after, bool sequential);

/* The candidates of family f around incumbent (candidate 0, as it is),
 * inside the same kernel guards as autotune_candidates(). The iosched
 * family varies one tunable of incumbent's scheduler at a time; the
 * incumbent's value of a tunable it does not set is the kernel's default
 * (a switch in the trial reset it), so candidate 0 is written with it.
 * -ENOENT: nothing to compare (note says why). */
int autotune_family_candidates(const AutotunePolicy *p, AutotuneFamily f, const AutotuneCandidate *incumbent,
                               const char *available_line, bool zoned, unsigned kernel_version,
                               unsigned max_nr_requests, AutotuneCandidate *ret, size_t *ret_n, char *note,
                               size_t note_size);

/* A sequential reader: reads at least AUTOTUNE_SEQ_MIN_READ_SHARE of the
 * I/Os, of at least AUTOTUNE_SEQ_MIN_KB on average, at least min_iops,
 * with at most AUTOTUNE_SEQ_MAX_DEPTH in flight (a deep queue of direct
 * reads does not use read-ahead). */
#define AUTOTUNE_SEQ_MIN_READ_SHARE 0.9
#define AUTOTUNE_SEQ_MIN_KB 64.0
#define AUTOTUNE_SEQ_MAX_DEPTH 16.0
bool autotune_sequential_reads(const AutotuneSignature *sig, double min_iops);

/* A candidate one of whose epochs tripped the guard rail: left out of the
 * device's next trials for AUTOTUNE_TRIPPED_USEC (or until its workload
 * changes, which the caller forgets the list for), so that a trial from a
 * good setting does not end early on a candidate known to be harmful. */
typedef struct AutotuneTripped {
        AutotuneCandidate cand;
        uint64_t usec; /* CLOCK_MONOTONIC of the trip */
} AutotuneTripped;

#define AUTOTUNE_TRIPPED_MAX 8
#define AUTOTUNE_TRIPPED_USEC (3600ULL * 1000000)

bool autotune_candidate_equal(const AutotuneCandidate *a, const AutotuneCandidate *b);
/* Records c (again: its time is renewed); the oldest entry makes room. */
void autotune_tripped_add(AutotuneTripped *t, size_t *n, const AutotuneCandidate *c, uint64_t now_usec);
/* Drops from cand[1..n) (the baseline stays) those that tripped within
 * AUTOTUNE_TRIPPED_USEC before now_usec, and says so in note (appended).
 * Returns how many are left. */
size_t autotune_drop_tripped(AutotuneCandidate *cand, size_t n, const AutotuneTripped *t, size_t n_t, uint64_t now_usec,
                             char *note, size_t note_size);

/* The 11 fields of /sys/block/X/stat we use. */
typedef struct AutotuneBlockStat {
        uint64_t rd_ios, rd_merges, rd_sectors, rd_ticks;
        uint64_t wr_ios, wr_merges, wr_sectors, wr_ticks;
        uint64_t in_flight, io_ticks, time_in_queue;
} AutotuneBlockStat;

int autotune_blockstat_parse(const char *text, AutotuneBlockStat *ret);

/* Whether the requests in flight when a candidate went in (at) have left
 * the queue by now: as many completions since as were in flight then (the
 * queue serves roughly in order), or nothing in flight. An epoch measures
 * only after that, so that it sees the candidate, not the tail of the one
 * before (a deep queue of large writes takes seconds to drain). */
bool autotune_drained(const AutotuneBlockStat *at, const AutotuneBlockStat *now);
#define AUTOTUNE_DRAIN_MAX_USEC (5ULL * 1000000) /* measure anyway after this long */

/* Per-epoch figures of one candidate. */
typedef struct AutotuneEpochFigures {
        double read_iops, write_iops;
        double read_mbps, write_mbps; /* MB = 10^6 bytes */
        double read_await_ms, write_await_ms; /* 0 if no I/O of that kind */
        double in_flight;             /* average requests in flight (time_in_queue / time) */
        double util;                  /* busy fraction */
        unsigned errors;              /* I/O errors seen in the epoch (probes) */
        double read_p99_ms;           /* the latency probes' p99 in the epoch; 0: fewer than
                                       * AUTOTUNE_P99_MIN_PROBES probes (or none) */
        bool valid;
} AutotuneEpochFigures;

/* Figures from two stat samples usec apart. Counters going backwards (the
 * device was replaced) make the epoch invalid. */
void autotune_epoch_figures(const AutotuneBlockStat *a, const AutotuneBlockStat *b, uint64_t usec,
                            AutotuneEpochFigures *ret);

/* Probes in an epoch for its read p99 to count. */
#define AUTOTUNE_P99_MIN_PROBES 50

/* The latency probes' interval during a trial, for a read p99 of every
 * epoch: one per AUTOTUNE_TRIAL_PROBE_SLOW_USEC at least (as before: 50
 * an epoch of 1 s), faster down to one per AUTOTUNE_TRIAL_PROBE_FAST_USEC
 * (200 a second, 0.8 MB/s of 4 KiB reads: 100 an epoch of 0.5 s) as long
 * as the probes stay at most 1 in AUTOTUNE_TRIAL_PROBE_SHARE of the I/Os
 * per second the disk did before the trial (iops; 0 or NaN: unknown, the
 * slow end). */
#define AUTOTUNE_TRIAL_PROBE_SLOW_USEC 20000
#define AUTOTUNE_TRIAL_PROBE_FAST_USEC 5000
#define AUTOTUNE_TRIAL_PROBE_SHARE 10
uint64_t autotune_trial_probe_usec(double iops);

/* The figure the objective ranks by, and whether lower is better. The read
 * latency is the probes' p99 when p99 (every epoch of the trial has one:
 * autotune_have_p99()), else the mean read await of /sys/block/X/stat. */
double autotune_objective_value(const AutotunePolicy *p, const AutotuneEpochFigures *e, bool p99);
double autotune_read_latency(const AutotuneEpochFigures *e, bool p99);
bool autotune_objective_lower_better(const AutotunePolicy *p);

/* One-sided Mann-Whitney: p-value of "x tends to be smaller than y". */
double autotune_mann_whitney_less(const double *x, size_t nx, const double *y, size_t ny);

typedef struct AutotuneSeries {
        AutotuneEpochFigures epochs[AUTOTUNE_MAX_EPOCHS];
        size_t n;
} AutotuneSeries;

typedef struct AutotuneSummary {
        bool dropped;       /* left the race before the last round */
        double objective;   /* median of the per-epoch objective */
        double read_await_ms, write_mbps, read_mbps, iops, in_flight; /* medians */
        double read_p99_ms; /* median of the epochs' probe p99s; 0: not measured */
        double write_low_mbps; /* the lower confidence bound of its write MB/s (at AutoConfidence=, Student's
                                * t on the logs of its epochs): the write bound judges a challenger by it */
        bool admissible;    /* meets the bound of the objective: for read latency, a challenger's write_low_mbps
                             * (the current setting's median) at least (1 - tolerance) times the best
                             * median write of every candidate measured, dropped ones included */
        double p_vs_current; /* p of "better than the current setting" (1 for the current) */
        size_t n;
} AutotuneSummary;

typedef enum AutotuneVerdict {
        AUTOTUNE_VERDICT_CHANGE,          /* winner is not the current setting */
        AUTOTUNE_VERDICT_KEEP_BEST,       /* the current setting is the best */
        AUTOTUNE_VERDICT_KEEP_NOISE,      /* the difference is not larger than the noise */
        AUTOTUNE_VERDICT_KEEP_HYSTERESIS, /* significant but smaller than the minimum improvement */
        AUTOTUNE_VERDICT_KEEP_IDLE,       /* too little I/O to judge */
        AUTOTUNE_VERDICT_KEEP_NO_DATA,    /* too few epochs */
        AUTOTUNE_VERDICT_ABORTED,         /* the guard rail ended the trial */
        _AUTOTUNE_VERDICT_MAX,
} AutotuneVerdict;

const char *autotune_verdict_to_string(AutotuneVerdict v);

typedef struct AutotuneDecision {
        AutotuneVerdict verdict;
        int winner;        /* candidate to set: the best on CHANGE, else the current (0) */
        int best;          /* the best admissible by median, -1 if none */
        double p;          /* rank-test p of best against current */
        double confidence; /* 1 - p */
        double improvement; /* relative, of the objective's medians (0.25 = 25 % better) */
        bool by_p99;        /* read latency was the probes' p99, not the mean await */
        char reason[256];
} AutotuneDecision;

/* Whether every valid epoch of the n series has a probe p99. */
bool autotune_have_p99(const AutotuneSeries *series, size_t n);

/* Each candidate's medians over its valid epochs so far, as the decision
 * takes them (a candidate without any: n 0, its figures 0); the read
 * latency is the probes' p99 where every epoch has one
 * (autotune_have_p99()). A running trial's progress. */
void autotune_summarise(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneSummary *summaries);

/* Candidate 0 must be the baseline. summaries (n entries) is filled too. */
void autotune_decide(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneSummary *summaries,
                     AutotuneDecision *ret);

/* ---- racing ----
 *
 * A trial runs in rounds; each round measures the candidates still in the
 * race once, and after each round autotune_race() drops a candidate that
 * another one beats with confidence. A candidate whose epoch is far worse
 * than the best so far leaves at once (autotune_far_worse()): the price
 * of a trial for the workload is one epoch per bad candidate. The current
 * setting (candidate 0) always stays: the decision compares with it. */

typedef struct AutotuneDrop {
        bool dropped;
        int by;           /* the candidate that beat it, -1 */
        unsigned epochs;  /* its epochs when it left */
        double p;         /* the racing test's p (0 for far worse) */
        char why[256];
} AutotuneDrop;

/* After a round: drops the candidates (never 0) that another one still in
 * the race dominates: better in the objective with p at most
 * (1 - confidence) / (3 * rounds * (n - 1)), and not worse on the bound's
 * figure (write MB/s for read latency, read latency for throughput) or,
 * for read latency, inside the write bound with half the tolerance to
 * spare. The
 * test is Student's t on the logarithms with the noise pooled over the
 * candidates in the race (and at least each pair's own). Returns how many
 * it dropped. For read latency, also those that write less than
 * (1 - tolerance) times another one, by the same test on write MB/s: they
 * can never be chosen; and, while the current setting is inside the write
 * bound, those that are not better than it by AutoMinImprovement= with
 * confidence: they could never change it. And it tells whether the race settled
 * (autotune_race_settled()). */
size_t autotune_race(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, AutotuneDrop *drops);

/* Whether the race's last look settled the trial: drops[0] (the current
 * setting, never dropped) then names the leader that beats it with
 * confidence (.by, .p); the trial may stop, and autotune_decide_raced()
 * changes to it. */
bool autotune_race_settled(const AutotuneDrop *drops, size_t n);

/* Whether epoch e of candidate c (not 0) is far worse than the best so
 * far: a read await more than the guard factor times the slowest epoch of
 * the candidate still in the race with the lowest median read await among
 * those inside the write bound so far (against the best writer among
 * every candidate measured, dropped ones included; at least
 * AUTOTUNE_GUARD_FLOOR_MS).
 * *why says against what. */
bool autotune_far_worse(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops,
                        size_t c, const AutotuneEpochFigures *e, char *why, size_t why_size);

/* The probe p99 above which an epoch of candidate c is far worse
 * (autotune_far_worse() with p99: the guard factor times the reference's
 * slowest epoch), so that a runner can tell before the epoch ends; 0 when
 * that test is not by p99 (c is 0, sequential reads, an epoch so far
 * without a p99, no reference yet). *ret_ref and *ret_base (may be NULL)
 * say against what. */
double autotune_far_worse_limit(const AutotunePolicy *p, const AutotuneSeries *series, size_t n,
                                const AutotuneDrop *drops, size_t c, int *ret_ref, double *ret_base);

/* Whether `above` samples over a limit make the p99 of every sample
 * count up to n_max exceed it, whatever the samples still to come: an
 * epoch that can hold at most n_max probes is far worse already. */
bool autotune_p99_above_certain(uint64_t above, uint64_t n_max);

/* The order of round `round` over the candidates still in the race:
 * grouped by scheduler (so a round switches only between groups), groups
 * and members forward on even rounds and backward on odd ones (A B C, C B
 * A: a linear drift favours no position, and a round begins where the
 * last ended, with no switch). Returns how many were written to order. */
size_t autotune_round_order(const AutotuneCandidate *cand, size_t n, const AutotuneDrop *drops, unsigned round,
                            size_t *order);
/* Scheduler switches to run order[0..k) from the scheduler `from`. */
unsigned autotune_order_switches(const AutotuneCandidate *cand, const size_t *order, size_t k, const char *from);

/* autotune_decide() with the drops of a race (NULL: none): a dropped
 * candidate is not chosen and needs no minimum of epochs; with every
 * challenger dropped the current setting is kept as the best. */
void autotune_decide_raced(const AutotunePolicy *p, const AutotuneSeries *series, size_t n, const AutotuneDrop *drops,
                           AutotuneSummary *summaries, AutotuneDecision *ret);

/* The guard rail: true if epoch e of a candidate saw I/O errors, or has a
 * read await more than the policy's factor times the slowest epoch of the
 * baseline so far (both at least AUTOTUNE_GUARD_FLOOR_MS); *why says
 * which. The runner ends a trial on errors only: a slow candidate leaves
 * the race instead (autotune_far_worse(), against the best so far). */
bool autotune_guard(const AutotunePolicy *p, const AutotuneSeries *baseline, const AutotuneEpochFigures *e, char *why,
                    size_t why_size);

/* Rate limits: the start times of recent trials (usec, any clock). */
typedef struct AutotuneHistory {
        uint64_t starts[64];
        size_t n;
        uint64_t last_change_usec; /* 0: never */
} AutotuneHistory;

void autotune_history_add(AutotuneHistory *h, uint64_t now_usec);
unsigned autotune_history_count(const AutotuneHistory *h, uint64_t now_usec, uint64_t window_usec);

/* Whether a trial may start now. forced (an operator asked): the dwell time
 * and the device's cap do not apply, the global cap does. */
bool autotune_may_start(const AutotunePolicy *p, const AutotuneHistory *device, const AutotuneHistory *global,
                        unsigned global_per_hour, uint64_t now_usec, bool forced, char *why, size_t why_size);

/* Workload-change detector: a signature of an epoch (read share of I/Os,
 * mean request size, rate) and whether two differ clearly. */
struct AutotuneSignature {
        double read_share;  /* of I/Os, 0..1 */
        double avg_kb;      /* mean request size */
        double iops;
        double depth;       /* mean requests in flight */
};

void autotune_signature(const AutotuneEpochFigures *e, AutotuneSignature *ret);
/* Changed: read share moved by more than 0.25, or mean size or rate by
 * more than a factor of 2, with both above min_iops. */
bool autotune_workload_changed(const AutotuneSignature *a, const AutotuneSignature *b, double min_iops);

double autotune_median(const double *v, size_t n);

/* ---- workloads seen ----
 *
 * A workload's signature is its read share of I/Os, mean request size,
 * rate and depth (autotune_signature()). Rate and depth follow the setting
 * in force as much as the workload (a queue of 32 holds at most 32), so
 * their scale is wider: the distance is the largest of
 *   |read share a - b| / 0.25,  |log2(size a / size b)|,
 *   |log2(rate a / rate b)| / 2,  |log2((depth a + 1) / (depth b + 1))| / 2
 * and two signatures within AUTOTUNE_MEMORY_MATCH are the same workload. */
#define AUTOTUNE_MEMORY_MAX 8
#define AUTOTUNE_MEMORY_MATCH 1.0

double autotune_signature_distance(const AutotuneSignature *a, const AutotuneSignature *b);
/* The median signature of the valid epochs of series[0..n). false: none. */
bool autotune_series_signature(const AutotuneSeries *series, size_t n, AutotuneSignature *ret);

typedef struct AutotuneMemory {
        AutotuneSignature sig;
        AutotuneCandidate cand;     /* what the trial chose (or kept) for it */
        uint64_t realtime_usec; /* when */
} AutotuneMemory;

/* Records what a trial chose for sig: an entry of the same workload is
 * replaced, else the oldest makes room. */
void autotune_memory_record(AutotuneMemory *m, size_t *n, const AutotuneSignature *sig, const AutotuneCandidate *c,
                            uint64_t now_usec);
/* The entry nearest sig within AUTOTUNE_MEMORY_MATCH; -1: none (or sig is
 * idle, below min_iops). */
int autotune_memory_find(const AutotuneMemory *m, size_t n, const AutotuneSignature *sig, double min_iops);

/* The state file's line for an entry of the disk `id` (its diskseq):
 * tab-separated id, diskseq, read share, size, rate, depth, time,
 * scheduler, nr_requests, wbt_lat_usec. -EINVAL if id holds a tab or a
 * newline. */
int autotune_memory_format(const char *id, uint64_t diskseq, const AutotuneMemory *e, char *buf, size_t size);
/* Parses such a line (without its newline); *ret_id points into a copy in
 * idbuf. -EINVAL on a malformed line. */
int autotune_memory_parse(const char *line, char *idbuf, size_t idsize, uint64_t *ret_diskseq, AutotuneMemory *ret);

/* ---- what the trial promised, watched after the change ----
 *
 * A change was admitted under a bound: for read latency, the chosen
 * setting's writes within AutoWriteTolerance= of the best candidate's; for
 * throughput, its read latency under the target. After the change the
 * runner watches the setting over AUTOTUNE_PROMISE_USEC, in the watch's
 * 10 s intervals, on the workload the trial measured. */
#define AUTOTUNE_PROMISE_USEC (300ULL * 1000000)
#define AUTOTUNE_PROMISE_MIN_INTERVALS 6 /* a minute of the same workload before judging */
#define AUTOTUNE_PROMISE_MAX_INTERVALS 32

typedef struct AutotunePromise {
        AutotuneSignature sig;       /* the workload the trial measured */
        double write_floor_mbps; /* read latency: (1 - tolerance) x the trial's best write; 0: moot */
        double read_ceiling_ms;  /* throughput: the target; 0: moot */
        double predicted_write_mbps, predicted_read_ms; /* the chosen setting in the trial */
} AutotunePromise;

typedef enum AutotunePromiseState {
        AUTOTUNE_PROMISE_WATCHING, /* too few intervals of the workload yet */
        AUTOTUNE_PROMISE_HOLDS,    /* inside the bound so far */
        AUTOTUNE_PROMISE_BROKEN,   /* the median of the intervals breaks the bound */
} AutotunePromiseState;

/* The promise of a trial whose decision was a change (winner). */
void autotune_promise_make(const AutotunePolicy *p, const AutotuneSeries *series, const AutotuneSummary *sum, size_t n,
                           int winner, AutotunePromise *ret);
/* Judges the watched intervals e[0..k): those of the promised workload
 * (signature within AUTOTUNE_MEMORY_MATCH, not idle) count; with at least
 * AUTOTUNE_PROMISE_MIN_INTERVALS of them, their median write MB/s (read
 * await) against the floor (ceiling). *why says the figures. */
AutotunePromiseState autotune_promise_check(const AutotunePolicy *p, const AutotunePromise *pr,
                                            const AutotuneEpochFigures *e, size_t k, char *why, size_t why_size);
/* The candidate to fall back to when the chosen one broke its bound: of
 * the admissible candidates of the trial other than chosen, the one that
 * kept the bound with the most margin (the highest median write for read
 * latency, the lowest read latency for throughput); -1: none. */
int autotune_fallback(const AutotunePolicy *p, const AutotuneSummary *sum, size_t n, int chosen);
