/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "knobs.h"
#include "log.h"
#include "originals-record.h"
#include "strbuf.h"
#include "sysfs.h"
#include "util.h"

#define RECORD_VERSION 1
#define RECORD_SUFFIX ".json"
#define RECORD_MAX_BYTES (1024 * 1024)

static int dup_ptr(char **dst, const char *src) {
        if (!src) {
                *dst = NULL;
                return 0;
        }
        *dst = strdup(src);
        return *dst ? 0 : -ENOMEM;
}

int originals_identity_from_info(const DeviceInfo *info, OriginalsIdentity *ret) {
        OriginalsIdentity id = { .diskseq = info->diskseq };

        if (dup_ptr(&id.sysname, info->sysname) < 0 || dup_ptr(&id.devnum, info->devnum) < 0 ||
            dup_ptr(&id.id, info->id) < 0 || dup_ptr(&id.serial, info->serial) < 0 ||
            dup_ptr(&id.wwn, info->wwn) < 0 || dup_ptr(&id.backing_file, info->backing_file) < 0) {
                originals_identity_done(&id);
                return -ENOMEM;
        }
        *ret = id;
        return 0;
}

void originals_identity_done(OriginalsIdentity *id) {
        free(id->sysname);
        free(id->devnum);
        free(id->id);
        free(id->serial);
        free(id->wwn);
        free(id->backing_file);
        *id = (OriginalsIdentity) {};
}

const char *originals_identity_mismatch(const OriginalsIdentity *rec, const OriginalsIdentity *now, char *buf,
                                        size_t size) {
        if (!streq_ptr(rec->devnum, now->devnum))
                snprintf(buf, size, "device number %s, now %s: another disk has the name", strna(rec->devnum),
                         strna(now->devnum));
        else if (rec->diskseq != now->diskseq)
                snprintf(buf, size, "diskseq %llu, now %llu: the disk was replaced or attached again",
                         (unsigned long long) rec->diskseq, (unsigned long long) now->diskseq);
        else if (!streq_ptr(rec->backing_file, now->backing_file))
                snprintf(buf, size, "backing file %s, now %s", strna(rec->backing_file), strna(now->backing_file));
        else if (!streq_ptr(rec->serial, now->serial))
                snprintf(buf, size, "serial %s, now %s", strna(rec->serial), strna(now->serial));
        else if (!streq_ptr(rec->wwn, now->wwn))
                snprintf(buf, size, "WWN %s, now %s", strna(rec->wwn), strna(now->wwn));
        else
                return NULL;
        return buf;
}

char *originals_record_path(const char *dir, const char *sysname) {
        _cleanup_free_ char *name = NULL;

        if (asprintf(&name, "%s" RECORD_SUFFIX, sysname) < 0)
                return NULL;
        return path_join(dir, name);
}

static json_t *str_or_null(const char *s) {
        return s ? json_string(s) : json_null();
}

int originals_record_write(const char *dir, const OriginalsIdentity *id, const Original *o, size_t n) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        json_t *root, *list;
        uint64_t now = now_usec(CLOCK_REALTIME);
        int pid = (int) getpid();

        if (n == 0)
                return originals_record_remove(dir, id->sysname);
        path = originals_record_path(dir, id->sysname);
        if (!path)
                return -ENOMEM;

        list = json_array();
        for (size_t i = 0; i < n; i++) {
                const KnobInfo *k = knob_info(o[i].knob);
                json_array_append_new(
                        list, json_pack("{s:s, s:s, s:o, s:s, s:o, s:b, s:i, s:I}", "knob", k ? k->key : "",
                                        "attribute", o[i].attr, "path", str_or_null(o[i].path), "value", o[i].value,
                                        "scheduler", str_or_null(o[i].scheduler), "implied", o[i].implied, "pid",
                                        o[i].pid ? o[i].pid : pid, "recordedUsec",
                                        (json_int_t) (o[i].pid ? o[i].recorded_usec : now)));
        }
        root = json_pack("{s:i, s:s, s:o, s:I, s:o, s:o, s:o, s:o, s:i, s:I, s:o}", "version", RECORD_VERSION,
                         "device", id->sysname, "devnum", str_or_null(id->devnum), "diskseq",
                         (json_int_t) id->diskseq, "id", str_or_null(id->id), "serial", str_or_null(id->serial),
                         "wwn", str_or_null(id->wwn), "backingFile", str_or_null(id->backing_file), "pid", pid,
                         "writtenUsec", (json_int_t) now, "originals", list);
        if (!root)
                return -ENOMEM;
        text = json_dumps(root, JSON_INDENT(1));
        json_decref(root);
        if (!text)
                return -ENOMEM;

        /* The runtime directory is a tmpfs: renamed whole, not synced. */
        return write_file_atomic(path, text, 0600, 0);
}

int originals_record_remove(const char *dir, const char *sysname) {
        _cleanup_free_ char *path = originals_record_path(dir, sysname);

        if (!path)
                return -ENOMEM;
        if (unlink(path) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

OriginalsRecord *originals_record_free(OriginalsRecord *r) {
        if (!r)
                return NULL;
        free(r->path);
        originals_identity_done(&r->identity);
        for (size_t i = 0; i < r->n_originals; i++) {
                free(r->originals[i].attr);
                free(r->originals[i].path);
                free(r->originals[i].value);
                free(r->originals[i].scheduler);
        }
        free(r->originals);
        free(r);
        return NULL;
}

/* A string member (NULL allowed when optional); 0, or -EBADMSG naming the key. */
static int get_str(json_t *o, const char *key, bool optional, char **dst, char **ret_error) {
        json_t *v = json_object_get(o, key);

        if ((!v || json_is_null(v)) && optional) {
                *dst = NULL;
                return 0;
        }
        if (!json_is_string(v) || (!optional && json_string_length(v) == 0)) {
                (void) asprintf(ret_error, "\"%s\" is missing or not a string", key);
                return -EBADMSG;
        }
        if (strlen(json_string_value(v)) != json_string_length(v)) {
                (void) asprintf(ret_error, "\"%s\" contains a NUL byte", key);
                return -EBADMSG;
        }
        return dup_ptr(dst, json_string_value(v));
}

static int get_uint(json_t *o, const char *key, uint64_t *dst, char **ret_error) {
        json_t *v = json_object_get(o, key);

        if (!json_is_integer(v) || json_integer_value(v) < 0) {
                (void) asprintf(ret_error, "\"%s\" is missing or not a number >= 0", key);
                return -EBADMSG;
        }
        *dst = (uint64_t) json_integer_value(v);
        return 0;
}

static int parse_original(json_t *e, Original *o, char **ret_error) {
        uint64_t pid, usec;
        _cleanup_free_ char *knob = NULL;
        json_t *implied;
        int k, r;

        if (!json_is_object(e)) {
                (void) asprintf(ret_error, "an entry of \"originals\" is not an object");
                return -EBADMSG;
        }
        if ((r = get_str(e, "knob", false, &knob, ret_error)) < 0 ||
            (r = get_str(e, "attribute", false, &o->attr, ret_error)) < 0 ||
            (r = get_str(e, "path", true, &o->path, ret_error)) < 0 ||
            (r = get_str(e, "value", false, &o->value, ret_error)) < 0 ||
            (r = get_str(e, "scheduler", true, &o->scheduler, ret_error)) < 0 ||
            (r = get_uint(e, "pid", &pid, ret_error)) < 0 || (r = get_uint(e, "recordedUsec", &usec, ret_error)) < 0)
                return r;
        k = knob_from_key(knob);
        if (k < 0) {
                (void) asprintf(ret_error, "unknown knob \"%s\"", knob);
                return -EBADMSG;
        }
        if (o->path && o->path[0] != '/') {
                (void) asprintf(ret_error, "path \"%s\" is not absolute", o->path);
                return -EBADMSG;
        }
        if (strstr(o->attr, "..") || o->attr[0] == '/') {
                (void) asprintf(ret_error, "attribute \"%s\" is not below the device", o->attr);
                return -EBADMSG;
        }
        implied = json_object_get(e, "implied");
        if (implied && !json_is_boolean(implied)) {
                (void) asprintf(ret_error, "\"implied\" is not a boolean");
                return -EBADMSG;
        }
        if (pid == 0 || pid > INT32_MAX || usec == 0) {
                (void) asprintf(ret_error, "\"pid\" or \"recordedUsec\" is 0");
                return -EBADMSG;
        }
        o->knob = (Knob) k;
        o->implied = json_is_true(implied);
        o->pid = (int) pid;
        o->recorded_usec = usec;
        return 0;
}

int originals_record_load(const char *path, OriginalsRecord **ret, char **ret_error) {
        _cleanup_(originals_record_freep) OriginalsRecord *rec = NULL;
        _cleanup_free_ char *base = NULL;
        json_t *root = NULL, *list;
        json_error_t jerr;
        uint64_t version, pid;
        const char *slash;
        struct stat st;
        int r;

        if (stat(path, &st) < 0)
                return -errno;
        if (st.st_size > RECORD_MAX_BYTES) {
                (void) asprintf(ret_error, "larger than %d bytes", RECORD_MAX_BYTES);
                return -EBADMSG;
        }
        root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
        if (!root) {
                (void) asprintf(ret_error, "line %d: %s", jerr.line, jerr.text);
                return -EBADMSG;
        }
        rec = calloc(1, sizeof *rec);
        if (!rec || !(rec->path = strdup(path))) {
                json_decref(root);
                return -ENOMEM;
        }
        r = -EBADMSG;
        if (!json_is_object(root)) {
                (void) asprintf(ret_error, "not a JSON object");
                goto out;
        }
        if ((r = get_uint(root, "version", &version, ret_error)) < 0)
                goto out;
        if (version != RECORD_VERSION) {
                (void) asprintf(ret_error, "version %llu, this blkmqd reads version %d", (unsigned long long) version,
                                RECORD_VERSION);
                r = -EBADMSG;
                goto out;
        }
        if ((r = get_str(root, "device", false, &rec->identity.sysname, ret_error)) < 0 ||
            (r = get_str(root, "devnum", true, &rec->identity.devnum, ret_error)) < 0 ||
            (r = get_uint(root, "diskseq", &rec->identity.diskseq, ret_error)) < 0 ||
            (r = get_str(root, "id", true, &rec->identity.id, ret_error)) < 0 ||
            (r = get_str(root, "serial", true, &rec->identity.serial, ret_error)) < 0 ||
            (r = get_str(root, "wwn", true, &rec->identity.wwn, ret_error)) < 0 ||
            (r = get_str(root, "backingFile", true, &rec->identity.backing_file, ret_error)) < 0 ||
            (r = get_uint(root, "pid", &pid, ret_error)) < 0 ||
            (r = get_uint(root, "writtenUsec", &rec->written_usec, ret_error)) < 0)
                goto out;
        rec->pid = (int) pid;
        /* The file is named after the device it records. */
        slash = strrchr(path, '/');
        if (asprintf(&base, "%s" RECORD_SUFFIX, rec->identity.sysname) < 0) {
                r = -ENOMEM;
                goto out;
        }
        if (!streq(slash ? slash + 1 : path, base)) {
                (void) asprintf(ret_error, "records device %s, not the one the file is named after",
                                rec->identity.sysname);
                r = -EBADMSG;
                goto out;
        }
        list = json_object_get(root, "originals");
        if (!json_is_array(list)) {
                (void) asprintf(ret_error, "\"originals\" is missing or not an array");
                r = -EBADMSG;
                goto out;
        }
        rec->originals = calloc(json_array_size(list) + 1, sizeof(Original));
        if (!rec->originals) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < json_array_size(list); i++) {
                r = parse_original(json_array_get(list, i), &rec->originals[i], ret_error);
                rec->n_originals = i + 1; /* freed with the record, even half parsed */
                if (r < 0)
                        goto out;
        }
        r = 0;
        *ret = TAKE_PTR(rec);
out:
        json_decref(root);
        return r;
}

static int record_name_cmp(const void *a, const void *b) {
        return strcmp((*(OriginalsRecord *const *) a)->path, (*(OriginalsRecord *const *) b)->path);
}

int originals_record_scan(const char *dir, OriginalsRecord ***ret, size_t *ret_n) {
        _cleanup_(closedirp_helper) DIR *d = NULL;
        OriginalsRecord **list = NULL;
        size_t n = 0;
        struct dirent *de;
        int r;

        r = mkdir_p(dir, 0755);
        if (r < 0)
                return log_error_errno(r, "Cannot create the directory of recorded originals %s: %m", dir);
        d = opendir(dir);
        if (!d)
                return log_error_errno(errno, "Cannot read the recorded originals in %s: %m", dir);
        while ((de = readdir(d))) {
                _cleanup_(originals_record_freep) OriginalsRecord *rec = NULL;
                _cleanup_free_ char *path = NULL, *error = NULL;
                size_t l = strlen(de->d_name);
                OriginalsRecord **t;

                if (de->d_name[0] == '.' || l <= strlen(RECORD_SUFFIX) ||
                    !streq(de->d_name + l - strlen(RECORD_SUFFIX), RECORD_SUFFIX))
                        continue;
                path = path_join(dir, de->d_name);
                if (!path)
                        goto oom;
                r = originals_record_load(path, &rec, &error);
                if (r == -ENOMEM)
                        goto oom;
                if (r < 0) {
                        log_error("%s: not a record of original values, refused (left in place): %s", path,
                                  error ? error : strerror(-r));
                        continue;
                }
                t = reallocarray(list, n + 1, sizeof *t);
                if (!t)
                        goto oom;
                list = t;
                list[n++] = TAKE_PTR(rec);
        }
        if (n > 1)
                qsort(list, n, sizeof *list, record_name_cmp);
        *ret = list;
        *ret_n = n;
        return 0;
oom:
        for (size_t i = 0; i < n; i++)
                originals_record_free(list[i]);
        free(list);
        return log_oom();
}

char *originals_signature(const Original *o, size_t n) {
        StrBuf b = {};

        for (size_t i = 0; i < n; i++)
                strbuf_appendf(&b, "%s=%s\n", o[i].attr, o[i].value);
        return strbuf_steal(&b);
}
