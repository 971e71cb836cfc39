// SPDX-License-Identifier: GPL-2.0-only
/*
 * moem load: read a file (or ranges of it) into the staging pool with the
 * loader and report which path it took and how fast. The pool is used as
 * a ring of chunk-sized slots, so a file larger than the pool streams
 * through it.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moem/error.h>
#include <moem/loader.h>
#include <moem/pool.h>
#include <moem/progress.h>
#include <moem/util.h>

#include "cmd.h"

#define LOAD_MAX_RANGES 64

struct load_slot {
	struct load_slot *next;
	struct load_ctx *ctx;
	uint8_t *dst;
	uint64_t len;
};

struct load_ctx {
	sem_t free_slots; /* counts the free list */
	pthread_mutex_t lock;
	struct load_slot *free;
	struct moem_progress progress;
	unsigned int failed;
	char first_error[512];
};

static void load_done(void *arg, int err)
{
	struct load_slot *s = arg;
	struct load_ctx *c = s->ctx;

	pthread_mutex_lock(&c->lock);
	if (err && !c->failed++)
		snprintf(c->first_error, sizeof(c->first_error), "%s", moem_last_error());
	s->next = c->free;
	c->free = s;
	pthread_mutex_unlock(&c->lock);
	if (!err)
		moem_progress_add(&c->progress, s->len);
	sem_post(&c->free_slots);
}

static void load_usage(FILE *f)
{
	fprintf(f,
		"usage: moem load FILE [--range OFFSET:LENGTH]... [--mode "
		"auto|uring|pread|buffered]\n"
		"                 [--qd N] [--bs SIZE] [--threads N] [--no-direct]\n"
		"                 [--pool SIZE] [--provider auto|kmod|hugetlb|thp] [--chunk SIZE]\n"
		"Read FILE (whole, or the given ranges) into the staging pool and print the\n"
		"loader's path and statistics. Sizes take K/M/G suffixes. With O_DIRECT, offsets\n"
		"and lengths must be multiples of the file's block size; a whole-file load skips\n"
		"a partial last block and says so.\n");
}

static int parse_range(const char *s, uint64_t *off, uint64_t *len)
{
	char buf[128], *colon;
	int ret;

	snprintf(buf, sizeof(buf), "%s", s);
	colon = strchr(buf, ':');
	if (!colon)
		return moem_errf(EINVAL, "range '%s': expected OFFSET:LENGTH", s);
	*colon = 0;
	ret = moem_parse_size(buf, NULL, off);
	if (!ret)
		ret = moem_parse_size(colon + 1, NULL, len);
	if (ret)
		return moem_err_prefix(-ret, "range '%s'", s);
	if (!*len)
		return moem_errf(EINVAL, "range '%s': empty", s);
	return 0;
}

static int load_ranges(struct moem_loader *ld, uint32_t idx, struct moem_pool *pool, uint64_t chunk,
		       const uint64_t (*ranges)[2], unsigned int nr, struct load_ctx *c)
{
	uint32_t nslots = (uint32_t)(moem_pool_size(pool) / chunk);
	struct load_slot *slots = calloc(nslots, sizeof(*slots));
	int ret = 0;

	if (!slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < nslots; i++) {
		slots[i] = (struct load_slot){.ctx = c,
					      .next = c->free,
					      .dst = (uint8_t *)moem_pool_base(pool) + i * chunk};
		c->free = &slots[i];
	}
	sem_init(&c->free_slots, 0, nslots);
	for (unsigned int r = 0; r < nr && !ret; r++) {
		for (uint64_t done = 0; done < ranges[r][1] && !ret;) {
			uint64_t n = moem_min(chunk, ranges[r][1] - done);
			struct load_slot *s;

			while (sem_wait(&c->free_slots) < 0 && errno == EINTR) {
			}
			pthread_mutex_lock(&c->lock);
			s = c->free;
			c->free = s->next;
			pthread_mutex_unlock(&c->lock);
			s->len = n;
			ret = moem_loader_read(ld, idx, ranges[r][0] + done, n, s->dst, load_done,
					       s);
			done += n;
		}
	}
	moem_loader_drain(ld);
	sem_destroy(&c->free_slots);
	free(slots);
	return ret;
}

static int cmd_load(int argc, char **argv)
{
	static const struct option opts[] = {
		{"range", required_argument, NULL, 'r'},
		{"mode", required_argument, NULL, 'm'},
		{"qd", required_argument, NULL, 'q'},
		{"bs", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"no-direct", no_argument, NULL, 'D'},
		{"pool", required_argument, NULL, 'p'},
		{"provider", required_argument, NULL, 'P'},
		{"chunk", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct moem_pool_opts po = {.size = 256 * MOEM_MiB};
	struct load_ctx c = {.lock = PTHREAD_MUTEX_INITIALIZER};
	struct moem_loader_opts lo = {0};
	uint64_t ranges[LOAD_MAX_RANGES][2], chunk = 8 * MOEM_MiB, v, total = 0;
	struct moem_loader_file_info fi;
	struct moem_loader_stats st;
	struct moem_loader *ld;
	struct moem_pool *pool;
	unsigned int nr = 0;
	char buf[2048], b1[32];
	uint32_t idx;
	int ch, ret;

	while ((ch = getopt_long(argc, argv, "r:m:q:b:t:Dp:P:c:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'r':
			if (nr == LOAD_MAX_RANGES) {
				fprintf(stderr, "moem load: at most %d ranges\n", LOAD_MAX_RANGES);
				return 2;
			}
			ret = parse_range(optarg, &ranges[nr][0], &ranges[nr][1]);
			if (ret)
				return moem_tool_fail("load", ret, NULL);
			nr++;
			break;
		case 'm':
			ret = moem_loader_mode_parse(optarg, &lo.mode);
			if (ret)
				return moem_tool_fail("load", ret, NULL);
			break;
		case 'q':
		case 'b':
		case 't':
			ret = moem_parse_size(optarg, NULL, &v);
			if (!ret && v > UINT32_MAX)
				ret = moem_errf(ERANGE, "'%s' is too large", optarg);
			if (ret)
				return moem_tool_fail("load", ret,
						      ch == 'q'	  ? "--qd"
						      : ch == 'b' ? "--bs"
								  : "--threads");
			if (ch == 'q')
				lo.queue_depth = (uint32_t)v;
			else if (ch == 'b')
				lo.req_size = (uint32_t)v;
			else
				lo.threads = (uint32_t)v;
			break;
		case 'D':
			lo.no_direct = true;
			break;
		case 'p':
			ret = moem_parse_size(optarg, NULL, &po.size);
			if (ret)
				return moem_tool_fail("load", ret, "--pool");
			break;
		case 'P':
			ret = moem_pool_provider_parse(optarg, &po.provider);
			if (ret)
				return moem_tool_fail("load", ret, NULL);
			break;
		case 'c':
			ret = moem_parse_size(optarg, NULL, &chunk);
			if (ret)
				return moem_tool_fail("load", ret, "--chunk");
			break;
		case 'h':
			load_usage(stdout);
			return 0;
		default:
			load_usage(stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		load_usage(stderr);
		return 2;
	}
	if (!chunk || chunk % 4096) {
		fprintf(stderr, "moem load: --chunk must be a non-zero multiple of 4 KiB\n");
		return 2;
	}
	ret = moem_loader_create(&lo, &ld);
	if (ret)
		return moem_tool_fail("load", ret, NULL);
	ret = moem_loader_add_file(ld, argv[optind], &idx);
	if (ret) {
		moem_loader_destroy(ld);
		return moem_tool_fail("load", ret, NULL);
	}
	moem_loader_file_info(ld, idx, &fi);
	if (!nr) {
		ranges[0][0] = 0;
		ranges[0][1] = fi.size - fi.size % fi.off_align;
		nr = ranges[0][1] ? 1 : 0;
		if (fi.size % fi.off_align)
			printf("note: the last %llu bytes are not loaded (O_DIRECT reads whole "
			       "%u-byte blocks)\n",
			       (unsigned long long)(fi.size % fi.off_align), fi.off_align);
	}
	for (unsigned int r = 0; r < nr; r++)
		total += ranges[r][1];
	if (po.size < chunk)
		po.size = chunk;
	ret = moem_pool_open(&po, &pool);
	if (ret) {
		moem_loader_destroy(ld);
		return moem_tool_fail("load", ret, "pool");
	}
	ret = moem_loader_register_memory(ld, moem_pool_base(pool), moem_pool_size(pool));
	if (!ret) {
		moem_progress_start(&c.progress, "load", total, true);
		ret = load_ranges(ld, idx, pool, chunk, (const uint64_t(*)[2])ranges, nr, &c);
		moem_progress_finish(&c.progress);
	}
	moem_loader_get_stats(ld, &st);
	moem_loader_destroy(ld);
	moem_pool_close(pool);
	if (ret)
		return moem_tool_fail("load", ret, NULL);
	printf("%s: %s in %u range%s, %s\n", fi.path, moem_fmt_bytes(total, b1, sizeof(b1)), nr,
	       nr == 1 ? "" : "s", fi.direct ? "O_DIRECT" : "buffered");
	fputs(moem_loader_format_stats(&st, buf, sizeof(buf)), stdout);
	if (c.failed) {
		fprintf(stderr, "moem load: %u read%s failed; first: %s\n", c.failed,
			c.failed == 1 ? "" : "s", c.first_error);
		return 1;
	}
	return 0;
}

MOEM_CMD(load_cmd, "load", "read a file into the staging pool with the loader", cmd_load);
