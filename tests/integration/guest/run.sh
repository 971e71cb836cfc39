#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moemd's guest tests: make the packs on the host, put them on the
# guest's disk, boot the guest with daemon.sh as its script and judge the
# log with check.sh.
#   tests/integration/guest/run.sh BUILD_DIR KO PROG...
# $MOEM is the moem tool (default BUILD_DIR/bin/moem). Exit 77 (skip)
# when scripts/guest/run.sh cannot boot a guest here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1
ko=$2
shift 2
moem=${MOEM:-$build/bin/moem}
work=$build/guest-daemon/work
mkdir -p "$work"

# The packs: one to serve (sized so that staging it from the virtio disk
# is real work), one with other weights for the foreign-region test.
mkpack() {
	local name=$1 seed=$2
	[ -s "$work/$name.moem" ] && [ "$work/$name.moem" -nt "$moem" ] && return 0
	rm -rf "$work/$name.model" "$work/$name.moem"
	"$moem" mkmodel --layers 4 --experts 16 --topk 4 --hidden 512 --moe-intermediate 512 \
		--vocab 256 --seed "$seed" --out "$work/$name.model" >/dev/null &&
		"$moem" pack --model "$work/$name.model" --out "$work/$name.moem" \
			--precisions bf16,q4 >/dev/null || return 1
	rm -rf "$work/$name.model"
}
mkpack daemon 1 || { echo "test-daemon-guest: cannot make the test pack"; exit 1; }
mkpack other 2 || { echo "test-daemon-guest: cannot make the second pack"; exit 1; }

exec "$here/../../../scripts/guest/run.sh" --work "$build/guest-daemon/vm" --ko "$ko" \
	--timeout "${MOEM_GUEST_TIMEOUT:-1800}" --params "max_pool_mb=512 prealloc_mb=64" \
	--script "$here/daemon.sh" --check "$here/check.sh" --disk-mb 512 \
	--disk-add "$work/daemon.moem" --disk-add "$work/other.moem" \
	--env "MOEM_KILL9_ITERS=${MOEM_GUEST_KILL9_ITERS:-30}" "$@"
