/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The varlink interface definition language (varlink.org, "Interface
 * definition"): a parser into a small type tree, and a validator that checks
 * a JSON object against a struct of that tree. Pure functions, no I/O and no
 * logging, so the fuzzer and the unit tests can call them alone.
 *
 * Grammar accepted (comments start with '#' and run to the end of the line):
 *
 *   interface  = "interface" interface-name member+
 *   member     = "type" Name (struct | enum)
 *              | "method" Name struct "->" struct
 *              | "error" Name struct
 *   type       = ["?"] ( "bool" | "int" | "float" | "string" | "object"
 *                      | Name | struct | enum | "[]" type | "[string]" type )
 *   struct     = "(" [ field-name ":" type { "," field-name ":" type } ] ")"
 *   enum       = "(" field-name { "," field-name } ")"
 *
 * A "?" may not follow another "?"; every Name must be defined by a "type"
 * member of the same interface; member names, field names and enum values
 * are unique within their scope. */

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

typedef enum VarlinkIdlTypeKind {
        VARLINK_IDL_BOOL,
        VARLINK_IDL_INT,
        VARLINK_IDL_FLOAT,
        VARLINK_IDL_STRING,
        VARLINK_IDL_OBJECT, /* any JSON object */
        VARLINK_IDL_ENUM,
        VARLINK_IDL_STRUCT,
        VARLINK_IDL_NAMED,  /* reference to a "type" member */
        VARLINK_IDL_ARRAY,  /* []element */
        VARLINK_IDL_MAP,    /* [string]element */
} VarlinkIdlTypeKind;

typedef struct VarlinkIdlType VarlinkIdlType;

typedef struct VarlinkIdlField {
        char *name;
        VarlinkIdlType *type;
} VarlinkIdlField;

struct VarlinkIdlType {
        VarlinkIdlTypeKind kind;
        bool nullable;
        VarlinkIdlType *element;         /* ARRAY, MAP */
        char *name;                      /* NAMED */
        const VarlinkIdlType *resolved;  /* NAMED: the definition's struct or enum */
        VarlinkIdlField *fields;         /* STRUCT */
        size_t n_fields;
        char **values;                   /* ENUM */
        size_t n_values;
};

typedef enum VarlinkIdlMemberKind {
        VARLINK_IDL_MEMBER_TYPE,
        VARLINK_IDL_MEMBER_METHOD,
        VARLINK_IDL_MEMBER_ERROR,
} VarlinkIdlMemberKind;

typedef struct VarlinkIdlMember {
        VarlinkIdlMemberKind kind;
        char *name;
        VarlinkIdlType *type;    /* TYPE: struct or enum; METHOD: input struct; ERROR: struct */
        VarlinkIdlType *output;  /* METHOD only */
} VarlinkIdlMember;

typedef struct VarlinkIdlInterface {
        char *name;
        VarlinkIdlMember *members;
        size_t n_members;
} VarlinkIdlInterface;

/* Returns 0, -EINVAL on a syntax or semantic error (then *ret_error, if
 * given, says "LINE:COLUMN: what", owned by the caller, NULL on OOM), or
 * -ENOMEM. */
int varlink_idl_parse(const char *text, VarlinkIdlInterface **ret, char **ret_error);
VarlinkIdlInterface *varlink_idl_free(VarlinkIdlInterface *i);
static inline void varlink_idl_freep(VarlinkIdlInterface **i) {
        varlink_idl_free(*i);
}

const VarlinkIdlMember *varlink_idl_find_member(const VarlinkIdlInterface *i, VarlinkIdlMemberKind kind,
                                                const char *name);

/* Checks a JSON object against a struct type (a method's input or output,
 * an error's parameters). Unknown fields, missing non-nullable fields, null
 * for a non-nullable field, wrong JSON types, non-integral ints and unknown
 * enum values are all refused. Returns 0 if valid, -EINVAL if not (then
 * *ret_path, if given, names the offending field: "foo", "foo.bar",
 * "list[3].name", "map.key"; owned by the caller), or -ENOMEM. A NULL value
 * counts as the empty object. */
int varlink_idl_validate(const VarlinkIdlType *struct_type, json_t *value, char **ret_path);
