# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by the GPU test scripts (. "$(dirname "$0")/lib.sh"): the build
# ($MOEM_BUILD, the bundle's folder on a GPU machine), a skip (exit 4) when
# the CUDA backend does not open, a scratch folder $tmp removed at exit, and
# ok/bad lines with $fail for the exit status.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
if ! why=$("$moem" backend --backend cuda 2>&1); then
	echo "SKIP: $why"
	exit 4
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
