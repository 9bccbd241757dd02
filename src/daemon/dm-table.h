/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The target types of a device-mapper device's live table ("striped",
 * "linear", "crypt", "multipath"; several joined by '+', each once, in
 * table order), asked of the kernel (DM_TABLE_STATUS on
 * /dev/mapper/control, status only: a crypt target's key is never read).
 * devnum is sysfs's "MAJOR:MINOR". Needs CAP_SYS_ADMIN and the control
 * node (the unit's DeviceAllow=); -errno otherwise, and explain goes without
 * the layout. */
int dm_target_types(const char *devnum, char **ret);
