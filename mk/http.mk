# SPDX-License-Identifier: GPL-2.0-only
#
# The model server in moemd (runtime/serve/moemd/http.c, api.c, serve.c,
# metrics.c, model.c) uses libmicrohttpd for HTTP. The guest's static
# moemd is built without the two files that call libmicrohttpd
# (MOEMD_HTTP_SRCS, used by mk/integration.mk, which is read after this).

moemd_LDLIBS	+= -lmicrohttpd
MOEMD_HTTP_SRCS := runtime/serve/moemd/http.c runtime/serve/moemd/api.c

# The serving benchmark (bench/serve/bench_serve.sh): requests/s, output
# tokens/s, TTFT and ITL percentiles at 1, 4, 16 clients, all-resident vs
# 25% HBM, top-k vs LYNX vs OEA; skipped with moemd's reason while it
# cannot serve the pack (no decoder or tokenizer yet).
BENCH_SUITES	+= bench-serve
.PHONY: bench-serve
bench-serve: all
	$(Q)MOEM_BUILD=$(O) bench/serve/bench_serve.sh
