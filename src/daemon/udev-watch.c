/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "udev-watch.h"
#include "util.h"

/* systemd's own monitors use 128 MiB: enough for thousands of events
 * queued while the loop is busy. Needs CAP_NET_ADMIN for more than
 * rmem_max (SO_RCVBUFFORCE); libudev tries that. */
#define UDEV_RCVBUF (128 * 1024 * 1024)

struct UdevWatch {
        struct udev *udev;
        struct udev_monitor *monitor;
        sd_event_source *source;
        sd_event_source *resync;
        udev_watch_cb_t cb;
        void *userdata;
};

static bool is_disk(struct udev_device *d) {
        const char *t = udev_device_get_devtype(d);
        return t && streq(t, "disk");
}

static int on_resync(sd_event_source *s, void *userdata) {
        UdevWatch *w = userdata;
        (void) udev_watch_enumerate(w);
        return 0;
}

/* Events taken per dispatch: a storm is worked off in slices, and the
 * varlink clients' calls are served in between (the socket stays readable,
 * so the loop comes back here at once). The kernel queue is large (128 MiB
 * receive buffer), and an overflow is met by re-enumerating. */
#define EVENTS_PER_DISPATCH 16

static int on_monitor(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        UdevWatch *w = userdata;

        for (unsigned n = 0; n < EVENTS_PER_DISPATCH; n++) {
                struct udev_device *d;
                const char *action;

                errno = 0;
                d = udev_monitor_receive_device(w->monitor);
                if (!d) {
                        if (errno == ENOBUFS) {
                                /* The kernel dropped events: the only way to be
                                 * sure of the state is to look again. */
                                log_warning("udev monitor overflowed, events were lost; re-enumerating block devices.");
                                sd_event_source_set_enabled(w->resync, SD_EVENT_ONESHOT);
                                continue;
                        }
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == 0)
                                break;
                        /* libudev returns NULL for messages it rejects (foreign
                         * senders, filtered): nothing more to read this round. */
                        break;
                }
                action = udev_device_get_action(d);
                if (is_disk(d) && action) {
                        log_debug("udev: %s %s", action, udev_device_get_sysname(d));
                        if (streq(action, "add") || streq(action, "bind"))
                                w->cb(UDEV_ACTION_ADD, d, w->userdata);
                        else if (streq(action, "change") || streq(action, "move") || streq(action, "online"))
                                w->cb(UDEV_ACTION_CHANGE, d, w->userdata);
                        else if (streq(action, "remove"))
                                w->cb(UDEV_ACTION_REMOVE, d, w->userdata);
                }
                udev_device_unref(d);
        }
        return 0;
}

UdevWatch *udev_watch_free(UdevWatch *w) {
        if (!w)
                return NULL;
        sd_event_source_disable_unref(w->source);
        sd_event_source_disable_unref(w->resync);
        udev_monitor_unref(w->monitor);
        udev_unref(w->udev);
        free(w);
        return NULL;
}

int udev_watch_new(UdevWatch **ret, sd_event *e, bool monitor, udev_watch_cb_t cb, void *userdata) {
        _cleanup_(udev_watch_freep) UdevWatch *w = NULL;
        int r;

        w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->cb = cb;
        w->userdata = userdata;
        w->udev = udev_new();
        if (!w->udev)
                return negative_errno();
        r = sd_event_add_defer(e, &w->resync, on_resync, w);
        if (r < 0)
                return r;
        sd_event_source_set_enabled(w->resync, SD_EVENT_OFF);

        if (monitor) {
                w->monitor = udev_monitor_new_from_netlink(w->udev, "udev");
                if (!w->monitor)
                        return log_error_errno(negative_errno(), "Failed to create udev monitor: %m");
                r = udev_monitor_filter_add_match_subsystem_devtype(w->monitor, "block", "disk");
                if (r < 0)
                        return r;
                r = udev_monitor_set_receive_buffer_size(w->monitor, UDEV_RCVBUF);
                if (r < 0)
                        log_notice_errno(r, "Could not raise the udev monitor's receive buffer to 128 MiB, ignoring: %m");
                r = udev_monitor_enable_receiving(w->monitor);
                if (r < 0)
                        return log_error_errno(r, "Failed to bind udev monitor: %m");
                r = sd_event_add_io(e, &w->source, udev_monitor_get_fd(w->monitor), EPOLLIN, on_monitor, w);
                if (r < 0)
                        return r;
                (void) sd_event_source_set_description(w->source, "udev-monitor");
        }
        *ret = TAKE_PTR(w);
        return 0;
}

int udev_watch_enumerate(UdevWatch *w) {
        struct udev_enumerate *en;
        struct udev_list_entry *le;
        int r;

        en = udev_enumerate_new(w->udev);
        if (!en)
                return -ENOMEM;
        r = udev_enumerate_add_match_subsystem(en, "block");
        if (r >= 0)
                r = udev_enumerate_add_match_property(en, "DEVTYPE", "disk");
        if (r >= 0)
                r = udev_enumerate_scan_devices(en);
        if (r < 0) {
                udev_enumerate_unref(en);
                return log_error_errno(r, "Failed to enumerate block devices: %m");
        }
        udev_list_entry_foreach(le, udev_enumerate_get_list_entry(en)) {
                struct udev_device *d = udev_device_new_from_syspath(w->udev, udev_list_entry_get_name(le));
                if (!d)
                        continue;
                if (is_disk(d))
                        w->cb(UDEV_ACTION_ADD, d, w->userdata);
                udev_device_unref(d);
        }
        udev_enumerate_unref(en);
        w->cb(UDEV_ACTION_SYNCED, NULL, w->userdata);
        return 0;
}

int udev_device_properties(struct udev_device *d, char ***ret) {
        _cleanup_strv_free_ char **l = calloc(1, sizeof(char *));
        struct udev_list_entry *le;

        if (!l)
                return -ENOMEM;
        udev_list_entry_foreach(le, udev_device_get_properties_list_entry(d)) {
                char *kv;
                if (asprintf(&kv, "%s=%s", udev_list_entry_get_name(le), strempty(udev_list_entry_get_value(le))) < 0)
                        return -ENOMEM;
                if (strv_push(&l, kv) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(l);
        return 0;
}
