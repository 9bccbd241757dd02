# SPDX-License-Identifier: LGPL-2.1-or-later
# vm-systemd, the brief boot (VM_SYSTEMD_BOOTS=brief; meson's
# vm-systemd@bookworm): in one boot, boot 1's installation and its checks
# (guest/systemd-install.sh, as /vm/systemd-install.sh), then enable --now
# tunes the disks (the journal's fields, the catalog), a disk hot-added
# while running is tuned, SIGKILL is restarted with the originals adopted,
# apt-get remove restores every attribute and purge leaves nothing.
SYSTEMD_BRIEF=1
. /vm/systemd-install.sh

# --- enable --now --------------------------------------------------------------
systemctl enable --now blkmqd.service > /tmp/enable.log 2>&1
check_eq "systemctl enable --now blkmqd" 0 $?
sed 's/^/# enable| /' /tmp/enable.log
check_eq "ActiveState" active "$(prop blkmqd.service ActiveState)"
check_match "StatusText from blkmqd (sd_notify STATUS=)" "Managing * block devices*" "$(prop blkmqd.service StatusText)"
check "$C (conventional): kyber/256/4096 in sysfs" vm_wait_for 20 tuned_conv $C
check "$P (ZNS path): $ZSCHED in sysfs" vm_wait_for 20 sched_is $P $ZSCHED
check "$C's originals on record: read_ahead_kb 128" record_has $C queue/read_ahead_kb 128
check "journal: MESSAGE_ID=applied, $C scheduler none -> kyber, from blkmqd.service" \
        jhas MESSAGE_ID=$MID_APPLIED BLKMQD_DEVICE=$C BLKMQD_KNOB=queue/scheduler BLKMQD_OLD=none BLKMQD_NEW=kyber _SYSTEMD_UNIT=blkmqd.service
check "catalog: journalctl -x explains MESSAGE_ID=applied" \
        sh -c "journalctl -b -x -q MESSAGE_ID=$MID_APPLIED | grep -q '^ *░░ '"

# --- hotplug while running ---------------------------------------------------------
hotplug_conv conv-add hot3
check "hot-added $H tuned (kyber/256/4096)" vm_wait_for 20 tuned_conv $H
check_match "udev gave $H SYSTEMD_WANTS=blkmqd.service (enabled)" "*SYSTEMD_WANTS=blkmqd.service*" \
        "$(udevadm info -q property /dev/$H | tr '\n' ' ')"

# --- kill -9: restarted, the originals adopted -----------------------------------
n0=$(prop blkmqd.service NRestarts)
pid=$(mainpid)
systemctl kill -s KILL blkmqd.service
check "systemctl kill -s KILL: restarted (Restart=on-failure)" vm_wait_for 30 restarted_from $pid
check_eq "NRestarts after SIGKILL" $((n0 + 1)) "$(prop blkmqd.service NRestarts)"
check "$C still tuned" vm_wait_for 20 tuned_conv $C
check "blkmqctl show $C: originals adopted from the earlier instance" adopted $C
check "journal: MESSAGE_ID=originals adopted for $C" jhas MESSAGE_ID=$MID_ADOPTED BLKMQD_DEVICE=$C
check "$C's record kept across the kill: read_ahead_kb 128 still its original" \
        record_has $C queue/read_ahead_kb 128

# --- remove and purge -----------------------------------------------------------------
remove_and_purge $H
vm_summary
