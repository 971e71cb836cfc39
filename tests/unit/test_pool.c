// SPDX-License-Identifier: GPL-2.0-only
/*
 * The userspace pool providers on this machine: thp always, hugetlb when
 * huge pages can be reserved (as root), kmod refused cleanly without the
 * module, and auto choosing and explaining.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numa.h>
#include <numaif.h>

#include <moem/error.h>
#include <moem/pool.h>
#include <moem/util.h>

#include "kselftest_harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

static void fill_check(struct __test_metadata *_metadata, struct moem_pool *p)
{
	uint8_t *b = moem_pool_base(p);
	uint64_t n = moem_pool_size(p);

	ASSERT_EQ(0u, (uintptr_t)b % MOEM_CHUNK_BYTES);
	for (uint64_t i = 0; i < n; i += 4096) {
		ASSERT_EQ(0, b[i]); /* fresh pools read as zeros */
	}
	memset(b, 0xa5, n);
	for (uint64_t i = 0; i < n; i += 4093) {
		ASSERT_EQ(0xa5, b[i]);
	}
}

TEST(thp_provider)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP, .size = 6 * MOEM_MiB + 1};
	struct moem_pool_info info;
	struct moem_pool *p;

	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(8 * MOEM_MiB, moem_pool_size(p)); /* rounded up to 2 MiB */
	moem_pool_get_info(p, &info);
	EXPECT_EQ(MOEM_POOL_THP, info.provider);
	/* ASan's mlock() returns 0 without locking: the pool must say so. */
	EXPECT_EQ(geteuid() == 0 && !UNDER_ASAN, info.pinned) TH_LOG("%s", info.why);
	if (UNDER_ASAN && geteuid() == 0)
		EXPECT_NE(NULL, strstr(info.why, "NOT PINNED"));
	TH_LOG("thp: %s; %s", info.why, info.backing);
	fill_check(_metadata, p);
	moem_pool_close(p);
}

TEST(thp_unlocked)
{
	struct moem_pool_opts o = {
		.provider = MOEM_POOL_THP, .size = 4 * MOEM_MiB, .no_lock = true};
	struct moem_pool_info info;
	struct moem_pool *p;

	ASSERT_EQ(0, moem_pool_open(&o, &p));
	moem_pool_get_info(p, &info);
	EXPECT_FALSE(info.pinned);
	fill_check(_metadata, p);
	moem_pool_close(p);
}

/* Pinned is what the kernel says: locked bytes, and said loudly when not. */
TEST(thp_not_pinned_says_so)
{
	struct moem_pool_opts o = {
		.provider = MOEM_POOL_THP, .size = 4 * MOEM_MiB, .no_lock = true};
	struct moem_pool_info info;
	struct moem_pool *p;

	ASSERT_EQ(0, moem_pool_open(&o, &p));
	moem_pool_get_info(p, &info);
	EXPECT_FALSE(info.pinned);
	EXPECT_EQ(0u, info.pinned_bytes);
	EXPECT_NE(NULL, strstr(info.why, "NOT PINNED")) TH_LOG("%s", info.why);
	moem_pool_close(p);
	o.require_pinned = true;
	EXPECT_EQ(-EPERM, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "require-pinned"))
	TH_LOG("%s", moem_last_error());
}

/* As a user whose RLIMIT_MEMLOCK is below the pool: mlock fails, and the
 * pool says so (not "THP + mlock" as if it had worked). */
TEST(thp_mlock_refused)
{
	pid_t pid;
	int st;

	if (UNDER_ASAN)
		SKIP(return, "ASan's mlock() never fails (it locks nothing)");
	pid = fork();
	ASSERT_LE(0, pid);
	if (!pid) {
		struct rlimit rl = {64 << 10, 64 << 10};
		struct moem_pool_opts o = {.size = 8 * MOEM_MiB};
		struct moem_pool_info info;
		struct moem_pool *p;

		if (!geteuid() && (setgid(65534) || setuid(65534)))
			_exit(10);
		if (setrlimit(RLIMIT_MEMLOCK, &rl))
			_exit(11);
		if (moem_pool_open(&o, &p))
			_exit(12);
		moem_pool_get_info(p, &info);
		if (info.pinned || info.pinned_bytes)
			_exit(13);
		if (!strstr(info.why, "NOT PINNED") || !strstr(info.why, "RLIMIT_MEMLOCK"))
			_exit(14);
		moem_pool_close(p);
		o.require_pinned = true;
		_exit(moem_pool_open(&o, &p) == -EPERM ? 0 : 15);
	}
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(0, WEXITSTATUS(st));
}

/*
 * A pool above MemAvailable less the reserve is refused before any
 * memory is locked (the machine is never pushed towards the OOM killer:
 * the sizes asked for here are never allocated); with fit it is shrunk.
 */
TEST(pool_above_memavailable)
{
	static const enum moem_pool_provider prov[] = {MOEM_POOL_AUTO, MOEM_POOL_THP};
	struct moem_pool_mem m;
	struct moem_pool *p;
	uint64_t t0;

	ASSERT_EQ(0, moem_pool_headroom(0, &m)) TH_LOG("%s", moem_last_error());
	TH_LOG("MemTotal %llu, MemAvailable %llu, reserve %llu, headroom %llu",
	       (unsigned long long)m.total, (unsigned long long)m.available,
	       (unsigned long long)m.reserve, (unsigned long long)m.headroom);
	EXPECT_EQ(moem_pool_default_reserve(m.total), m.reserve);
	EXPECT_GE(m.reserve, 256 * MOEM_MiB);
	EXPECT_LE(m.reserve, 4 * MOEM_GiB);
	for (size_t i = 0; i < 2; i++) {
		struct moem_pool_opts o = {.provider = prov[i], .size = m.available + MOEM_GiB};

		t0 = moem_now_ns();
		EXPECT_EQ(-ENOMEM, moem_pool_open(&o, &p));
		EXPECT_NE(NULL, strstr(moem_last_error(), "more than this machine can give"))
		TH_LOG("%s", moem_last_error());
		EXPECT_NE(NULL, strstr(moem_last_error(), "MemAvailable"));
		/* Refused by arithmetic, not by trying. */
		EXPECT_LT(moem_now_ns() - t0, 500000000ull);
		o.size = 1ull << 40;
		EXPECT_EQ(-ENOMEM, moem_pool_open(&o, &p));
	}
	/* The reserve is the knob: reserve all but 512 MiB, ask for 4 GiB. */
	if (m.available > MOEM_GiB) {
		struct moem_pool_opts o = {.provider = MOEM_POOL_THP,
					   .size = 4 * MOEM_GiB,
					   .mem_reserve = m.available - 512 * MOEM_MiB,
					   .no_lock = true};
		struct moem_pool_info info;

		EXPECT_EQ(-ENOMEM, moem_pool_open(&o, &p));
		EXPECT_NE(NULL, strstr(moem_last_error(), "mem-reserve"));
		o.fit = true;
		ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
		moem_pool_get_info(p, &info);
		EXPECT_LE(info.size, 768 * MOEM_MiB);
		EXPECT_GE(info.size, 2 * MOEM_MiB);
		EXPECT_NE(NULL, strstr(info.why, "shrunk from 4.00 GiB")) TH_LOG("%s", info.why);
		moem_pool_close(p);
	}
	/* hugetlb is measured in reserved huge pages, not MemAvailable. */
	{
		struct moem_pool_opts o = {.provider = MOEM_POOL_HUGETLB, .size = m.total * 2};

		EXPECT_EQ(-ENOSPC, moem_pool_open(&o, &p));
		EXPECT_NE(NULL, strstr(moem_last_error(), "huge pages"))
		TH_LOG("%s", moem_last_error());
		/* prefixed once, the message it prefixes whole */
		EXPECT_EQ(0, strncmp(moem_last_error(), "hugetlb: a pool of ", 19))
		TH_LOG("%s", moem_last_error());
	}
}

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

#define NR_HUGE "/proc/sys/vm/nr_hugepages"

/* The reservation is restored in teardown, whatever the test's outcome. */
FIXTURE(huge)
{
	char old[32];
	bool reserved;
};

FIXTURE_SETUP(huge)
{
	FILE *f = fopen(NR_HUGE, "r");

	self->reserved = false;
	if (f && fgets(self->old, sizeof(self->old), f) && geteuid() == 0 &&
	    write_str(NR_HUGE, "8") == 0)
		self->reserved = true;
	if (f)
		fclose(f);
}

FIXTURE_TEARDOWN(huge)
{
	if (self->reserved)
		write_str(NR_HUGE, self->old);
}

TEST_F(huge, hugetlb_provider)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_HUGETLB, .size = 8 * MOEM_MiB};
	struct moem_pool_info info;
	struct moem_pool *p;

	if (!self->reserved)
		SKIP(return, "cannot reserve huge pages (needs root and hugetlbfs)");
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	EXPECT_EQ(MOEM_POOL_HUGETLB, info.provider);
	EXPECT_EQ(2 * MOEM_MiB, info.page_bytes) TH_LOG("%s", info.backing);
	EXPECT_EQ(8 * MOEM_MiB, info.huge_bytes);
	fill_check(_metadata, p);
	moem_pool_close(p);
	/* more than reserved: a clean -ENOSPC, not a SIGBUS later */
	o.size = 64 * MOEM_MiB;
	EXPECT_EQ(-ENOSPC, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
}

TEST(kmod_absent)
{
	struct moem_pool_opts o = {
		.provider = MOEM_POOL_KMOD, .size = 2 * MOEM_MiB, .dev_path = "/nonexistent/moem"};
	struct moem_pool *p;

	EXPECT_EQ(-ENODEV, moem_pool_open(&o, &p));
	EXPECT_NE(NULL, strstr(moem_last_error(), "not loaded"));
}

TEST(auto_explains_choice)
{
	struct moem_pool_opts o = {.size = 4 * MOEM_MiB, .dev_path = "/nonexistent/moem"};
	struct moem_pool_info info;
	struct moem_pool *p;

	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	EXPECT_NE(MOEM_POOL_KMOD, info.provider);
	EXPECT_NE(NULL, strstr(info.why, "kmod not loaded")) TH_LOG("%s", info.why);
	moem_pool_close(p);
}

TEST(bad_opts)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP};
	struct moem_pool *p;

	EXPECT_EQ(-EINVAL, moem_pool_open(&o, &p));
	o.size = 1ULL << 62;
	EXPECT_EQ(-EINVAL, moem_pool_open(&o, &p));
	o.size = UINT64_MAX;
	EXPECT_EQ(-EINVAL, moem_pool_open(&o, &p));
	o.provider = (enum moem_pool_provider)42;
	o.size = 2 * MOEM_MiB;
	EXPECT_EQ(-EINVAL, moem_pool_open(&o, &p));
}

/* The node of the first page of each 2 MiB chunk, from the kernel (move_pages status). */
static void expect_chunks_on(struct __test_metadata *_metadata, struct moem_pool *p,
			     const struct moem_pool_node *r)
{
	uint8_t *b = moem_pool_base(p);

	for (uint64_t off = r->off; off < r->off + r->bytes; off += MOEM_CHUNK_BYTES) {
		void *page = b + off;
		int status = -1;

		ASSERT_EQ(0, move_pages(0, 1, &page, NULL, &status, 0));
		ASSERT_EQ(r->node, status) TH_LOG("chunk at %llu", (unsigned long long)off);
	}
}

/* The default on this one-node machine: one range, nothing bound, as before. */
TEST(nodes_default_one_node)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP, .size = 8 * MOEM_MiB};
	struct moem_pool_info info;
	struct moem_pool *p;
	int32_t nodes[MOEM_POOL_MAX_NODES];
	uint32_t n;

	ASSERT_EQ(0, moem_pool_nodes_parse(NULL, nodes, &n)) TH_LOG("%s", moem_last_error());
	if (n != 1)
		SKIP(return, "%u NUMA nodes here: the one-node default is not this machine's", n);
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	ASSERT_EQ(1u, info.n_nodes);
	EXPECT_FALSE(info.bound);
	EXPECT_EQ(0u, info.nodes[0].off);
	EXPECT_EQ(moem_pool_size(p), info.nodes[0].bytes);
	/* where the kernel put it, found after the fact */
	EXPECT_EQ(numa_available() < 0 ? 0 : nodes[0], info.nodes[0].node);
	fill_check(_metadata, p);
	moem_pool_close(p);
}

/* A node named is bound: every chunk is checked on it. */
TEST(nodes_named_is_bound)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP, .size = 8 * MOEM_MiB, .nodes = "0"};
	struct moem_pool_info info;
	struct moem_pool *p;

	if (numa_available() < 0)
		SKIP(return, "no NUMA in this kernel");
	ASSERT_EQ(0, moem_pool_open(&o, &p)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(p, &info);
	ASSERT_EQ(1u, info.n_nodes);
	EXPECT_TRUE(info.bound);
	EXPECT_EQ(0, info.nodes[0].node);
	expect_chunks_on(_metadata, p, &info.nodes[0]);
	fill_check(_metadata, p);
	moem_pool_close(p);
}

TEST(nodes_refused_clearly)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_THP, .size = 8 * MOEM_MiB};
	int32_t nodes[MOEM_POOL_MAX_NODES];
	char missing[32];
	struct moem_pool *p;
	uint32_t n;

	snprintf(missing, sizeof(missing), "0,%d", numa_available() < 0 ? 1 : numa_max_node() + 1);
	o.nodes = missing;
	EXPECT_EQ(-ENODEV, moem_pool_open(&o, &p));
	EXPECT_NE(NULL,
		  strstr(moem_last_error(), numa_available() < 0 ? "no NUMA" : "does not exist"))
	TH_LOG("%s", moem_last_error());
	EXPECT_NE(NULL, strstr(moem_last_error(), missing)) TH_LOG("%s", moem_last_error());
	o.nodes = "1023";
	EXPECT_EQ(-ENODEV, moem_pool_open(&o, &p));
	for (int i = 0; i < 6; i++) {
		static const char *const bad[] = {"x", "0,", "1-0", "0-", "-1", "1024"};

		EXPECT_EQ(-EINVAL, moem_pool_nodes_parse(bad[i], nodes, &n)) TH_LOG("%s", bad[i]);
		EXPECT_NE(NULL, strstr(moem_last_error(), bad[i]));
	}
	/* repeats and ranges collapse to one sorted list */
	ASSERT_EQ(0, moem_pool_nodes_parse("0,0-0,0", nodes, &n)) TH_LOG("%s", moem_last_error());
	EXPECT_EQ(1u, n);
	EXPECT_EQ(0, nodes[0]);
	/* A kmod pool over several nodes (one moem.ko region per node) is
	 * tested with the module, in the two-node guest (numa_test.c). */
}

TEST(provider_names)
{
	enum moem_pool_provider pr;

	ASSERT_EQ(0, moem_pool_provider_parse("hugetlb", &pr));
	EXPECT_EQ(MOEM_POOL_HUGETLB, pr);
	EXPECT_EQ(-EINVAL, moem_pool_provider_parse("shm", &pr));
	EXPECT_STREQ("thp", moem_pool_provider_name(MOEM_POOL_THP));
}

TEST_HARNESS_MAIN
