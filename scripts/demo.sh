#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The quick start's main job (make demo). At this stage: open the staging
# pool with the embedded defaults (userspace provider unless moem.ko is
# loaded) and report what served it.
set -eu
B=${MOEM_BUILD:-build}
echo "== moem demo: staging pool"
"$B/bin/moem" pool --size 256M
