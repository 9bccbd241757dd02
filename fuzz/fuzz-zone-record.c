/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The emulated zoned device's state decoder (emu_meta_load() of src/zbd/zbd-emu-meta.c:
 * the header, the geometry checks, the two record slots per zone and their
 * choice). The file's static functions are compiled in here, so the real
 * code runs, unchanged. The first input byte says which CRCs the harness
 * fixes up before loading (bit 0: the header's, bit 1: every record's), so
 * that the fuzzer gets past them and reaches the geometry and the records;
 * without, it tests the CRC rejections themselves. Any input must load or
 * fail cleanly, in bounded memory and time, and what loads must be
 * consistent. */
#include "../src/zbd/zbd-emu-meta.c"

#include <sys/mman.h>
#include <sys/param.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ZONES_IN_INPUT 512U

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        ZbdEmuConfig cfg = {};
        EmuZbd e = {};
        uint8_t flags, *img;
        size_t n;
        int fd, r;

        /* quiet: every refusal is expected, and one line each would bury
         * a CI log's end */
        log_set_max_level(-1);
        if (size < 1)
                return 0;
        flags = data[0];
        data++;
        size--;
        n = MAX((size_t) EMU_HDR_SIZE, MIN(size, (size_t) EMU_HDR_SIZE + MAX_ZONES_IN_INPUT * EMU_ZONE_STRIDE));
        img = calloc(1, n);
        if (!img)
                return 0;
        memcpy(img, data, MIN(size, n));
        if (flags & 1) {
                EmuHeader *h = (EmuHeader *) img;
                memcpy(h->magic, EMU_MAGIC, sizeof h->magic);
                h->crc = crc32_buf(h, offsetof(EmuHeader, crc));
        }
        if (flags & 2)
                for (size_t off = EMU_HDR_SIZE; off + EMU_REC_SIZE <= n; off += EMU_REC_SIZE) {
                        EmuRecord *rec = (EmuRecord *) (img + off);
                        rec->crc = crc32_buf(rec, offsetof(EmuRecord, crc));
                }
        fd = memfd_create("fuzz-zone-record", MFD_CLOEXEC);
        if (fd < 0 || write(fd, img, n) != (ssize_t) n)
                abort();
        free(img);

        e.meta_fd = fd;
        r = emu_meta_load(&e, &cfg, "fuzz.zones");
        if (r >= 0) {
                /* What loaded is within its geometry. */
                if (e.nr_zones == 0 || e.capacity == 0 || e.capacity > e.zone_size || e.nr_conv > e.nr_zones)
                        abort();
                for (uint32_t i = 0; i < e.nr_zones; i++)
                        if (e.zones[i].wp > e.capacity || (e.zones[i].cond == ZONE_COND_FULL && e.zones[i].wp != e.capacity))
                                abort();
        }
        free(e.zones);
        close(fd);
        return 0;
}
