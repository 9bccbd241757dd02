/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

#include "varlink.h"
#include "zone-service.h"

/* io.blkmqd.Zones: decodes a call into a request to the zone service and
 * encodes its result, errors and "more" progress. s outlives the server's
 * calls into it (the server is freed after the service's last callbacks). */
int zones_varlink_add(VarlinkServer *server, ZoneService *s);
