# SPDX-License-Identifier: LGPL-2.1-or-later
# vm-systemd, boot 1 (systemd as PID 1): the packages installed with apt
# from /root/debs (no network: the image holds their dependencies); nothing
# is enabled, nothing starts, no queue attribute changes.
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
timeout 60 systemctl is-system-running --wait > /dev/null 2>&1
systemd-analyze blame 2>/dev/null | head -n 8 | sed 's/^/# blame| /'
echo "# $(systemd-analyze time 2>&1 | head -n1)"
vm_summary
