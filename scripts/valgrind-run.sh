#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Run test programs under valgrind's memcheck (mk/valgrind.mk): any
# invalid read or write, use of uninitialised memory or definite leak
# fails the program (the kselftest harness forks each test; valgrind
# follows the forks and the child's exit status carries the error).
#   VALGRIND=valgrind SAN=0 scripts/valgrind-run.sh prog...
set -u
if [ "${SAN:-0}" = 1 ]; then
	echo "  SKIP  valgrind suite: SAN=1 programs carry ASan's runtime, which valgrind cannot host"
	exit 0
fi
if [ -z "${VALGRIND:-}" ]; then
	echo "valgrind: not installed (scripts/deps.sh installs it)" >&2
	exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
for t in "$@"; do
	name=$(basename "$t")
	printf '#!/bin/sh\nexec %s -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --child-silent-after-fork=no %s "$@"\n' \
		"$VALGRIND" "$(cd "$(dirname "$t")" && pwd)/$name" >"$dir/$name"
	chmod +x "$dir/$name"
	n=$((n + 1))
done
set --
for f in "$dir"/*; do
	set -- "$@" "$f"
done
exec scripts/run-tests.sh --suite valgrind --timeout 600 "$@"
