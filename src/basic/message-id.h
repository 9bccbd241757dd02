/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/* The MESSAGE_ID of each kind of event blkmqd logs, as systemd's daemons
 * give theirs (sd-messages.h): `journalctl MESSAGE_ID=…` finds them, and
 * the journal catalog (systemd/blkmqd.catalog, installed to
 * /usr/lib/systemd/catalog/) explains each and says what to do. Fixed:
 * scripts and the guest tests search for them; never change one, add new.
 *
 * Beside MESSAGE, such an entry carries the fields that say what it is
 * about (log_struct()): BLKMQD_DEVICE, BLKMQD_KNOB, BLKMQD_OLD, BLKMQD_NEW,
 * BLKMQD_SECTION, BLKMQD_LEASE, BLKMQD_ZONE, BLKMQD_LABEL, BLKMQD_SHA256,
 * BLKMQD_SHA256_READ, BLKMQD_VERDICT, BLKMQD_REASON, BLKMQD_PID,
 * BLKMQD_RECORD, BLKMQD_POLICY. The comment above each ID names the fields its entries
 * carry; tests/integration/test_journal.py reads each back with them. */

/* A value written: BLKMQD_DEVICE, BLKMQD_KNOB, BLKMQD_OLD, BLKMQD_NEW. */
#define BLKMQD_MESSAGE_CHANGE_APPLIED "4c924cfe14914bf589305f00f0167f4d"
/* An original written back: BLKMQD_DEVICE, BLKMQD_KNOB, BLKMQD_OLD, BLKMQD_NEW. */
#define BLKMQD_MESSAGE_RESTORE "7bbaaee7e01f412da4e43d21077d090d"
/* An original not written back (the kernel refused it or kept another
 * value; a device gone is no refusal): BLKMQD_DEVICE, BLKMQD_KNOB,
 * BLKMQD_NEW (the original). */
#define BLKMQD_MESSAGE_RESTORE_REFUSED "14f9f4f6fa0f488c9ecc55b9b2cc7f72"
/* A closed-loop trial decided: BLKMQD_DEVICE, BLKMQD_VERDICT, BLKMQD_REASON,
 * BLKMQD_OLD (the setting before), BLKMQD_NEW (the setting in force after). */
#define BLKMQD_MESSAGE_TRIAL_DECISION "bcd174fd7dfb4993a8849ab106c38508"
/* A sealed object's data no longer matches its SHA-256: BLKMQD_DEVICE,
 * BLKMQD_ZONE, BLKMQD_LEASE, BLKMQD_LABEL. */
#define BLKMQD_MESSAGE_OBJECT_DAMAGED "b2016f31101f4a079677cd1e35952e29"
/* A zone marked failed: BLKMQD_DEVICE, BLKMQD_ZONE, BLKMQD_LEASE, BLKMQD_LABEL. */
#define BLKMQD_MESSAGE_ZONE_FAILED "a34415b27daa4b9e991e091d568ae920"
/* Originals an earlier instance put on record, adopted: BLKMQD_DEVICE,
 * BLKMQD_PID (the earlier instance), BLKMQD_RECORD (the file). */
#define BLKMQD_MESSAGE_ORIGINALS_ADOPTED "0854cebe77424a898c8480628de28cc3"
/* A managed setting written by something else (drift), once per device,
 * attribute and value: BLKMQD_DEVICE, BLKMQD_KNOB (the attribute),
 * BLKMQD_OLD (the value blkmqd left), BLKMQD_NEW (the value read now),
 * BLKMQD_POLICY (what DriftPolicy= does about it: report, reapply, keep). */
#define BLKMQD_MESSAGE_DRIFT "545a9ec00fca429390d340b53788ec10"
