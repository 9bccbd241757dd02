/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

#include "varlink.h"

/* The callers of a "more" streaming method (Monitor): each kept until its
 * peer goes away, every event sent to all of them. Embed it in a
 * heap-allocated object: its address is the disconnect callback's data. */

typedef struct VarlinkSubscriber {
        struct VarlinkSubscriber *next;
        VarlinkCall *call;
} VarlinkSubscriber;

typedef struct VarlinkSubscribers {
        VarlinkSubscriber *head;
} VarlinkSubscribers;

/* Keeps a reference to call. */
int varlink_subscribers_add(VarlinkSubscribers *s, VarlinkCall *call);
/* Sends params (reference taken) to every subscriber, continues: true. */
void varlink_subscribers_notify(VarlinkSubscribers *s, json_t *params);
static inline bool varlink_subscribers_empty(const VarlinkSubscribers *s) {
        return !s->head;
}
void varlink_subscribers_clear(VarlinkSubscribers *s);
