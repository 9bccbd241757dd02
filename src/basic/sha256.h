/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"

/* SHA-256 (FIPS 180-4), streaming, no global state: a thin wrapper over
 * OpenSSL libcrypto's EVP digest interface.
 *
 * Why libcrypto: it is already mapped into blkmqd through libnvme (built with
 * OpenSSL, as the distributions ship it: `ldd build/src/blkmqd` lists
 * libcrypto.so.3), so using it directly adds no dependency to the daemon;
 * and its SHA-256 picks hardware paths at run time (SHA-NI, AVX2, ARMv8
 * crypto extensions) that we would otherwise have to write by hand: about
 * 1.9 GB/s against some 280 MB/s for the portable C this replaced.
 * (blkmqctl, which does not link libnvme, gains libcrypto for its stage.)
 *
 * A context belongs to one caller at a time; distinct contexts may be used
 * from different threads. */

#define SHA256_DIGEST_SIZE 32
#define SHA256_BLOCK_SIZE 64
#define SHA256_HEX_SIZE (2 * SHA256_DIGEST_SIZE + 1)

/* OpenSSL's EVP_MD_CTX (typedef struct evp_md_ctx_st EVP_MD_CTX), declared
 * here so that users of this header do not include <openssl/evp.h>. */
struct evp_md_ctx_st;

/* Zero-initialised (or after sha256_final()/sha256_done()) it holds nothing:
 * sha256_done() on it is a no-op. */
typedef struct Sha256 {
        struct evp_md_ctx_st *ctx;
} Sha256;

/* 0, or -ENOMEM / -EIO (libcrypto could not set up SHA-256) with c->ctx ==
 * NULL: nothing to free either way but a context set up. */
int sha256_init(Sha256 *c);
/* len 0 is fine (data may then be NULL). c must have been set up by
 * sha256_init(); libcrypto failing here (it does not for SHA-256) aborts
 * rather than let a wrong digest through. */
void sha256_update(Sha256 *c, const void *data, size_t len);
/* Writes the digest and frees the context (c->ctx = NULL): sha256_init() it
 * again before reuse. */
void sha256_final(Sha256 *c, uint8_t out[SHA256_DIGEST_SIZE]);
/* Frees the context without a digest; idempotent. */
void sha256_done(Sha256 *c);
#define _cleanup_sha256_ _cleanup_(sha256_done)

/* Lowercase hex, NUL-terminated, as sha256sum prints it. */
void sha256_hex(const uint8_t d[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]);

/* One-shot (EVP_Digest()): 0, or -EIO if libcrypto failed (its context
 * allocation included; EVP_Digest() does not tell the two apart). */
int sha256_buffer(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]);
