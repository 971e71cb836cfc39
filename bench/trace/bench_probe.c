// SPDX-License-Identifier: GPL-2.0-only
/*
 * bench_probe: what one moem:route probe (usdt.h) costs.
 *   unattached  the semaphore check guarding the probe, against the same
 *               call without it (what every decode layer pays always);
 *   attached    a uprobe hit running bpf/moem_route.bpf.c on an 8 x 8
 *               routing record (Qwen3-30B-A3B top-8, batch 8): counting
 *               into moem_hot only, and counting plus the ring buffer
 *               record, drained as `moem trace record` does.
 * The tracer part is skipped (said so) where BPF is not permitted.
 *   bench_probe [--calls N]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <moem/bpf.h>
#include <moem/error.h>
#include <moem/usdt.h>
#include <moem/util.h>

#define B 8
#define K 8

static int32_t ids[B * K];
static float w[B * K];

static __attribute__((noinline)) void with_probe(uint32_t layer, uint64_t step)
{
	MOEM_USDT_ROUTE(layer, step, B, K, ids, w, 48, 128, 0);
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void without_probe(uint32_t layer, uint64_t step)
{
	__asm__ volatile("" ::: "memory");
}

static double ns_per_call(void (*fn)(uint32_t, uint64_t), uint64_t n)
{
	uint64_t t0 = moem_now_ns();

	for (uint64_t i = 0; i < n; i++)
		fn((uint32_t)(i % 48), i / 48);
	return (double)(moem_now_ns() - t0) / (double)n;
}

/* Best of 5: the machine's noise only ever adds time. */
static double best(void (*fn)(uint32_t, uint64_t), uint64_t n)
{
	double b = 1e30;

	for (int r = 0; r < 5; r++) {
		double x = ns_per_call(fn, n);

		b = x < b ? x : b;
	}
	return b;
}

static int drain(void *arg, const struct moem_bpf_route_rec *r)
{
	(*(uint64_t *)arg)++;
	return 0;
}

static int attached(bool records, uint64_t n, double *ns)
{
	struct moem_bpf_route_opts o = {
		.pid = getpid(), .records = records, .ring_bytes = 64u << 20};
	struct moem_bpf_route *r;
	uint64_t t0, got = 0;
	int ret = moem_bpf_route_open(&o, &r);

	if (ret)
		return ret;
	t0 = moem_now_ns();
	for (uint64_t i = 0; i < n; i++) {
		with_probe((uint32_t)(i % 48), i / 48);
		if (records && i % 4096 == 4095)
			moem_bpf_route_poll(r, 0, drain, &got);
	}
	if (records)
		while (moem_bpf_route_poll(r, 0, drain, &got) > 0)
			;
	*ns = (double)(moem_now_ns() - t0) / (double)n;
	moem_bpf_route_close(r);
	if (records && got != n)
		return moem_errf(EIO, "%llu of %llu records arrived", (unsigned long long)got,
				 (unsigned long long)n);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t n = 50000000, na;
	double base, probe, cnt, rec;
	int ret;

	if (argc == 3 && !strcmp(argv[1], "--calls"))
		n = strtoull(argv[2], NULL, 0);
	if (!n) {
		fprintf(stderr, "usage: bench_probe [--calls N]\n");
		return 2;
	}
	for (int i = 0; i < B * K; i++) {
		ids[i] = (i * 37) % 128;
		w[i] = 1.0f / K;
	}
	base = best(without_probe, n);
	probe = best(with_probe, n);
	printf("probe unattached: %.2f ns per call with the probe, %.2f ns without: %.2f ns "
	       "(the semaphore check)\n",
	       probe, base, probe - base);
	na = n / 100 > 200000 ? 200000 : n / 100;
	ret = attached(false, na, &cnt);
	if (!ret)
		ret = attached(true, na, &rec);
	if (ret) {
		printf("probe attached: skipped: %s\n", moem_strerror(ret));
		return ret == -EPERM || ret == -EOPNOTSUPP ? 0 : 1;
	}
	printf("probe attached, moem_hot only: %.2f us per probe (%llu calls, 8 x 8 ids)\n",
	       cnt / 1000, (unsigned long long)na);
	printf("probe attached, moem_hot + ring buffer record, drained: %.2f us per probe\n",
	       rec / 1000);
	return 0;
}
