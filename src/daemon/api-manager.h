/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "autotune-runner.h"
#include "manager.h"
#include "varlink.h"

/* The io.blkmqd.Manager varlink interface: validate, call the manager,
 * reply. Mutating calls that change devices reply once the writes are done. */

typedef struct ApiManager ApiManager;

/* Serves io.blkmqd.Manager on server, and listens to m: its events feed
 * Monitor streams and complete waiting calls. */
int api_manager_new(ApiManager **ret, Manager *m, AutotuneRunner *autotuner, VarlinkServer *server);
ApiManager *api_manager_free(ApiManager *a);
DEFINE_TRIVIAL_CLEANUP_FUNC(ApiManager *, api_manager_free)
