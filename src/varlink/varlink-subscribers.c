/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <errno.h>
#include <stdlib.h>

#include "varlink-subscribers.h"

static void on_disconnect(VarlinkCall *call, void *userdata) {
        VarlinkSubscribers *s = userdata;

        for (VarlinkSubscriber **p = &s->head; *p; p = &(*p)->next)
                if ((*p)->call == call) {
                        VarlinkSubscriber *sub = *p;
                        *p = sub->next;
                        varlink_call_unref(sub->call);
                        free(sub);
                        return;
                }
}

int varlink_subscribers_add(VarlinkSubscribers *s, VarlinkCall *call) {
        VarlinkSubscriber *sub = calloc(1, sizeof *sub);

        if (!sub)
                return -ENOMEM;
        sub->call = varlink_call_ref(call);
        sub->next = s->head;
        s->head = sub;
        varlink_call_set_disconnect_callback(call, on_disconnect, s);
        return 0;
}

void varlink_subscribers_notify(VarlinkSubscribers *s, json_t *params) {
        /* Serialized once for all: with 50 Monitor streams and a hotplug
         * storm this was a seventh of the event loop's time. */
        char *text = s->head && s->head->next ? varlink_notify_serialize(params) : NULL;

        for (VarlinkSubscriber *sub = s->head, *next; sub; sub = next) {
                /* A failed notify drops the connection; its disconnect
                 * callback may run from here and free sub. */
                next = sub->next;
                if (text)
                        varlink_call_notify_serialized(sub->call, text);
                else
                        varlink_call_notify(sub->call, json_incref(params));
        }
        free(text);
        json_decref(params);
}

void varlink_subscribers_clear(VarlinkSubscribers *s) {
        while (s->head) {
                VarlinkSubscriber *sub = s->head;
                s->head = sub->next;
                varlink_call_set_disconnect_callback(sub->call, NULL, NULL);
                varlink_call_unref(sub->call);
                free(sub);
        }
}
