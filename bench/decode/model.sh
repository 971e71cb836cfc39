# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by the decode benchmarks (run.sh, gpu.sh): decode_model DIR L E
# PRECISIONS [keep] makes DIR/q3-L<L>-E<E>.moem once, a synthetic qwen3_moe
# with Qwen3-30B-A3B layer shapes (moem mkmodel --preset qwen3-30b-a3b,
# seed 1), packed in PRECISIONS; with keep the checkpoint folder
# DIR/q3-L<L>-E<E> stays (the PyTorch peer reads it). Sets $m to the path
# without .moem. Needs $moem.
decode_model() {
	m=$1/q3-L$2-E$3
	[ -f "$m.moem" ] && { [ -z "${5:-}" ] || [ -f "$m/config.json" ]; } && return 0
	rm -rf "$m" "$m.moem"
	"$moem" mkmodel --preset qwen3-30b-a3b --layers "$2" --experts "$3" --seed 1 \
		--out "$m" >/dev/null || return 1
	"$moem" pack --model "$m" --out "$m.moem.tmp" --precisions "$4" >/dev/null || return 1
	mv "$m.moem.tmp" "$m.moem"
	[ -n "${5:-}" ] || rm -rf "$m"
}
