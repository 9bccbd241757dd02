/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

#include <jansson.h>

#include "device.h"
#include "policy.h"
#include "stack.h"
#include "tune.h"

/* A stack as explain draws it (io.blkmqd.Manager's StackNode): each device
 * of the tree with its role (top, striped LV, dm-crypt, md raid1,
 * partition, request-based disk, multipath path) and what blkmqd sets
 * there and why: on a bio-based layer the keys that stay with it
 * (ReadAheadKB=, the probes), on a request-based disk or map (a member)
 * every key in force, each with its section and file:line, and the stacks'
 * keys it does not take (Resolved.losses). A partition's disk is drawn
 * below it: its queue carries the partition.
 * Pure but for reading the stacks below sysfs_root (stack.c): what the
 * daemon knows of each device comes from the lookup. */

typedef struct StackTreeDevice {
        const DeviceInfo *info;  /* NULL: blkmqd does not know the device */
        Resolved resolved;       /* its policy in force now (all NULL: none) */
        const TuneJob *job;      /* its last job, for the values read back; NULL */
        char *dm_target;         /* the dm table's target types ("striped"), NULL: unknown */
} StackTreeDevice;

/* Fills *ret (zeroed by the caller) for sysname; stack_tree_json() frees
 * its resolved and dm_target. A negative errno ends the walk. */
typedef int (*StackTreeLookupFn)(const char *sysname, StackTreeDevice *ret, void *userdata);

/* "striped LV", "dm-crypt", "md raid1", "partition", "request-based disk",
 * ... into buf. */
const char *stack_role(const DeviceInfo *d, const char *dm_target, bool partition, bool request_based,
                       char buf[static 64]);
/* The tree of s as nested StackNode objects. A request-based device with
 * slaves (a dm-multipath map) is a member, its paths are drawn below it
 * (role "multipath path", pathOf the map): no members, they take none of
 * the stack's keys, only their own sections'. */
int stack_tree_json(const Stack *s, StackTreeLookupFn lookup, void *userdata, json_t **ret);
/* Explain's stacks of sysname, as a JSON array: the tree of each top above
 * it (stack_tree_tops(): past a map whose path it is), or its own where it
 * is a top; none on a disk in no stack. A stack not read is left out. */
int stack_trees_json(const char *sysfs_root, const char *sysname, StackTreeLookupFn lookup, void *userdata,
                     json_t **ret);
