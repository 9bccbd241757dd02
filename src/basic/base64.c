/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"

static int b64_value(int c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int base64_decode(const char *in, uint8_t **ret, size_t *ret_len) {
        size_t n = strlen(in), o = 0;
        uint8_t *out;

        if (n % 4)
                return -EINVAL;
        out = malloc(n / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < n; i += 4) {
                int v[4];
                for (int k = 0; k < 4; k++) {
                        v[k] = in[i + k] == '=' ? -2 : b64_value((unsigned char) in[i + k]);
                        if (v[k] == -1 || (v[k] == -2 && (i + 4 != n || k < 2))) {
                                free(out);
                                return -EINVAL;
                        }
                }
                if (v[2] == -2 && v[3] != -2) {
                        free(out);
                        return -EINVAL;
                }
                out[o++] = (uint8_t) (v[0] << 2 | v[1] >> 4);
                if (v[2] >= 0)
                        out[o++] = (uint8_t) ((v[1] & 15) << 4 | v[2] >> 2);
                if (v[3] >= 0)
                        out[o++] = (uint8_t) ((v[2] & 3) << 6 | v[3]);
        }
        *ret = out;
        *ret_len = o;
        return 0;
}
