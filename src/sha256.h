/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* SHA-256 (FIPS 180-4), streaming, no global state. Written here so that
 * verifying staged firmware does not pull libcrypto into the daemon. A
 * context belongs to one caller at a time; distinct contexts may be used
 * from different threads. */

#define SHA256_DIGEST_SIZE 32
#define SHA256_BLOCK_SIZE 64
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

typedef struct Sha256 {
        uint32_t h[8];
        uint64_t length;                 /* bytes hashed so far (messages < 2^61 bytes) */
        uint8_t buf[SHA256_BLOCK_SIZE];  /* a partial block, buf_len bytes of it */
        size_t buf_len;
} Sha256;

void sha256_init(Sha256 *c);
void sha256_update(Sha256 *c, const void *data, size_t len);
/* Writes the digest and wipes c: sha256_init() it again before reuse. */
void sha256_final(Sha256 *c, uint8_t out[SHA256_DIGEST_SIZE]);

/* Lowercase hex, NUL-terminated, as sha256sum prints it. */
void sha256_hex(const uint8_t d[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]);

/* One-shot: init, update, final. */
void sha256_buffer(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]);
