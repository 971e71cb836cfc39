// SPDX-License-Identifier: GPL-2.0-only
/*
 * bpf_pool_watch: the pool tracer (bpf.h, bpf/moem_pool.bpf.c) in the test
 * guest. Linked statically (libbpf, libelf, zlib archives) and started in
 * the background by scripts/guest/init while the kselftest programs run:
 * prints "MOEM-BPF ready" once attached, one "MOEM-BPF event" line per
 * region create/destroy it receives, and on SIGINT/SIGTERM the per-event
 * counts the program kept ("MOEM-BPF count TYPE SEEN DELIVERED") for the
 * init script to compare with tracefs's own record of the same events.
 * Exit 0, 1 on failure, 4 if BPF is not permitted.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>

static uint64_t delivered[MOEM_BPF_POOL_NR];

static int on_event(void *arg, const struct moem_bpf_pool_ev *e)
{
	if ((unsigned int)e->type < MOEM_BPF_POOL_NR)
		delivered[e->type]++;
	if (e->type == MOEM_BPF_POOL_REGION_CREATE || e->type == MOEM_BPF_POOL_REGION_DESTROY) {
		char fields[256];

		/* The same text `moem trace pool` prints. */
		moem_bpf_pool_format(e, fields, sizeof(fields));
		printf("MOEM-BPF event %s comm=%s pid=%u %s\n", moem_bpf_pool_type_name(e->type),
		       e->comm, e->pid, fields);
	}
	return 0;
}

int main(void)
{
	struct moem_bpf_pool_stats st;
	struct moem_bpf_pool *p;
	struct pollfd fds[2];
	sigset_t set;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = moem_bpf_pool_open(&p);
	if (ret) {
		printf("MOEM-BPF error %s\n", moem_strerror(ret));
		return ret == -EPERM || ret == -EOPNOTSUPP ? 4 : 1;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fds[0] = (struct pollfd){.fd = moem_bpf_pool_fd(p), .events = POLLIN};
	fds[1] = (struct pollfd){.fd = signalfd(-1, &set, 0), .events = POLLIN};
	if (fds[1].fd < 0) {
		printf("MOEM-BPF error signalfd: %d\n", errno);
		return 1;
	}
	printf("MOEM-BPF ready\n");
	while (!(fds[1].revents & POLLIN)) {
		if (poll(fds, 2, -1) < 0 && errno != EINTR)
			break;
		ret = moem_bpf_pool_poll(p, 0, on_event, NULL);
		if (ret < 0) {
			printf("MOEM-BPF error %s\n", moem_strerror(ret));
			return 1;
		}
	}
	while (moem_bpf_pool_poll(p, 0, on_event, NULL) > 0)
		;
	ret = moem_bpf_pool_stats(p, &st);
	if (ret) {
		printf("MOEM-BPF error %s\n", moem_strerror(ret));
		return 1;
	}
	for (unsigned int i = 0; i < MOEM_BPF_POOL_NR; i++)
		printf("MOEM-BPF count %s %" PRIu64 " %" PRIu64 "\n", moem_bpf_pool_type_name(i),
		       st.events[i], delivered[i]);
	printf("MOEM-BPF dropped %" PRIu64 "\n", st.dropped);
	moem_bpf_pool_close(p);
	return 0;
}
