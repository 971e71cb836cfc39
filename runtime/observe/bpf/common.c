// SPDX-License-Identifier: GPL-2.0-only
/* What the BPF loaders share (bpf_int.h): privileges, libbpf messages. */
#include <errno.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <moem/error.h>

#include "bpf_int.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

bool moem_bpf_built(void)
{
#ifdef MOEM_NO_BPF
	return false;
#else
	return true;
#endif
}

int moem_bpf_check_perm(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return moem_errf(errno, "capget: %s", strerror(errno));
#define HAS(c) (d[(c) >> 5].effective & (1u << ((c)&31)))
	if (HAS(CAP_SYS_ADMIN) || (HAS(CAP_BPF) && HAS(CAP_PERFMON)))
		return 0;
#undef HAS
	return moem_errf(EPERM, MOEM_BPF_PERM_MSG);
}

#ifndef MOEM_NO_BPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

static __thread char libbpf_msg[512];
static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static int print_fn(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[sizeof(libbpf_msg)];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == ' '))
		line[--n] = 0;
	/* The verifier log comes line by line: keep the first real reason. */
	if (n && !*libbpf_msg)
		memcpy(libbpf_msg, line, n + 1);
	return 0;
}

static void install_quiet(void)
{
	libbpf_set_print(print_fn);
}

void moem_bpf_quiet_libbpf(void)
{
	pthread_once(&quiet_once, install_quiet);
}

const char *moem_bpf_libbpf_msg(void)
{
	return libbpf_msg;
}

void moem_bpf_libbpf_msg_reset(void)
{
	libbpf_msg[0] = 0;
}

int moem_bpf_load_error(int err, const char *what)
{
	const char *m = moem_bpf_libbpf_msg();

	if (err < 0)
		err = -err;
	if (err == EPERM || err == EACCES)
		return moem_errf(EPERM, "%s: the kernel refused (%s)%s%s%s", what, strerror(err),
				 moem_bpf_check_perm() ? "; " MOEM_BPF_PERM_MSG : "",
				 *m ? "; libbpf: " : "", m);
	return moem_errf(err, "%s: %s%s%s", what, strerror(err), *m ? "; libbpf: " : "", m);
}

int moem_bpf_percpu_sum(int map_fd, unsigned int n, uint64_t *out)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t *v;

	if (ncpu <= 0)
		return moem_errf(-ncpu, "cannot count the possible CPUs");
	v = calloc((size_t)ncpu, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++) {
		out[i] = 0;
		if (bpf_map_lookup_elem(map_fd, &i, v)) {
			int ret = moem_errf(errno, "reading BPF counters: %s", strerror(errno));

			free(v);
			return ret;
		}
		for (int c = 0; c < ncpu; c++)
			out[i] += v[c];
	}
	free(v);
	return 0;
}
#endif /* MOEM_NO_BPF */
