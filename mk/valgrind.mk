# SPDX-License-Identifier: GPL-2.0-only
#
# Programs that handle untrusted input through uninstrumented libraries
# (json-c for the control protocol) run under valgrind: ASan sees only
# what was compiled with it, valgrind sees every read, json-c's included.
#
#   make test-valgrind   the control protocol's and the chat templates' error
#                        tests under memcheck
#
# Under SAN=1 the programs carry ASan's runtime, which valgrind cannot
# host: the suite then says so and skips.

VALGRIND	?= $(shell command -v valgrind 2>/dev/null)
VALGRIND_BINS	:= $(O)/tests/unit/test_ctl $(O)/tests/unit/test_chat_errors
TEST_SUITES	+= test-valgrind

.PHONY: test-valgrind
test-valgrind: $(VALGRIND_BINS)
	$(Q)MOEM_BUILD=$(O) VALGRIND="$(VALGRIND)" SAN=$(SAN) scripts/valgrind-run.sh $(VALGRIND_BINS)
