# SPDX-License-Identifier: GPL-2.0-only
# Full decode: the CLI's invariants and bad input (tests/decode), fused
# (transformers 5) checkpoints, the independent PyTorch reference on tiny
# checkpoints of each architecture (tests/ref; skips without Debian's
# python3-torch), and llama.cpp as a second reference for qwen3_moe
# (tests/llama; installs the npm peer into $(O)/llama-peer, skips when the
# registry is unreachable).
TEST_SUITES += test-decode

# Sampling's exp loop (runtime/model/sample.c) is vectorised and gives the
# same bits in every build: no FMA contraction, and no trapping math (its
# clamp becomes a blend).
$(O)/runtime/model/sample.o: CFLAGS += -O3 -ffp-contract=off -fno-trapping-math

.PHONY: test-decode
test-decode: all
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite decode --timeout 900 \
		tests/decode/decode_cli.sh tests/decode/eval_cli.sh tests/decode/fused_ckpt.sh \
		tests/ref/check.sh tests/llama/logits.sh
