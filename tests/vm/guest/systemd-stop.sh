# SPDX-License-Identifier: LGPL-2.1-or-later
# vm-systemd, boot "stop" (systemd as PID 1, packages installed at boot 1,
# nothing enabled): the README's quick start turns blkmqd on (its block
# marked quickstart-systemd: enable, as the README has it, NVMe name
# replaced by this guest's); then `systemctl stop blkmqd.service` sticks:
# nothing listens, and a read (blkmqctl status as root and as a user), bash's
# completion and a profile timer's service leave blkmqd.service inactive
# and every queue attribute as the stop restored it; the socket cannot be
# enabled alone; a start tunes and listens again, a kill -9
# restarts with its socket; a socket started by hand listens alone: the
# completion starts nothing, a call of blkmqctl does. Last, the README's off switch
# (quickstart-systemd: off) leaves nothing listening, timed or enabled.
# Ends with blkmqd disabled and stopped, every attribute as at this boot's
# start (boot 2 expects that).
. /vm/daemon-lib.sh
. /vm/systemd-lib.sh
COMPLETION=/usr/share/bash-completion/completions/blkmqctl
SOCK=/run/blkmqd/io.blkmqd

disks_boot
check_eq "nothing enabled or running at boot" "inactive inactive" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState)"
snap_all /tmp/orig

# complete USER LINE...: the names bash's completion offers for the words
# (the last one being completed), as bash calls _blkmqctl: the installed
# file sourced, COMP_WORDS, COMP_CWORD, COMP_LINE, COMP_POINT set.
complete_as() {
        _u=$1
        shift
        runuser -u $_u -- bash -c '
                . '$COMPLETION' || exit 3
                COMP_WORDS=("$@")
                COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
                COMP_LINE="$*"
                COMP_POINT=${#COMP_LINE}
                COMPREPLY=()
                _blkmqctl blkmqctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
                printf "%s\n" "${COMPREPLY[@]}"' _ "$@"
}
listening() { systemctl list-sockets --no-legend 2>/dev/null | grep -q "$SOCK"; }
# untouched WHEN: blkmqd.service did not start again since the stop (its
# InactiveEnterTimestamp, the stop's, is still the last change: no start
# since), and $C is as the stop left it
untouched() {
        check_eq "$1: blkmqd.service still inactive" inactive "$(prop blkmqd.service ActiveState)"
        check_eq "$1: blkmqd.service not started since the stop (InactiveExitTimestampMonotonic)" \
                "$t_exit_stop" "$(prop blkmqd.service InactiveExitTimestampMonotonic)"
        check "$1: no blkmqd process" no_blkmqd
        check "$1: nothing listens at $SOCK" sh -c "! systemctl list-sockets --no-legend | grep -q $SOCK"
        check "$1: $C's queue attributes as the stop restored them" same_as /tmp/orig $C
}

# --- the README's quick start: enable, show, verify ------------------------------
# The README names nvme0n1; this guest's conventional NVMe disk is $C.
sed "s/nvme0n1/$C/g" /vm/quickstart-enable.sh > /tmp/qs-enable.sh
sed 's/^/# quick start| /' /tmp/qs-enable.sh
sh -c 'sudo() { "$@"; }; set -e; . /tmp/qs-enable.sh' > /tmp/qs-enable.out 2>&1
rc=$?
sed 's/^/# quick start out| /' /tmp/qs-enable.out | head -n 40
check_eq "README quick start, enable (systemctl enable --now, blkmqctl show $C, blkmqctl verify)" 0 $rc
check_eq "blkmqd.service enabled" enabled "$(systemctl is-enabled blkmqd.service)"
check_eq "blkmqd.service and its socket active" "active active" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState)"
check "$C tuned (kyber/256/4096)" vm_wait_for 20 tuned_conv $C
check "quick start: show printed $C's settings" grep -q "queue/scheduler .*kyber" /tmp/qs-enable.out
check "quick start: verify found no drift" grep -q " 0 drifted" /tmp/qs-enable.out
check "the socket listens ($SOCK in systemctl list-sockets)" listening
names=$(complete_as tester blkmqctl show "")
check_match "completion while active: device names from blkmqd ($C among them)" "*$C*" "$(echo $names)"
check_eq "blkmqd.socket cannot be enabled alone (is-enabled: static, no [Install])" static \
        "$(systemctl is-enabled blkmqd.socket 2>&1)"

# --- systemctl stop blkmqd.service sticks ------------------------------------------
systemctl stop blkmqd.service
check_eq "stop: blkmqd.service and its socket inactive (PartOf=)" "inactive inactive" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState)"
t_exit_stop=$(prop blkmqd.service InactiveExitTimestampMonotonic)
check "stop: every queue attribute of $C as before the start" same_as /tmp/orig $C
check "stop: $SOCK gone" sh -c "[ ! -e $SOCK ]"

blkmqctl status > /tmp/status.out 2>&1
rc=$?
sed 's/^/# status as root| /' /tmp/status.out
check_eq "blkmqctl status as root after the stop: exit 2, not reachable" 2 $rc
check "it says so (is blkmqd running?)" grep -q "is blkmqd running" /tmp/status.out
untouched "status as root"
runuser -u tester -- blkmqctl status > /tmp/status.out 2>&1
rc=$?
sed 's/^/# status as tester| /' /tmp/status.out
check_eq "blkmqctl status as tester after the stop: exit 2" 2 $rc
untouched "status as tester"
blkmqctl show $C > /dev/null 2>&1
check_eq "blkmqctl show $C as root: exit 2" 2 $?
untouched "show as root"

for u in root tester; do
        names=$(complete_as $u blkmqctl show "")
        check_eq "completion of 'blkmqctl show ' as $u after the stop: no names" "" "$(echo $names)"
        complete_as $u blkmqctl zones release "" > /dev/null
        untouched "completion as $u"
done

t=$(date +%s)
systemctl start blkmqd-profile@offpeak.service > /tmp/prof.out 2>&1
rc=$?
sed 's/^/# profile service| /' /tmp/prof.out
check "systemctl start blkmqd-profile@offpeak.service after the stop fails (rc $rc)" [ $rc != 0 ]
journalctl -b -q --since @$t -u blkmqd-profile@offpeak.service | sed 's/^/# journal| /'
check "journal: Dependency failed for the profile service (Requisite=blkmqd.service)" \
        sh -c "journalctl -b -q --since @$t -u blkmqd-profile@offpeak.service | grep -q 'Dependency failed'"
untouched "profile service"
systemctl start blkmqd-profile-clear.service > /dev/null 2>&1
check "systemctl start blkmqd-profile-clear.service after the stop fails" [ $? != 0 ]
untouched "profile-clear service"
# A profile timer's own firing: the same service, started by the timer.
mkdir -p /etc/systemd/system/blkmqd-profile@offpeak.timer.d
printf '[Timer]\nOnCalendar=\nOnActiveSec=1s\nAccuracySec=1s\nPersistent=no\n' \
        > /etc/systemd/system/blkmqd-profile@offpeak.timer.d/50-vmtest.conf
systemctl daemon-reload
t=$(date +%s)
systemctl start blkmqd-profile@offpeak.timer
sleep 4
journalctl -b -q --since @$t -u blkmqd-profile@offpeak.service -u blkmqd-profile@offpeak.timer | sed 's/^/# journal| /'
check "the timer fired and its service failed its dependency" \
        sh -c "journalctl -b -q --since @$t -u blkmqd-profile@offpeak.service | grep -q 'Dependency failed'"
untouched "profile timer"
systemctl stop blkmqd-profile@offpeak.timer
rm -rf /etc/systemd/system/blkmqd-profile@offpeak.timer.d
systemctl daemon-reload

# Socket-only: the socket has no [Install], so enabling it links nothing
# and it starts at no boot: no read can start blkmqd through it then.
systemctl enable blkmqd.socket > /tmp/sock.out 2>&1
sed 's/^/# enable socket| /' /tmp/sock.out
check_eq "systemctl enable blkmqd.socket links nothing (no [Install])" "" \
        "$(find /etc/systemd/system -name 'blkmqd.socket*' 2>/dev/null)"
check_eq "blkmqd.socket still inactive" inactive "$(prop blkmqd.socket ActiveState)"
untouched "socket enabled alone"

# The one way to a socket that listens with the service stopped: started by
# hand. The completion must not be the call that starts blkmqd then.
systemctl start blkmqd.socket
check_eq "blkmqd.socket started by hand, blkmqd.service stopped" "active inactive" \
        "$(prop blkmqd.socket ActiveState) $(prop blkmqd.service ActiveState)"
for u in root tester; do
        names=$(complete_as $u blkmqctl show "")
        check_eq "completion as $u, the socket listening alone: no names" "" "$(echo $names)"
        check_eq "completion as $u: blkmqd.service not started (InactiveExitTimestampMonotonic), no process" \
                "$t_exit_stop " "$(prop blkmqd.service InactiveExitTimestampMonotonic) $(blkmqd_procs)"
done
check "completion: $C as the stop restored it" same_as /tmp/orig $C
# A call of blkmqctl does start it: a socket started by hand is armed.
runuser -u tester -- blkmqctl status > /dev/null 2>&1
check_eq "blkmqctl status as tester through the socket started by hand" 0 $?
check_eq "it started blkmqd.service (socket activation)" active "$(prop blkmqd.service ActiveState)"

# --- a start tunes and listens again ------------------------------------------------
systemctl start blkmqd.service
check_eq "start: blkmqd.service and its socket active" "active active" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState)"
check "start: $C tuned again" vm_wait_for 20 tuned_conv $C
check "start: the socket listens again" listening
runuser -u tester -- blkmqctl status > /dev/null 2>&1
check_eq "blkmqctl status as tester" 0 $?

# --- kill -9: Restart=on-failure, and the socket with it ------------------------------
pid=$(mainpid)
n0=$(prop blkmqd.service NRestarts)
systemctl kill -s KILL blkmqd.service
check "kill -9: restarted (Restart=on-failure)" vm_wait_for 30 restarted_from $pid
check_eq "NRestarts" $((n0 + 1)) "$(prop blkmqd.service NRestarts)"
check "after the restart: the socket active and listening" \
        vm_wait_for 10 sh -c "[ \"\$(systemctl show -P ActiveState blkmqd.socket)\" = active ] && systemctl list-sockets --no-legend | grep -q $SOCK"
check "after the restart: $C tuned" vm_wait_for 20 tuned_conv $C
runuser -u tester -- blkmqctl status > /tmp/status.out 2>&1
check_eq "after the restart: blkmqctl status as tester" 0 $?
pid=$(mainpid)
systemctl kill -s KILL blkmqd.service
check "a second kill -9: restarted again" vm_wait_for 30 restarted_from $pid
check_eq "and blkmqctl status answers" 0 "$(blkmqctl status > /dev/null 2>&1; echo $?)"

# --- the README's off switch -------------------------------------------------------
systemctl enable --now blkmqd-profile-clear.timer > /dev/null 2>&1
systemctl start blkmqd-profile@offpeak.timer
check "before the off switch: blkmqd timers listed (list-timers)" \
        sh -c "systemctl list-timers --no-legend | grep -q blkmqd"
sed 's/^/# quick start| /' /vm/quickstart-off.sh
sh -c 'sudo() { "$@"; }; set -e; . /vm/quickstart-off.sh' > /tmp/qs-off.out 2>&1
rc=$?
sed 's/^/# quick start out| /' /tmp/qs-off.out
check_eq "README quick start, off" 0 $rc
systemctl list-sockets --all --no-legend | grep blkmqd | sed 's/^/# list-sockets| /'
systemctl list-timers --all --no-legend | grep blkmqd | sed 's/^/# list-timers| /'
check_eq "off: nothing of blkmqd listening (systemctl list-sockets)" "" "$(systemctl list-sockets --no-legend | grep blkmqd)"
check_eq "off: no blkmqd timer (systemctl list-timers)" "" "$(systemctl list-timers --no-legend | grep blkmqd)"
check_eq "off: blkmqd.service and the clear timer disabled" "disabled disabled" \
        "$(systemctl is-enabled blkmqd.service blkmqd-profile-clear.timer | tr '\n' ' ' | sed 's/ $//')"
check_eq "off: every unit inactive" "inactive inactive inactive inactive" \
        "$(prop blkmqd.service ActiveState) $(prop blkmqd.socket ActiveState) $(prop blkmqd-profile-clear.timer ActiveState) $(prop blkmqd-profile@offpeak.timer ActiveState)"
check "off: no blkmqd process" no_blkmqd
for d in $R $C $P $Z; do
        check "off: $d's queue attributes as at this boot's start" same_as /tmp/orig $d
done
blkmqctl status > /dev/null 2>&1
check_eq "off: blkmqctl status exits 2" 2 $?
check_eq "off: and starts nothing" inactive "$(prop blkmqd.service ActiveState)"
vm_summary
