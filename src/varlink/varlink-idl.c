/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "varlink-idl.h"

/* Nesting of anonymous types; keeps the recursive descent off the end of the
 * stack whatever the input (the fuzzer feeds us "((((((...."). */
#define IDL_DEPTH_MAX 64

typedef struct Parser {
        const char *p;
        unsigned line, column;
        unsigned depth;
        char *error;
} Parser;

static void type_free(VarlinkIdlType *t);

static void field_array_free(VarlinkIdlField *f, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(f[i].name);
                type_free(f[i].type);
        }
        free(f);
}

static void type_free(VarlinkIdlType *t) {
        if (!t)
                return;
        type_free(t->element);
        free(t->name);
        field_array_free(t->fields, t->n_fields);
        for (size_t i = 0; i < t->n_values; i++)
                free(t->values[i]);
        free(t->values);
        free(t);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(VarlinkIdlType *, type_free)

VarlinkIdlInterface *varlink_idl_free(VarlinkIdlInterface *i) {
        if (!i)
                return NULL;
        for (size_t k = 0; k < i->n_members; k++) {
                free(i->members[k].name);
                type_free(i->members[k].type);
                type_free(i->members[k].output);
        }
        free(i->members);
        free(i->name);
        free(i);
        return NULL;
}

const VarlinkIdlMember *varlink_idl_find_member(const VarlinkIdlInterface *i, VarlinkIdlMemberKind kind,
                                                const char *name) {
        if (!i || !name)
                return NULL;
        for (size_t k = 0; k < i->n_members; k++)
                if (i->members[k].kind == kind && streq(i->members[k].name, name))
                        return &i->members[k];
        return NULL;
}

_printf_(2, 3) static int parser_error(Parser *P, const char *fmt, ...) {
        _cleanup_free_ char *m = NULL;
        va_list ap;
        int r;

        if (P->error)
                return -EINVAL;
        va_start(ap, fmt);
        r = vasprintf(&m, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        if (asprintf(&P->error, "%u:%u: %s", P->line, P->column, m) < 0) {
                P->error = NULL;
                return -ENOMEM;
        }
        return -EINVAL;
}

static void advance(Parser *P) {
        if (*P->p == '\n') {
                P->line++;
                P->column = 1;
        } else
                P->column++;
        P->p++;
}

static void skip_ws(Parser *P) {
        for (;;) {
                if (*P->p == '#') {
                        while (*P->p && *P->p != '\n')
                                advance(P);
                } else if (*P->p && strchr(" \t\r\n", *P->p))
                        advance(P);
                else
                        return;
        }
}

static bool is_word_char(char c) {
        return isalnum((unsigned char) c) || c == '_' || c == '-' || c == '.';
}

/* Reads the next word ([A-Za-z0-9_.-]+) after whitespace. Its validity
 * depends on the context, so callers check the shape. */
static int read_word(Parser *P, const char *what, char **ret) {
        const char *start;
        char *w;

        skip_ws(P);
        start = P->p;
        while (is_word_char(*P->p))
                advance(P);
        if (P->p == start)
                return parser_error(P, "expected %s", what);
        w = strndup(start, P->p - start);
        if (!w)
                return -ENOMEM;
        *ret = w;
        return 0;
}

static int expect(Parser *P, char c) {
        skip_ws(P);
        if (*P->p != c) {
                if (*P->p)
                        return parser_error(P, "expected '%c', got '%c'", c, *P->p);
                return parser_error(P, "expected '%c', got end of input", c);
        }
        advance(P);
        return 0;
}

/* [A-Za-z](_?[A-Za-z0-9])* */
static bool field_name_valid(const char *s) {
        if (!isalpha((unsigned char) *s))
                return false;
        for (s++; *s; s++) {
                if (*s == '_')
                        s++;
                if (!isalnum((unsigned char) *s))
                        return false;
        }
        return true;
}

/* [A-Z][A-Za-z0-9]* */
static bool member_name_valid(const char *s) {
        if (!isupper((unsigned char) *s))
                return false;
        for (s++; *s; s++)
                if (!isalnum((unsigned char) *s))
                        return false;
        return true;
}

/* [A-Za-z]([-]*[A-Za-z0-9])*(\.[A-Za-z0-9]([-]*[A-Za-z0-9])*)+ */
static bool interface_name_valid(const char *s) {
        unsigned dots = 0;
        bool first = true;

        if (!isalpha((unsigned char) *s))
                return false;
        while (*s) {
                /* one label */
                if (!isalnum((unsigned char) *s))
                        return false;
                if (first && !isalpha((unsigned char) *s))
                        return false;
                first = false;
                s++;
                while (*s && *s != '.') {
                        while (*s == '-')
                                s++;
                        if (!isalnum((unsigned char) *s))
                                return false;
                        s++;
                }
                if (*s == '.') {
                        dots++;
                        s++;
                        if (!*s)
                                return false;
                }
        }
        return dots > 0;
}

static int parse_type(Parser *P, VarlinkIdlType **ret);

/* After the opening '(' was seen (not consumed). A "()" is an empty struct. */
static int parse_struct_or_enum(Parser *P, bool allow_enum, VarlinkIdlType **ret) {
        _cleanup_(type_freep) VarlinkIdlType *t = NULL;
        int r;

        r = expect(P, '(');
        if (r < 0)
                return r;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->kind = VARLINK_IDL_STRUCT;

        skip_ws(P);
        if (*P->p == ')') {
                advance(P);
                *ret = TAKE_PTR(t);
                return 0;
        }

        for (bool first = true;; first = false) {
                _cleanup_free_ char *name = NULL;
                unsigned line, column;

                skip_ws(P);
                line = P->line;
                column = P->column;
                r = read_word(P, t->kind == VARLINK_IDL_ENUM ? "enum value" : "field name", &name);
                if (r < 0)
                        return r;
                if (!field_name_valid(name)) {
                        P->line = line;
                        P->column = column;
                        return parser_error(P, "invalid %s '%s'",
                                            t->kind == VARLINK_IDL_ENUM ? "enum value" : "field name", name);
                }

                skip_ws(P);
                if (first && *P->p != ':') {
                        if (!allow_enum)
                                return parser_error(P, "expected ':' (an enum is not allowed here)");
                        t->kind = VARLINK_IDL_ENUM;
                }

                if (t->kind == VARLINK_IDL_STRUCT) {
                        VarlinkIdlField *f;

                        for (size_t i = 0; i < t->n_fields; i++)
                                if (streq(t->fields[i].name, name))
                                        return parser_error(P, "duplicate field '%s'", name);
                        r = expect(P, ':');
                        if (r < 0)
                                return r;
                        f = realloc(t->fields, (t->n_fields + 1) * sizeof *f);
                        if (!f)
                                return -ENOMEM;
                        t->fields = f;
                        f[t->n_fields++] = (VarlinkIdlField) { .name = TAKE_PTR(name) };
                        r = parse_type(P, &f[t->n_fields - 1].type);
                        if (r < 0)
                                return r;
                } else {
                        char **v;

                        for (size_t i = 0; i < t->n_values; i++)
                                if (streq(t->values[i], name))
                                        return parser_error(P, "duplicate enum value '%s'", name);
                        v = realloc(t->values, (t->n_values + 1) * sizeof *v);
                        if (!v)
                                return -ENOMEM;
                        t->values = v;
                        v[t->n_values++] = TAKE_PTR(name);
                }

                skip_ws(P);
                if (*P->p == ')') {
                        advance(P);
                        break;
                }
                r = expect(P, ',');
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(t);
        return 0;
}

static int parse_type(Parser *P, VarlinkIdlType **ret) {
        _cleanup_(type_freep) VarlinkIdlType *t = NULL;
        bool nullable = false;
        int r;

        if (++P->depth > IDL_DEPTH_MAX)
                return parser_error(P, "types nested too deeply");

        skip_ws(P);
        if (*P->p == '?') {
                nullable = true;
                advance(P);
                skip_ws(P);
                if (*P->p == '?')
                        return parser_error(P, "'?' may not be repeated");
        }

        if (*P->p == '[') {
                advance(P);
                t = calloc(1, sizeof *t);
                if (!t)
                        return -ENOMEM;
                skip_ws(P);
                if (*P->p == ']')
                        t->kind = VARLINK_IDL_ARRAY;
                else {
                        _cleanup_free_ char *k = NULL;

                        r = read_word(P, "']' or 'string'", &k);
                        if (r < 0)
                                return r;
                        if (!streq(k, "string"))
                                return parser_error(P, "map keys must be 'string', not '%s'", k);
                        t->kind = VARLINK_IDL_MAP;
                }
                r = expect(P, ']');
                if (r < 0)
                        return r;
                r = parse_type(P, &t->element);
                if (r < 0)
                        return r;
        } else if (*P->p == '(') {
                r = parse_struct_or_enum(P, true, &t);
                if (r < 0)
                        return r;
        } else {
                static const struct {
                        const char *name;
                        VarlinkIdlTypeKind kind;
                } builtin[] = {
                        { "bool", VARLINK_IDL_BOOL },     { "int", VARLINK_IDL_INT },
                        { "float", VARLINK_IDL_FLOAT },   { "string", VARLINK_IDL_STRING },
                        { "object", VARLINK_IDL_OBJECT },
                };
                _cleanup_free_ char *w = NULL;
                unsigned line = P->line, column = P->column;

                r = read_word(P, "type", &w);
                if (r < 0)
                        return r;
                t = calloc(1, sizeof *t);
                if (!t)
                        return -ENOMEM;
                t->kind = VARLINK_IDL_NAMED;
                for (size_t i = 0; i < ELEMENTSOF(builtin); i++)
                        if (streq(w, builtin[i].name))
                                t->kind = builtin[i].kind;
                if (t->kind == VARLINK_IDL_NAMED) {
                        if (!member_name_valid(w)) {
                                P->line = line;
                                P->column = column;
                                return parser_error(P, "invalid type '%s'", w);
                        }
                        t->name = TAKE_PTR(w);
                }
        }

        t->nullable = nullable;
        P->depth--;
        *ret = TAKE_PTR(t);
        return 0;
}

static int parse_member(Parser *P, VarlinkIdlInterface *iface) {
        _cleanup_free_ char *keyword = NULL, *name = NULL;
        VarlinkIdlMember *m;
        unsigned line, column;
        int r;

        skip_ws(P);
        line = P->line;
        column = P->column;
        r = read_word(P, "'type', 'method' or 'error'", &keyword);
        if (r < 0)
                return r;
        if (!streq(keyword, "type") && !streq(keyword, "method") && !streq(keyword, "error")) {
                P->line = line;
                P->column = column;
                return parser_error(P, "expected 'type', 'method' or 'error', got '%s'", keyword);
        }

        skip_ws(P);
        line = P->line;
        column = P->column;
        r = read_word(P, "member name", &name);
        if (r < 0)
                return r;
        if (!member_name_valid(name) || varlink_idl_find_member(iface, VARLINK_IDL_MEMBER_TYPE, name) ||
            varlink_idl_find_member(iface, VARLINK_IDL_MEMBER_METHOD, name) ||
            varlink_idl_find_member(iface, VARLINK_IDL_MEMBER_ERROR, name)) {
                P->line = line;
                P->column = column;
                return parser_error(P, "invalid or duplicate member name '%s'", name);
        }

        m = realloc(iface->members, (iface->n_members + 1) * sizeof *m);
        if (!m)
                return -ENOMEM;
        iface->members = m;
        m = &m[iface->n_members++];
        *m = (VarlinkIdlMember) { .name = TAKE_PTR(name) };

        if (streq(keyword, "type")) {
                m->kind = VARLINK_IDL_MEMBER_TYPE;
                skip_ws(P);
                if (*P->p != '(')
                        return parser_error(P, "expected a struct or an enum");
                return parse_struct_or_enum(P, true, &m->type);
        }
        if (streq(keyword, "error")) {
                m->kind = VARLINK_IDL_MEMBER_ERROR;
                return parse_struct_or_enum(P, false, &m->type);
        }

        m->kind = VARLINK_IDL_MEMBER_METHOD;
        r = parse_struct_or_enum(P, false, &m->type);
        if (r < 0)
                return r;
        skip_ws(P);
        if (P->p[0] != '-' || P->p[1] != '>')
                return parser_error(P, "expected '->'");
        advance(P);
        advance(P);
        return parse_struct_or_enum(P, false, &m->output);
}

static int resolve_type(const VarlinkIdlInterface *iface, VarlinkIdlType *t, const char **ret_missing) {
        int r;

        if (!t)
                return 0;
        if (t->kind == VARLINK_IDL_NAMED) {
                const VarlinkIdlMember *m = varlink_idl_find_member(iface, VARLINK_IDL_MEMBER_TYPE, t->name);
                if (!m) {
                        *ret_missing = t->name;
                        return -EINVAL;
                }
                t->resolved = m->type;
        }
        r = resolve_type(iface, t->element, ret_missing);
        if (r < 0)
                return r;
        for (size_t i = 0; i < t->n_fields; i++) {
                r = resolve_type(iface, t->fields[i].type, ret_missing);
                if (r < 0)
                        return r;
        }
        return 0;
}

int varlink_idl_parse(const char *text, VarlinkIdlInterface **ret, char **ret_error) {
        _cleanup_(varlink_idl_freep) VarlinkIdlInterface *iface = NULL;
        _cleanup_free_ char *keyword = NULL;
        Parser P = { .p = text, .line = 1, .column = 1 };
        int r;

        if (!text || !ret)
                return -EINVAL;

        iface = calloc(1, sizeof *iface);
        if (!iface)
                return -ENOMEM;

        r = read_word(&P, "'interface'", &keyword);
        if (r >= 0 && !streq(keyword, "interface"))
                r = parser_error(&P, "expected 'interface', got '%s'", keyword);
        if (r >= 0)
                r = read_word(&P, "interface name", &iface->name);
        if (r >= 0 && !interface_name_valid(iface->name))
                r = parser_error(&P, "invalid interface name '%s'", iface->name);

        while (r >= 0) {
                skip_ws(&P);
                if (!*P.p) {
                        if (iface->n_members == 0)
                                r = parser_error(&P, "interface has no members");
                        break;
                }
                r = parse_member(&P, iface);
        }

        for (size_t k = 0; r >= 0 && k < iface->n_members; k++) {
                const char *missing = NULL;

                if (resolve_type(iface, iface->members[k].type, &missing) < 0 ||
                    resolve_type(iface, iface->members[k].output, &missing) < 0)
                        r = parser_error(&P, "member '%s' refers to undefined type '%s'",
                                         iface->members[k].name, missing);
        }

        if (r < 0) {
                if (ret_error)
                        *ret_error = TAKE_PTR(P.error);
                free(P.error);
                return r;
        }
        *ret = TAKE_PTR(iface);
        return 0;
}

/* Validation. Each function returns -EINVAL and a path relative to the value
 * it was handed (NULL meaning the value itself). */

static int path_prepend(const char *name, size_t index, bool is_index, char **path) {
        char *n;
        int r;

        if (is_index)
                r = asprintf(&n, "[%zu]%s%s", index, *path && (*path)[0] != '[' ? "." : "", strempty(*path));
        else
                r = asprintf(&n, "%s%s%s", name, *path && (*path)[0] != '[' ? "." : "", strempty(*path));
        if (r < 0)
                return -ENOMEM;
        free(*path);
        *path = n;
        return -EINVAL;
}

static int validate_value(const VarlinkIdlType *t, json_t *v, char **path);

static int validate_struct(const VarlinkIdlType *t, json_t *v, char **path) {
        const char *key;
        json_t *value;
        int r;

        if (!json_is_object(v))
                return -EINVAL;

        json_object_foreach(v, key, value) {
                bool known = false;

                for (size_t i = 0; i < t->n_fields && !known; i++)
                        known = streq(t->fields[i].name, key);
                if (!known)
                        return path_prepend(key, 0, false, path);
        }

        for (size_t i = 0; i < t->n_fields; i++) {
                const VarlinkIdlField *f = &t->fields[i];

                value = json_object_get(v, f->name);
                if (!value || json_is_null(value)) {
                        if (!f->type->nullable)
                                return path_prepend(f->name, 0, false, path);
                        continue;
                }
                r = validate_value(f->type, value, path);
                if (r == -EINVAL)
                        return path_prepend(f->name, 0, false, path);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* v is not JSON null here; nullability is the caller's business. */
static int validate_value(const VarlinkIdlType *t, json_t *v, char **path) {
        int r;

        switch (t->kind) {
        case VARLINK_IDL_BOOL:
                return json_is_boolean(v) ? 0 : -EINVAL;
        case VARLINK_IDL_INT:
                return json_is_integer(v) ? 0 : -EINVAL;
        case VARLINK_IDL_FLOAT:
                return json_is_number(v) ? 0 : -EINVAL;
        case VARLINK_IDL_STRING:
                return json_is_string(v) ? 0 : -EINVAL;
        case VARLINK_IDL_OBJECT:
                return json_is_object(v) ? 0 : -EINVAL;
        case VARLINK_IDL_ENUM:
                if (!json_is_string(v))
                        return -EINVAL;
                for (size_t i = 0; i < t->n_values; i++)
                        if (streq(t->values[i], json_string_value(v)))
                                return 0;
                return -EINVAL;
        case VARLINK_IDL_STRUCT:
                return validate_struct(t, v, path);
        case VARLINK_IDL_NAMED:
                if (!t->resolved)
                        return -EINVAL;
                return validate_value(t->resolved, v, path);
        case VARLINK_IDL_ARRAY: {
                size_t i;
                json_t *e;

                if (!json_is_array(v))
                        return -EINVAL;
                json_array_foreach(v, i, e) {
                        if (json_is_null(e))
                                r = t->element->nullable ? 0 : -EINVAL;
                        else
                                r = validate_value(t->element, e, path);
                        if (r == -EINVAL)
                                return path_prepend(NULL, i, true, path);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        case VARLINK_IDL_MAP: {
                const char *key;
                json_t *e;

                if (!json_is_object(v))
                        return -EINVAL;
                json_object_foreach(v, key, e) {
                        if (json_is_null(e))
                                r = t->element->nullable ? 0 : -EINVAL;
                        else
                                r = validate_value(t->element, e, path);
                        if (r == -EINVAL)
                                return path_prepend(key, 0, false, path);
                        if (r < 0)
                                return r;
                }
                return 0;
        }
        }
        return -EINVAL;
}

int varlink_idl_validate(const VarlinkIdlType *struct_type, json_t *value, char **ret_path) {
        _cleanup_(json_decrefp) json_t *empty = NULL;
        _cleanup_free_ char *path = NULL;
        int r;

        if (!struct_type || struct_type->kind != VARLINK_IDL_STRUCT)
                return -EINVAL;
        if (!value) {
                empty = json_object();
                if (!empty)
                        return -ENOMEM;
                value = empty;
        }
        r = validate_struct(struct_type, value, &path);
        if (r == -EINVAL && ret_path)
                *ret_path = TAKE_PTR(path);
        return r;
}
