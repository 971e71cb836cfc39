// SPDX-License-Identifier: GPL-2.0-only
/*
 * The guest's moemd is linked statically, and Debian's libmicrohttpd
 * needs GnuTLS, whose dependencies (p11-kit, libunistring) have no
 * static libraries: the guest build leaves http.c and api.c out and
 * links this instead. The guest tests the kernel module's side (warm
 * restart, kill -9, sysfs budgets), never HTTP; the host tests HTTP.
 */
#include <moem/log.h>

#include "moemd.h"
#include "serve.h"

int moemd_http_start(struct moemd *d)
{
	(void)d;
	moem_info("http: not in this build (the static guest moemd)");
	return 0;
}

void moemd_http_stop(struct moemd *d)
{
	(void)d;
}

void moemd_http_count(struct moemd_srv *s, enum moemd_ep ep, unsigned int status)
{
	(void)s;
	(void)ep;
	(void)status;
}

void moemd_http_resume(struct MHD_Connection *c)
{
	(void)c;
}

int moemd_http_conn_fd(struct MHD_Connection *c)
{
	(void)c;
	return -1;
}
