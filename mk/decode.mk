# SPDX-License-Identifier: GPL-2.0-only
# Full decode: the CLI's invariants and bad input (tests/decode), and the
# independent PyTorch reference on tiny checkpoints of each architecture
# (tests/ref; skips without Debian's python3-torch).
TEST_SUITES += test-decode

.PHONY: test-decode
test-decode: all
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite decode --timeout 900 \
		tests/decode/decode_cli.sh tests/ref/check.sh
