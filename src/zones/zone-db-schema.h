/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include <stdbool.h>

typedef struct sqlite3 sqlite3;

/* The zone store's SQLite connections and schema (zone-db.c runs the
 * store on them). */

#define ZONE_DB_SCHEMA_VERSION 1

/* A negative errno for an SQLite result code. */
int zone_db_errno(int rc);
/* Runs sql; logs a failure against path. */
int zone_db_exec(sqlite3 *s, const char *sql, const char *path);
/* Opens a connection to path (an SQLite URI if uri), foreign keys on. */
int zone_db_connect(const char *path, bool uri, sqlite3 **ret);
/* On the writer connection, before the store thread starts: WAL with
 * synchronous=FULL (unless in_memory: a database in memory has no journal
 * to make durable), and the schema created or migrated. */
int zone_db_setup(sqlite3 *w, const char *path, bool in_memory);
