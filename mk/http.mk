# SPDX-License-Identifier: GPL-2.0-only
#
# The model server in moemd (runtime/serve/moemd/http.c, api.c, serve.c,
# metrics.c, model.c) uses libmicrohttpd for HTTP. The guest's static
# moemd is built without the two files that call libmicrohttpd
# (MOEMD_HTTP_SRCS, used by mk/integration.mk, which is read after this).

moemd_LDLIBS	+= -lmicrohttpd
MOEMD_HTTP_SRCS := runtime/serve/moemd/http.c runtime/serve/moemd/api.c

# A test-only moemd whose model is tests/serve/fake_model.c (it says
# why): the server machinery's tests run on it (tests/serve/).
FAKE_MOEMD	:= $(O)/tests/serve/moemd-fakemodel
FAKE_MOEMD_OBJS	:= $(patsubst %.c,$(O)/%.o,$(filter-out runtime/serve/moemd/model%.c,\
		   $(wildcard runtime/serve/moemd/*.c))) $(O)/tests/serve/fake_model.o

$(O)/tests/serve/fake_model.o: tests/serve/fake_model.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) -Iruntime/serve/moemd $(CFLAGS) -c -o $@ $<

$(FAKE_MOEMD): $(FAKE_MOEMD_OBJS) $(LIB)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(moemd_LDLIBS) $(LDLIBS)

# The server tests (tests/integration/serve_test.sh, http_test.c) use it.
test-daemon-host: $(FAKE_MOEMD)

# The serving benchmark (bench/serve/bench_serve.sh): requests/s, output
# tokens/s, TTFT and ITL percentiles at 1, 4, 16 clients, all-resident vs
# 25% HBM, top-k vs LYNX vs OEA; skipped with moemd's reason while it
# cannot serve the pack (no decoder or tokenizer yet).
BENCH_SUITES	+= bench-serve
.PHONY: bench-serve
bench-serve: all
	$(Q)MOEM_BUILD=$(O) bench/serve/bench_serve.sh
