/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Strict base64 (RFC 4648, the standard alphabet, padding required): the
 * decoded bytes in a new buffer (*ret, freed by the caller) and their
 * count. -EINVAL for anything else, -ENOMEM. */
int base64_decode(const char *in, uint8_t **ret, size_t *ret_len);
