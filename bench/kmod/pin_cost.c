// SPDX-License-Identifier: GPL-2.0-only
/*
 * What Linux 6.1's io_uring costs the loader on moem.ko region memory.
 * 6.1's io_pin_pages() takes no file-backed memory but shmem and hugetlbfs
 * as fixed buffers, so on 6.1 the loader reads into a region with plain
 * IORING_OP_READ + O_DIRECT, which pins and unpins the destination pages
 * on every request, instead of READ_FIXED into pages pinned once.
 *
 * This host cannot load moem.ko (its kernel is not one moem.ko is built
 * for), so the destination is memory shaped like a region mapping: 2 MiB
 * physically contiguous folios (transparent huge pages) mapped with 4 KiB
 * page table entries (each huge mapping split by an mprotect() round
 * trip), which is what a region's 2 MiB compound pages under its 4 KiB
 * PTEs are to get_user_pages and the block layer. The same reads run with
 * the memory registered as fixed buffers and without, interleaved and
 * repeated; GB/s and the process's CPU time per GB are compared.
 *
 *   pin_cost FILE [--bs 1M] [--qd 32] [--mem 256M] [--reps 5] [--secs 3]
 * prints one line per run and a RESULT line with the medians.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MiB  (1ULL << 20)
#define HUGE (2 * MiB)

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int parse_size(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long n = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	if (*end == 'K')
		n <<= 10;
	else if (*end == 'M')
		n <<= 20;
	else if (*end == 'G')
		n <<= 30;
	else if (*end)
		return -1;
	*v = n;
	return 0;
}

/* Huge pages mapped with 4 KiB entries: a region mapping, to GUP and the block layer. */
static uint8_t *region_like(uint64_t len, uint64_t *huge_kb)
{
	uint8_t *raw = mmap(NULL, len + HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
			    -1, 0),
		*p;
	char line[256];
	FILE *f;

	if (raw == MAP_FAILED)
		return NULL;
	p = (uint8_t *)(((uintptr_t)raw + HUGE - 1) & ~(HUGE - 1));
	madvise(p, len, MADV_HUGEPAGE);
	memset(p, 1, len);
	*huge_kb = 0;
	f = fopen("/proc/self/smaps_rollup", "r");
	while (f && fgets(line, sizeof(line), f))
		sscanf(line, "AnonHugePages: %llu kB", (unsigned long long *)huge_kb);
	if (f)
		fclose(f);
	/* Split every PMD mapping into PTEs; the folios stay 2 MiB. */
	for (uint64_t off = 0; off < len; off += HUGE) {
		mprotect(p + off, 4096, PROT_READ);
		mprotect(p + off, 4096, PROT_READ | PROT_WRITE);
	}
	return p;
}

struct cfg {
	int fd;
	uint64_t file_size, bs, mem;
	unsigned int qd;
	double secs;
};

/* Read the file round and round for secs; GB/s and CPU seconds per GB. */
static int run(const struct cfg *c, uint8_t *mem, int fixed, double *gbps, double *cpu_per_gb)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	uint64_t off = 0, done = 0, slots = c->mem / c->bs, next = 0;
	unsigned int inflight = 0;
	double t0, c0, t;
	int ret;

	ret = io_uring_queue_init(c->qd * 2, &ring, 0);
	if (ret)
		return ret;
	ret = io_uring_register_files(&ring, &c->fd, 1);
	if (ret)
		goto out;
	if (fixed) {
		struct iovec iov = {mem, c->mem};

		ret = io_uring_register_buffers(&ring, &iov, 1);
		if (ret)
			goto out;
	}
	t0 = now_s();
	c0 = cpu_s();
	for (;;) {
		while (inflight < c->qd && now_s() - t0 < c->secs) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			uint8_t *dst = mem + (next++ % slots) * c->bs;

			if (fixed)
				io_uring_prep_read_fixed(sqe, 0, dst, c->bs, off, 0);
			else
				io_uring_prep_read(sqe, 0, dst, c->bs, off);
			sqe->flags |= IOSQE_FIXED_FILE;
			off = off + c->bs >= c->file_size ? 0 : off + c->bs;
			inflight++;
		}
		if (!inflight)
			break;
		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0)
			goto out;
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			if (cqe->res != (int)c->bs) {
				ret = cqe->res < 0 ? cqe->res : -EIO;
				goto out;
			}
			done += c->bs;
			inflight--;
			io_uring_cqe_seen(&ring, cqe);
		}
	}
	t = now_s() - t0;
	*gbps = (double)done / t / 1e9;
	*cpu_per_gb = (cpu_s() - c0) / ((double)done / 1e9);
	ret = 0;
out:
	io_uring_queue_exit(&ring);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"bs", required_argument, NULL, 'b'},	{"qd", required_argument, NULL, 'q'},
		{"mem", required_argument, NULL, 'm'},	{"reps", required_argument, NULL, 'r'},
		{"secs", required_argument, NULL, 's'}, {NULL, 0, NULL, 0},
	};
	struct cfg c = {.bs = MiB, .qd = 32, .mem = 256 * MiB, .secs = 3};
	double g[2][64], cp[2][64];
	uint64_t huge_kb;
	int reps = 5, ch;
	struct stat st;
	uint8_t *mem;

	while ((ch = getopt_long(argc, argv, "b:q:m:r:s:", opts, NULL)) != -1) {
		if ((ch == 'b' && parse_size(optarg, &c.bs)) ||
		    (ch == 'm' && parse_size(optarg, &c.mem)))
			goto usage;
		if (ch == 'q')
			c.qd = (unsigned int)atoi(optarg);
		if (ch == 'r')
			reps = atoi(optarg);
		if (ch == 's')
			c.secs = atof(optarg);
		if (ch == '?')
			goto usage;
	}
	if (optind + 1 != argc || reps < 1 || reps > 64 || !c.qd || c.bs < 4096 || c.bs % 4096 ||
	    c.mem % HUGE || c.mem < c.bs)
		goto usage;
	c.fd = open(argv[optind], O_RDONLY | O_DIRECT);
	if (c.fd < 0 || fstat(c.fd, &st) || (uint64_t)st.st_size < c.bs) {
		fprintf(stderr, "pin_cost: %s: %s\n", argv[optind], strerror(errno));
		return 1;
	}
	c.file_size = (uint64_t)st.st_size / c.bs * c.bs;
	mem = region_like(c.mem, &huge_kb);
	if (!mem) {
		perror("pin_cost: mmap");
		return 1;
	}
	printf("pin_cost: %llu MiB destination, %llu MiB of it in 2 MiB folios mapped with 4 KiB "
	       "PTEs; bs %llu KiB, qd %u, %.0f s per run\n",
	       (unsigned long long)(c.mem / MiB), (unsigned long long)(huge_kb / 1024),
	       (unsigned long long)(c.bs / 1024), c.qd, c.secs);
	for (int r = 0; r < reps; r++) {
		for (int fixed = 1; fixed >= 0; fixed--) {
			int ret = run(&c, mem, fixed, &g[fixed][r], &cp[fixed][r]);

			if (ret) {
				fprintf(stderr, "pin_cost: %s run: %s\n", fixed ? "fixed" : "plain",
					strerror(-ret));
				return 1;
			}
			printf("rep %d %-5s %.3f GB/s  %.1f ms CPU per GB\n", r + 1,
			       fixed ? "fixed" : "plain", g[fixed][r], cp[fixed][r] * 1e3);
		}
	}
	printf("RESULT kmod_pin_plain_vs_fixed bs=%lluK ratio=%.3f plain_gbps=%.3f fixed_gbps=%.3f "
	       "plain_cpu_ms_per_gb=%.1f fixed_cpu_ms_per_gb=%.1f\n",
	       (unsigned long long)(c.bs / 1024), median(g[0], reps) / median(g[1], reps),
	       median(g[0], reps), median(g[1], reps), median(cp[0], reps) * 1e3,
	       median(cp[1], reps) * 1e3);
	return 0;
usage:
	fprintf(stderr,
		"usage: pin_cost FILE [--bs 1M] [--qd 32] [--mem 256M] [--reps 5] [--secs 3]\n");
	return 2;
}
