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
# MOEM_GUEST_PACK="LAYERS EXPERTS HIDDEN WIDTH" (default "4 16 512 512",
# 121.5 MiB of experts); a larger pack wants MOEM_GUEST_MEM (MiB, default
# 2048) and MOEM_GUEST_POOL_MB (moem.ko's max_pool_mb, default 512).
read -r L E H I <<<"${MOEM_GUEST_PACK:-4 16 512 512}"
tag=$L-$E-$H-$I
mkpack() {
	local name=$1 seed=$2
	[ -s "$work/$name-$tag.moem" ] && [ "$work/$name-$tag.moem" -nt "$moem" ] && return 0
	rm -rf "$work/$name.model" "$work/$name-$tag.moem"
	"$moem" mkmodel --layers "$L" --experts "$E" --top-k 4 --hidden "$H" --moe-intermediate "$I" \
		--vocab 256 --seed "$seed" --out "$work/$name.model" >/dev/null &&
		"$moem" pack --model "$work/$name.model" --out "$work/$name-$tag.moem" \
			--precisions bf16,q4 >/dev/null || return 1
	rm -rf "$work/$name.model"
}
mkpack daemon 1 || { echo "test-daemon-guest: cannot make the test pack"; exit 1; }
mkpack other 2 || { echo "test-daemon-guest: cannot make the second pack"; exit 1; }

# The guest finds them under fixed names.
mkdir -p "$work/disk"
ln -f "$work/daemon-$tag.moem" "$work/disk/daemon.moem"
ln -f "$work/other-$tag.moem" "$work/disk/other.moem"
disk_mb=$((($(stat -c %s "$work/disk/daemon.moem") * 2 / 1048576) + 128))

exec "$here/../../../scripts/guest/run.sh" --work "$build/guest-daemon/vm" --ko "$ko" \
	--timeout "${MOEM_GUEST_TIMEOUT:-1800}" --mem "${MOEM_GUEST_MEM:-2048}" \
	--params "max_pool_mb=${MOEM_GUEST_POOL_MB:-512} prealloc_mb=64" \
	--script "$here/daemon.sh" --check "$here/check.sh" --disk-mb "$disk_mb" \
	--disk-add "$work/disk/daemon.moem" --disk-add "$work/disk/other.moem" \
	--env "MOEM_KILL9_ITERS=${MOEM_GUEST_KILL9_ITERS:-30}" "$@"
