/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The varlink IDL parser: any input must parse or fail cleanly; what parses
 * must validate a few JSON values against each struct without trouble. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "varlink-idl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const values[] = {
        "{}",
        "{\"a\": 1, \"b\": \"x\", \"c\": [1, null, {}], \"d\": {\"e\": true}}",
        "{\"x\": 1.5, \"y\": null, \"z\": [[]], \"tree\": {\"value\": 1, \"children\": [{\"value\": 2}]}}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        VarlinkIdlInterface *i = NULL;
        char *text, *error = NULL;
        json_t *v[sizeof values / sizeof values[0]];

        text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = 0;

        if (varlink_idl_parse(text, &i, &error) < 0) {
                free(error);
                free(text);
                return 0;
        }
        if (error)
                abort(); /* success leaves no error message */

        for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
                v[k] = json_loads(values[k], 0, NULL);
        for (size_t m = 0; m < i->n_members; m++) {
                const VarlinkIdlMember *member = &i->members[m];

                if (varlink_idl_find_member(i, member->kind, member->name) != member)
                        abort(); /* names are unique */
                for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
                        char *path = NULL;

                        if (member->type->kind == VARLINK_IDL_STRUCT)
                                (void) varlink_idl_validate(member->type, v[k], &path);
                        free(path);
                        path = NULL;
                        if (member->output)
                                (void) varlink_idl_validate(member->output, v[k], &path);
                        free(path);
                }
        }
        for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
                json_decref(v[k]);
        varlink_idl_free(i);
        free(text);
        return 0;
}
