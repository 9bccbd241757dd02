/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The varlink IDL parser and parameter validation, alone. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "varlink-idl.h"

static const char good_idl[] =
        "# A comment before everything\n"
        "interface io.blkmqd.Test-1 # trailing comment\n"
        "\n"
        "type Point (x: int, y: int)\n"
        "type Color (red, green, blue)\n"
        "# Recursive types are fine.\n"
        "type Tree (value: int, children: ?[]Tree)\n"
        "\n"
        "method Echo(\n"
        "  b: bool,\n"
        "  i: int,\n"
        "  f: float,\n"
        "  s: string,\n"
        "  o: ?object,\n"
        "  color: ?Color,\n"
        "  point: ?Point,\n"
        "  list: ?[]int,\n"
        "  nlist: ?[]?string, # nullable elements\n"
        "  map: ?[string]string,\n"
        "  mapOfLists: ?[string][]Point,\n"
        "  nested: ?(inner: (deep: int)),\n"
        "  mode: ?(fast, slow),\n"
        "  tree: ?Tree,\n"
        "  snake_case: ?int\n"
        ") -> (echo: object)\n"
        "method Nothing() -> ()\n"
        "error Failed (reason: string, code: ?int)\n"
        "error Empty ()\n";

static VarlinkIdlInterface *parse_ok(const char *text) {
        VarlinkIdlInterface *i = NULL;
        char *error = NULL;
        int r;

        r = varlink_idl_parse(text, &i, &error);
        if (r < 0)
                print_error("unexpected parse failure: %s\n", error ? error : "(null)");
        assert_int_equal(r, 0);
        assert_null(error);
        assert_non_null(i);
        return i;
}

static void test_parse_good(void **state) {
        VarlinkIdlInterface *i = parse_ok(good_idl);
        const VarlinkIdlMember *m;
        const VarlinkIdlType *t;

        assert_string_equal(i->name, "io.blkmqd.Test-1");
        assert_int_equal(i->n_members, 7);

        m = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_TYPE, "Color");
        assert_non_null(m);
        assert_int_equal(m->type->kind, VARLINK_IDL_ENUM);
        assert_int_equal(m->type->n_values, 3);
        assert_string_equal(m->type->values[2], "blue");

        m = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_METHOD, "Echo");
        assert_non_null(m);
        assert_int_equal(m->type->kind, VARLINK_IDL_STRUCT);
        assert_int_equal(m->type->n_fields, 15);
        assert_string_equal(m->type->fields[0].name, "b");
        assert_int_equal(m->type->fields[0].type->kind, VARLINK_IDL_BOOL);
        assert_false(m->type->fields[0].type->nullable);
        assert_int_equal(m->type->fields[4].type->kind, VARLINK_IDL_OBJECT);
        assert_true(m->type->fields[4].type->nullable);

        t = m->type->fields[5].type; /* color: ?Color */
        assert_int_equal(t->kind, VARLINK_IDL_NAMED);
        assert_string_equal(t->name, "Color");
        assert_ptr_equal(t->resolved, varlink_idl_find_member(i, VARLINK_IDL_MEMBER_TYPE, "Color")->type);

        t = m->type->fields[8].type; /* nlist: ?[]?string */
        assert_int_equal(t->kind, VARLINK_IDL_ARRAY);
        assert_true(t->nullable);
        assert_int_equal(t->element->kind, VARLINK_IDL_STRING);
        assert_true(t->element->nullable);

        t = m->type->fields[10].type; /* mapOfLists: ?[string][]Point */
        assert_int_equal(t->kind, VARLINK_IDL_MAP);
        assert_int_equal(t->element->kind, VARLINK_IDL_ARRAY);
        assert_int_equal(t->element->element->kind, VARLINK_IDL_NAMED);

        t = m->type->fields[11].type; /* nested: ?(inner: (deep: int)) */
        assert_int_equal(t->kind, VARLINK_IDL_STRUCT);
        assert_int_equal(t->fields[0].type->kind, VARLINK_IDL_STRUCT);
        assert_string_equal(t->fields[0].type->fields[0].name, "deep");

        t = m->type->fields[12].type; /* mode: ?(fast, slow) */
        assert_int_equal(t->kind, VARLINK_IDL_ENUM);
        assert_int_equal(t->n_values, 2);

        assert_int_equal(m->output->n_fields, 1);

        m = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_METHOD, "Nothing");
        assert_non_null(m);
        assert_int_equal(m->type->n_fields, 0);
        assert_int_equal(m->output->n_fields, 0);

        m = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_ERROR, "Failed");
        assert_non_null(m);
        assert_int_equal(m->type->n_fields, 2);
        assert_null(varlink_idl_find_member(i, VARLINK_IDL_MEMBER_METHOD, "Failed"));

        varlink_idl_free(i);
}

static void test_parse_service(void **state) {
        VarlinkIdlInterface *i = parse_ok("interface org.varlink.service\n"
                                          "method GetInfo() -> (vendor: string, product: string, version: string,"
                                          " url: string, interfaces: []string)\n"
                                          "method GetInterfaceDescription(interface: string) -> (description: string)\n"
                                          "error InterfaceNotFound (interface: string)\n");
        assert_string_equal(i->name, "org.varlink.service");
        assert_int_equal(i->n_members, 3);
        varlink_idl_free(i);
}

static void test_parse_bad(void **state) {
        static const struct {
                const char *idl;
                const char *where; /* expected "LINE:COLUMN:" prefix */
        } bad[] = {
                { "", "1:1:" },
                { "# only a comment\n", "2:1:" },
                { "interfac foo.bar\nmethod A() -> ()", "1:" },
                { "interface foo\nmethod A() -> ()", "1:" },
                { "interface foo.\nmethod A() -> ()", "1:" },
                { "interface .foo\nmethod A() -> ()", "1:" },
                { "interface 1a.b\nmethod A() -> ()", "1:" },
                { "interface a..b\nmethod A() -> ()", "1:" },
                { "interface a.b-\nmethod A() -> ()", "1:" },
                { "interface a.b", "1:14:" },
                { "interface a.b\nfunction A() -> ()", "2:1:" },
                { "interface a.b\nmethod a() -> ()", "2:8:" },
                { "interface a.b\nmethod A() -> ()\nmethod A() -> ()", "3:8:" },
                { "interface a.b\ntype A (x: int)\nerror A ()", "3:7:" },
                { "interface a.b\nmethod A(x: int, x: int) -> ()", "2:" },
                { "interface a.b\nmethod A(x: Missing) -> ()", "2:" },
                { "interface a.b\nmethod A(x: ??int) -> ()", "2:" },
                { "interface a.b\nmethod A(x: [int]string) -> ()", "2:" },
                { "interface a.b\nmethod A(x: int) ()", "2:" },
                { "interface a.b\nmethod A(x: int)", "2:" },
                { "interface a.b\nmethod A(red, green) -> ()", "2:" },
                { "interface a.b\nmethod A() -> (red)", "2:" },
                { "interface a.b\nerror E (red)", "2:" },
                { "interface a.b\nmethod A(x: int -> ()", "2:" },
                { "interface a.b\nmethod A(x: int,) -> ()", "2:" },
                { "interface a.b\nmethod A(x: ) -> ()", "2:" },
                { "interface a.b\nmethod A(x int) -> ()", "2:" },
                { "interface a.b\nmethod A(_x: int) -> ()", "2:" },
                { "interface a.b\nmethod A(a__b: int) -> ()", "2:" },
                { "interface a.b\nmethod A(a_: int) -> ()", "2:" },
                { "interface a.b\nmethod A(x: integer) -> ()", "2:" },
                { "interface a.b\nmethod A(x: []) -> ()", "2:" },
                { "interface a.b\ntype T int", "2:" },
                { "interface a.b\ntype T (a, b, a)", "2:" },
                { "interface a.b\ntype T (a, b: int)", "2:" },
                { "interface a.b\nmethod A() -> () garbage", "2:" },
                { "interface a.b\nmethod A() -> () )", "2:" },
                { "interface a.b\nmethod A() -> ()\nmethod B(x: (y: (z: int)) -> ()", "3:" },
        };
        char deep[4096];
        size_t n;

        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                VarlinkIdlInterface *i = NULL;
                char *error = NULL;
                int r;

                r = varlink_idl_parse(bad[k].idl, &i, &error);
                if (r != -EINVAL)
                        print_error("IDL #%zu unexpectedly parsed: %s\n", k, bad[k].idl);
                assert_int_equal(r, -EINVAL);
                assert_null(i);
                assert_non_null(error);
                if (strncmp(error, bad[k].where, strlen(bad[k].where)) != 0)
                        print_error("IDL #%zu: error '%s', expected at '%s'\n", k, error, bad[k].where);
                assert_memory_equal(error, bad[k].where, strlen(bad[k].where));
                free(error);
        }

        /* Deep nesting is refused, not a stack overflow. */
        n = (size_t) snprintf(deep, sizeof deep, "interface a.b\nmethod A(x: ");
        for (int k = 0; k < 1000; k++)
                deep[n++] = '[', deep[n++] = ']';
        strcpy(deep + n, "int) -> ()");
        {
                VarlinkIdlInterface *i = NULL;
                char *error = NULL;

                assert_int_equal(varlink_idl_parse(deep, &i, &error), -EINVAL);
                assert_non_null(strstr(error, "nested too deeply"));
                free(error);
        }
        /* No error output wanted: still fails cleanly. */
        {
                VarlinkIdlInterface *i = NULL;
                assert_int_equal(varlink_idl_parse("interface x", &i, NULL), -EINVAL);
                assert_null(i);
        }
}

/* Validates json text against Echo's input: the offending path, or NULL. */
static char *check(VarlinkIdlInterface *i, const char *json) {
        const VarlinkIdlMember *m = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_METHOD, "Echo");
        json_error_t error;
        json_t *v = json_loads(json, 0, &error);
        char *path = NULL;
        int r;

        if (!v)
                print_error("bad test JSON %s: %s\n", json, error.text);
        assert_non_null(v);
        r = varlink_idl_validate(m->type, v, &path);
        json_decref(v);
        if (r == 0) {
                assert_null(path);
                return NULL;
        }
        assert_int_equal(r, -EINVAL);
        assert_non_null(path);
        return path;
}

#define BASE "\"b\": true, \"i\": 1, \"f\": 1.5, \"s\": \"x\""

static void expect_bad(VarlinkIdlInterface *i, const char *json, const char *path) {
        char *p = check(i, json);

        if (!p)
                print_error("%s unexpectedly valid\n", json);
        assert_non_null(p);
        assert_string_equal(p, path);
        free(p);
}

static void test_validate(void **state) {
        VarlinkIdlInterface *i = parse_ok(good_idl);
        const VarlinkIdlMember *nothing = varlink_idl_find_member(i, VARLINK_IDL_MEMBER_METHOD, "Nothing");
        json_t *v;
        char *path = NULL;

        /* Valid. */
        assert_null(check(i, "{" BASE "}"));
        assert_null(check(i, "{\"b\": false, \"i\": -5, \"f\": 3, \"s\": \"\"}")); /* int is a float */
        assert_null(check(i, "{" BASE ", \"o\": {\"any\": [1, {}]}, \"color\": \"green\", \"point\": {\"x\": 1, "
                             "\"y\": 2}, \"list\": [1, 2, 3], \"nlist\": [\"a\", null], \"map\": {\"k\": \"v\"}, "
                             "\"mapOfLists\": {\"a\": [{\"x\": 0, \"y\": 0}]}, \"nested\": {\"inner\": {\"deep\": 7}},"
                             " \"mode\": \"slow\", \"tree\": {\"value\": 1, \"children\": [{\"value\": 2}]}, "
                             "\"snake_case\": 3}"));
        assert_null(check(i, "{" BASE ", \"o\": null, \"color\": null, \"list\": null, \"tree\": null}"));

        /* Unknown field. */
        expect_bad(i, "{" BASE ", \"bogus\": 1}", "bogus");
        /* Missing non-nullable field, or null for one. */
        expect_bad(i, "{\"b\": true, \"i\": 1, \"f\": 1.5}", "s");
        expect_bad(i, "{\"b\": true, \"i\": null, \"f\": 1.5, \"s\": \"x\"}", "i");
        /* Wrong JSON types. */
        expect_bad(i, "{\"b\": 1, \"i\": 1, \"f\": 1.5, \"s\": \"x\"}", "b");
        expect_bad(i, "{\"b\": true, \"i\": \"1\", \"f\": 1.5, \"s\": \"x\"}", "i");
        expect_bad(i, "{\"b\": true, \"i\": 1, \"f\": \"1.5\", \"s\": \"x\"}", "f");
        expect_bad(i, "{\"b\": true, \"i\": 1, \"f\": 1.5, \"s\": 2}", "s");
        expect_bad(i, "{" BASE ", \"o\": [1]}", "o");
        expect_bad(i, "{" BASE ", \"point\": [1, 2]}", "point");
        expect_bad(i, "{" BASE ", \"list\": {}}", "list");
        expect_bad(i, "{" BASE ", \"map\": []}", "map");
        /* An int that is not an integer. */
        expect_bad(i, "{\"b\": true, \"i\": 1.5, \"f\": 1.5, \"s\": \"x\"}", "i");
        expect_bad(i, "{\"b\": true, \"i\": 1.0, \"f\": 1.5, \"s\": \"x\"}", "i");
        /* Enum value outside the set, named and inline. */
        expect_bad(i, "{" BASE ", \"color\": \"purple\"}", "color");
        expect_bad(i, "{" BASE ", \"color\": 1}", "color");
        expect_bad(i, "{" BASE ", \"mode\": \"medium\"}", "mode");
        /* Nested paths. */
        expect_bad(i, "{" BASE ", \"point\": {\"x\": 1}}", "point.y");
        expect_bad(i, "{" BASE ", \"point\": {\"x\": 1, \"y\": 2, \"z\": 3}}", "point.z");
        expect_bad(i, "{" BASE ", \"nested\": {\"inner\": {\"deep\": \"no\"}}}", "nested.inner.deep");
        expect_bad(i, "{" BASE ", \"list\": [1, \"2\"]}", "list[1]");
        expect_bad(i, "{" BASE ", \"list\": [1, null]}", "list[1]");
        expect_bad(i, "{" BASE ", \"nlist\": [null, 3]}", "nlist[1]");
        expect_bad(i, "{" BASE ", \"map\": {\"k\": 1}}", "map.k");
        expect_bad(i, "{" BASE ", \"mapOfLists\": {\"a\": [{\"x\": 0, \"y\": 0}, {\"x\": 0}]}}", "mapOfLists.a[1].y");
        expect_bad(i, "{" BASE ", \"tree\": {\"value\": 1, \"children\": [{\"value\": true}]}}",
                   "tree.children[0].value");

        /* NULL is {}; a non-object value is refused with no path. */
        assert_int_equal(varlink_idl_validate(nothing->type, NULL, &path), 0);
        v = json_array();
        assert_int_equal(varlink_idl_validate(nothing->type, v, &path), -EINVAL);
        assert_null(path);
        json_decref(v);
        v = json_pack("{s:i}", "x", 1);
        assert_int_equal(varlink_idl_validate(nothing->type, v, NULL), -EINVAL);
        json_decref(v);
        /* Only structs can be validated against. */
        assert_int_equal(varlink_idl_validate(varlink_idl_find_member(i, VARLINK_IDL_MEMBER_TYPE, "Color")->type,
                                              NULL, NULL),
                         -EINVAL);

        varlink_idl_free(i);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_good),
                cmocka_unit_test(test_parse_service),
                cmocka_unit_test(test_parse_bad),
                cmocka_unit_test(test_validate),
        };
        return cmocka_run_group_tests_name("varlink-idl", tests, NULL, NULL);
}
