/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SHA-256 (src/basic/sha256.c, a wrapper over libcrypto's EVP) against the FIPS
 * 180-4 example vectors, streamed in pieces against the one-shot, and both
 * against coreutils' sha256sum; then the wrapper's context life cycle.
 * Random data comes from a fixed seed, so a failure reproduces. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cleanup.h"
#include "sha256.h"

static uint64_t rng_state;

static uint64_t rng(void) {
        /* splitmix64 */
        uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));

        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

static void fill_random(uint8_t *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t) rng();
}

static void hex_of(const void *data, size_t len, char out[SHA256_HEX_SIZE]) {
        uint8_t d[SHA256_DIGEST_SIZE];

        assert_int_equal(sha256_buffer(data, len, d), 0);
        sha256_hex(d, out);
}

/* The same through sha256_init/update/final, chunk bytes at a time. */
static void hex_of_streamed(const void *data, size_t len, size_t chunk, char out[SHA256_HEX_SIZE]) {
        const uint8_t *p = data;
        uint8_t d[SHA256_DIGEST_SIZE];
        Sha256 c;

        assert_int_equal(sha256_init(&c), 0);
        for (size_t off = 0; off < len; off += chunk)
                sha256_update(&c, p + off, len - off < chunk ? len - off : chunk);
        sha256_final(&c, d);
        assert_null(c.ctx);
        sha256_hex(d, out);
}

static void test_fips_vectors(void **state) {
        static const struct {
                const char *msg;
                const char *hex;
        } v[] = {
                { "",
                  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
                { "abc",
                  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
                /* 448 bits: the padding no longer fits, a second block follows. */
                { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
                /* 896 bits */
                { "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                  "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
                  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
        };
        char hex[SHA256_HEX_SIZE];

        for (size_t i = 0; i < ELEMENTSOF(v); i++) {
                hex_of(v[i].msg, strlen(v[i].msg), hex);
                assert_string_equal(hex, v[i].hex);
                for (size_t chunk = 1; chunk <= 3; chunk++) {
                        hex_of_streamed(v[i].msg, strlen(v[i].msg), chunk, hex);
                        assert_string_equal(hex, v[i].hex);
                }
        }

        /* NULL with length 0 is the empty message, one-shot and streamed. */
        hex_of(NULL, 0, hex);
        assert_string_equal(hex, v[0].hex);
        {
                uint8_t d[SHA256_DIGEST_SIZE];
                Sha256 c;

                assert_int_equal(sha256_init(&c), 0);
                sha256_update(&c, NULL, 0);
                sha256_final(&c, d);
                sha256_hex(d, hex);
                assert_string_equal(hex, v[0].hex);
        }
}

static void test_million_a(void **state) {
        static const char expect[] = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
        _cleanup_free_ char *a = malloc(1000000);
        uint8_t d[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        Sha256 c;

        assert_non_null(a);
        memset(a, 'a', 1000000);

        hex_of(a, 1000000, hex);
        assert_string_equal(hex, expect);

        /* 1000 bytes at a time: never a whole number of blocks. */
        assert_int_equal(sha256_init(&c), 0);
        for (size_t i = 0; i < 1000; i++)
                sha256_update(&c, a + i * 1000, 1000);
        sha256_final(&c, d);
        sha256_hex(d, hex);
        assert_string_equal(hex, expect);
}

static void test_split_points(void **state) {
        uint8_t buf[258], one[SHA256_DIGEST_SIZE], two[SHA256_DIGEST_SIZE];

        rng_state = 1;
        fill_random(buf, sizeof(buf));

        /* Every length up to 257 (all padding cases, up to four blocks), each
         * split at every point. */
        for (size_t len = 0; len < sizeof(buf); len++) {
                assert_int_equal(sha256_buffer(buf, len, one), 0);
                for (size_t s = 0; s <= len; s++) {
                        Sha256 c;

                        assert_int_equal(sha256_init(&c), 0);
                        sha256_update(&c, buf, s);
                        sha256_update(&c, buf + s, len - s);
                        sha256_final(&c, two);
                        assert_memory_equal(one, two, sizeof(one));
                }
        }
}

static void test_random_chunks(void **state) {
        enum { LEN = 64 * 1024 + 7 };
        _cleanup_free_ uint8_t *buf = malloc(LEN + 8);
        uint8_t one[SHA256_DIGEST_SIZE], two[SHA256_DIGEST_SIZE];

        assert_non_null(buf);
        rng_state = 2;
        fill_random(buf, LEN + 8);

        for (unsigned round = 0; round < 200; round++) {
                /* Unaligned starts too: libcrypto hashes whole blocks in place. */
                const uint8_t *p = buf + round % 8;
                size_t len = LEN - rng() % 4096, off = 0;
                Sha256 c;

                assert_int_equal(sha256_buffer(p, len, one), 0);

                assert_int_equal(sha256_init(&c), 0);
                while (off < len) {
                        size_t k;

                        switch (rng() % 4) {
                        case 0:
                                k = 0;
                                break;
                        case 1:
                                k = rng() % 64 + 1;
                                break;
                        case 2:
                                k = rng() % 512 + 1;
                                break;
                        default:
                                k = rng() % 16384 + 1;
                                break;
                        }
                        if (k > len - off)
                                k = len - off;
                        sha256_update(&c, p + off, k);
                        off += k;
                }
                sha256_final(&c, two);
                assert_memory_equal(one, two, sizeof(one));
        }
}

/* Runs sha256sum on len bytes of data; returns 0 and its hex in out, or
 * -ENOENT if sha256sum is absent, or another negative errno. */
static int sha256sum_of(const uint8_t *data, size_t len, char out[SHA256_HEX_SIZE]) {
        char path[] = "/tmp/test-sha256.XXXXXX", cmd[128], line[256];
        _cleanup_close_ int fd = -EBADF;
        FILE *f;
        int r = 0, status;

        fd = mkstemp(path);
        if (fd < 0)
                return negative_errno();
        for (size_t off = 0; off < len;) {
                ssize_t n = write(fd, data + off, len - off);

                if (n < 0) {
                        r = negative_errno();
                        goto out;
                }
                off += (size_t) n;
        }

        snprintf(cmd, sizeof(cmd), "sha256sum < '%s' 2>/dev/null", path);
        f = popen(cmd, "r");
        if (!f) {
                r = negative_errno();
                goto out;
        }
        if (!fgets(line, sizeof(line), f))
                line[0] = '\0';
        status = pclose(f);
        if (status != 0 || strlen(line) < SHA256_HEX_SIZE - 1) {
                r = -ENOENT;
                goto out;
        }
        memcpy(out, line, SHA256_HEX_SIZE - 1);
        out[SHA256_HEX_SIZE - 1] = '\0';
out:
        unlink(path);
        return r;
}

static void test_sha256sum(void **state) {
        /* 1 MiB + 1, and the lengths either side of the padding boundaries. */
        static const size_t lens[] = { 1024 * 1024 + 1, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128 };
        _cleanup_free_ uint8_t *buf = malloc(lens[0]);
        char ours[SHA256_HEX_SIZE], theirs[SHA256_HEX_SIZE];

        assert_non_null(buf);
        rng_state = 3;
        fill_random(buf, lens[0]);

        for (size_t i = 0; i < ELEMENTSOF(lens); i++) {
                int r = sha256sum_of(buf, lens[i], theirs);

                if (r == -ENOENT) {
                        print_message("sha256sum not usable here, skipping\n");
                        skip();
                }
                assert_int_equal(r, 0);
                hex_of(buf, lens[i], ours);
                assert_string_equal(ours, theirs);
                /* Streamed, in pieces that straddle block boundaries. */
                hex_of_streamed(buf, lens[i], 1000, ours);
                assert_string_equal(ours, theirs);
        }
}

static void test_lifecycle(void **state) {
        static const char abc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        uint8_t d[SHA256_DIGEST_SIZE];
        char hex[SHA256_HEX_SIZE];
        Sha256 c = {};

        /* Nothing set up: done is a no-op, twice. */
        sha256_done(&c);
        sha256_done(&c);
        assert_null(c.ctx);

        /* Set up and dropped without a digest (ASan/valgrind: no leak). */
        assert_int_equal(sha256_init(&c), 0);
        assert_non_null(c.ctx);
        sha256_update(&c, "x", 1);
        sha256_done(&c);
        assert_null(c.ctx);
        sha256_done(&c);

        /* Reused after final: init starts afresh, nothing of "x" left. */
        for (unsigned i = 0; i < 2; i++) {
                assert_int_equal(sha256_init(&c), 0);
                sha256_update(&c, "abc", 3);
                sha256_final(&c, d);
                assert_null(c.ctx);
                sha256_done(&c); /* after final: a no-op */
                sha256_hex(d, hex);
                assert_string_equal(hex, abc);
        }

        /* Scope-bound: freed on the way out, digested or not. */
        {
                _cleanup_sha256_ Sha256 a = {}, b = {};

                assert_int_equal(sha256_init(&a), 0);
                assert_int_equal(sha256_init(&b), 0);
                sha256_update(&a, "abc", 3);
                sha256_final(&a, d);
                sha256_update(&b, "ab", 2);
        }

        /* Two contexts interleaved do not share state. */
        {
                _cleanup_sha256_ Sha256 a = {}, b = {};
                uint8_t da[SHA256_DIGEST_SIZE], db[SHA256_DIGEST_SIZE];

                assert_int_equal(sha256_init(&a), 0);
                assert_int_equal(sha256_init(&b), 0);
                sha256_update(&a, "a", 1);
                sha256_update(&b, "xyz", 3);
                sha256_update(&a, "bc", 2);
                sha256_final(&a, da);
                sha256_final(&b, db);
                sha256_hex(da, hex);
                assert_string_equal(hex, abc);
                assert_memory_not_equal(da, db, sizeof(da));
        }
}

static void test_throughput(void **state) {
        enum { LEN = 64 * 1024 * 1024 };
        _cleanup_free_ uint8_t *buf = malloc(LEN);
        uint8_t d[SHA256_DIGEST_SIZE];
        struct timespec t0, t1;
        double s;

        assert_non_null(buf);
        rng_state = 4;
        fill_random(buf, LEN);

        assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t0), 0);
        assert_int_equal(sha256_buffer(buf, LEN, d), 0);
        assert_int_equal(clock_gettime(CLOCK_MONOTONIC, &t1), 0);

        /* Reported, not asserted: shared CI machines vary too much. */
        s = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (s > 0)
                print_message("sha256: 64 MiB in %.3f s, %.0f MB/s\n", s, LEN / s / 1e6);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_fips_vectors),
                cmocka_unit_test(test_million_a),
                cmocka_unit_test(test_split_points),
                cmocka_unit_test(test_random_chunks),
                cmocka_unit_test(test_sha256sum),
                cmocka_unit_test(test_lifecycle),
                cmocka_unit_test(test_throughput),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
