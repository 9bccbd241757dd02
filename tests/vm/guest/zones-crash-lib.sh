# SPDX-License-Identifier: LGPL-2.1-or-later
# The stagers and the checks of the guest crash rounds (zones-crash.sh:
# kill -9; power-cut.sh: power cuts), sourced after /vm/daemon-lib.sh.
# Needs Z and DEV (vm_need_zoned), STAGERS; POWER_ECHO=1 also prints each
# stage begun (POWER-STAGING LABEL), each acknowledged seal (POWER-ACK K
# LEASE SHA256 LBA SIZE) and release (POWER-REL K LEASE, then POWER-RELD K
# LEASE once acknowledged, or once check_round found it went through) on the
# console, where the host keeps them across a power cut. POWER_RELEASE=0:
# the stagers never release (power-cut.py's negative controls: a release in
# flight at the cut excuses a seal the crash state lost, and its reset
# flushes the ZNS drive).
POWER_ECHO=${POWER_ECHO:-}
POWER_RELEASE=${POWER_RELEASE:-1}

readback() {
        dd if=$DEV bs=512 skip=$1 count=$((($2 + 511) / 512)) 2>/dev/null | head -c $2 | sha256sum | cut -d' ' -f1
}

# stager K ROUND: until /tmp/stop exists. Acknowledged seals go to /tmp/ack.K as
# "lease sha256 lba size"; a release in flight is in /tmp/rel.K.
stager() {
        k=$1 round=$2 n=0 full=0
        while [ ! -e /tmp/stop ]; do
                n=$((n + 1))
                if [ "$POWER_RELEASE" = 1 ] && [ -s /tmp/ack.$k ] && { [ $full = 1 ] || [ $((RANDOM % 3)) = 0 ]; }; then
                        full=0
                        set -- $(head -n1 /tmp/ack.$k)
                        echo "$1" > /tmp/rel.$k
                        [ -z "$POWER_ECHO" ] || echo "POWER-REL $k $1"
                        if blkmqctl zones release $1 >/dev/null 2>&1; then
                                [ -z "$POWER_ECHO" ] || echo "POWER-RELD $k $1"
                                grep -v "^$1 " /tmp/ack.$k > /tmp/ack.$k.new; mv /tmp/ack.$k.new /tmp/ack.$k
                                rm -f /tmp/rel.$k
                        fi
                        continue
                fi
                case $((RANDOM % 4)) in 0) size=1 ;; 1) size=4096 ;; 2) size=100000 ;; *) size=1048577 ;; esac
                head -c $size /dev/urandom > /tmp/s$k.bin
                want=$(sha256sum < /tmp/s$k.bin | cut -d' ' -f1)
                [ -z "$POWER_ECHO" ] || echo "POWER-STAGING r$round-s$k-$n"
                blkmqctl stage /tmp/s$k.bin --device $Z --label r$round-s$k-$n --settle-timeout=60 > /tmp/s$k.out 2> /tmp/s$k.err
                rc=$?
                if [ $rc = 0 ]; then
                        echo "$(fld /tmp/s$k.out Lease) $(fld /tmp/s$k.out SHA256) $(fld /tmp/s$k.out 'Start LBA') $size" >> /tmp/ack.$k
                        [ -z "$POWER_ECHO" ] || echo "POWER-ACK $k $(tail -n1 /tmp/ack.$k)"
                        [ "$(fld /tmp/s$k.out SHA256)" = "$want" ] || echo "stager $k: stage printed a SHA256 not the file's" >> /tmp/odd
                elif [ $rc = 8 ]; then
                        full=1
                        [ "$POWER_RELEASE" = 1 ] || sleep 1
                elif grep -q "outcome of lease" /tmp/s$k.err; then
                        cat /tmp/s$k.err >> /tmp/odd
                elif [ $rc != 2 ] && [ $rc != 3 ]; then
                        { echo "stager $k: stage exit $rc"; cat /tmp/s$k.err; } >> /tmp/odd
                fi
        done
}

check_round() {
        i=$1 bad=0
        blkmqctl --no-legend zones $Z > /tmp/z.tab
        cat /tmp/ack.* 2>/dev/null > /tmp/acked
        # INDEX START-LBA WP COND STATE LEASE LABEL BYTES
        awk '$6 != "-" { print $6 }' /tmp/z.tab | sort | uniq -d > /tmp/dup
        [ -s /tmp/dup ] && { echo "# round $i: a lease holds two zones: $(cat /tmp/dup)"; bad=1; }
        awk '$5 == "failed" || $5 == "allocated" || $5 == "writing"' /tmp/z.tab > /tmp/badz
        [ -s /tmp/badz ] && { echo "# round $i: zones left failed/allocated/writing:"; sed 's/^/#   /' /tmp/badz; bad=1; }
        # (a power cut: a stage in flight, its label in /tmp/seen-labels, may
        # have been sealed with its reply lost: its stager settles it)
        awk '$5 == "sealed" { print $6, $7 }' /tmp/z.tab | while read -r l label; do
                grep -q "^$l " /tmp/acked || grep -qx "$label" /tmp/seen-labels 2>/dev/null ||
                        echo "# round $i: zone sealed under $l, which no stager knows of"
        done > /tmp/unknown
        [ -s /tmp/unknown ] && { cat /tmp/unknown; bad=1; }
        for k in $(seq 0 $((STAGERS - 1))); do
                [ -e /tmp/ack.$k ] || continue
                while read -r l h lba size; do
                        blkmqctl zones get $l > /tmp/g.out 2>&1
                        if [ -e /tmp/rel.$k ] && [ "$(cat /tmp/rel.$k)" = "$l" ] && ! grep -q "State: *sealed" /tmp/g.out; then
                                # its release went through before the kill
                                [ -z "$POWER_ECHO" ] || echo "POWER-RELD $k $l"
                                grep -v "^$l " /tmp/ack.$k > /tmp/ack.$k.new; mv /tmp/ack.$k.new /tmp/ack.$k
                                continue
                        fi
                        if [ "$(fld /tmp/g.out State) $(fld /tmp/g.out SHA256)" != "sealed $h" ]; then
                                echo "# round $i: acknowledged seal $l lost: $(tr '\n' ' ' < /tmp/g.out)"; bad=1
                        elif [ "$(readback $lba $size)" != "$h" ]; then
                                echo "# round $i: acknowledged seal $l does not read back from LBA $lba"; bad=1
                        fi
                done < /tmp/ack.$k
                rm -f /tmp/rel.$k
        done
        [ -s /tmp/odd ] && { echo "# round $i: client:"; sed 's/^/#   /' /tmp/odd; bad=1; rm -f /tmp/odd; }
        echo "# round $i: $(awk '{ print $5 }' /tmp/z.tab | sort | uniq -c | tr '\n' ' ')"
        return $bad
}

