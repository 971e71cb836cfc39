#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# moem eval on a synthetic qwen3_moe pack (bf16, q8, q4):
#  - the run with the reference's own settings, and a lossless run at 25%
#    HBM, agree with the reference exactly: top-1 1, KL 0, the same
#    perplexity;
#  - q4 experts, q8 experts and OEA routing move the distributions (KL > 0),
#    q4 more than q8;
#  - dense weights quantized (--dense-prec) move them too, q4 more than q8;
#  - the report is labelled synthetic;
#  - bad token files get clear errors.
set -u
B=${MOEM_BUILD:-build}
moem=$B/bin/moem
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$moem" mkmodel --arch qwen3_moe --layers 2 --experts 16 --topk 4 --hidden 256 \
	--moe-intermediate 128 --seed 11 --out "$tmp/m" >/dev/null 2>&1 &&
	"$moem" pack --model "$tmp/m" --out "$tmp/m.moem" --precisions bf16,q8,q4 >/dev/null 2>&1 ||
	{ echo "FAIL: cannot make the model"; exit 1; }
/usr/bin/python3 -c '
import random
r = random.Random(3)
for s in range(6):
    print(" ".join(str(r.randrange(4096)) for _ in range(24 + 5 * s)))
print("# a comment, then a short one")
print("7, 8, 9")' >"$tmp/toks"

ev() { "$moem" eval --pack "$tmp/m.moem" --tokens-file "$tmp/toks" --json "$@"; }
field() { echo "$1" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"; }

for args in "" "--hbm 25% --dram 60%" "--cpu-moe-layers 1 --hbm 25%" \
	"--exec hybrid --cpu-gbps 1000 --hbm 25% --cpu-threads 1"; do
	# shellcheck disable=SC2086
	out=$(ev $args)
	if [ "$(field "$out" top1_agreement)" = 1.0 ] && [ "$(field "$out" mean_kl)" = 0.0 ] &&
		[ "$(field "$out" perplexity)" = "$(field "$out" reference_perplexity)" ]; then
		ok "lossless run '${args:-reference settings}' equals the reference"
	else
		bad "lossless run '$args': $out"
	fi
done
out=$(ev)
[ "$(field "$out" synthetic)" = true ] && [ "$(field "$out" positions)" = 222 ] &&
	ok "synthetic label, 222 positions" || bad "label or positions: $out"
q4=$(field "$(ev --precisions q4)" mean_kl)
q8=$(field "$(ev --precisions q8)" mean_kl)
oea=$(field "$(ev --route oea)" mean_kl)
if awk -v a="$q4" -v b="$q8" -v c="$oea" 'BEGIN { exit !(a > b && b > 0 && c > 0) }'; then
	ok "KL: q4 $q4 > q8 $q8 > 0, oea $oea > 0"
else
	bad "KL: q4 '$q4' q8 '$q8' oea '$oea'"
fi

d8=$(field "$(ev --dense-prec q8)" mean_kl)
d4=$(field "$(ev --dense-prec q4)" mean_kl)
if awk -v a="$d4" -v b="$d8" 'BEGIN { exit !(a > b && b > 0) }'; then
	ok "KL of quantized dense weights: q4 $d4 > q8 $d8 > 0"
else
	bad "KL of quantized dense weights: q4 '$d4' q8 '$d8'"
fi

expect_err() {
	what=$1
	printf '%s\n' "$2" >"$tmp/bad"
	if out=$("$moem" eval --pack "$tmp/m.moem" --tokens-file "$tmp/bad" 2>&1); then
		bad "accepted: $what"
	elif echo "$out" | grep -q "$3"; then
		ok "refused: $what"
	else
		bad "$what: message \"$out\" lacks \"$3\""
	fi
}
expect_err "a one-token sequence" "5" "2 or more tokens"
expect_err "an id out of vocabulary" "1,2,5000" "outside the vocabulary"
expect_err "not a number" "1,two,3" "want ids"
expect_err "no sequences" "# nothing" "no sequences"
out=$("$moem" eval --pack "$tmp/m.moem" --tokens-file "$tmp/none" 2>&1) &&
	bad "accepted a missing file" || ok "refused: a missing file ($out)"
exit $fail
