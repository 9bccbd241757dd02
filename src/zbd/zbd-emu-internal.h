/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The emulated zoned device's state, shared by zbd-emu.c (the zone
 * semantics) and zbd-emu-meta.c (the state file: its format, creation and
 * loading). Not for other modules: they see zbd.h. */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "zbd.h"

#define EMU_MAGIC "blkmqd-zbd-emu\n" /* 15 characters + NUL = 16 bytes */
#define EMU_VERSION 1U
#define EMU_HDR_SIZE 4096U
#define EMU_REC_SIZE 32U
#define EMU_ZONE_STRIDE (2U * EMU_REC_SIZE)
#define EMU_BLOCK 4096U
#define EMU_MAX_WRITE_DEFAULT (512U * 1024U)
#define EMU_ZERO_CHUNK (1U << 20)

typedef struct EmuHeader {
        char magic[16];
        uint32_t version;
        uint32_t header_size;
        uint64_t zone_size;
        uint64_t zone_capacity;
        uint32_t nr_zones;
        uint32_t nr_conv;
        uint32_t block_size;
        uint32_t max_open;   /* as created; informational */
        uint32_t max_active; /* as created; informational */
        uint32_t crc;        /* crc32 of the bytes before it */
} EmuHeader;
_Static_assert(sizeof(EmuHeader) == 64, "EmuHeader layout");

typedef struct EmuRecord {
        uint64_t seq;  /* 0: never written */
        uint64_t wp;   /* bytes written into the zone, <= capacity */
        uint32_t zone; /* index: a record in the wrong place is invalid */
        uint32_t cond; /* ZoneCond */
        uint32_t reserved;
        uint32_t crc;  /* crc32 of the bytes before it */
} EmuRecord;
_Static_assert(sizeof(EmuRecord) == EMU_REC_SIZE, "EmuRecord layout");

typedef struct EmuZone {
        uint64_t wp;  /* relative to the zone start */
        uint64_t seq; /* of the newest record written */
        uint64_t lru; /* when it was last written or opened: implicit-close order */
        ZoneCond cond;
        bool busy;    /* reset/finish in progress, outside the lock */
} EmuZone;

typedef struct EmuZbd {
        pthread_mutex_t lock;
        int meta_fd;     /* PATH.zones, flock()ed */
        int rfd;         /* PATH, buffered: reads, punching holes */
        bool direct;     /* z->fd (the writes) is O_DIRECT: the pool's reads use it too */
        uint64_t zone_size, capacity;
        uint32_t nr_zones, nr_conv;
        uint32_t max_open, max_active;
        uint32_t n_open, n_active;
        uint64_t lru_clock;
        EmuZone *zones;
} EmuZbd;

/* Under the lock: writes the zone's current state as its next record. Not
 * synced. */
int emu_record_write(EmuZbd *e, uint32_t i);
/* fsync()s the directory path is in: a new name in it is durable. */
int emu_fsync_parent(const char *path);
/* Creates meta_path atomically: written to a temporary file, fsync'd,
 * renamed without replacing. -EEXIST if someone else created it first. */
int emu_meta_create(const char *meta_path, const ZbdEmuConfig *c, uint32_t block_size);
/* Loads the zone table of e->meta_fd: -EBADMSG (not a state file, torn
 * beyond repair, truncated), -EPROTONOSUPPORT, -EINVAL (not the geometry
 * asked for), each logged with meta_path. */
int emu_meta_load(EmuZbd *e, const ZbdEmuConfig *c, const char *meta_path);
