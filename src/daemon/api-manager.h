/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "manager.h"
#include "varlink.h"

/* The io.blkmqd.Manager varlink interface: validate, call the manager,
 * reply. Mutating calls that change devices reply once the writes are done. */

typedef struct ApiManager ApiManager;

int api_manager_new(ApiManager **ret, Manager *m, VarlinkServer *server);
ApiManager *api_manager_free(ApiManager *a);
/* Manager events: feeds Monitor streams and completes waiting calls. */
void api_manager_event(Manager *m, ManagerEventType type, Device *d, void *userdata);
