/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* util.c and the pure parts of sysfs.c: number, boolean and size parsing
 * (outputs untouched on failure), CPU lists in our and the kernel's
 * format, string vectors, path joining, kernel releases, and the sysfs
 * accessor pair on plain files. */

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include "base64.h"
#include "cleanup.h"
#include "fake-sysfs.h"
#include "sysfs.h"
#include "util.h"

#define SENTINEL_LL 0x5a5a5a5aLL

static void test_safe_atolli(void **state) {
        static const struct {
                const char *s;
                int r;
                long long v;
        } cases[] = {
                { "0", 0, 0 },
                { "42", 0, 42 },
                { "-5", 0, -5 },
                { "+7", 0, 7 },
                { "007", 0, 7 },
                { "9223372036854775807", 0, LLONG_MAX },
                { "-9223372036854775808", 0, LLONG_MIN },
                { "9223372036854775808", -ERANGE, 0 },
                { "-9223372036854775809", -ERANGE, 0 },
                { "99999999999999999999999", -ERANGE, 0 },
                { "", -EINVAL, 0 },
                { " 5", -EINVAL, 0 },
                { "\t5", -EINVAL, 0 },
                { "5 ", -EINVAL, 0 },
                { "5\n", -EINVAL, 0 },
                { "12abc", -EINVAL, 0 },
                { "0x10", -EINVAL, 0 },
                { "1.5", -EINVAL, 0 },
                { "-", -EINVAL, 0 },
                { "abc", -EINVAL, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                long long v = SENTINEL_LL;
                int r = safe_atolli(cases[i].s, &v);

                if (r != cases[i].r)
                        fail_msg("safe_atolli(\"%s\") = %d, expected %d", cases[i].s, r, cases[i].r);
                /* Outputs are untouched on failure. */
                assert_true(v == (r == 0 ? cases[i].v : SENTINEL_LL));
        }
        {
                long long v = SENTINEL_LL;
                assert_int_equal(safe_atolli(NULL, &v), -EINVAL);
                assert_true(v == SENTINEL_LL);
        }
}

static void test_safe_atoi(void **state) {
        int v = 77;

        assert_int_equal(safe_atoi("2147483647", &v), 0);
        assert_int_equal(v, INT_MAX);
        assert_int_equal(safe_atoi("-2147483648", &v), 0);
        assert_int_equal(v, INT_MIN);
        v = 77;
        assert_int_equal(safe_atoi("2147483648", &v), -ERANGE);
        assert_int_equal(safe_atoi("-2147483649", &v), -ERANGE);
        assert_int_equal(safe_atoi("9223372036854775808", &v), -ERANGE);
        assert_int_equal(safe_atoi("1x", &v), -EINVAL);
        assert_int_equal(safe_atoi("", &v), -EINVAL);
        assert_int_equal(safe_atoi(NULL, &v), -EINVAL);
        assert_int_equal(v, 77);
}

static void test_safe_atou64(void **state) {
        uint64_t v = 77;

        assert_int_equal(safe_atou64("18446744073709551615", &v), 0);
        assert_true(v == UINT64_MAX);
        assert_int_equal(safe_atou64("0", &v), 0);
        assert_true(v == 0);
        v = 77;
        assert_int_equal(safe_atou64("18446744073709551616", &v), -ERANGE);
        /* strtoull() would wrap "-1" to UINT64_MAX: must be refused. */
        assert_int_equal(safe_atou64("-1", &v), -EINVAL);
        assert_int_equal(safe_atou64("+1", &v), -EINVAL);
        assert_int_equal(safe_atou64(" 1", &v), -EINVAL);
        assert_int_equal(safe_atou64("1 ", &v), -EINVAL);
        assert_int_equal(safe_atou64("", &v), -EINVAL);
        assert_true(v == 77);
}

static void test_parse_boolean(void **state) {
        static const char *const yes[] = { "1", "yes", "YES", "Yes", "y", "Y", "true", "TRUE", "t", "on", "On" };
        static const char *const no[] = { "0", "no", "NO", "n", "N", "false", "False", "f", "off", "OFF" };
        static const char *const bad[] = { "", "2", "-1", "yess", "ye", "of", "enable", " yes", "yes ", "tru" };

        for (size_t i = 0; i < ELEMENTSOF(yes); i++)
                if (parse_boolean(yes[i]) != 1)
                        fail_msg("parse_boolean(\"%s\") != 1", yes[i]);
        for (size_t i = 0; i < ELEMENTSOF(no); i++)
                if (parse_boolean(no[i]) != 0)
                        fail_msg("parse_boolean(\"%s\") != 0", no[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (parse_boolean(bad[i]) != -EINVAL)
                        fail_msg("parse_boolean(\"%s\") != -EINVAL", bad[i]);
        assert_int_equal(parse_boolean(NULL), -EINVAL);
}

static void test_parse_size(void **state) {
        static const struct {
                const char *s;
                int r;
                uint64_t v;
        } cases[] = {
                { "0", 0, 0 },
                { "512", 0, 512 },
                { "10B", 0, 10 },
                { "4K", 0, 4096 },
                { "4k", 0, 4096 },
                { "4KB", 0, 4096 },
                { "4KiB", 0, 4096 },
                { "1M", 0, UINT64_C(1) << 20 },
                { "1G", 0, UINT64_C(1) << 30 },
                { "1.5G", 0, UINT64_C(3) << 29 },
                { "0.5K", 0, 512 },
                { ".5K", 0, 512 },
                { "2T", 0, UINT64_C(2) << 40 },
                { "3P", 0, UINT64_C(3) << 50 },
                { "16383P", 0, UINT64_C(16383) << 50 },
                { "16384P", -ERANGE, 0 }, /* 2^64 */
                { "5X", -EINVAL, 0 },
                { "4KX", -EINVAL, 0 },
                { "4KBB", -EINVAL, 0 },
                { "4 K", -EINVAL, 0 },
                { "K", -EINVAL, 0 },
                { "", -EINVAL, 0 },
                { "-1", -EINVAL, 0 },
                { "-1K", -EINVAL, 0 },
                { " 1K", -EINVAL, 0 },
                { "1.5.5G", -EINVAL, 0 },
                { "1E", -EINVAL, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = 77;
                int r = parse_size(cases[i].s, &v);

                if (r != cases[i].r)
                        fail_msg("parse_size(\"%s\") = %d, expected %d", cases[i].s, r, cases[i].r);
                if (v != (r == 0 ? cases[i].v : 77))
                        fail_msg("parse_size(\"%s\") gave %llu, expected %llu", cases[i].s, (unsigned long long) v,
                                 (unsigned long long) (r == 0 ? cases[i].v : 77));
        }
        {
                uint64_t v = 77;
                assert_int_equal(parse_size(NULL, &v), -EINVAL);
                assert_true(v == 77);
        }
}

/* BUG (reported to the lead): parse_size() hands the number to strtold(),
 * which also takes C hexadecimal floats and exponents, so MatchSize=0x10-1e3
 * is accepted as 16-1000 bytes instead of being refused like any other
 * malformed size. Fails until parse_size() accepts only [digits][.digits]. */
static void test_parse_size_rejects_hex_and_exponent(void **state) {
        static const char *const bad[] = { "0x10", "0x1p4", "1e3", "1e3K", "1E3" };

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                uint64_t v = 77;
                int r = parse_size(bad[i], &v);

                if (r != -EINVAL)
                        fail_msg("BUG: parse_size(\"%s\") = %d (value %llu), expected -EINVAL", bad[i], r,
                                 (unsigned long long) v);
        }
}

static void test_format_size(void **state) {
        char buf[16];

        assert_string_equal(format_size(0, buf), "0");
        assert_string_equal(format_size(1023, buf), "1023");
        assert_string_equal(format_size(1024, buf), "1K");
        assert_string_equal(format_size(1536, buf), "1.5K");
        assert_string_equal(format_size(UINT64_C(1) << 30, buf), "1G");
        assert_string_equal(format_size(UINT64_C(3) << 39, buf), "1.5T");
        assert_string_equal(format_size(UINT64_C(5) << 50, buf), "5P");
        /* P is the largest unit: 16384P does not become "16E". */
        assert_string_equal(format_size(UINT64_MAX, buf), "16384P");

        /* format_size() output parses back to the same value. */
        for (unsigned shift = 0; shift < 60; shift += 5) {
                uint64_t v = UINT64_C(1) << shift, back = 0;
                assert_int_equal(parse_size(format_size(v, buf), &back), 0);
                assert_true(back == v);
        }
}

static void test_strstrip(void **state) {
        char a[] = "  \t hello world \n ", b[] = "", c[] = "   ", d[] = "x";

        assert_string_equal(strstrip(a), "hello world");
        assert_string_equal(strstrip(b), "");
        assert_string_equal(strstrip(c), "");
        assert_string_equal(strstrip(d), "x");
}

static void cpuset_check(const char *in, const char *canonical) {
        _cleanup_free_ char *out = NULL;
        CpuSet c, again;

        if (cpuset_parse(in, &c) != 0)
                fail_msg("cpuset_parse(\"%s\") failed", in);
        out = cpuset_format(&c);
        assert_non_null(out);
        if (!streq(out, canonical))
                fail_msg("cpuset_format(cpuset_parse(\"%s\")) = \"%s\", expected \"%s\"", in, out, canonical);
        /* The canonical form is a fixed point. */
        assert_int_equal(cpuset_parse(out, &again), 0);
        assert_true(cpuset_equal(&c, &again));
}

static void test_cpuset_parse_format(void **state) {
        CpuSet c;

        cpuset_check("0-3,8,10-11", "0-3,8,10-11");
        cpuset_check("11,10,8,3,2,1,0", "0-3,8,10-11");
        cpuset_check("0-3,2-5", "0-5");
        cpuset_check("0, 1", "0-1"); /* mq/N/cpu_list as the kernel prints it */
        cpuset_check("0, 2, 4", "0,2,4");
        cpuset_check("1,,2,", "1-2");
        cpuset_check("7", "7");
        cpuset_check("5-5", "5");
        cpuset_check("63-64", "63-64"); /* across a word */
        cpuset_check("0-1023", "0-1023");
        cpuset_check("1023", "1023");
        cpuset_check("", "");

        assert_int_equal(cpuset_parse("0-3,8", &c), 0);
        assert_true(cpuset_isset(&c, 0) && cpuset_isset(&c, 3) && cpuset_isset(&c, 8));
        assert_false(cpuset_isset(&c, 4) || cpuset_isset(&c, 7) || cpuset_isset(&c, 9));
        assert_false(cpuset_isset(&c, CPU_MAX));
}

static void test_cpuset_bad(void **state) {
        static const struct {
                const char *s;
                int r;
        } cases[] = {
                { "a", -EINVAL },   { "1-a", -EINVAL }, { "0-", -EINVAL },  { "-1", -EINVAL },
                { "1;2", -EINVAL }, { "1.5", -EINVAL }, { "0-3-5", -EINVAL }, { "0x3", -EINVAL },
                { "3-1", -ERANGE }, { "1024", -ERANGE }, { "0-1024", -ERANGE },
                { "99999999999999999999999", -ERANGE },
        };
        CpuSet c;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int r;

                memset(&c, 0xff, sizeof c);
                r = cpuset_parse(cases[i].s, &c);
                if (r != cases[i].r)
                        fail_msg("cpuset_parse(\"%s\") = %d, expected %d", cases[i].s, r, cases[i].r);
                /* Untouched on failure. */
                assert_true(cpuset_isset(&c, 1000));
        }
        assert_int_equal(cpuset_parse(NULL, &c), -EINVAL);
}

static void test_cpuset_ops(void **state) {
        CpuSet a, b, e = {};

        assert_true(cpuset_is_empty(&e));
        assert_int_equal(cpuset_parse("0-3", &a), 0);
        assert_int_equal(cpuset_parse("0, 1, 2, 3", &b), 0);
        assert_true(cpuset_equal(&a, &b));
        assert_false(cpuset_is_empty(&a));
        assert_true(cpuset_subset(&e, &a));
        assert_true(cpuset_subset(&a, &b));
        assert_int_equal(cpuset_parse("2-3", &b), 0);
        assert_true(cpuset_subset(&b, &a));
        assert_false(cpuset_subset(&a, &b));
        assert_false(cpuset_equal(&a, &b));
        cpuset_set(&b, 900);
        assert_false(cpuset_subset(&b, &a));
        cpuset_set(&b, CPU_MAX); /* ignored, not a write past the end */
        assert_false(cpuset_isset(&b, CPU_MAX));
}

static void test_strv(void **state) {
        _cleanup_strv_free_ char **l = NULL, **c = NULL, **s = NULL, **empty = NULL;
        _cleanup_free_ char *j = NULL, *j0 = NULL;

        assert_int_equal(strv_length(NULL), 0);
        assert_false(strv_contains(NULL, "a"));

        assert_int_equal(strv_extend(&l, "a"), 0);
        assert_int_equal(strv_extend(&l, "bc"), 0);
        assert_int_equal(strv_push(&l, strdup("d")), 0);
        assert_int_equal(strv_length(l), 3);
        assert_null(l[3]);
        assert_true(strv_contains(l, "bc"));
        assert_false(strv_contains(l, "b"));

        j = strv_join(l, ", ");
        assert_string_equal(j, "a, bc, d");

        c = strv_copy(l);
        assert_non_null(c);
        assert_int_equal(strv_length(c), 3);
        assert_ptr_not_equal(c[0], l[0]);
        assert_string_equal(c[2], "d");

        assert_int_equal(strv_split_ws("  kyber\t mq-deadline \n none  ", &s), 0);
        assert_int_equal(strv_length(s), 3);
        assert_string_equal(s[0], "kyber");
        assert_string_equal(s[1], "mq-deadline");
        assert_string_equal(s[2], "none");

        /* An empty split is an empty vector, not NULL. */
        assert_int_equal(strv_split_ws(" \t ", &empty), 0);
        assert_non_null(empty);
        assert_int_equal(strv_length(empty), 0);
        j0 = strv_join(empty, " ");
        assert_string_equal(j0, "");

        STRV_FOREACH(x, empty)
                fail_msg("STRV_FOREACH on an empty vector ran");
        {
                unsigned n = 0;
                STRV_FOREACH(x, l)
                        n++;
                assert_int_equal(n, 3);
        }

        assert_true(strv_fnmatch(s, "none"));
        {
                _cleanup_strv_free_ char **globs = NULL;
                assert_int_equal(strv_split_ws("nvme*n1 sd[a-c]", &globs), 0);
                assert_true(strv_fnmatch(globs, "nvme0n1"));
                assert_true(strv_fnmatch(globs, "sdb"));
                assert_false(strv_fnmatch(globs, "sdd"));
                assert_false(strv_fnmatch(globs, "nvme0n2"));
                assert_false(strv_fnmatch(NULL, "x"));
        }
}

static void test_path_join(void **state) {
        static const struct {
                const char *a, *b, *c, *expect;
        } cases[] = {
                { "/sys", "block", "nvme0n1", "/sys/block/nvme0n1" },
                { "/sys/", "block", "nvme0n1", "/sys/block/nvme0n1" },
                { "/sys/", "/block", "queue/scheduler", "/sys/block/queue/scheduler" },
                { "/sys", "/block", "", "/sys/block" },
                { "/sys", "", "block", "/sys/block" },
                { "", "block", "x", "block/x" },
                { "a/", "b/", "c", "a/b/c" },
                { "/", "sys", "", "/sys" },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *p = path_join(cases[i].a, cases[i].b, cases[i].c);
                assert_non_null(p);
                if (!streq(p, cases[i].expect))
                        fail_msg("path_join(\"%s\", \"%s\", \"%s\") = \"%s\", expected \"%s\"", cases[i].a, cases[i].b,
                                 cases[i].c, p, cases[i].expect);
        }
        {
                _cleanup_free_ char *p = path_join("/only");
                assert_string_equal(p, "/only");
        }
}

static void test_kernel_version(void **state) {
        static const struct {
                const char *s;
                int r;
                unsigned a, b;
        } cases[] = {
                { "6.1.0-50-cloud-amd64", 0, 6, 1 },
                { "6.18.44-fc", 0, 6, 18 },
                { "6.18.44-fc-v769", 0, 6, 18 },
                { "6.10", 0, 6, 10 },
                { "5.15.0-1051-azure", 0, 5, 15 },
                { "6.12.0-rc1+", 0, 6, 12 },
                { "6", -EINVAL, 0, 0 },
                { "", -EINVAL, 0, 0 },
                { "linux-6.1", -EINVAL, 0, 0 },
                { "6.x", -EINVAL, 0, 0 },
                { "256.1", -EINVAL, 0, 0 },
                { "6.256", -EINVAL, 0, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                unsigned v = 77;
                int r = kernel_version_parse(cases[i].s, &v);

                if (r != cases[i].r)
                        fail_msg("kernel_version_parse(\"%s\") = %d, expected %d", cases[i].s, r, cases[i].r);
                assert_int_equal(v, r == 0 ? KERNEL_VERSION_CODE(cases[i].a, cases[i].b) : 77);
        }
        {
                unsigned v = 77;
                assert_int_equal(kernel_version_parse(NULL, &v), -EINVAL);
        }
        /* The zoned guard compares codes: 6.9 < 6.10 < 6.18, 5.19 < 6.1. */
        assert_true(KERNEL_VERSION_CODE(6, 9) < KERNEL_VERSION_CODE(6, 10));
        assert_true(KERNEL_VERSION_CODE(6, 10) < KERNEL_VERSION_CODE(6, 18));
        assert_true(KERNEL_VERSION_CODE(5, 19) < KERNEL_VERSION_CODE(6, 1));
        assert_int_equal(KERNEL_VERSION_CODE(6, 1), 0x060100);
}

static void test_now_usec(void **state) {
        uint64_t a = now_usec(CLOCK_MONOTONIC), b = now_usec(CLOCK_MONOTONIC);

        assert_true(a > 0);
        assert_true(b >= a);
        /* CLOCK_REALTIME is after 2020. */
        assert_true(now_usec(CLOCK_REALTIME) > UINT64_C(1577836800) * 1000000);
}

/* sysfs.c's accessors on plain files: what tune relies on. */
static void test_base64_decode(void **state) {
        static const struct {
                const char *in, *out;
        } good[] = {
                { "", "" },       { "Zg==", "f" },     { "Zm8=", "fo" },         { "Zm9v", "foo" },
                { "Zm9vYg==", "foob" }, { "Zm9vYmE=", "fooba" }, { "Zm9vYmFy", "foobar" }, { "+/+/", "\xfb\xff\xbf" },
        };
        static const char *const bad[] = { "Z", "Zg=", "Zg", "Z===", "=Zg=", "Zg==Zg==", "Zm9v!A==", "Zg=a", "Zm 9v" };

        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
                _cleanup_free_ uint8_t *out = NULL;
                size_t n = 99;

                assert_int_equal(base64_decode(good[i].in, &out, &n), 0);
                assert_int_equal(n, strlen(good[i].out));
                assert_memory_equal(out, good[i].out, n);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
                uint8_t *out = NULL;
                size_t n = 99;

                assert_int_equal(base64_decode(bad[i], &out, &n), -EINVAL);
                assert_null(out);
                assert_int_equal(n, 99);
        }
}

static void test_mkdir_p(void **state) {
        _cleanup_free_ char *dir = NULL, *deep = NULL, *file = NULL, *under = NULL;
        struct stat st;

        assert_int_equal(t_mkdtemp("test-util", &dir), 0);
        deep = path_join(dir, "var/lib/blkmqd");
        /* every missing parent, then nothing to do the second time */
        assert_int_equal(mkdir_p(deep, 0755), 0);
        assert_int_equal(stat(deep, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(mkdir_p(deep, 0755), 0);
        /* a file in the way is an error, not a directory */
        file = path_join(dir, "file");
        assert_int_equal(t_write_file(file, "x"), 0);
        under = path_join(file, "sub");
        assert_int_equal(mkdir_p(under, 0755), -ENOTDIR);
        assert_int_equal(mkdir_p(file, 0755), -ENOTDIR);
        assert_int_equal(t_rm_rf(dir), 0);
}

static void test_sysfs_accessors(void **state) {
        _cleanup_free_ char *dir = NULL, *p = NULL, *ro = NULL, *missing = NULL, *v = NULL, *v2 = NULL;
        long long n = 0;

        assert_int_equal(t_mkdtemp("test-util", &dir), 0);
        p = path_join(dir, "scheduler");
        ro = path_join(dir, "zoned");
        missing = path_join(dir, "nope");

        /* Trailing newline and blanks are stripped, inner and leading kept. */
        assert_int_equal(t_write_file(p, "[none] mq-deadline kyber \n"), 0);
        assert_int_equal(sysfs_read(p, &v), 0);
        assert_string_equal(v, "[none] mq-deadline kyber");
        assert_int_equal(t_write_file(ro, "       0        0\n"), 0);
        assert_int_equal(sysfs_read(ro, &v2), 0);
        assert_string_equal(v2, "       0        0");

        assert_int_equal(sysfs_read(missing, &v), -ENOENT);
        assert_int_equal(sysfs_write(missing, "1"), -ENOENT);
        assert_false(sysfs_exists(missing));
        assert_true(sysfs_exists(p));

        /* One write(2), no newline added. */
        assert_int_equal(t_write_file(p, ""), 0);
        assert_int_equal(sysfs_write(p, "kyber"), 0);
        {
                _cleanup_free_ char *raw = NULL;
                assert_int_equal(sysfs_read(p, &raw), 0);
                assert_string_equal(raw, "kyber");
        }

        assert_int_equal(t_write_file(ro, "-42\n"), 0);
        assert_int_equal(sysfs_read_int(ro, &n), 0);
        assert_true(n == -42);
        assert_int_equal(t_write_file(ro, "host-managed\n"), 0);
        assert_int_equal(sysfs_read_int(ro, &n), -EINVAL);
        assert_int_equal(sysfs_read_int(missing, &n), -ENOENT);

        /* Mode bits decide, not whether root could open it. */
        assert_int_equal(chmod(ro, 0444), 0);
        assert_int_equal(sysfs_writable(ro), 0);
        assert_int_equal(chmod(ro, 0200), 0);
        assert_int_equal(sysfs_writable(ro), 1);
        assert_int_equal(chmod(ro, 0644), 0);
        assert_int_equal(sysfs_writable(ro), 1);
        assert_int_equal(sysfs_writable(missing), -ENOENT);

        assert_int_equal(t_rm_rf(dir), 0);
        assert_false(sysfs_exists(dir));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_safe_atolli),
                cmocka_unit_test(test_safe_atoi),
                cmocka_unit_test(test_safe_atou64),
                cmocka_unit_test(test_parse_boolean),
                cmocka_unit_test(test_parse_size),
                cmocka_unit_test(test_parse_size_rejects_hex_and_exponent),
                cmocka_unit_test(test_format_size),
                cmocka_unit_test(test_strstrip),
                cmocka_unit_test(test_cpuset_parse_format),
                cmocka_unit_test(test_cpuset_bad),
                cmocka_unit_test(test_cpuset_ops),
                cmocka_unit_test(test_strv),
                cmocka_unit_test(test_path_join),
                cmocka_unit_test(test_kernel_version),
                cmocka_unit_test(test_now_usec),
                cmocka_unit_test(test_base64_decode),
                cmocka_unit_test(test_mkdir_p),
                cmocka_unit_test(test_sysfs_accessors),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
