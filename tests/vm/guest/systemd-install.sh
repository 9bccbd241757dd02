# SPDX-License-Identifier: LGPL-2.1-or-later
# vm-systemd, boot 1 (systemd as PID 1): the packages installed with apt
# from /root/debs (no network: the image holds their dependencies); nothing
# is enabled, nothing starts, no queue attribute changes. Sourced by
# guest/systemd-brief.sh (SYSTEMD_BRIEF=1), which goes on in the same boot.
. /vm/daemon-lib.sh
. /vm/systemd-lib.sh

check_eq "PID 1 is systemd" systemd "$(cat /proc/1/comm)"
systemctl --failed --no-legend | sed 's/^/# failed unit| /'
check_eq "no unit failed at boot" 0 "$(systemctl --failed --no-legend | wc -l)"
disks_boot
check "boot disks: conventional, ZNS head and path" [ -n "$C" -a -n "$Z" -a -n "$P" ]
snap_all $ST/boot1

v=$(cat /vm/deb-version)
t0=$(vm_uptime)
apt-get install -y -q --no-install-recommends /root/debs/blkmqd_${v}_amd64.deb \
        /root/debs/libblkmq0_${v}_amd64.deb > /tmp/apt.log 2>&1
rc=$?
sed 's/^/# apt| /' /tmp/apt.log | tail -n 12
check_eq "apt-get install of blkmqd $v and libblkmq0 (no network)" 0 $rc
echo "# installed in $(awk -v a=$t0 -v b=$(vm_uptime) 'BEGIN{print b-a}') s"
check_eq "dpkg: blkmqd installed" "install ok installed $v" "$(dpkg-query -W -f='${Status} ${Version}' blkmqd)"
udevadm settle -t 20

# (the socket has no [Install]: static, it starts and stops with the service)
for u in blkmqd.service:disabled blkmqd.socket:static blkmqd-profile-clear.timer:disabled; do
        check_eq "${u%:*} not enabled" ${u#*:} "$(systemctl is-enabled ${u%:*} 2>&1)"
        check_eq "${u%:*} not started" inactive "$(prop ${u%:*} ActiveState)"
done
check_eq "no blkmqd unit link under /etc or /run" "" \
        "$(find /etc/systemd /run/systemd/system -name 'blkmqd*' 2>/dev/null)"
check "no blkmqd process" no_blkmqd
check_eq "blkmqd.service never ran this boot (journal)" 0 "$(jcount _SYSTEMD_UNIT=blkmqd.service)"
for d in $R $C $P $Z; do
        check "$d: queue attributes unchanged by the installation" same_as $ST/boot1 $d
done
# (the redirection inside: on check itself it would hide check's own line)
check "systemd knows the units" sh -c 'systemctl cat blkmqd.service blkmqd.socket blkmqd-profile@x.timer > /dev/null'
# The installed units and udev rule as this systemd reads them (252 and 257
# differ in the directives they know): systemd-analyze verify, and udevadm
# verify where udev has it (254 and later).
systemd-analyze verify --man=no --recursive-errors=no blkmqd.service blkmqd.socket \
        blkmqd-profile@x.service blkmqd-profile@x.timer blkmqd-profile-clear.service \
        blkmqd-profile-clear.timer > /tmp/analyze-verify.txt 2>&1
sed 's/^/# analyze verify| /' /tmp/analyze-verify.txt
check_eq "systemd-analyze verify (systemd $SD_VERSION): nothing about blkmqd's units" "" \
        "$(grep -i blkmqd /tmp/analyze-verify.txt | tr '\n' ' ')"
rules=$(dpkg-query -L blkmqd | grep '/rules.d/60-blkmqd.rules$')
if [ "$SD_VERSION" -ge 254 ]; then
        udevadm verify --resolve-names=never "$rules" > /tmp/udev-verify.txt 2>&1
        rc=$?
        sed 's/^/# udevadm verify| /' /tmp/udev-verify.txt
        check_eq "udevadm verify $rules (systemd $SD_VERSION)" 0 $rc
fi
timeout 60 systemctl is-system-running --wait > /dev/null 2>&1
systemd-analyze blame 2>/dev/null | head -n 8 | sed 's/^/# blame| /'
echo "# $(systemd-analyze time 2>&1 | head -n1)"
# guest/systemd-brief.sh goes on in this boot
[ -n "${SYSTEMD_BRIEF:-}" ] || vm_summary
