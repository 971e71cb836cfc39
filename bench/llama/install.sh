#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Install the llama.cpp peer into DIR (default build/llama-peer): the npm
# package node-llama-cpp (pinned) with its prebuilt CPU binaries for
# linux-x64 only, with downloads and source builds disabled
# (NODE_LLAMA_CPP_SKIP_DOWNLOAD, --ignore-scripts); llama.h and ggml's
# headers of the same release from the source bundle the package ships;
# and bench/llama/llama_peer.c built against them. Idempotent.
# Exit 77 when npm is not installed or the registry is not reachable.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-build/llama-peer}
ver=3.21.1
cc=${CC:-cc}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# One install at a time: the text and decode tests may run side by side.
exec 9>"$dir/.lock"
flock 9
bins=$dir/npm/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64

if [ "$(uname -m)" != x86_64 ]; then
	echo "llama-peer: only the linux-x64 build is installed here" >&2
	exit 77
fi
if [ ! -f "$dir/npm/.done-$ver" ]; then
	if ! command -v npm >/dev/null 2>&1; then
		echo "llama-peer: npm not found (Debian's nodejs/npm)" >&2
		exit 77
	fi
	rm -rf "$dir/npm"
	mkdir -p "$dir/npm"
	printf '{"name":"moem-llama-peer","private":true}\n' >"$dir/npm/package.json"
	if ! (cd "$dir/npm" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --save-exact \
		--ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error \
		"node-llama-cpp@$ver" "@node-llama-cpp/linux-x64@$ver" >"$dir/npm.log" 2>&1); then
		if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|network' "$dir/npm.log"; then
			echo "llama-peer: the npm registry is unreachable: see $dir/npm.log" >&2
			exit 77
		fi
		cat "$dir/npm.log" >&2
		echo "llama-peer: npm install failed" >&2
		exit 1
	fi
	touch "$dir/npm/.done-$ver"
fi
if [ ! -f "$dir/src/include/llama.h" ]; then
	rm -rf "$dir/src"
	git clone -q --no-checkout \
		"$dir/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$dir/src"
	git -C "$dir/src" -c advice.detachedHead=false checkout -q HEAD -- include ggml/include
fi
lib=$(ls "$bins"/libllama.*so | head -1)
ggml=$(ls "$bins"/libggml.*so | head -1)
if [ ! -x "$dir/llama-peer" ] || [ "$here/llama_peer.c" -nt "$dir/llama-peer" ]; then
	$cc -O2 -Wall -I"$dir/src/include" -I"$dir/src/ggml/include" \
		-o "$dir/llama-peer.tmp" "$here/llama_peer.c" \
		"$lib" "$ggml" "$bins/libggml-base.so" -Wl,-rpath,"$bins"
	mv "$dir/llama-peer.tmp" "$dir/llama-peer"
fi
printf '#!/bin/sh\nLLAMA_PEER_LIBDIR=%s exec %s "$@"\n' "$bins" "$dir/llama-peer" \
	>"$dir/run.tmp"
chmod +x "$dir/run.tmp"
mv "$dir/run.tmp" "$dir/peer"
