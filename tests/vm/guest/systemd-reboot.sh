# SPDX-License-Identifier: LGPL-2.1-or-later
# vm-systemd, boot 3 (blkmqd enabled, running when boot 2 powered off): the
# previous boot's stop in the journal; blkmqd up at boot (boot -> READY);
# hotplug through the udev rule when stopped-but-enabled and when disabled;
# apt-get remove restores every original, purge leaves nothing.
. /vm/daemon-lib.sh
. /vm/systemd-lib.sh

disks_boot
# --- 12. the poweroff at the end of boot 2 ---------------------------------------
# Boot 2 stopped and restarted blkmqd many times, each stop restoring: only
# the stop of the instance it left running (InvocationID in $ST), after its
# last words in the journal (nothing but the poweroff stops it after them),
# counts. stop_window (systemd-lib.sh) reads it in the journal's order.
INV=$(cat $ST/boot2-invocation 2>/dev/null)
check "boot 2 left its blkmqd.service InvocationID (${INV:-none})" [ -n "$INV" ]
# The conventional disk as boot 2 named it, in its journal ($C is this
# boot's name: it was nvme0n1 in boot 2 and nvme1n1 here in one run).
C2=$(cat $ST/boot2-conv 2>/dev/null)
check "boot 2 left the conventional disk's name (${C2:-none}; ${C:-none} in this boot)" [ -n "$C2" ]
stop_window "$INV" "boot 2 ends" /tmp/stopwin.env
sed 's/^/# boot -1| /' /tmp/stopwin.env.log | head -n 80
echo "# poweroff window: $(cat /tmp/stopwin.env | tr '\n' ' ')"
check "journal -b -1: boot 2's last words (entry $mark), then one stop of blkmqd.service (entry $stopping): the poweroff's" \
        sh -c '[ "$1" -gt 0 ] && [ "$2" -gt "$1" ] && [ "$3" = 1 ]' _ $mark $stopping $nstopping
check "journal -b -1: that stop ended, Deactivated successfully (entry $deactivated), Stopped (entry $stopped)" \
        sh -c '[ "$1" -gt 0 ] && [ "$2" -gt "$1" ] && [ "$3" -ge "$2" ]' _ $stopping $deactivated $stopped
check "journal -b -1: shutdown.target (entry $shutdown) came after blkmqd.service stopped (entry $stopped)" \
        sh -c '[ "$1" -gt 0 ] && [ "$2" -gt "$1" ]' _ $stopped $shutdown
check_eq "journal -b -1: no failure, timeout or kill in that stop" 0 "$nfailed"
check_eq "journal -b -1: no restore refused at the poweroff" 0 "$nrefused"
# Restored before systemd considered the unit stopped (and so before
# shutdown.target, the unmounts and the disks' removal): the restore entries
# of that instance lie after boot 2's last words and before its
# "Deactivated successfully" ($nbefore of them before systemd's "Stopping",
# which it logs after sending SIGTERM).
check "journal -b -1: $nrestore restore entries of instance $INV at the poweroff, entries $rfirst..$rlast, after boot 2's last words ($mark) and before Deactivated successfully ($deactivated)" \
        sh -c '[ "$1" -gt 0 ] && [ "$2" -gt "$3" ] && [ "$4" -lt "$5" ]' _ $nrestore $rfirst $mark $rlast $deactivated
check_eq "journal -b -1: no restore of that instance after Deactivated successfully" 0 "$nafter"
check "journal -b -1: instance $INV changed $C2 (MESSAGE_ID=applied)" sh -c 'case " $1 " in *" $2 "*) ;; *) exit 1 ;; esac' _ "$applied" "$C2"
check_eq "journal -b -1: every device that instance changed ($applied) restored at the poweroff ($restored)" "" \
        "$(missing_from "$applied" "$restored")"
check "journal -b -1: in that window, MESSAGE_ID=restore of $C2's scheduler back to none" \
        window_has /tmp/stopwin.env.log "$mark" "$deactivated" "$MID_RESTORE $C2 queue/scheduler -> none |"

# --- 2. started at boot --------------------------------------------------------
check_eq "blkmqd.service active at boot (enabled)" active "$(prop blkmqd.service ActiveState)"
t_ready=$(prop blkmqd.service ActiveEnterTimestampMonotonic)
t_exit=$(prop blkmqd.service InactiveExitTimestampMonotonic)
t_sysinit=$(prop sysinit.target ActiveEnterTimestampMonotonic)
echo "# TIMING boot -> READY=1: $(usec_s $t_ready) s after the kernel started; start job -> READY $(usec_ms $t_exit $t_ready) ms (under TCG)"
echo "$(usec_s $t_ready)" > $ST/boot-to-ready-s
# The same from the journal's monotonic stamps (since the kernel's start):
# systemd's "Started" entry of blkmqd.service (MESSAGE_ID unit started),
# which it writes when READY=1 comes.
j_ready=$(journalctl -b -o json MESSAGE_ID=39f53479d3a045ac8e11786248231fbf UNIT=blkmqd.service 2>/dev/null |
        head -n1 | sed -n 's/.*"__MONOTONIC_TIMESTAMP" *: *"\([0-9]*\)".*/\1/p')
echo "# TIMING boot -> READY=1 (journal, systemd $SD_VERSION, kernel $(uname -r)): $(usec_s ${j_ready:-0}) s after the kernel started"
check "journal: blkmqd.service started at this boot (${j_ready:-no} us)" [ -n "$j_ready" ]
# (a unit never active has ActiveEnterTimestampMonotonic 0: not "before")
check "READY ($t_ready us) before sysinit.target ($t_sysinit us) (Before=sysinit.target)" \
        sh -c '[ "$1" -gt 0 ] && [ "$1" -le "$2" ]' _ "$t_ready" "$t_sysinit"
check "$C tuned at boot" vm_wait_for 20 tuned_conv $C

# --- 3. hotplug: stopped but enabled -> the udev rule starts it -----------------
systemctl stop blkmqd.service blkmqd.socket
check_eq "stopped (service and socket), still enabled" "inactive inactive enabled" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState) $(systemctl is-enabled blkmqd.service)"
hotplug_conv conv-add hot3
check "udev's SYSTEMD_WANTS started blkmqd.service" vm_wait_for 20 active_is blkmqd.service active
check_match "udev gave $H SYSTEMD_WANTS=blkmqd.service" "*SYSTEMD_WANTS=blkmqd.service*" "$(udevadm info -q property /dev/$H | tr '\n' ' ')"
check "hot-added $H tuned" vm_wait_for 20 tuned_conv $H

# --- disabled -> a hotplug starts nothing -----------------------------------------
systemctl disable --now blkmqd.service blkmqd.socket > /dev/null 2>&1
check_eq "disabled and stopped (service and socket; the socket is static: no [Install])" "inactive inactive disabled static" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState) $(systemctl is-enabled blkmqd.service blkmqd.socket | tr '\n' ' ' | sed 's/ $//')"
hotplug_conv conv-add2 hot4
udevadm settle -t 20
sleep 3
check_eq "disabled: the hotplug started nothing" inactive "$(prop blkmqd.service ActiveState)"
check "no blkmqd process" no_blkmqd
check_eq "udev gave $H no SYSTEMD_WANTS" "" "$(udevadm info -q property /dev/$H | grep SYSTEMD_WANTS)"
check_eq "$H untouched" "none 128" "$(sched $H) $(qattr $H read_ahead_kb)"

# --- 11. remove and purge ----------------------------------------------------------
systemctl enable --now blkmqd.service > /dev/null 2>&1
check "enabled and started again" vm_wait_for 20 tuned_conv $C
check "$H tuned" vm_wait_for 20 tuned_conv $H

# --- 8. features inside the sandbox: probes, IRQ affinity, no EPERM/EROFS ------
pid=$(mainpid)
r0=$(awk '{print $1}' /sys/block/$C/stat)
sleep 12
r1=$(awk '{print $1}' /sys/block/$C/stat)
check "latency probes read $C inside the sandbox (reads $r0 -> $r1, /sys/block/$C/stat)" [ "$r1" -gt "$r0" ]
blkmqctl latency $C > /tmp/lat.out 2>&1
check_eq "blkmqctl latency $C" 0 $?
head -n 4 /tmp/lat.out | sed 's/^/# latency| /'
# IRQ affinity of the root disk's PCI function (virtio: its config vector
# is not managed by the kernel, the queue vectors are).
fn=$(readlink -f /sys/block/$R/device/..)
mkdir -p /etc/blkmqd/blkmqd.conf.d
printf '[Device rotational]\nCPUAffinity=1\n' > /etc/blkmqd/blkmqd.conf.d/50-vmtest-irq.conf
cfg=
for i in $(ls $fn/msi_irqs 2>/dev/null); do
        grep -q "^ *$i:.*config" /proc/interrupts && cfg=$i
done
echo "# $R ($fn): config vector IRQ ${cfg:-none}, affinity $(cat /proc/irq/$cfg/smp_affinity_list 2>/dev/null)"
t=$(date +%s)
systemctl reload blkmqd.service
echo "# reload rc $?"
journalctl -q -b --since @$t | grep -i -e irq -e affinity -e blkmqctl | sed 's/^/# reload| /' | head -n 12
irq_all=
for i in $(ls $fn/msi_irqs 2>/dev/null); do irq_all="$irq_all $i:$(cat /proc/irq/$i/smp_affinity_list 2>/dev/null)"; done
echo "# $R IRQs after the reload:$irq_all"
check_eq "the config vector (IRQ $cfg, not kernel-managed) of $R steered to CPU 1 (/proc/irq)" 1 \
        "$(cat /proc/irq/$cfg/smp_affinity_list 2>/dev/null)"
rm -f /etc/blkmqd/blkmqd.conf.d/50-vmtest-irq.conf
systemctl reload blkmqd.service
journalctl -b -q -u blkmqd.service | grep -i -e 'operation not permitted' -e 'read-only file system' -e 'permission denied' | sed 's/^/# denied| /'
check_eq "no EPERM/EROFS/EACCES from blkmqd in this boot's journal" 0 \
        "$(journalctl -b -q -u blkmqd.service | grep -c -i -e 'operation not permitted' -e 'read-only file system' -e 'permission denied')"

# --- 9. profiles by timer -------------------------------------------------------
mkdir -p /etc/systemd/system/blkmqd-profile@offpeak.timer.d /etc/systemd/system/blkmqd-profile-clear.timer.d
for t in blkmqd-profile@offpeak.timer.d blkmqd-profile-clear.timer.d; do
        printf '[Timer]\nOnCalendar=\nOnActiveSec=2s\nAccuracySec=1s\nPersistent=no\n' > /etc/systemd/system/$t/50-vmtest.conf
done
systemctl daemon-reload
systemctl start blkmqd-profile@offpeak.timer
check "the offpeak timer fired: $C nr_requests 512 ([Profile offpeak])" vm_wait_for 30 attr_is $C nr_requests 512
check_eq "blkmqd-profile@offpeak.service succeeded" success "$(prop blkmqd-profile@offpeak.service Result)"
systemctl start blkmqd-profile-clear.timer
check "the clear timer fired: $C nr_requests 256 again" vm_wait_for 30 attr_is $C nr_requests 256
check_eq "blkmqd-profile-clear.service succeeded" success "$(prop blkmqd-profile-clear.service Result)"
systemctl stop blkmqd-profile@offpeak.timer blkmqd-profile-clear.timer
rm -rf /etc/systemd/system/blkmqd-profile@offpeak.timer.d /etc/systemd/system/blkmqd-profile-clear.timer.d
systemctl daemon-reload

# (the drop-in directory this test made is an admin's, not the package's:
# remove_and_purge takes it away between the remove and the purge)
remove_and_purge $H
timeout 60 systemctl is-system-running --wait > /dev/null 2>&1
echo "# $(systemd-analyze time 2>&1 | head -n1)"
vm_summary
