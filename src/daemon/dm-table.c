/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/dm-ioctl.h>

#include "cleanup.h"
#include "dm-table.h"
#include "util.h"

#define DM_CONTROL "/dev/mapper/control"
#define DM_BUFFER_MAX (1024U * 1024U) /* a volume of thousands of segments */

int dm_target_types(const char *devnum, char **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ struct dm_ioctl *io = NULL;
        _cleanup_free_ char *types = NULL;
        unsigned ma, mi;
        size_t size = 16384;

        if (!devnum || sscanf(devnum, "%u:%u", &ma, &mi) != 2)
                return -EINVAL;
        fd = open(DM_CONTROL, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        for (;;) {
                free(io);
                io = calloc(1, size);
                if (!io)
                        return -ENOMEM;
                io->version[0] = DM_VERSION_MAJOR;
                io->version[1] = 0;
                io->version[2] = 0;
                io->data_size = size;
                io->data_start = sizeof *io;
                io->dev = makedev(ma, mi);
                if (ioctl(fd, DM_TABLE_STATUS, io) < 0)
                        return -errno;
                if (!(io->flags & DM_BUFFER_FULL_FLAG))
                        break;
                if (size >= DM_BUFFER_MAX)
                        return -E2BIG;
                size *= 2;
        }

        const char *data = (const char *) io + io->data_start, *end = (const char *) io + io->data_size;
        const struct dm_target_spec *spec = (const struct dm_target_spec *) data;
        for (uint32_t i = 0; i < io->target_count; i++) {
                char type[DM_MAX_TYPE_NAME + 1];

                if ((const char *) (spec + 1) > end)
                        return -EBADMSG;
                memcpy(type, spec->target_type, DM_MAX_TYPE_NAME);
                type[DM_MAX_TYPE_NAME] = 0;
                /* each type once: "linear+striped" */
                bool seen = false;
                if (types) {
                        size_t n = strlen(type);
                        for (const char *p = types; (p = strstr(p, type)); p += n)
                                if ((p == types || p[-1] == '+') && (p[n] == 0 || p[n] == '+'))
                                        seen = true;
                }
                if (!seen) {
                        char *t = NULL;
                        if (asprintf(&t, "%s%s%s", strempty(types), types ? "+" : "", type) < 0)
                                return -ENOMEM;
                        free(types);
                        types = t;
                }
                if (spec->next == 0)
                        break;
                spec = (const struct dm_target_spec *) (data + spec->next);
        }
        if (!types)
                return -ENODATA; /* no live table */
        *ret = TAKE_PTR(types);
        return 0;
}
