/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* What the files of the closed loop's decisions (autotune-*.c) share
 * among themselves and with their unit test, beyond autotune.h: the
 * daemon includes autotune.h only. It includes no header of theirs, so
 * that a file of them includes both with no circle. */

#include <stddef.h>

/* The t with P(T >= t) = alpha for Student's t with df degrees of freedom
 * (by bisection: autotune_t_upper() falls as t grows); 0 for alpha >= 0.5. */
double autotune_t_quantile_upper(double alpha, double df);

struct AutotunePolicy;

/* The decisions the trial's error rate is shared by (AutotunePolicy.looks),
 * at least 1. */
double autotune_looks(const struct AutotunePolicy *p);

/* P(T >= t) for Student's t with df degrees of freedom (df may be
 * fractional). */
double autotune_t_upper(double t, double df);

/* The rotated order (A B C, B C A, ...): slot s of n_cand * rounds runs
 * candidate autotune_slot_candidate(s, n_cand). The runner uses
 * autotune_round_order(); the unit tests' synthetic trials use this. */
size_t autotune_slot_candidate(size_t slot, size_t n_cand);
