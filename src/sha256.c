/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SHA-256 after FIPS 180-4, sections 4.1.2, 4.2.2, 5.1.1, 5.3.3 and 6.2. */

#include <string.h>

#include "sha256.h"

static const uint32_t K[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Byte-wise big-endian access: correct on any host and at any alignment;
 * compilers turn it into a load plus bswap where the target has them. */
static inline uint32_t load_be32(const uint8_t *p) {
        return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | (uint32_t) p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t) (v >> 24);
        p[1] = (uint8_t) (v >> 16);
        p[2] = (uint8_t) (v >> 8);
        p[3] = (uint8_t) v;
}

static inline void store_be64(uint8_t *p, uint64_t v) {
        store_be32(p, (uint32_t) (v >> 32));
        store_be32(p + 4, (uint32_t) v);
}

static inline uint32_t rotr(uint32_t x, unsigned n) {
        return (x >> n) | (x << (32 - n));
}

#define CH(x, y, z) (((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z) (((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))
#define BSIG0(x) (rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22))
#define BSIG1(x) (rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25))
#define SSIG0(x) (rotr(x, 7) ^ rotr(x, 18) ^ ((x) >> 3))
#define SSIG1(x) (rotr(x, 17) ^ rotr(x, 19) ^ ((x) >> 10))

/* Compresses n whole blocks starting at p into h. */
static void sha256_blocks(uint32_t h[8], const uint8_t *p, size_t n) {
        uint32_t w[64];

        for (; n > 0; n--, p += SHA256_BLOCK_SIZE) {
                uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];

                for (unsigned t = 0; t < 16; t++)
                        w[t] = load_be32(p + 4 * t);
                for (unsigned t = 16; t < 64; t++)
                        w[t] = SSIG1(w[t - 2]) + w[t - 7] + SSIG0(w[t - 15]) + w[t - 16];

                for (unsigned t = 0; t < 64; t++) {
                        uint32_t t1 = hh + BSIG1(e) + CH(e, f, g) + K[t] + w[t];
                        uint32_t t2 = BSIG0(a) + MAJ(a, b, c);

                        hh = g;
                        g = f;
                        f = e;
                        e = d + t1;
                        d = c;
                        c = b;
                        b = a;
                        a = t1 + t2;
                }

                h[0] += a;
                h[1] += b;
                h[2] += c;
                h[3] += d;
                h[4] += e;
                h[5] += f;
                h[6] += g;
                h[7] += hh;
        }
}

void sha256_init(Sha256 *c) {
        static const uint32_t h0[8] = {
                0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
        };

        memset(c, 0, sizeof(*c));
        memcpy(c->h, h0, sizeof(h0));
}

void sha256_update(Sha256 *c, const void *data, size_t len) {
        const uint8_t *p = data;

        if (len == 0)
                return;

        c->length += len;

        /* Top up a partial block first. */
        if (c->buf_len > 0) {
                size_t k = SHA256_BLOCK_SIZE - c->buf_len;

                if (k > len)
                        k = len;
                memcpy(c->buf + c->buf_len, p, k);
                c->buf_len += k;
                p += k;
                len -= k;
                if (c->buf_len < SHA256_BLOCK_SIZE)
                        return;
                sha256_blocks(c->h, c->buf, 1);
                c->buf_len = 0;
        }

        /* Whole blocks straight from the caller's memory, no copy. */
        if (len >= SHA256_BLOCK_SIZE) {
                size_t n = len / SHA256_BLOCK_SIZE;

                sha256_blocks(c->h, p, n);
                p += n * SHA256_BLOCK_SIZE;
                len -= n * SHA256_BLOCK_SIZE;
        }

        if (len > 0) {
                memcpy(c->buf, p, len);
                c->buf_len = len;
        }
}

void sha256_final(Sha256 *c, uint8_t out[SHA256_DIGEST_SIZE]) {
        uint64_t bits = c->length << 3;

        /* Padding (5.1.1): 0x80, zeros to 56 mod 64, the bit length big-endian. */
        c->buf[c->buf_len++] = 0x80;
        if (c->buf_len > SHA256_BLOCK_SIZE - 8) {
                memset(c->buf + c->buf_len, 0, SHA256_BLOCK_SIZE - c->buf_len);
                sha256_blocks(c->h, c->buf, 1);
                c->buf_len = 0;
        }
        memset(c->buf + c->buf_len, 0, SHA256_BLOCK_SIZE - 8 - c->buf_len);
        store_be64(c->buf + SHA256_BLOCK_SIZE - 8, bits);
        sha256_blocks(c->h, c->buf, 1);

        for (unsigned i = 0; i < 8; i++)
                store_be32(out + 4 * i, c->h[i]);

        memset(c, 0, sizeof(*c));
}

void sha256_hex(const uint8_t d[SHA256_DIGEST_SIZE], char out[SHA256_HEX_SIZE]) {
        static const char hex[] = "0123456789abcdef";

        for (unsigned i = 0; i < SHA256_DIGEST_SIZE; i++) {
                out[2 * i] = hex[d[i] >> 4];
                out[2 * i + 1] = hex[d[i] & 0xf];
        }
        out[2 * SHA256_DIGEST_SIZE] = '\0';
}

void sha256_buffer(const void *data, size_t len, uint8_t out[SHA256_DIGEST_SIZE]) {
        Sha256 c;

        sha256_init(&c);
        sha256_update(&c, data, len);
        sha256_final(&c, out);
}
