// SPDX-License-Identifier: GPL-2.0-only
/* Provider choice and the common part of moem_pool (pool.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <moem/error.h>
#include <moem/util.h>

#include "pool_int.h"

static const char *const provider_names[MOEM_POOL_NR] = {
	[MOEM_POOL_AUTO] = "auto",
	[MOEM_POOL_KMOD] = "kmod",
	[MOEM_POOL_HUGETLB] = "hugetlb",
	[MOEM_POOL_THP] = "thp",
};

const char *moem_pool_provider_name(enum moem_pool_provider p)
{
	return (unsigned int)p < MOEM_POOL_NR ? provider_names[p] : "?";
}

int moem_pool_provider_parse(const char *s, enum moem_pool_provider *out)
{
	for (int i = 0; i < MOEM_POOL_NR; i++) {
		if (!strcmp(s, provider_names[i])) {
			*out = (enum moem_pool_provider)i;
			return 0;
		}
	}
	return moem_errf(EINVAL, "unknown pool provider '%s' (auto, kmod, hugetlb, thp)", s);
}

static int open_auto(const struct moem_pool_opts *opts, uint32_t n_named, struct moem_pool *pool)
{
	char kmod_why[160], thp_why[sizeof(pool->info.why)];
	uint64_t need = opts->size / MOEM_CHUNK_BYTES, free_huge;
	int ret;

	ret = moem_pool_kmod_open(opts, pool);
	if (ret == 0)
		return 0;
	if (ret == -EOPNOTSUPP && n_named > 1) {
		/* A module older than per-node regions: the next provider can. */
		snprintf(kmod_why, sizeof(kmod_why),
			 "kmod skipped (this moem.ko cannot place regions on NUMA nodes %s)",
			 opts->nodes);
	} else if (ret != -ENODEV) {
		return ret; /* the module is there but refused: say so, do not hide it */
	} else {
		snprintf(kmod_why, sizeof(kmod_why), "kmod not loaded (%s missing)",
			 opts->dev_path ? opts->dev_path : "/dev/moem");
	}
	free_huge = moem_hugetlb_free_pages();
	if (free_huge >= need) {
		ret = moem_pool_hugetlb_open(opts, pool);
		if (ret == 0) {
			snprintf(pool->info.why, sizeof(pool->info.why),
				 "%s: using memfd hugetlb pool (%llu huge pages free)", kmod_why,
				 (unsigned long long)free_huge);
			return 0;
		}
	}
	ret = moem_pool_thp_open(opts, pool);
	if (ret == 0) {
		/* Keep what the provider said (an mlock failure above all). */
		snprintf(thp_why, sizeof(thp_why), "%s", pool->info.why);
		snprintf(pool->info.why, sizeof(pool->info.why),
			 "%s, %llu huge pages free, %llu needed: THP + mlock pool%s%s", kmod_why,
			 (unsigned long long)free_huge, (unsigned long long)need,
			 thp_why[0] ? "; " : "", thp_why);
	}
	return ret;
}

int moem_pool_open(const struct moem_pool_opts *in, struct moem_pool **out)
{
	struct moem_pool_opts opts = *in;
	int32_t named[MOEM_POOL_MAX_NODES];
	uint32_t n_named = 0;
	struct moem_pool *pool;
	int ret;

	if ((unsigned int)opts.provider >= MOEM_POOL_NR)
		return moem_errf(EINVAL, "bad pool provider %d", (int)opts.provider);
	if (!opts.size &&
	    !(opts.attach && opts.provider != MOEM_POOL_HUGETLB && opts.provider != MOEM_POOL_THP))
		return moem_errf(EINVAL, "pool size 0");
	if (moem_align_up_overflow(opts.size, MOEM_CHUNK_BYTES, &opts.size) ||
	    opts.size > (1ULL << 50))
		return moem_errf(EINVAL, "pool size %llu is too large",
				 (unsigned long long)in->size);
	/* A kmod pool over several nodes needs moem.ko 1.4 (kmod.c says so). */
	if (opts.nodes && *opts.nodes) {
		ret = moem_pool_nodes_parse(opts.nodes, named, &n_named);
		if (ret)
			return ret;
	}
	if (!opts.name)
		opts.name = "moem";
	if (!opts.mode)
		opts.mode = 0600;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->fd = -1;
	pool->dev_fd = -1;
	switch (opts.provider) {
	case MOEM_POOL_KMOD:
		ret = moem_pool_kmod_open(&opts, pool);
		break;
	case MOEM_POOL_HUGETLB:
		ret = moem_pool_hugetlb_open(&opts, pool);
		break;
	case MOEM_POOL_THP:
		ret = moem_pool_thp_open(&opts, pool);
		break;
	default:
		ret = open_auto(&opts, n_named, pool);
		break;
	}
	if (ret) {
		free(pool);
		return ret;
	}
	if (!pool->info.n_nodes) { /* kmod 1.3: the module placed it (node=) */
		pool->info.n_nodes = 1;
		pool->info.nodes[0] = (struct moem_pool_node){.node = -1, .bytes = pool->size};
	}
	/* What moem.ko placed on a node on request it reports itself. */
	ret = pool->info.bound ? 0 : moem_pool_nodes_check(pool, pool->base);
	if (!ret && pool->info.provider == MOEM_POOL_KMOD && n_named == 1 &&
	    pool->info.nodes[0].node != named[0])
		ret = moem_errf(EXDEV,
				"moem.ko's region is not (all) on NUMA node %d: load the module "
				"with node=%d, or use the thp or hugetlb provider",
				named[0], named[0]);
	if (ret) {
		moem_pool_close(pool);
		return ret;
	}
	if (!pool->info.why[0])
		snprintf(pool->info.why, sizeof(pool->info.why), "%s pool requested",
			 moem_pool_provider_name(pool->info.provider));
	if (pool->limit[0]) {
		size_t n = strlen(pool->info.why);

		snprintf(pool->info.why + n, sizeof(pool->info.why) - n, "; %s", pool->limit);
	}
	pool->info.size = pool->size;
	if (opts.require_pinned && !pool->info.pinned) {
		ret = moem_errf(EPERM,
				"the %s pool is not pinned (%llu of %llu bytes locked): %s; "
				"require-pinned refuses it",
				moem_pool_provider_name(pool->info.provider),
				(unsigned long long)pool->info.pinned_bytes,
				(unsigned long long)pool->size, pool->info.why);
		moem_pool_close(pool);
		return ret;
	}
	*out = pool;
	return 0;
}

void moem_pool_close(struct moem_pool *pool)
{
	if (!pool)
		return;
	if (pool->base)
		munmap(pool->base, pool->size);
	if (pool->fd >= 0)
		close(pool->fd);
	if (pool->dev_fd >= 0)
		close(pool->dev_fd);
	free(pool);
}

void *moem_pool_base(const struct moem_pool *pool)
{
	return pool->base;
}

uint64_t moem_pool_size(const struct moem_pool *pool)
{
	return pool->size;
}

void moem_pool_get_info(const struct moem_pool *pool, struct moem_pool_info *info)
{
	*info = pool->info;
}

int moem_pool_region_fd(const struct moem_pool *pool)
{
	return pool->info.provider == MOEM_POOL_KMOD ? pool->fd : -1;
}
