/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <libudev.h>
#include <systemd/sd-event.h>

#include "cleanup.h"

/* Whole-disk block devices from udev: a monitor on the "udev" source
 * (events after udevd processed them, with properties) and enumeration.
 * Partitions are filtered out by devtype. */

typedef struct UdevWatch UdevWatch;

typedef enum UdevAction {
        UDEV_ACTION_ADD,    /* add, or found by enumeration */
        UDEV_ACTION_CHANGE, /* loop attach/detach, resize, media change */
        UDEV_ACTION_REMOVE,
        UDEV_ACTION_SYNCED, /* an enumeration finished: d is NULL; devices not reported since the last
                             * sync are gone */
} UdevAction;

typedef void (*udev_watch_cb_t)(UdevAction action, struct udev_device *d, void *userdata);

/* monitor=false: enumeration only (for --once). */
int udev_watch_new(UdevWatch **ret, sd_event *e, bool monitor, udev_watch_cb_t cb, void *userdata);
/* Reports every present disk as ADD, then SYNCED. */
int udev_watch_enumerate(UdevWatch *w);
UdevWatch *udev_watch_free(UdevWatch *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(UdevWatch *, udev_watch_free)
/* udev properties as KEY=VALUE strings. */
int udev_device_properties(struct udev_device *d, char ***ret);
