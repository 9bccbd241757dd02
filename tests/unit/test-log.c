/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* log_struct() on the console: the MESSAGE_ID and the fields follow the
 * message in brackets (nothing is lost when stderr is not the journal), a
 * NULL value leaves its field out, a value with a space, a quote, a
 * backslash or a newline is quoted and escaped. The journal side is
 * tests/integration/test_journal.py (the native protocol on a socket). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"
#include "message-id.h"

static void test_format(void **state) {
        char buf[512];
        int n;

        n = log_format_fields(buf, sizeof buf, BLKMQD_MESSAGE_CHANGE_APPLIED,
                              LOG_FIELDS({ "BLKMQD_DEVICE", "loop3" }, { "BLKMQD_KNOB", "queue/scheduler" },
                                         { "BLKMQD_OLD", NULL }, { "BLKMQD_NEW", "kyber" }));
        assert_string_equal(buf, " [MESSAGE_ID=4c924cfe14914bf589305f00f0167f4d BLKMQD_DEVICE=loop3 "
                                 "BLKMQD_KNOB=queue/scheduler BLKMQD_NEW=kyber]");
        assert_int_equal(n, (int) strlen(buf));

        log_format_fields(buf, sizeof buf, NULL,
                          LOG_FIELDS({ "BLKMQD_LABEL", "fw 1.2 \"beta\"" }, { "BLKMQD_OLD", "a\\b\nc" },
                                     { "BLKMQD_NEW", "" }, { "BLKMQD_ZONE", "x]y" }));
        assert_string_equal(buf, " [BLKMQD_LABEL=\"fw 1.2 \\\"beta\\\"\" BLKMQD_OLD=\"a\\\\b\\nc\" BLKMQD_NEW=\"\" "
                                 "BLKMQD_ZONE=\"x]y\"]");

        /* Nothing to say: nothing appended. */
        log_format_fields(buf, sizeof buf, NULL, LOG_FIELDS({ "BLKMQD_DEVICE", NULL }));
        assert_string_equal(buf, "");

        /* Cut to the buffer, NUL-terminated; the length it would have. */
        n = log_format_fields(buf, 16, BLKMQD_MESSAGE_RESTORE, NULL);
        assert_int_equal(strlen(buf), 15);
        assert_int_equal(n, (int) strlen(" [MESSAGE_ID=7bbaaee7e01f412da4e43d21077d090d]"));
}

/* What log_struct() writes to a stderr that is a pipe (not the journal). */
static void test_console(void **state) {
        char out[1024] = "";
        int p[2], saved;
        ssize_t n;

        assert_int_equal(pipe(p), 0);
        saved = dup(STDERR_FILENO);
        assert_true(dup2(p[1], STDERR_FILENO) >= 0);
        log_set_target(LOG_TARGET_CONSOLE);
        log_struct(LOG_NOTICE, BLKMQD_MESSAGE_ORIGINALS_ADOPTED,
                   LOG_FIELDS({ "BLKMQD_DEVICE", "sda" }, { "BLKMQD_PID", "42" }),
                   "%s: adopting %d original values.", "sda", 2);
        log_struct_errno(LOG_ERR, -EIO, BLKMQD_MESSAGE_ZONE_FAILED, LOG_FIELDS({ "BLKMQD_ZONE", "7" }),
                         "zone %u: reset failed: %m", 7u);
        log_info("plain %s", "line");
        dup2(saved, STDERR_FILENO);
        close(saved);
        close(p[1]);
        n = read(p[0], out, sizeof out - 1);
        close(p[0]);
        assert_true(n > 0);
        out[n] = 0;
        assert_string_equal(out, "<5>sda: adopting 2 original values. [MESSAGE_ID=0854cebe77424a898c8480628de28cc3 "
                                 "BLKMQD_DEVICE=sda BLKMQD_PID=42]\n"
                                 "<3>zone 7: reset failed: Input/output error [MESSAGE_ID=a34415b27daa4b9e991e091d568ae920 "
                                 "BLKMQD_ZONE=7]\n"
                                 "<6>plain line\n");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_format),
                cmocka_unit_test(test_console),
        };

        return cmocka_run_group_tests(tests, NULL, NULL);
}
