/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SHA-256 through libcrypto's EVP interface; see sha256.h for why. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <openssl/err.h>
#include <openssl/evp.h>

#include "sha256.h"

/* The header's forward declaration must name OpenSSL's type. */
_Static_assert(__builtin_types_compatible_p(struct evp_md_ctx_st *, EVP_MD_CTX *),
               "EVP_MD_CTX is not struct evp_md_ctx_st");

/* For what cannot fail with a context sha256_init() set up: a caller that
 * went on after a failed init, or libcrypto broken. A digest the caller
 * would trust is not made up instead. */
static void sha256_fatal(const char *what) __attribute__((noreturn, cold));
static void sha256_fatal(const char *what) {
        fprintf(stderr, "sha256: %s, aborting\n", what);
        abort();
}

int sha256_init(Sha256 *c) {
        EVP_MD_CTX *ctx;

        c->ctx = NULL;
        ctx = EVP_MD_CTX_new();
        if (!ctx)
                return -ENOMEM;
        /* EVP_sha256(): the default library context's implementation, looked
         * up once per init; no EVP_MD of ours to keep (no global state). */
        if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
                EVP_MD_CTX_free(ctx);
                ERR_clear_error(); /* this thread's queue, not left to libnvme */
                return -EIO;
        }
        c->ctx = ctx;
        return 0;
}

void sha256_update(Sha256 *c, const void *data, size_t len) {
        if (!c->ctx)
                sha256_fatal("sha256_update() without sha256_init()");
        if (len == 0)
                return;
        if (EVP_DigestUpdate(c->ctx, data, len) != 1)
                sha256_fatal("EVP_DigestUpdate() failed");
}

void sha256_final(Sha256 *c, uint8_t out[SHA256_DIGEST_SIZE]) {
        unsigned n = 0;

        if (!c->ctx)
                sha256_fatal("sha256_final() without sha256_init()");
        if (EVP_DigestFinal_ex(c->ctx, out, &n) != 1 || n != SHA256_DIGEST_SIZE)
                sha256_fatal("EVP_DigestFinal_ex() failed");
        sha256_done(c);
}

void sha256_done(Sha256 *c) {
        EVP_MD_CTX_free(c->ctx); /* NULL is fine */
        c->ctx = NULL;
}

void sha256_hex(const uint8_t d[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]) {
        static const char hex[] = "0123456789abcdef";

        for (unsigned i = 0; i < SHA256_DIGEST_SIZE; i++) {
                out[2 * i] = hex[d[i] >> 4];
                out[2 * i + 1] = hex[d[i] & 0xf];
        }
        out[2 * SHA256_DIGEST_SIZE] = '\0';
}

int sha256_buffer(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]) {
        unsigned n = 0;

        /* data NULL with len 0: EVP_DigestUpdate() does not look at it. */
        if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 ||
            n != SHA256_DIGEST_SIZE) {
                ERR_clear_error();
                return -EIO;
        }
        return 0;
}
