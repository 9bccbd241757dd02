/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "cleanup.h"

/* Stacked block devices (LVM, md, dm-crypt, dm-multipath, partitions), read
 * from a sysfs tree: pure but for reading below sysfs_root ("/sys", or a
 * fake tree in the unit tests).
 *
 * The stack of a top device is followed down through slaves/ to the
 * devices whose request queue carries the request-queue settings (the
 * members): a device with a real blk-mq scheduler list in queue/scheduler
 * (one name in brackets) is a member and the walk stops there (a
 * request-based dm-multipath map is its own member: the queues of its paths
 * are below it, past their schedulers); a bio-based device (LV, md, a
 * dm-crypt mapping: queue/scheduler reads "none" without brackets, or is
 * absent) is followed into each of its slaves, through any number of
 * layers; a partition is carried by its disk's queue. A bio-based device
 * without slaves (an NVMe multipath head, brd) has no member here. */

typedef struct StackNode {
        char *name;                 /* sysname: dm-0, md0, nvme0n1p1, nvme0n1 */
        char *disk;                 /* whose queue carries it: the disk of a partition, else name */
        bool partition;
        bool request_based;         /* disk's queue has a blk-mq scheduler: a member */
        struct StackNode **children; /* slaves, in directory order (sorted) */
        size_t n_children;
        /* A request-based device's slaves (a dm-multipath map's paths):
         * below its queue, not followed, no members (they take none of the
         * stack's keys); leaves, sorted. None elsewhere. */
        struct StackNode **paths;
        size_t n_paths;
} StackNode;

typedef struct Stack {
        StackNode *top;
        char **members;             /* request-based disks, each once, in walk order */
} Stack;

int stack_resolve(const char *sysfs_root, const char *top, Stack **ret);
Stack *stack_free(Stack *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Stack *, stack_free)
/* true if the top itself is its only member: a plain disk, no stack */
bool stack_is_trivial(const Stack *s);
/* The path from the top down to member (top first, "dm-2 dm-0 nvme0n1p1
 * nvme0n1" as a NULL-terminated list), or -ENOENT. */
int stack_path_to(const Stack *s, const char *member, char ***ret);

/* The tops of every stack that uses disk name (through the disk or one of
 * its partitions), followed up through holders/: the devices without
 * holders above it, each once, sorted. None (an empty list) if nothing
 * holds it. The walk stops below a request-based holder (a dm-multipath
 * map): that one is its own member, it and what is above it are carried
 * by its queue, not by name's (as stack_resolve() sees it from above). */
int stack_tops(const char *sysfs_root, const char *name, char ***ret);
/* The tops whose trees show name, as explain draws them: stack_tops(), and
 * past a request-based holder too (the map whose path name is, or the
 * stacks on that map), where name is drawn as a path (StackNode.paths). */
int stack_tree_tops(const char *sysfs_root, const char *name, char ***ret);
/* Every device above disk name, tops and the layers between (crypt, the
 * LV under it), each once, sorted; none if nothing holds it. */
int stack_above(const char *sysfs_root, const char *name, char ***ret);
