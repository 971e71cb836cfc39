# SPDX-License-Identifier: GPL-2.0-only
#
# The model server in moemd (runtime/serve/moemd/http.c, api.c, serve.c,
# metrics.c, model.c) uses libmicrohttpd for HTTP. The guest's static
# moemd is built without the two files that call libmicrohttpd
# (MOEMD_HTTP_SRCS, used by mk/integration.mk, which is read after this).

moemd_LDLIBS	+= -lmicrohttpd
MOEMD_HTTP_SRCS := runtime/serve/moemd/http.c runtime/serve/moemd/api.c
