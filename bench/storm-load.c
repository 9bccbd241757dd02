/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Load for bench/storm: many varlink clients on one epoll loop, light on
 * CPU so that the daemon keeps its own, plus one prober thread that makes a
 * call every --probe-ms and records what a well-behaved client sees.
 *
 *   storm-load --socket PATH --clients 1000 --monitors 50 --seconds 60
 *              [--mutating-device loopN] [--zones DEV] [--prober-only]
 *
 * Clients (all but the monitors), each at --rate calls per second (2 by
 * default: a paced client, not a flood), loop over: GetStatus (nine calls
 * in ten) and, if --zones, Allocate + Release of a 4 KiB lease (one in ten);
 * one call in --list-every (100) is a ListDevices (more); one client in 50
 * also switches a profile now and then (SetProfile/ClearProfile of
 * "storm"). Monitor clients subscribe and count events by kind; with
 * --marker they count until the first "reloaded" event once the load is
 * over (the caller sends one by a Reload), so that every monitor counts
 * the same stretch and a lost event shows as a difference. The prober
 * calls GetStatus every --probe-ms and, every tenth time, Apply of
 * --mutating-device. Prints one JSON object at the end: counts, protocol
 * errors (unexpected error replies, malformed replies, connections closed
 * by the daemon), monitor events, and the prober's latencies (p50, p99,
 * max) for read and mutating calls. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *arg_socket, *arg_mutating, *arg_zones;
static unsigned arg_clients = 1000, arg_monitors = 50, arg_seconds = 60, arg_probe_ms = 50;
static double arg_rate = 2; /* calls per second per client (a person's or a script's pace, not a flood) */
static unsigned arg_list_every = 100; /* one ListDevices in this many calls; 0: none */
static bool arg_marker;      /* monitors count until the first "reloaded" event after the load */
static bool arg_prober_only;
static atomic_bool stop;

static uint64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ULL + (uint64_t) ts.tv_nsec;
}

static int connect_unix(bool nonblock) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);

        if (fd < 0)
                return -errno;
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", arg_socket);
        if (connect(fd, (struct sockaddr *) &sa, sizeof sa) < 0 && errno != EINPROGRESS && errno != EAGAIN) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* ---- counters ---- */

typedef struct Stats {
        uint64_t calls, replies, errors_expected, protocol_errors, disconnects, connect_failures;
        uint64_t refused; /* TooManyConnections */
        uint64_t ev_added, ev_removed, ev_applied, ev_restored, ev_other, monitors_subscribed;
        char first_error[256];
} Stats;

static Stats st;

static void protocol_error(const char *what) {
        if (!st.first_error[0])
                snprintf(st.first_error, sizeof st.first_error, "%s", what);
        st.protocol_errors++;
}

/* ---- clients on the epoll loop ---- */

enum { K_STATUS, K_LIST, K_ALLOC, K_RELEASE, K_PROFILE, K_MONITOR };

typedef struct Client {
        int fd;
        bool monitor, mutator;
        int kind;
        unsigned step;
        char lease[64];
        uint64_t events; /* monitor events received */
        uint64_t due;    /* when the next call goes (ns); 0: waiting for a reply */
        bool marked;     /* a monitor that saw the end marker */
        char *in;
        size_t in_len, in_cap;
        char out[512];
        size_t out_len, out_off;
} Client;

static void client_send(Client *c, const char *json) {
        c->out_len = (size_t) snprintf(c->out, sizeof c->out - 1, "%s", json) + 1; /* with the NUL */
        c->out_off = 0;
        st.calls++;
}

static void client_next(Client *c) {
        char buf[256];

        if (c->monitor) {
                c->kind = K_MONITOR;
                client_send(c, "{\"method\":\"io.blkmqd.Manager.Monitor\",\"more\":true}");
                return;
        }
        c->step++;
        if (c->mutator && c->step % 40 == 0) {
                c->kind = K_PROFILE;
                client_send(c, c->step % 80 ? "{\"method\":\"io.blkmqd.Manager.SetProfile\",\"parameters\":{\"profile\":\"storm\"}}"
                                            : "{\"method\":\"io.blkmqd.Manager.ClearProfile\"}");
                return;
        }
        if (c->lease[0]) {
                c->kind = K_RELEASE;
                snprintf(buf, sizeof buf, "{\"method\":\"io.blkmqd.Zones.Release\",\"parameters\":{\"lease\":\"%s\"}}",
                         c->lease);
                c->lease[0] = 0;
                client_send(c, buf);
                return;
        }
        /* The mix: status reads, zone leases, Monitor streams and
         * profile switches (above); and, once in --list-every calls, a
         * ListDevices (a reply per device: 256 of them in a storm). */
        if (arg_list_every && c->step % arg_list_every == 0) {
                c->kind = K_LIST;
                client_send(c, "{\"method\":\"io.blkmqd.Manager.ListDevices\",\"more\":true}");
                return;
        }
        switch (c->step % 10) {
        case 5:
                break;
        default:
                c->kind = K_STATUS;
                client_send(c, "{\"method\":\"io.blkmqd.Manager.GetStatus\"}");
                return;
        }
        {
                if (arg_zones) {
                        c->kind = K_ALLOC;
                        snprintf(buf, sizeof buf,
                                 "{\"method\":\"io.blkmqd.Zones.Allocate\",\"parameters\":{\"device\":\"%s\",\"size\":4096}}",
                                 arg_zones);
                        client_send(c, buf);
                } else {
                        c->kind = K_STATUS;
                        client_send(c, "{\"method\":\"io.blkmqd.Manager.GetStatus\"}");
                }
        }
}

/* Monitor events, counted without a JSON parse: 50 streams of a storm's
 * events would otherwise take a core of the two this machine has. The
 * daemon's output is compact JSON from jansson, fields in a known order. */
static bool monitor_message(Client *c, const char *text) {
        const char *ev = strstr(text, "\"event\":\"");

        st.replies++;
        if (!ev || !strstr(text, "\"continues\":true")) {
                protocol_error(ev ? "monitor stream ended" : "monitor event without event");
                return true;
        }
        ev += strlen("\"event\":\"");
        if (c->marked)
                return false;
        if (atomic_load(&stop) && !strncmp(ev, "reloaded\"", 9)) {
                c->marked = true;
                return false;
        }
        c->events++;
        if (!strncmp(ev, "added\"", 6))
                st.ev_added++;
        else if (!strncmp(ev, "removed\"", 8))
                st.ev_removed++;
        else if (!strncmp(ev, "applied\"", 8))
                st.ev_applied++;
        else if (!strncmp(ev, "restored\"", 9))
                st.ev_restored++;
        else if (!strncmp(ev, "subscribed\"", 11))
                st.monitors_subscribed++;
        else
                st.ev_other++;
        return false;
}

/* One message in; returns true when the call is complete. */
static bool client_message(Client *c, const char *text) {
        json_error_t e;
        json_t *m = json_loads(text, 0, &e), *p;
        const char *err;
        bool cont, done = true;

        if (!m || !json_is_object(m)) {
                protocol_error("malformed reply");
                json_decref(m);
                return true;
        }
        st.replies++;
        err = json_string_value(json_object_get(m, "error"));
        cont = json_is_true(json_object_get(m, "continues"));
        p = json_object_get(m, "parameters");
        if (err) {
                if (strcmp(err, "io.blkmqd.TooManyConnections") == 0)
                        st.refused++;
                else if (strcmp(err, "io.blkmqd.Zones.NoFreeZone") == 0 ||
                         strcmp(err, "io.blkmqd.Zones.ZoneLimitReached") == 0 ||
                         strcmp(err, "io.blkmqd.Manager.Timeout") == 0)
                        st.errors_expected++;
                else {
                        char w[200];
                        snprintf(w, sizeof w, "unexpected error %s", err);
                        protocol_error(w);
                }
        } else if (c->kind == K_ALLOC) {
                const char *l = json_string_value(json_object_get(p, "lease"));
                if (l)
                        snprintf(c->lease, sizeof c->lease, "%s", l);
        } else if (c->kind == K_MONITOR) {
                const char *ev = json_string_value(json_object_get(p, "event"));
                if (c->marked) {
                        json_decref(m);
                        return false;
                }
                if (atomic_load(&stop) && ev && !strcmp(ev, "reloaded")) {
                        c->marked = true;
                        json_decref(m);
                        return false;
                }
                c->events++;
                if (!ev)
                        protocol_error("monitor event without event");
                else if (!strcmp(ev, "added"))
                        st.ev_added++;
                else if (!strcmp(ev, "removed"))
                        st.ev_removed++;
                else if (!strcmp(ev, "applied"))
                        st.ev_applied++;
                else if (!strcmp(ev, "restored"))
                        st.ev_restored++;
                else if (!strcmp(ev, "subscribed"))
                        st.monitors_subscribed++;
                else
                        st.ev_other++;
                if (!cont)
                        protocol_error("monitor stream ended");
        }
        if (cont)
                done = false;
        json_decref(m);
        return done;
}

static int client_io(int ep, Client *c, uint32_t events) {
        if (events & EPOLLOUT && c->out_off < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
                if (n < 0 && errno != EAGAIN)
                        return -errno;
                if (n > 0)
                        c->out_off += (size_t) n;
        }
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                for (;;) {
                        if (c->in_cap - c->in_len < 65536) {
                                c->in_cap = c->in_cap ? c->in_cap * 2 : 131072;
                                c->in = realloc(c->in, c->in_cap);
                                if (!c->in)
                                        abort();
                        }
                        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
                        if (n == 0)
                                return -ECONNRESET;
                        if (n < 0) {
                                if (errno == EAGAIN)
                                        break;
                                return -errno;
                        }
                        c->in_len += (size_t) n;
                }
                size_t off = 0;
                char *nul;
                while ((nul = memchr(c->in + off, 0, c->in_len - off))) {
                        bool done = c->monitor ? monitor_message(c, c->in + off) : client_message(c, c->in + off);
                        off = (size_t) (nul - c->in) + 1;
                        if (done && !c->monitor) /* paced: the next call when it is due */
                                c->due = now_ns() + (uint64_t) (1e9 / arg_rate * (0.5 + (double) rand() / RAND_MAX));
                }
                memmove(c->in, c->in + off, c->in_len - off);
                c->in_len -= off;
        }
        struct epoll_event ev = { .events = EPOLLIN | (c->out_off < c->out_len ? EPOLLOUT : 0), .data.ptr = c };
        (void) epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        return 0;
}

/* ---- the prober ---- */

#define PROBES_MAX 100000
static uint64_t read_lat[PROBES_MAX], mut_lat[PROBES_MAX], job_lat[PROBES_MAX];
static size_t n_read, n_mut, n_job;
static uint64_t prober_errors;

static int blocking_call(int fd, const char *json, char *reply, size_t size) {
        size_t len = strlen(json) + 1, got = 0;

        if (send(fd, json, len, MSG_NOSIGNAL) != (ssize_t) len)
                return -EIO;
        for (;;) {
                ssize_t n = recv(fd, reply + got, size - 1 - got, 0);
                if (n <= 0)
                        return -EIO;
                got += (size_t) n;
                if (memchr(reply, 0, got))
                        return strstr(reply, "\"error\"") ? -EBADMSG : 0;
                if (got >= size - 1)
                        return -E2BIG;
        }
}

static void *prober(void *arg) {
        static char reply[1 << 20];
        (void) arg;
        char mut[256], get[256];
        int fd = connect_unix(false);
        unsigned i = 0;

        if (fd < 0) {
                prober_errors++;
                return NULL;
        }
        if (arg_mutating) {
                snprintf(mut, sizeof mut, "{\"method\":\"io.blkmqd.Manager.Apply\",\"parameters\":{\"device\":\"%s\"}}",
                         arg_mutating);
                snprintf(get, sizeof get, "{\"method\":\"io.blkmqd.Manager.GetDevice\",\"parameters\":{\"device\":\"%s\"}}",
                         arg_mutating);
        }
        while (!atomic_load(&stop)) {
                bool m = arg_mutating && ++i % 10 == 0;
                uint64_t t0 = now_ns();
                int r = blocking_call(fd, m ? mut : "{\"method\":\"io.blkmqd.Manager.GetStatus\"}", reply, sizeof reply);
                uint64_t dt = now_ns() - t0;
                if (r < 0)
                        prober_errors++;
                else if (m && n_mut < PROBES_MAX) {
                        mut_lat[n_mut++] = dt;
                        /* The Apply's own job: how long its writes took on the worker. */
                        if (blocking_call(fd, get, reply, sizeof reply) == 0) {
                                const char *j = strstr(reply, "\"lastJobUsec\":");
                                if (j && n_job < PROBES_MAX)
                                        job_lat[n_job++] = strtoull(j + 14, NULL, 10) * 1000ULL;
                        }
                }
                else if (!m && n_read < PROBES_MAX)
                        read_lat[n_read++] = dt;
                if (dt < arg_probe_ms * 1000000ULL)
                        usleep((useconds_t) ((arg_probe_ms * 1000000ULL - dt) / 1000));
        }
        close(fd);
        return NULL;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

static json_t *lat_json(uint64_t *v, size_t n) {
        if (!n)
                return json_pack("{s:i}", "n", 0);
        qsort(v, n, sizeof *v, cmp_u64);
        return json_pack("{s:I, s:f, s:f, s:f}", "n", (json_int_t) n, "p50Ms", v[n / 2] / 1e6, "p99Ms",
                         v[n * 99 / 100 < n ? n * 99 / 100 : n - 1] / 1e6, "maxMs", v[n - 1] / 1e6);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },       { "clients", required_argument, NULL, 'c' },
                { "monitors", required_argument, NULL, 'm' },     { "seconds", required_argument, NULL, 't' },
                { "probe-ms", required_argument, NULL, 'p' },     { "mutating-device", required_argument, NULL, 'd' },
                { "zones", required_argument, NULL, 'z' },        { "prober-only", no_argument, NULL, 'P' },
                { "rate", required_argument, NULL, 'r' },         { "marker", no_argument, NULL, 'k' },
                { "list-every", required_argument, NULL, 'l' },
                {},
        };
        pthread_t pt;
        int o, ep;

        while ((o = getopt_long(argc, argv, "", opts, NULL)) >= 0)
                switch (o) {
                case 's': arg_socket = optarg; break;
                case 'c': arg_clients = (unsigned) atoi(optarg); break;
                case 'm': arg_monitors = (unsigned) atoi(optarg); break;
                case 't': arg_seconds = (unsigned) atoi(optarg); break;
                case 'p': arg_probe_ms = (unsigned) atoi(optarg); break;
                case 'd': arg_mutating = optarg; break;
                case 'z': arg_zones = optarg; break;
                case 'P': arg_prober_only = true; break;
                case 'r': arg_rate = atof(optarg); break;
                case 'k': arg_marker = true; break;
                case 'l': arg_list_every = (unsigned) atoi(optarg); break;
                default: return 2;
                }
        if (!arg_socket)
                return fprintf(stderr, "storm-load: --socket is required\n"), 2;

        ep = epoll_create1(EPOLL_CLOEXEC);
        Client *cl = calloc(arg_clients, sizeof *cl);
        unsigned n = arg_prober_only ? 0 : arg_clients;
        for (unsigned i = 0; i < n; i++) {
                Client *c = &cl[i];
                c->fd = connect_unix(true);
                if (c->fd < 0) {
                        st.connect_failures++;
                        continue;
                }
                c->monitor = i < arg_monitors;
                c->mutator = !c->monitor && i % 50 == 7;
                c->step = i;
                client_next(c);
                struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
                epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        }
        pthread_create(&pt, NULL, prober, NULL);

        uint64_t end = now_ns() + arg_seconds * 1000000000ULL, grace = end + 60 * 1000000000ULL;
        struct epoll_event evs[256];
        for (;;) {
                uint64_t now = now_ns();
                if (now >= end && !atomic_load(&stop))
                        atomic_store(&stop, true); /* no new calls; monitors read on to the marker */
                if (now >= end) {
                        bool all = true;
                        for (unsigned i = 0; arg_marker && i < n; i++)
                                if (cl[i].monitor && cl[i].fd >= 0 && !cl[i].marked)
                                        all = false;
                        if (all || now >= grace)
                                break;
                }
                for (unsigned i = 0; i < n && !atomic_load(&stop); i++) {
                        Client *c = &cl[i];
                        if (c->fd >= 0 && c->due && c->due <= now) {
                                c->due = 0;
                                client_next(c);
                                struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.ptr = c };
                                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
                        }
                }
                int k = epoll_wait(ep, evs, 256, 10);
                for (int i = 0; i < k; i++) {
                        Client *c = evs[i].data.ptr;
                        if (client_io(ep, c, evs[i].events) < 0) {
                                st.disconnects++;
                                if (!st.first_error[0])
                                        snprintf(st.first_error, sizeof st.first_error, "disconnected by the daemon");
                                epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
                                close(c->fd);
                                c->fd = -1;
                        }
                }
        }
        atomic_store(&stop, true);
        pthread_join(pt, NULL);
        unsigned unmarked = 0;
        for (unsigned i = 0; arg_marker && i < n; i++)
                if (cl[i].monitor && !cl[i].marked)
                        unmarked++;

        uint64_t ev_min = UINT64_MAX, ev_max = 0;
        for (unsigned i = 0; i < n; i++)
                if (cl[i].monitor) {
                        if (cl[i].events < ev_min)
                                ev_min = cl[i].events;
                        if (cl[i].events > ev_max)
                                ev_max = cl[i].events;
                }
        if (ev_min == UINT64_MAX)
                ev_min = 0;
        json_t *out = json_pack(
                "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:o, s:o, s:I, s:s}", "calls",
                (json_int_t) st.calls, "replies", (json_int_t) st.replies, "expectedErrors",
                (json_int_t) st.errors_expected, "protocolErrors", (json_int_t) st.protocol_errors, "disconnects",
                (json_int_t) st.disconnects, "connectFailures", (json_int_t) st.connect_failures, "refused",
                (json_int_t) st.refused, "monitor", "subscribed", (json_int_t) st.monitors_subscribed, "added",
                (json_int_t) st.ev_added, "removed", (json_int_t) st.ev_removed, "applied",
                (json_int_t) st.ev_applied, "restored", (json_int_t) st.ev_restored, "other",
                (json_int_t) st.ev_other, "proberRead", lat_json(read_lat, n_read), "proberMutating",
                lat_json(mut_lat, n_mut), "proberErrors", (json_int_t) prober_errors, "firstError", st.first_error);
        json_object_set_new(out, "applyJob", lat_json(job_lat, n_job));
        json_object_set_new(out, "monitorsWithoutMarker", json_integer(unmarked));
        json_object_set_new(json_object_get(out, "monitor"), "perMonitorMin", json_integer((json_int_t) ev_min));
        json_object_set_new(json_object_get(out, "monitor"), "perMonitorMax", json_integer((json_int_t) ev_max));
        json_dumpf(out, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(out);
        return 0;
}
