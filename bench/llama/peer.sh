# SPDX-License-Identifier: GPL-2.0-only
# shellcheck shell=sh
# shellcheck disable=SC2154 # B, moem and py: the sourcing script's
#
# Sourced by the benchmarks that compare with llama.cpp (bench/llama/run.sh,
# bench/prefix/run.sh); they set B (the build), moem and py.
#
# peer_setup: install the peer (bench/llama/install.sh) and set peer, or
#   exit 77 (SKIP: no npm registry) or 1.
# peer_model M L E PRECS [TYPE..]: unless they are there, write the
#   synthetic qwen3_moe of the qwen3-30b-a3b preset with L layers of E
#   experts (seed 1), M.moem packed in PRECS (bf16,q8,...), M.bf16.gguf
#   (bench/llama/to_gguf.py) and M.TYPE.gguf quantized by llama.cpp's own
#   llama_model_quantize(); each file appears whole (written, then renamed).

peer_lib=$(cd "$(dirname "$0")/../llama" && pwd)

peer_setup() {
	_rc=0
	sh "$peer_lib/install.sh" "$B/llama-peer" || _rc=$?
	if [ $_rc -eq 77 ]; then
		echo "SKIP: the llama.cpp peer cannot be installed"
		exit 77
	fi
	[ $_rc -eq 0 ] || exit 1
	peer=$B/llama-peer/peer
}

peer_model() {
	_m=$1
	_l=$2
	_e=$3
	_p=$4
	shift 4
	_have=1
	for _f in "$_m.moem" "$_m.bf16.gguf"; do
		[ -f "$_f" ] || _have=0
	done
	for _t in "$@"; do
		[ -f "$_m.$_t.gguf" ] || _have=0
	done
	[ $_have = 0 ] || return 0
	mkdir -p "$(dirname "$_m")"
	rm -rf "$_m"
	"$moem" mkmodel --preset qwen3-30b-a3b --layers "$_l" --experts "$_e" --seed 1 \
		--out "$_m" >/dev/null
	"$moem" pack --model "$_m" --out "$_m.moem.tmp" --precisions "$_p" >/dev/null
	mv "$_m.moem.tmp" "$_m.moem"
	$py "$peer_lib/to_gguf.py" "$_m" "$_m.bf16.gguf.tmp" bf16
	mv "$_m.bf16.gguf.tmp" "$_m.bf16.gguf"
	for _t in "$@"; do
		"$peer" quantize "$_m.bf16.gguf" "$_m.$_t.gguf.tmp" "$_t" 2
		mv "$_m.$_t.gguf.tmp" "$_m.$_t.gguf"
	done
	rm -rf "$_m"
}
