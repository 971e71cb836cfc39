#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only
#
# The guest's part of moemd's integration tests (tests/integration/guest/
# run.sh boots it through scripts/guest/run.sh --script): load moem.ko,
# run every /tests/*_test program with the statically linked moemd and
# moemctl and the packs on the disk (/mnt), print the kernel log after
# each, unload the module. Markers (MOEM-RUN, MOEM-EXIT, MOEM-DMESG-*,
# MOEM-STEP, MOEM-DONE) are judged on the host by check.sh.
export PATH=/bin:/tests
export MOEMD=/tests/moemd MOEMCTL=/tests/moemctl
export MOEM_TEST_PACK=/mnt/daemon.moem MOEM_TEST_OTHER_PACK=/mnt/other.moem

dmesg_section() {
	echo "MOEM-DMESG-BEGIN $1"
	dmesg -c
	echo "MOEM-DMESG-END $1"
}

dmesg_section boot
if insmod /moem.ko $(cat /moem.params); then
	echo "MOEM-STEP insmod ok"
else
	echo "MOEM-STEP insmod FAILED"
fi
dmesg_section insmod
for t in $(cat /tests/list); do
	case "$t" in
	*_test) ;;
	*) continue ;;
	esac
	echo "MOEM-RUN daemon/$t"
	start=$(cut -d' ' -f1 /proc/uptime)
	(cd /tmp && timeout -s KILL 1200 "/tests/$t" 2>&1)
	rc=$?
	echo "MOEM-EXIT daemon/$t $rc $start $(cut -d' ' -f1 /proc/uptime)"
	dmesg_section "daemon/$t"
done
# Nothing may still hold the module: every daemon has exited.
if rmmod moem; then
	echo "MOEM-STEP rmmod ok"
else
	echo "MOEM-STEP rmmod FAILED"
	ls /sys/kernel/moem/regions
fi
dmesg_section rmmod
echo "MOEM-DONE"
