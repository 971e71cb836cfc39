#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The NUMA guest's sequence (make test-numa: run.sh --numa 2 --script):
# every /tests/*_test program as root, then as an unprivileged user
# (uid/gid 65534), with the markers scripts/guest/check-numa.sh reads.
# moem.ko is loaded without node= (its regions may go on either node) and
# /dev/moem given to the user's group for the second phase; at the end it
# must unload (every test's regions gone).
export MOEM_NUMA_NODES=2
export MOEM_NUMA_MEMLESS=2 # test-kernels.sh: --memless 1, node 2
step() {
	# step NAME command...: run, report ok or FAILED
	name=$1
	shift
	if "$@"; then
		echo "MOEM-STEP $name ok"
	else
		echo "MOEM-STEP $name FAILED"
	fi
}
echo "MOEM-NUMA online $(cat /sys/devices/system/node/online)"
for n in /sys/devices/system/node/node[0-9]*; do
	echo "MOEM-NUMA $(basename "$n") $(grep MemTotal "$n/meminfo" | tr -s ' ')"
done
dmesg -c >/dev/null
step insmod insmod /moem.ko $(cat /moem.params)
chgrp 65534 /dev/moem
chmod 0660 /dev/moem
run() {
	phase=$1
	shift
	for t in $(cat /tests/list); do
		case "$t" in
		*_test) ;;
		*) continue ;;
		esac
		echo "MOEM-RUN $phase/$t"
		start=$(cut -d' ' -f1 /proc/uptime)
		timeout -s KILL 600 "$@" "/tests/$t" 2>&1
		echo "MOEM-EXIT $phase/$t $? $start $(cut -d' ' -f1 /proc/uptime)"
		echo "MOEM-DMESG-BEGIN $phase/$t"
		dmesg -c
		echo "MOEM-DMESG-END $phase/$t"
	done
}
run root
run user /tests/moem_asuser 65534 65534
step rmmod rmmod moem
echo "MOEM-DMESG-BEGIN rmmod"
dmesg -c
echo "MOEM-DMESG-END rmmod"
echo "MOEM-DONE"
