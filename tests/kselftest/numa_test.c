// SPDX-License-Identifier: GPL-2.0-only
/*
 * The DRAM pool over NUMA nodes, on a guest booted with two of them
 * (scripts/guest/run.sh --numa 2, make test-numa): a thp pool and, as
 * root, a hugetlb pool span both nodes with every 2 MiB chunk on the node
 * its range names, as move_pages(2) reports it; the DRAM tier over such a
 * pool puts the experts of one layer on both nodes, each version's pages
 * (first and last) on the node the tier says; the engine computing every
 * expert on the CPU from a pool over both nodes gives the outputs of a
 * one-node run. moem.ko (loaded by scripts/guest/numa.sh) makes a region
 * on each node with every page there, keeps its per-node figures and its
 * per-user quota over both nodes, and its pool provider spreads a pool
 * over both (one region per node), reattaches the set and refuses half of
 * one; the DRAM tier and the engine work over that pool as over thp.
 * Where the machine has one node (the ordinary guest, MOEM_NUMA_NODES
 * unset) it skips; where MOEM_NUMA_NODES says how many there must be,
 * fewer is a failure, and so is a missing /dev/moem.
 */
#include <errno.h>
#include <fcntl.h>
#include <numa.h>
#include <numaif.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <moem/dev.h>
#include <moem/engine.h>
#include <moem/error.h>
#include <moem/log.h>
#include <moem/pack.h>
#include <moem/pool.h>
#include <moem/tierdev.h>
#include <moem/tiers.h>
#include <moem/util.h>

#include "kselftest_harness.h"
#include "../unit/store_test_util.h"

/* How many nodes this guest has; SKIPs (or fails, when told how many to expect) below two. */
#define NEED_TWO_NODES()                                                           \
	do {                                                                       \
		const char *want = getenv("MOEM_NUMA_NODES");                      \
		int have = numa_available() < 0 ? 1 : numa_num_configured_nodes(); \
		if (want && have < atoi(want))                                     \
			ASSERT_GE(have, atoi(want))                                \
		TH_LOG("the guest should have %s nodes", want);                    \
		if (have < 2)                                                      \
			SKIP(return, "one NUMA node here");                        \
	} while (0)

/* /dev/moem, or a SKIP where nobody said the module is there. */
#define NEED_MOEM_KO(fd)                                                          \
	do {                                                                      \
		(fd) = open("/dev/moem", O_RDWR | O_CLOEXEC);                     \
		if ((fd) < 0 && getenv("MOEM_NUMA_NODES"))                        \
			ASSERT_LE(0, (fd))                                        \
		TH_LOG("/dev/moem: %s (numa.sh loads moem.ko)", strerror(errno)); \
		if ((fd) < 0)                                                     \
			SKIP(return, "moem.ko not loaded");                       \
	} while (0)

static int page_node(const void *p)
{
	void *page = (void *)((uintptr_t)p & ~4095UL);
	int status = -1;

	if (move_pages(0, 1, &page, NULL, &status, 0))
		return -errno;
	return status;
}

/* Every chunk of every range on its node; both nodes used. */
static void expect_spread(struct __test_metadata *_metadata, struct moem_pool *p)
{
	struct moem_pool_info info;
	uint8_t *b = moem_pool_base(p);
	uint64_t covered = 0;

	moem_pool_get_info(p, &info);
	ASSERT_EQ(2u, info.n_nodes);
	ASSERT_TRUE(info.bound);
	for (uint32_t k = 0; k < info.n_nodes; k++) {
		const struct moem_pool_node *r = &info.nodes[k];

		EXPECT_EQ((int32_t)k, r->node);
		EXPECT_EQ(covered, r->off);
		EXPECT_GT(r->bytes, 0u);
		for (uint64_t off = r->off; off < r->off + r->bytes; off += MOEM_CHUNK_BYTES) {
			ASSERT_EQ(r->node, page_node(b + off))
			TH_LOG("chunk at %llu", (unsigned long long)off);
			ASSERT_EQ(r->node, page_node(b + off + MOEM_CHUNK_BYTES - 1));
		}
		covered += r->bytes;
	}
	EXPECT_EQ(moem_pool_size(p), covered);
	/* the memory works: written and read back */
	memset(b, 0x5a, covered);
	for (uint64_t i = 0; i < covered; i += 4093)
		ASSERT_EQ(0x5a, b[i]);
}

TEST(thp_pool_spans_both_nodes)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP, .size = 64 * MOEM_MiB};
	struct moem_pool *p;

	NEED_TWO_NODES();
	/* the default: every node the process may allocate on */
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	expect_spread(_metadata, p);
	moem_pool_close(p);
	/* named, unequal split: 5 chunks, 3 on node 0 and 2 on node 1 */
	o.nodes = "0-1";
	o.size = 10 * MOEM_MiB;
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	expect_spread(_metadata, p);
	{
		struct moem_pool_info info;

		moem_pool_get_info(p, &info);
		EXPECT_EQ(6 * MOEM_MiB, info.nodes[0].bytes);
		EXPECT_EQ(4 * MOEM_MiB, info.nodes[1].bytes);
	}
	moem_pool_close(p);
	/* one node named: all of it there */
	o.nodes = "1";
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	for (uint64_t off = 0; off < moem_pool_size(p); off += MOEM_CHUNK_BYTES)
		ASSERT_EQ(1, page_node((uint8_t *)moem_pool_base(p) + off));
	moem_pool_close(p);
	/* a node the guest does not have (node 2 has no memory: its own test) */
	o.nodes = "0,3";
	EXPECT_EQ(-ENODEV, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "does not exist"))
	TH_LOG("%s", moem_last_error());
}

/* ---- moem.ko regions on a chosen node ------------------------------------ */

/* A number from moem.ko's sysfs, or -1. */
static int64_t ko_read(const char *path)
{
	unsigned long long v;
	FILE *f = fopen(path, "r");
	int n;

	if (!f)
		return -1;
	n = fscanf(f, "%llu", &v);
	fclose(f);
	return n == 1 ? (int64_t)v : -1;
}

/* nodes/node<N>/<file> and pool/<file>. */
static int64_t ko_node(int node, const char *file)
{
	char path[160];

	snprintf(path, sizeof(path), "/sys/kernel/moem/nodes/node%d/%s", node, file);
	return ko_read(path);
}

static int64_t ko_pool(const char *file)
{
	char path[160];

	snprintf(path, sizeof(path), "/sys/kernel/moem/pool/%s", file);
	return ko_read(path);
}

/* Every 4 KiB page of [p, p + len) on node, by move_pages(2). */
static void expect_pages_on(struct __test_metadata *_metadata, const uint8_t *p, uint64_t len,
			    int node)
{
	uint64_t n = len / 4096;
	void **pages = calloc(n, sizeof(*pages));
	int *status = calloc(n, sizeof(*status));

	ASSERT_NE(NULL, pages);
	ASSERT_NE(NULL, status);
	for (uint64_t i = 0; i < n; i++)
		pages[i] = (void *)(p + i * 4096);
	ASSERT_EQ(0, move_pages(0, n, pages, NULL, status, 0)) TH_LOG("%s", strerror(errno));
	for (uint64_t i = 0; i < n; i++) {
		ASSERT_EQ(node, status[i]) TH_LOG("page %llu", (unsigned long long)i);
	}
	free(pages);
	free(status);
}

TEST(kmod_region_on_each_node)
{
	int64_t total[2], free_bytes[2], sum_total = 0, sum_free = 0;
	const uint64_t size = 12 * MOEM_MiB;
	struct moem_region_info info;
	char name[32];
	int dev, fd[2];
	uint8_t *p[2];

	NEED_TWO_NODES();
	NEED_MOEM_KO(dev);
	for (int n = 0; n < 2; n++) {
		total[n] = ko_node(n, "total_bytes");
		free_bytes[n] = ko_node(n, "free_bytes");
		ASSERT_LE(0, total[n]) TH_LOG("node %d has no nodes/node%d", n, n);
		ASSERT_LE(0, free_bytes[n]);
	}
	for (int n = 0; n < 2; n++) {
		snprintf(name, sizeof(name), "numa-r%d", n);
		ASSERT_EQ(0, moem_dev_region_create_on(dev, name, size, 0, 0600, n, &fd[n]))
		TH_LOG("%s", moem_last_error());
		ASSERT_EQ(0, moem_dev_region_info(dev, name, &info));
		EXPECT_EQ((uint32_t)n, info.node);
		EXPECT_TRUE(info.flags & MOEM_REGION_NODE);
		p[n] = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd[n], 0);
		ASSERT_NE(MAP_FAILED, p[n]);
		/* zeroed, then touched: every page mapped, every page on node n */
		for (uint64_t i = 0; i < size; i += 4096)
			ASSERT_EQ(0, p[n][i]);
		memset(p[n], 0x40 + n, size);
		expect_pages_on(_metadata, p[n], size, n);
	}
	/* each node's free (floor) chunks were used first, then it grew by the rest */
	for (int n = 0; n < 2; n++) {
		int64_t reused = free_bytes[n] < (int64_t)size ? free_bytes[n] : (int64_t)size;

		EXPECT_EQ(total[n] + (int64_t)size - reused, ko_node(n, "total_bytes"))
		TH_LOG("node %d", n);
		EXPECT_EQ(free_bytes[n] - reused, ko_node(n, "free_bytes"));
	}
	for (int n = 0; n < 2; n++) {
		sum_total += ko_node(n, "total_bytes");
		sum_free += ko_node(n, "free_bytes");
	}
	EXPECT_EQ(ko_pool("total_bytes"), sum_total);
	EXPECT_EQ(ko_pool("free_bytes"), sum_free);
	for (int n = 0; n < 2; n++) {
		munmap(p[n], size);
		close(fd[n]);
	}
	/* gone with their last fd: node 1 is back where it was */
	EXPECT_EQ(total[1], ko_node(1, "total_bytes"));
	EXPECT_EQ(total[0], ko_node(0, "total_bytes"));
	/* a node the guest does not have */
	EXPECT_EQ(-EINVAL, moem_dev_region_create_on(dev, "numa-bad", size, 0, 0600, 63, &fd[0]));
	close(dev);
}

/* The first node that is online but has no memory (a CPU-only node), or -1. */
static int memoryless_node(void)
{
	for (int n = 0; n < 64; n++) {
		char path[96];
		uint64_t total = 1;
		FILE *f;

		snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", n);
		f = fopen(path, "r");
		if (!f)
			continue;
		{
			char line[160];
			unsigned long long v;
			int nd;

			while (fgets(line, sizeof(line), f))
				if (sscanf(line, "Node %d MemTotal: %llu kB", &nd, &v) == 2)
					total = v;
		}
		fclose(f);
		if (!total)
			return n;
	}
	return -1;
}

/*
 * A node that exists (online, with a CPU) but has no memory is refused
 * with EINVAL, as a node that does not exist is, and takes nothing; it
 * has no nodes/node<N>/ directory. The NUMA guest has one
 * (MOEM_NUMA_MEMLESS names it: run.sh --memless 1).
 */
TEST(kmod_node_without_memory)
{
	const char *memless = getenv("MOEM_NUMA_MEMLESS");
	int64_t total = ko_pool("total_bytes");
	int dev, fd, node = memoryless_node();

	NEED_TWO_NODES();
	NEED_MOEM_KO(dev);
	if (memless)
		ASSERT_EQ(atoi(memless), node) TH_LOG("no memoryless node %s", memless);
	if (node < 0) {
		close(dev);
		SKIP(return, "no memoryless node here");
	}
	EXPECT_EQ(-EINVAL,
		  moem_dev_region_create_on(dev, "numa-memless", 2 * MOEM_MiB, 0, 0600, node, &fd));
	EXPECT_EQ(-1, ko_node(node, "total_bytes"));
	EXPECT_EQ(total, ko_pool("total_bytes"));
	/* a pool named to it is refused by libmoem first, by name */
	{
		struct moem_pool_opts o = {.provider = MOEM_POOL_KMOD, .size = 2 * MOEM_MiB};
		struct moem_pool *p;
		char list[16];

		snprintf(list, sizeof(list), "0,%d", node);
		o.nodes = list;
		EXPECT_EQ(-ENODEV, moem_pool_open(&o, &p));
		EXPECT_NE(NULL, strstr(moem_last_error(), "has no memory"))
		TH_LOG("%s", moem_last_error());
	}
	close(dev);
}

/*
 * A user without CAP_SYS_ADMIN cannot pin more than its quota by
 * spreading regions over nodes: the quota counts every node (the root
 * phase runs it through a child that becomes uid 65534).
 */
static int quota_over_nodes(int dev)
{
	int64_t quota = ko_pool("user_max_bytes");
	uint64_t half;
	int fd[2], extra, ret = 0;

	if (quota < (int64_t)(4 * MOEM_MiB))
		return 1;
	half = (uint64_t)quota / 2 / MOEM_CHUNK_BYTES * MOEM_CHUNK_BYTES;
	if (moem_dev_region_create_on(dev, "numa-q0", half, 0, 0600, 0, &fd[0]))
		return 2;
	if (moem_dev_region_create_on(dev, "numa-q1", (uint64_t)quota - half, 0, 0600, 1, &fd[1])) {
		close(fd[0]);
		return 3;
	}
	for (int n = 0; n < 2 && !ret; n++) {
		if (moem_dev_region_create_on(dev, "numa-q2", MOEM_CHUNK_BYTES, 0, 0600, n,
					      &extra) != -EDQUOT)
			ret = 4 + n;
	}
	close(fd[0]);
	close(fd[1]);
	return ret;
}

TEST(kmod_quota_counts_every_node)
{
	int dev;

	NEED_TWO_NODES();
	NEED_MOEM_KO(dev);
	if (geteuid() == 0) {
		pid_t pid = fork();
		int st;

		ASSERT_LE(0, pid);
		if (pid == 0)
			_exit(setgid(65534) || setuid(65534) ? 100 : quota_over_nodes(dev));
		ASSERT_EQ(pid, waitpid(pid, &st, 0));
		ASSERT_TRUE(WIFEXITED(st));
		EXPECT_EQ(0, WEXITSTATUS(st));
	} else {
		EXPECT_EQ(0, quota_over_nodes(dev));
	}
	close(dev);
}

/* The kmod provider over both nodes: one region per node, mapped as one. */
TEST(kmod_pool_spans_both_nodes)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_KMOD,
				   .size = 10 * MOEM_MiB,
				   .name = "numa-pool",
				   .persistent = true};
	struct moem_region_info ri;
	struct moem_pool_info info;
	struct moem_pool *p;
	int dev, fd;

	NEED_TWO_NODES();
	NEED_MOEM_KO(dev);
	/* the default (module loaded without node=): every node */
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	TH_LOG("%s", info.why);
	EXPECT_FALSE(info.attached);
	/* unequal split, as thp cuts it: 3 chunks on node 0, 2 on node 1 */
	EXPECT_EQ(6 * MOEM_MiB, info.nodes[0].bytes);
	EXPECT_EQ(4 * MOEM_MiB, info.nodes[1].bytes);
	for (int n = 0; n < 2; n++) {
		char name[32];

		snprintf(name, sizeof(name), "numa-pool@%d", n);
		ASSERT_EQ(0, moem_dev_region_info(dev, name, &ri)) TH_LOG("%s", moem_last_error());
		EXPECT_EQ((uint32_t)n, ri.node);
		EXPECT_EQ(info.nodes[n].bytes, ri.size);
	}
	/* kmod pages are mapped on first touch: touch, then ask the kernel */
	memset(moem_pool_base(p), 0, moem_pool_size(p));
	expect_spread(_metadata, p);
	memset(moem_pool_base(p), 0x6b, moem_pool_size(p));
	moem_pool_close(p);

	/* a restart reattaches the set, bytes and layout as they were */
	o.attach = true;
	o.size = 0;
	o.nodes = "0-1";
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	EXPECT_TRUE(info.attached);
	EXPECT_TRUE(info.persistent);
	ASSERT_EQ(10 * MOEM_MiB, moem_pool_size(p));
	EXPECT_EQ(6 * MOEM_MiB, info.nodes[1].off);
	for (uint64_t i = 0; i < moem_pool_size(p); i += 4093)
		ASSERT_EQ(0x6b, ((uint8_t *)moem_pool_base(p))[i]);
	expect_spread(_metadata, p);
	moem_pool_close(p);

	/* a set with a region missing is refused, not half used */
	ASSERT_EQ(0, moem_dev_region_destroy(dev, "numa-pool@1"));
	EXPECT_EQ(-ENOENT, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "incomplete")) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_dev_region_destroy(dev, "numa-pool@0"));

	/* one region of the name (a one-node pool) is another layout */
	ASSERT_EQ(0, moem_dev_region_create(dev, "numa-pool", 2 * MOEM_MiB, MOEM_REGION_PERSISTENT,
					    0600, &fd));
	close(fd);
	o.size = 4 * MOEM_MiB;
	EXPECT_EQ(-EEXIST, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "one region")) TH_LOG("%s", moem_last_error());
	/* ...which a restart with the default nodes reattaches as it was
	 * (made before the module had per-node regions, say) */
	o.nodes = NULL;
	o.size = 0;
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	EXPECT_TRUE(info.attached);
	EXPECT_EQ(1u, info.n_nodes);
	EXPECT_EQ(2 * MOEM_MiB, moem_pool_size(p));
	moem_pool_close(p);
	ASSERT_EQ(0, moem_dev_region_destroy(dev, "numa-pool"));

	/* one node named: the whole region there */
	o = (struct moem_pool_opts){
		.provider = MOEM_POOL_KMOD, .size = 6 * MOEM_MiB, .name = "numa-one", .nodes = "1"};
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	EXPECT_EQ(1u, info.n_nodes);
	EXPECT_EQ(1, info.nodes[0].node);
	EXPECT_TRUE(info.bound);
	memset(moem_pool_base(p), 1, moem_pool_size(p));
	expect_pages_on(_metadata, moem_pool_base(p), moem_pool_size(p), 1);
	moem_pool_close(p);
	/* a name that leaves no room for "@<node>" */
	o.nodes = "0,1";
	o.name = "a-region-name-of-sixty-two-bytes-which-is-within-the-limit-xyz";
	EXPECT_EQ(-ENAMETOOLONG, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	close(dev);
}

static int write_int(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	int ret = 0;

	if (!f)
		return -errno;
	if (fprintf(f, "%ld\n", v) < 0)
		ret = -EIO;
	if (fclose(f))
		ret = -errno;
	return ret;
}

#define NODE_HUGE "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/nr_hugepages"

TEST(hugetlb_pool_spans_both_nodes)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_HUGETLB, .size = 16 * MOEM_MiB};
	struct moem_pool *p;
	char path[128];
	int ret;

	NEED_TWO_NODES();
	if (geteuid())
		SKIP(return, "reserving huge pages needs root");
	for (int n = 0; n < 2; n++) {
		snprintf(path, sizeof(path), NODE_HUGE, n);
		ASSERT_EQ(0, write_int(path, 4));
	}
	ret = moem_pool_open(&o, &p);
	EXPECT_EQ(0, ret) TH_LOG("%s", moem_last_error());
	if (!ret) {
		expect_spread(_metadata, p);
		moem_pool_close(p);
	}
	/* enough huge pages in all, too few on one node: refused before
	 * anything is mapped, naming the node */
	snprintf(path, sizeof(path), NODE_HUGE, 0);
	ASSERT_EQ(0, write_int(path, 7));
	snprintf(path, sizeof(path), NODE_HUGE, 1);
	ASSERT_EQ(0, write_int(path, 1));
	EXPECT_EQ(-ENOSPC, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "NUMA node 1")) TH_LOG("%s", moem_last_error());
	for (int n = 0; n < 2; n++) {
		snprintf(path, sizeof(path), NODE_HUGE, n);
		write_int(path, 0);
	}
}

/* ---- the DRAM tier over a two-node pool ---------------------------------- */

#define L     2
#define N     8
#define BYTES (3 * MOEM_MiB + 12345) /* spans chunks: its pages must all be on one node */

struct job {
	uint32_t l, e;
	uint8_t *dst;
	uint64_t bytes;
	void (*done)(void *, int);
	void *arg;
	struct job *next;
};

/* Loads complete from a thread of their own (never inside read()). */
struct tstager {
	struct moem_stager s;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *jobs;
	int stop;
};

static void *stager_thread(void *arg)
{
	struct tstager *st = arg;

	pthread_mutex_lock(&st->lock);
	while (!st->stop || st->jobs) {
		struct job *j = st->jobs;

		if (!j) {
			pthread_cond_wait(&st->cond, &st->lock);
			continue;
		}
		st->jobs = j->next;
		pthread_mutex_unlock(&st->lock);
		memset(j->dst, (int)(j->l * N + j->e + 1), j->bytes);
		j->done(j->arg, 0);
		free(j);
		pthread_mutex_lock(&st->lock);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

static int stager_read(struct moem_stager *s, uint32_t l, uint32_t e, uint32_t pi, void *dst,
		       uint64_t bytes, void (*done)(void *, int), void *arg)
{
	struct tstager *st = (struct tstager *)s;
	struct job *j = calloc(1, sizeof(*j));

	(void)pi;
	if (!j)
		return -ENOMEM;
	*j = (struct job){l, e, dst, bytes, done, arg, NULL};
	pthread_mutex_lock(&st->lock);
	j->next = st->jobs;
	st->jobs = j;
	pthread_cond_signal(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

static void tier_spread(struct __test_metadata *_metadata, enum moem_pool_provider provider)
{
	struct moem_pool_opts po = {
		.provider = provider, .size = 64 * MOEM_MiB, .name = "numa-tier"};
	struct moem_emu_opts eo = {.link_gbps = 50, .granularity = 1 << 20};
	struct tstager st = {.s.read = stager_read};
	struct moem_tiers_cfg c = {
		.n_layers = L,
		.n_experts = N,
		.n_prec = 1,
		.bytes = {BYTES},
		.hbm_budget = 8 * MOEM_MiB,
		.dram_budget = 64 * MOEM_MiB,
		.xfer = {.piece_bytes = 1 << 20},
	};
	struct moem_evictor *hev, *dev_ev;
	struct moem_tiers_stats s;
	struct moem_pool_info info;
	struct moem_tierdev *dev;
	struct moem_tiers *t;
	struct moem_pool *p;
	uint8_t *base;

	ASSERT_EQ(0, moem_pool_open(&po, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	ASSERT_EQ(2u, info.n_nodes);
	ASSERT_TRUE(info.bound);
	c.n_nodes = info.n_nodes;
	for (uint32_t k = 0; k < info.n_nodes; k++) {
		c.node_id[k] = info.nodes[k].node;
		c.node_off[k] = info.nodes[k].off;
	}
	base = moem_pool_base(p);
	pthread_mutex_init(&st.lock, NULL);
	pthread_cond_init(&st.cond, NULL);
	ASSERT_EQ(0, pthread_create(&st.th, NULL, stager_thread, &st));
	ASSERT_EQ(0, moem_tierdev_emu_create(&eo, &dev));
	ASSERT_EQ(0, moem_evictor_lru_create(L * N * 2, &hev));
	ASSERT_EQ(0, moem_evictor_lru_create(L * N * 2, &dev_ev));
	ASSERT_EQ(0, moem_tiers_create(&c, dev, base, moem_pool_size(p), &st.s, hev, dev_ev, &t))
	TH_LOG("%s", moem_last_error());
	for (uint32_t l = 0; l < L; l++) {
		for (uint32_t e = 0; e < N; e++) {
			ASSERT_EQ(0, moem_tiers_stage(t, l, e, MOEM_TIER_HI))
			TH_LOG("(%u,%u): %s", l, e, moem_last_error());
		}
	}
	moem_tiers_drain(t);
	for (uint32_t l = 0; l < L; l++) {
		uint32_t per_node[2] = {0, 0};

		for (uint32_t e = 0; e < N; e++) {
			int32_t node;
			uint64_t off;

			ASSERT_EQ(0, moem_tiers_dram_node(t, l, e, MOEM_TIER_HI, &node, &off));
			ASSERT_TRUE(node == 0 || node == 1);
			per_node[node]++;
			/* the kernel agrees with the tier, at both ends of the copy */
			for (uint64_t i = 0; i < BYTES; i += MOEM_CHUNK_BYTES / 2) {
				ASSERT_EQ(node, page_node(base + off + i))
				TH_LOG("(%u,%u) at %llu+%llu", l, e, (unsigned long long)off,
				       (unsigned long long)i);
			}
			ASSERT_EQ(node, page_node(base + off + BYTES - 1));
			ASSERT_EQ((uint8_t)(l * N + e + 1), base[off + BYTES - 1]);
		}
		EXPECT_EQ(N / 2, per_node[0]) TH_LOG("layer %u", l);
		EXPECT_EQ(N / 2, per_node[1]) TH_LOG("layer %u", l);
	}
	moem_tiers_get_stats(t, &s);
	ASSERT_EQ(2u, s.n_nodes);
	EXPECT_EQ(0u, s.dram_node_fallback);
	EXPECT_EQ(s.dram_node[0].used, s.dram_node[1].used);
	EXPECT_EQ(0, moem_tiers_check(t)) TH_LOG("%s", moem_last_error());
	moem_tiers_destroy(t);
	hev->destroy(hev);
	dev_ev->destroy(dev_ev);
	dev->ops->destroy(dev);
	pthread_mutex_lock(&st.lock);
	st.stop = 1;
	pthread_cond_signal(&st.cond);
	pthread_mutex_unlock(&st.lock);
	pthread_join(st.th, NULL);
	moem_pool_close(p);
}

TEST(tier_spreads_each_layer_over_the_nodes)
{
	NEED_TWO_NODES();
	tier_spread(_metadata, MOEM_POOL_THP);
}

/* The same over moem.ko: the node of each chunk is its region's. */
TEST(tier_spreads_each_layer_over_kmod_regions)
{
	int dev;

	NEED_TWO_NODES();
	NEED_MOEM_KO(dev);
	close(dev);
	tier_spread(_metadata, MOEM_POOL_KMOD);
}

/* ---- hybrid execution over a two-node pool ------------------------------- */

static int run_engine(const char *pack, enum moem_pool_provider provider, const char *nodes,
		      struct moem_run_stats *rs, struct moem_engine_status *st)
{
	struct moem_engine_opts o = {
		.pack_path = pack,
		.backend = "cpu",
		.threads = 2, /* one worker per node: vCPU n is node n */
		.pool = {.provider = provider, .nodes = nodes, .name = "numa-engine"},
		.hi = MOEM_PREC_BF16,
		.dram_budget = 32 * MOEM_MiB,
		.hbm_budget = 1 * MOEM_MiB,
		.link_gbps = 50,
		.exec_hybrid = true,
		.cpu_moe_layers = 3, /* every MoE layer's experts on the CPU */
		.cpu_gbps = 5,	     /* given: no measuring under TCG */
		.cpu_token_ns = 1000,
	};
	struct moem_workload w = {.kind = MOEM_WL_SYNTH, .batch = 4, .steps = 6};
	struct moem_engine *e;
	int ret = moem_engine_open(&o, &e);

	if (ret)
		return ret;
	ret = moem_engine_run(e, &w, NULL, NULL, rs);
	moem_engine_get_status(e, st);
	moem_engine_close(e);
	return ret;
}

/*
 * The engine with every expert computed on the CPU from a pool over both
 * nodes gives the one-node run's outputs bit for bit, and the experts'
 * copies (hence their work) were on both nodes.
 */
TEST(hybrid_outputs_equal_the_one_node_run)
{
	struct moem_mkmodel_opts mo;
	struct moem_pack_opts po = {0};
	struct moem_run_stats one, two;
	struct moem_engine_status st;
	char *dir, *model, *pack;

	NEED_TWO_NODES();
	moem_log_set_level(MOEM_LOG_WARN);
	dir = st_tmpdir();
	ASSERT_NE(NULL, dir);
	model = st_path(dir, "model");
	pack = st_path(dir, "m.moem");
	st_tiny_opts(&mo, MOEM_ARCH_QWEN3_MOE, model);
	mo.cfg.n_experts = 16;
	mo.cfg.top_k = 4;
	ASSERT_EQ(0, moem_mkmodel(&mo)) TH_LOG("%s", moem_last_error());
	po.model_dir = model;
	po.out_path = pack;
	po.prec_mask = 1u << MOEM_PREC_BF16;
	po.threads = 2;
	ASSERT_EQ(0, moem_pack_write(&po)) TH_LOG("%s", moem_last_error());

	ASSERT_EQ(0, run_engine(pack, MOEM_POOL_THP, "0", &one, &st))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(1u, st.dram_n_nodes);
	EXPECT_EQ(0, st.dram_node[0].node);
	EXPECT_GT(one.total.cpu_experts, 0u);
	/* over both nodes: thp, then moem.ko's regions (where it is loaded) */
	for (int prov = 0; prov < 2; prov++) {
		enum moem_pool_provider pv = prov ? MOEM_POOL_KMOD : MOEM_POOL_THP;

		if (pv == MOEM_POOL_KMOD && access("/dev/moem", F_OK) && !getenv("MOEM_NUMA_NODES"))
			break;
		ASSERT_EQ(0, run_engine(pack, pv, "0,1", &two, &st))
		TH_LOG("%s: %s", moem_pool_provider_name(pv), moem_last_error());
		ASSERT_EQ(2u, st.dram_n_nodes);
		EXPECT_TRUE(st.pool_bound);
		for (int k = 0; k < 2; k++) {
			EXPECT_EQ(k, st.dram_node[k].node);
			EXPECT_GT(st.dram_node[k].used, 0u) TH_LOG("node %d", k);
		}
		EXPECT_EQ(one.total.cpu_experts, two.total.cpu_experts);
		EXPECT_STREQ(one.digest_hex, two.digest_hex);
		TH_LOG("%s: %llu CPU expert computations; digest %s; node 0 %llu, node 1 %llu "
		       "bytes used",
		       moem_pool_provider_name(pv), (unsigned long long)two.total.cpu_experts,
		       two.digest_hex, (unsigned long long)st.dram_node[0].used,
		       (unsigned long long)st.dram_node[1].used);
	}
	st_rm_rf(dir);
	free(dir);
	free(model);
	free(pack);
}

TEST_HARNESS_MAIN
