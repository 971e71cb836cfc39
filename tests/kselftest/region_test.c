// SPDX-License-Identifier: GPL-2.0-only
/*
 * Regions: create / map / write / read back / destroy, open by name from
 * another process, persistence across the creator's exit, destroy while
 * mapped, no data leak through a recreated region, listing, ownership
 * and permissions, MOEM_OPEN_OWNED (a region a daemon can trust), the
 * per-user quota and memory cgroup charging, one privilege rule for the
 * writable knobs, libmoem's kmod pool provider attaching to a
 * persistent region after its creator exited and refusing a squatted one,
 * and regions on a chosen NUMA node (MOEM_REGION_NODE) on this one-node
 * guest: the flag's rules, bad nodes, what INFO and sysfs report (the
 * two-node guest's numa_test.c checks where the pages really are).
 */
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>

#include <linux/capability.h>

#include <moem/dev.h>
#include <moem/error.h>
#include <moem/pool.h>

#include "moem_test.h"

TEST_F(moem, version)
{
	struct moem_version v;
	char buf[32];

	memset(&v, 0xff, sizeof(v));
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_VERSION, &v));
	EXPECT_EQ(MOEM_ABI_VERSION, v.abi_version);
	EXPECT_EQ(MOEM_MIN_LIB_VERSION, v.min_lib_version);
	EXPECT_EQ(0, v.reserved[0]);
	EXPECT_EQ(0, v.reserved[1]);
	ASSERT_EQ(0, sysfs_read(SYSFS "/abi_version", buf, sizeof(buf)));
	EXPECT_STREQ("1.4", buf);
	/* libmoem checks the version at open. */
	int fd;

	ASSERT_EQ(0, moem_dev_open(NULL, &fd)) TH_LOG("%s", moem_last_error());
	close(fd);
}

TEST_F(moem, create_map_write_destroy)
{
	struct moem_region_info info;
	char name[MOEM_NAME_MAX];
	uint8_t *p, *q, *r;
	int fd, fd2;

	fd = region_create(self->dev, "rw", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(FD_CLOEXEC, fcntl(fd, F_GETFD) & FD_CLOEXEC);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, (uintptr_t)p % CHUNK); /* chunk-aligned placement */
	EXPECT_TRUE(all_zero(p, 4 * MiB));
	pattern_fill(p, 4 * MiB, 1);
	EXPECT_EQ(0, msync(p, 4 * MiB, MS_SYNC)); /* nothing to write back */

	/* A second mapping, of the second chunk only, sees the same bytes. */
	q = map_region(fd, 2 * MiB, 2 * MiB);
	ASSERT_NE(MAP_FAILED, q);
	EXPECT_EQ(0, memcmp(q, p + 2 * MiB, 2 * MiB));
	q[5] = 0x5a;
	EXPECT_EQ(0x5a, p[2 * MiB + 5]);
	pattern_fill(p, 4 * MiB, 1);

	memset(name, 'x', sizeof(name));
	ASSERT_EQ(0, region_fd_info(fd, &info, name));
	EXPECT_STREQ("rw", name);
	EXPECT_EQ(4 * MiB, info.size);
	EXPECT_EQ(0, info.flags);
	EXPECT_EQ(0600, info.mode);
	EXPECT_EQ(getuid(), info.owner_uid);
	EXPECT_EQ(2, info.nr_maps);
	EXPECT_EQ(1, info.nr_fds);

	/* Reopen by name: the same bytes through a new fd. */
	fd2 = region_open(self->dev, "rw", 0);
	ASSERT_LE(0, fd2);
	r = map_region(fd2, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, r);
	EXPECT_EQ(-1, pattern_check(r, 4 * MiB, 1));
	ASSERT_EQ(0, region_info(self->dev, "rw", &info));
	EXPECT_EQ(3, info.nr_maps);
	EXPECT_EQ(2, info.nr_fds);
	ASSERT_EQ(0, munmap(r, 4 * MiB));
	close(fd2);

	ASSERT_EQ(0, munmap(p, 4 * MiB));
	ASSERT_EQ(0, region_destroy(self->dev, "rw"));
	EXPECT_EQ(-ENOENT, region_destroy(self->dev, "rw"));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "rw", 0));
	/* Destroyed, but the fd and the other mapping keep the memory. */
	ASSERT_EQ(0, region_fd_info(fd, &info, NULL));
	EXPECT_EQ(1, info.nr_maps);
	EXPECT_EQ(-1, pattern_check_from(q, 2 * MiB, 1, 2 * MiB / 8));
	close(fd);
	EXPECT_EQ(-1, pattern_check_from(q, 2 * MiB, 1, 2 * MiB / 8));
	ASSERT_EQ(0, munmap(q, 2 * MiB));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, open_from_second_process)
{
	uint8_t *p;
	pid_t pid;
	int fd;

	fd = region_create(self->dev, "shared", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 7);

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int dev = dev_open(), rfd;
		uint8_t *c;

		if (dev < 0)
			_exit(10);
		rfd = region_open(dev, "shared", 0);
		if (rfd < 0)
			_exit(11);
		c = map_region(rfd, 2 * MiB, 0);
		if (c == MAP_FAILED)
			_exit(12);
		if (pattern_check(c, 2 * MiB, 7) != -1)
			_exit(13);
		memset(c + 4096, 0xc3, 4096); /* the parent must see this */
		_exit(0);
	}
	ASSERT_EQ(0, wait_child(pid));
	for (int i = 0; i < 4096; i++) {
		ASSERT_EQ(0xc3, p[4096 + i]);
	}
	EXPECT_EQ(-1, pattern_check(p, 4096, 7));
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(fd);
	/* Not persistent: its last fd and mapping went, so did the name. */
	EXPECT_EQ(-ENOENT, region_open(self->dev, "shared", 0));
	EXPECT_POOL_BASELINE(self);
}

static int create_fill_exit(const char *name, uint32_t flags, uint32_t seed)
{
	int dev = dev_open(), fd;
	void *p;

	if (dev < 0)
		return 10;
	fd = region_create(dev, name, 4 * MiB, flags, 0600);
	if (fd < 0)
		return 11;
	p = map_region(fd, 4 * MiB, 0);
	if (p == MAP_FAILED)
		return 12;
	pattern_fill(p, 4 * MiB, seed);
	return 0; /* exit without unmapping, closing or destroying */
}

TEST_F(moem, persistent_survives_creator)
{
	struct moem_region_info info;
	void *p;
	pid_t pid;
	int fd;

	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(create_fill_exit("keep", MOEM_REGION_PERSISTENT, 3));
	ASSERT_EQ(0, wait_child(pid));

	ASSERT_EQ(0, region_info(self->dev, "keep", &info));
	EXPECT_EQ(MOEM_REGION_PERSISTENT, info.flags);
	EXPECT_EQ(0, info.nr_maps);
	EXPECT_EQ(0, info.nr_fds);
	fd = region_open(self->dev, "keep", 0);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 3));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	/* Still there with no user at all, until destroyed. */
	ASSERT_EQ(0, region_info(self->dev, "keep", &info));
	ASSERT_EQ(0, region_destroy(self->dev, "keep"));
	EXPECT_EQ(-ENOENT, region_info(self->dev, "keep", &info));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, nonpersistent_dies_with_creator)
{
	pid_t pid = fork();

	ASSERT_LE(0, pid);
	if (pid == 0)
		_exit(create_fill_exit("gone", 0, 4));
	ASSERT_EQ(0, wait_child(pid));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "gone", 0));
	EXPECT_POOL_BASELINE(self);
}

static bool sysfs_exists(const char *name)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), SYSFS "/regions/%s", name);
	return stat(path, &st) == 0;
}

TEST_F(moem, destroy_while_mapped)
{
	struct moem_region_info info, info2;
	struct moem_pool_stats st;
	uint8_t *p, *q;
	int fd, fd2;

	fd = region_create(self->dev, "busy", 2 * MiB, MOEM_REGION_PERSISTENT, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	close(fd); /* the mapping alone keeps it */
	pattern_fill(p, 2 * MiB, 9);
	ASSERT_TRUE(sysfs_exists("busy"));
	ASSERT_EQ(0, region_info(self->dev, "busy", &info));

	ASSERT_EQ(0, region_destroy(self->dev, "busy"));
	EXPECT_FALSE(sysfs_exists("busy"));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "busy", 0));
	/* The mapping still works and the memory is still in use. */
	EXPECT_EQ(-1, pattern_check(p, 2 * MiB, 9));
	p[100] = 1;
	ASSERT_EQ(0, pool_stats(self->dev, &st));
	EXPECT_EQ(self->base.free_bytes >= 2 * MiB ? self->base.free_bytes - 2 * MiB : 0,
		  st.free_bytes);

	/* The name is free at once; the new region is new and zeroed. */
	fd2 = region_create(self->dev, "busy", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd2);
	ASSERT_EQ(0, region_fd_info(fd2, &info2, NULL));
	EXPECT_NE(info.id, info2.id);
	q = map_region(fd2, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, q);
	EXPECT_TRUE(all_zero(q, 2 * MiB));
	memset(q, 0xee, 2 * MiB);
	EXPECT_EQ(1, p[100]);
	ASSERT_EQ(0, munmap(q, 2 * MiB));
	close(fd2);

	ASSERT_EQ(0, munmap(p, 2 * MiB));
	EXPECT_POOL_BASELINE(self);
}

/* The page frame behind a virtual address (root sees PFNs in pagemap). */
static uint64_t pfn_of(const void *addr)
{
	int fd = open("/proc/self/pagemap", O_RDONLY);
	uint64_t e = 0;

	if (fd < 0)
		return 0;
	if (pread(fd, &e, 8, (uintptr_t)addr / 4096 * 8) != 8)
		e = 0;
	close(fd);
	return (e >> 63) ? e & ((1ULL << 55) - 1) : 0;
}

TEST_F(moem, recreated_region_reads_zero)
{
	uint64_t size = 4 * MiB, pfns[2][2];
	uint8_t *p;
	int fd;

	for (int round = 0; round < 2; round++) {
		fd = region_create(self->dev, "leak", size, 0, 0600);
		ASSERT_LE(0, fd);
		p = map_region(fd, size, 0);
		ASSERT_NE(MAP_FAILED, p);
		/* Every byte, not a sample: any leftover is a leak. */
		ASSERT_TRUE(all_zero(p, size)) TH_LOG("round %d: stale data", round);
		memset(p, 0xa5, size);
		pfns[round][0] = pfn_of(p);
		pfns[round][1] = pfn_of(p + CHUNK);
		ASSERT_EQ(0, munmap(p, size));
		close(fd);
		EXPECT_EQ(-ENOENT, region_open(self->dev, "leak", 0));
	}
	/*
	 * With a preallocated pool the same chunks come back, so the zeros
	 * above were written over the 0xa5 of round 0, not found fresh.
	 * (Page frame numbers read as 0 without CAP_SYS_ADMIN.)
	 */
	if (self->base.free_bytes >= size && geteuid() == 0) {
		ASSERT_NE(0, pfns[0][0]);
		EXPECT_TRUE((pfns[0][0] == pfns[1][0] && pfns[0][1] == pfns[1][1]) ||
			    (pfns[0][0] == pfns[1][1] && pfns[0][1] == pfns[1][0]))
		TH_LOG("pfns %llx %llx then %llx %llx", (unsigned long long)pfns[0][0],
		       (unsigned long long)pfns[0][1], (unsigned long long)pfns[1][0],
		       (unsigned long long)pfns[1][1]);
	}
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, list_regions)
{
	const char *names[] = {"list-a", "list-bb", "list-ccc"};
	struct moem_region_list l;
	char buf[256], **got;
	uint32_t count, base = self->base.nr_regions;
	int fds[3];

	for (int i = 0; i < 3; i++) {
		fds[i] = region_create(self->dev, names[i], 2 * MiB, 0, 0600);
		ASSERT_LE(0, fds[i]);
	}
	memset(&l, 0, sizeof(l));
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	EXPECT_EQ(base + 3, l.count);
	ASSERT_LE(7 + 8 + 9, l.needed);

	/* Too small: nothing copied, still the counts. */
	memset(buf, 'x', sizeof(buf));
	l.buf_ptr = (uintptr_t)buf;
	l.buf_len = l.needed - 1;
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	for (int i = 0; i < (int)sizeof(buf); i++) {
		ASSERT_EQ('x', buf[i]);
	}

	l.buf_len = sizeof(buf);
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	int seen = 0;

	for (uint32_t off = 0, i = 0; i < l.count; i++) {
		for (int j = 0; j < 3; j++)
			seen += !strcmp(buf + off, names[j]);
		off += strlen(buf + off) + 1;
	}
	EXPECT_EQ(3, seen);

	/* libmoem's wrapper agrees. */
	ASSERT_EQ(0, moem_dev_region_list(self->dev, &got, &count));
	EXPECT_EQ(base + 3, count);
	moem_dev_names_free(got, count);

	for (int i = 0; i < 3; i++)
		close(fds[i]);
	EXPECT_POOL_BASELINE(self);
}

/* In a child: switch to uid 1000 keeping the /dev/moem fd, run fn. */
static int as_user(int dev, int (*fn)(int dev))
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (setgid(1000) || setuid(1000))
			_exit(100);
		_exit(fn(dev));
	}
	return wait_child(pid);
}

static int user_refused(int dev)
{
	struct moem_region_info info;
	struct moem_budget b = {.knob = MOEM_BUDGET_PREFETCH_DEPTH, .value = 3};
	void *p;
	int fd;

	if (region_open(dev, "priv", 0) != -EACCES)
		return 1;
	if (region_open(dev, "priv", MOEM_OPEN_RDONLY) != -EACCES)
		return 2;
	if (region_destroy(dev, "priv") != -EACCES)
		return 3;
	if (region_info(dev, "priv", &info) || info.owner_uid != 0)
		return 4; /* anyone may ask */
	if (ioc(dev, MOEM_IOC_BUDGET_SET, &b) != -EPERM)
		return 5;
	/* Other-readable: read-only access only. */
	if (region_open(dev, "pub", 0) != -EACCES)
		return 6;
	fd = region_open(dev, "pub", MOEM_OPEN_RDONLY);
	if (fd < 0)
		return 7;
	p = mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED || errno != EACCES)
		return 8;
	p = mmap(NULL, 2 * MiB, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED || ((uint8_t *)p)[10] != 0x77)
		return 9;
	if (mprotect(p, 2 * MiB, PROT_READ | PROT_WRITE) == 0 || errno != EACCES)
		return 10;
	munmap(p, 2 * MiB);
	close(fd);
	/* Its own region, owned by uid 1000, mode 0600. */
	fd = region_create(dev, "user", 2 * MiB, MOEM_REGION_PERSISTENT, 0600);
	if (fd < 0)
		return 11;
	if (region_info(dev, "user", &info) || info.owner_uid != 1000)
		return 12;
	close(fd);
	fd = region_open(dev, "user", 0);
	if (fd < 0)
		return 13;
	close(fd);
	return 0;
}

TEST_F(moem, other_uid_refused)
{
	struct moem_region_info info;
	uint8_t *p;
	int fd, pub;

	REQUIRE_ROOT();
	fd = region_create(self->dev, "priv", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	pub = region_create(self->dev, "pub", 2 * MiB, 0, 0604);
	ASSERT_LE(0, pub);
	p = map_region(pub, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x77, 2 * MiB);
	ASSERT_EQ(0, munmap(p, 2 * MiB));

	EXPECT_EQ(0, as_user(self->dev, user_refused));

	/* CAP_SYS_ADMIN manages everyone's regions. */
	ASSERT_EQ(0, region_info(self->dev, "user", &info));
	EXPECT_EQ(1000, info.owner_uid);
	int ufd = region_open(self->dev, "user", 0);

	ASSERT_LE(0, ufd);
	close(ufd);
	EXPECT_EQ(0, region_destroy(self->dev, "user"));
	close(fd);
	close(pub);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, rdonly_open_by_owner)
{
	uint8_t *p;
	int fd, ro;

	fd = region_create(self->dev, "ro", 2 * MiB, 0, 0400);
	ASSERT_LE(0, fd);
	/* Mode 0400 without CAP_SYS_ADMIN would refuse rw; root may. */
	ro = region_open(self->dev, "ro", MOEM_OPEN_RDONLY);
	ASSERT_LE(0, ro);
	EXPECT_EQ(O_RDONLY, fcntl(ro, F_GETFL) & O_ACCMODE);
	p = mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EACCES, errno);
	p = mmap(NULL, 2 * MiB, PROT_READ, MAP_SHARED, ro, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(0, p[0]);
	EXPECT_EQ(-1, mprotect(p, 2 * MiB, PROT_READ | PROT_WRITE));
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(ro);
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, kmod_pool_provider_attach)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_KMOD,
				   .size = 6 * MiB,
				   .name = "poolprov",
				   .persistent = true};
	struct moem_pool_info info;
	struct moem_pool *pool;
	pid_t pid;

	/* The creator: a daemon that stages data and exits (or crashes). */
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (moem_pool_open(&o, &pool))
			_exit(10);
		moem_pool_get_info(pool, &info);
		if (info.provider != MOEM_POOL_KMOD || info.attached || !info.persistent ||
		    info.page_bytes != CHUNK || !info.pinned)
			_exit(11);
		pattern_fill(moem_pool_base(pool), moem_pool_size(pool), 21);
		moem_pool_close(pool);
		_exit(0);
	}
	ASSERT_EQ(0, wait_child(pid));

	/* The restarted daemon attaches by name, size taken from the region. */
	o.size = 0;
	o.attach = true;
	ASSERT_EQ(0, moem_pool_open(&o, &pool)) TH_LOG("%s", moem_last_error());
	moem_pool_get_info(pool, &info);
	EXPECT_TRUE(info.attached);
	EXPECT_EQ(6 * MiB, moem_pool_size(pool));
	EXPECT_EQ(0, (uintptr_t)moem_pool_base(pool) % CHUNK);
	EXPECT_EQ(-1, pattern_check(moem_pool_base(pool), 6 * MiB, 21));
	TH_LOG("kmod pool: %s; %s", info.why, info.backing);
	moem_pool_close(pool);

	/* A different size is refused rather than silently attached. */
	o.size = 4 * MiB;
	EXPECT_EQ(-EEXIST, moem_pool_open(&o, &pool));
	ASSERT_EQ(0, region_destroy(self->dev, "poolprov"));
	EXPECT_POOL_BASELINE(self);
}

/* Bytes the pool holds (what) on node, from nodes/node<N>/, or -1. */
static int64_t node_bytes(int node, const char *what)
{
	char path[128];
	uint64_t v;

	snprintf(path, sizeof(path), SYSFS "/nodes/node%d/%s", node, what);
	return sysfs_read_u64(path, &v) ? -1 : (int64_t)v;
}

/* Every node= directory's total and free add up to the pool's. */
static void expect_nodes_sum(struct __test_metadata *_metadata, int dev)
{
	struct moem_pool_stats st;
	uint64_t total = 0, free_bytes = 0;
	int64_t t, f;

	ASSERT_EQ(0, pool_stats(dev, &st));
	for (int n = 0; n < 1024; n++) {
		t = node_bytes(n, "total_bytes");
		f = node_bytes(n, "free_bytes");
		if (t < 0)
			continue;
		ASSERT_LE(0, f);
		EXPECT_LE(f, t);
		total += (uint64_t)t;
		free_bytes += (uint64_t)f;
	}
	EXPECT_EQ(st.total_bytes, total);
	EXPECT_EQ(st.free_bytes, free_bytes);
}

/*
 * MOEM_REGION_NODE (ABI 1.4) on the guest's one node: a region on node 0
 * is made, zeroed, and says so in INFO, FD_INFO and sysfs; node 0's
 * figures in nodes/node0/ follow it; a node that does not exist or has no
 * memory is -EINVAL, as is a node with the flag clear and a flag bit
 * beyond the known ones; INFO's node is output only.
 */
static int user_on_node(int dev)
{
	struct moem_region_info info;
	int fd = region_create_on(dev, "node-user", 2 * MiB, 0, 0600, 0), ret = 0;

	if (fd < 0)
		return 1;
	if (region_info(dev, "node-user", &info) || info.node != 0 ||
	    info.owner_uid != (uint32_t)geteuid() || !(info.flags & MOEM_REGION_NODE))
		ret = 2;
	else if (region_create_on(dev, "node-user2", 2 * MiB, 0, 0600, 1) != -EINVAL)
		ret = 3;
	close(fd);
	return ret;
}

TEST_F(moem, region_on_node)
{
	struct moem_region_create c;
	struct moem_region_info info;
	char name[MOEM_NAME_MAX], buf[32];
	int64_t total0, free0;
	uint8_t *p;
	int fd, fd2;

	total0 = node_bytes(0, "total_bytes");
	free0 = node_bytes(0, "free_bytes");
	ASSERT_LE(0, total0);
	ASSERT_LE(0, free0);
	EXPECT_EQ(-1, node_bytes(1, "total_bytes")); /* one node here */
	expect_nodes_sum(_metadata, self->dev);

	fd = region_create_on(self->dev, "node0", 6 * MiB, 0, 0600, 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, region_info(self->dev, "node0", &info));
	EXPECT_EQ(0u, info.node);
	EXPECT_EQ(MOEM_REGION_NODE, info.flags);
	EXPECT_EQ(6 * MiB, info.size);
	ASSERT_EQ(0, region_fd_info(fd, &info, name));
	EXPECT_EQ(0u, info.node);
	EXPECT_STREQ("node0", name);
	ASSERT_EQ(0, sysfs_read(SYSFS "/regions/node0/node", buf, sizeof(buf)));
	EXPECT_STREQ("0", buf);
	/* node 0 holds the region: floor chunks first, then new ones */
	EXPECT_EQ(total0 + (int64_t)(6 * MiB) - (free0 < (int64_t)(6 * MiB) ? free0 : 6 * MiB),
		  node_bytes(0, "total_bytes"));
	expect_nodes_sum(_metadata, self->dev);
	p = map_region(fd, 6 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_TRUE(all_zero(p, 6 * MiB));
	pattern_fill(p, 6 * MiB, 9);
	munmap(p, 6 * MiB);
	close(fd);
	/* ...and gives them back: a new region on the node reads zero */
	EXPECT_POOL_BASELINE(self);
	fd = region_create_on(self->dev, "node0", 6 * MiB, 0, 0600, 0);
	ASSERT_LE(0, fd);
	p = map_region(fd, 6 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_TRUE(all_zero(p, 6 * MiB));
	munmap(p, 6 * MiB);

	/* Without the flag: the node its chunks are on, not flagged. */
	fd2 = region_create(self->dev, "node-any", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd2);
	memset(&info, 0, sizeof(info));
	info.name_ptr = (uintptr_t) "node-any";
	info.node = 77; /* output only: ignored on input */
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_INFO, &info));
	EXPECT_EQ(0u, info.node);
	EXPECT_EQ(0u, info.flags);
	info.name_ptr = 0;
	info.node = 0xffffffffU;
	ASSERT_EQ(0, ioc(fd2, MOEM_IOC_REGION_FD_INFO, &info));
	EXPECT_EQ(0u, info.node);
	ASSERT_EQ(0, sysfs_read(SYSFS "/regions/node-any/node", buf, sizeof(buf)));
	EXPECT_STREQ("0", buf);
	close(fd2);

	/* Bad nodes: none of them makes a region or takes memory. */
	const uint32_t bad[] = {1, 2, 63, 1023, 1024, 0x7fffffffU, MOEM_NODE_ANY};

	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT_EQ(-EINVAL,
			  region_create_on(self->dev, "node-bad", 2 * MiB, 0, 0600, bad[i]))
		TH_LOG("node %u", bad[i]);
	}
	/* node is a pad without the flag: non-zero is refused, zero is fine */
	c = (struct moem_region_create){
		.name_ptr = (uintptr_t) "node-bad", .size = 2 * MiB, .mode = 0600, .node = 1};
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c.node = 0x80000000U;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c.node = 0;
	c.flags = MOEM_REGION_FLAGS_ALL + 1; /* the next bit is still unknown */
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c.flags = MOEM_REGION_NODE;
	c.reserved[0] = 1;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "node-bad", 0));
	/* A taken name stays taken, whatever the node. */
	EXPECT_EQ(-EEXIST, region_create_on(self->dev, "node0", 2 * MiB, 0, 0600, 0));
	close(fd);

	/* Users may place their regions too (the quota is per user, any node). */
	if (geteuid() == 0) {
		EXPECT_EQ(0, as_user(self->dev, user_on_node));
	} else {
		EXPECT_EQ(0, user_on_node(self->dev));
	}
	EXPECT_POOL_BASELINE(self);
	expect_nodes_sum(_metadata, self->dev);
}

/* OWNED: only the caller's own region, writable by nobody else. */
TEST_F(moem, open_owned_modes)
{
	static const struct {
		const char *name;
		uint32_t mode;
		int want;
	} cases[] = {
		{"own-600", 0600, 0},	   {"own-644", 0644, 0},      {"own-400", 0400, 0},
		{"own-620", 0620, -EPERM}, {"own-602", 0602, -EPERM}, {"own-666", 0666, -EPERM},
	};
	int fds[6];

	for (int i = 0; i < 6; i++) {
		fds[i] = region_create(self->dev, cases[i].name, 2 * MiB, 0, cases[i].mode);
		ASSERT_LE(0, fds[i]);
	}
	for (int i = 0; i < 6; i++) {
		int fd = region_open(self->dev, cases[i].name, MOEM_OPEN_OWNED | MOEM_OPEN_RDONLY);

		EXPECT_EQ(cases[i].want, fd < 0 ? fd : 0) TH_LOG("%s", cases[i].name);
		if (fd >= 0)
			close(fd);
	}
	/* rw as well, where the owner bits allow it (0400: root may, others not). */
	int fd = region_open(self->dev, "own-600", MOEM_OPEN_OWNED);

	EXPECT_LE(0, fd);
	close(fd);
	EXPECT_EQ(-EPERM, region_open(self->dev, "own-602", MOEM_OPEN_OWNED));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "own-none", MOEM_OPEN_OWNED));
	EXPECT_EQ(-EINVAL, region_open(self->dev, "own-600", 1U << 2));
	for (int i = 0; i < 6; i++)
		close(fds[i]);
	EXPECT_POOL_BASELINE(self);
}

static int user_squats(int dev)
{
	int fd = region_create(dev, "squat", 2 * MiB, MOEM_REGION_PERSISTENT, 0666);

	if (fd < 0)
		return 1;
	close(fd);
	/* Its owner may trust it only with a safe mode: this one is not. */
	if (region_open(dev, "squat", MOEM_OPEN_OWNED) != -EPERM)
		return 2;
	fd = region_create(dev, "mine", 2 * MiB, MOEM_REGION_PERSISTENT, 0600);
	if (fd < 0)
		return 3;
	close(fd);
	fd = region_open(dev, "mine", MOEM_OPEN_OWNED);
	if (fd < 0)
		return 4;
	close(fd);
	/* root's region: not the user's. */
	if (region_open(dev, "rootown", MOEM_OPEN_OWNED) != -EPERM)
		return 5;
	return 0;
}

/*
 * Another user got the name first: root's CREATE says EEXIST, a plain
 * OPEN succeeds (CAP_SYS_ADMIN opens anything), OWNED refuses it, and
 * libmoem's attach (the kmod pool provider) says whose region it is.
 */
TEST_F(moem, open_owned_other_uid)
{
	struct moem_pool_opts o = {.provider = MOEM_POOL_KMOD,
				   .size = 2 * MiB,
				   .name = "squat",
				   .persistent = true,
				   .attach = true};
	struct moem_pool *pool;
	int fd, root_fd;

	REQUIRE_ROOT();
	root_fd = region_create(self->dev, "rootown", 2 * MiB, 0, 0644);
	ASSERT_LE(0, root_fd);
	ASSERT_EQ(0, as_user(self->dev, user_squats));
	EXPECT_EQ(-EEXIST, region_create(self->dev, "squat", 2 * MiB, 0, 0600));
	fd = region_open(self->dev, "squat", 0);
	EXPECT_LE(0, fd);
	close(fd);
	EXPECT_EQ(-EPERM, region_open(self->dev, "squat", MOEM_OPEN_OWNED));
	EXPECT_EQ(-EPERM, region_open(self->dev, "mine", MOEM_OPEN_OWNED));
	EXPECT_EQ(-EPERM, moem_pool_open(&o, &pool));
	TH_LOG("attach: %s", moem_last_error());
	EXPECT_NE(NULL, strstr(moem_last_error(), "owned by uid 1000"));
	EXPECT_NE(NULL, strstr(moem_last_error(), "0666"));
	EXPECT_EQ(0, region_destroy(self->dev, "squat"));
	EXPECT_EQ(0, region_destroy(self->dev, "mine"));
	close(root_fd);
	EXPECT_POOL_BASELINE(self);
}

static int user_quota_fill(int dev)
{
	int a, b;

	/* 8 MiB allowed: 6 persistent + 2, then nothing more. */
	a = region_create(dev, "q-a", 6 * MiB, MOEM_REGION_PERSISTENT, 0600);
	if (a < 0)
		return 1;
	if (region_create(dev, "q-b", 4 * MiB, 0, 0600) != -EDQUOT)
		return 2;
	b = region_create(dev, "q-b", 2 * MiB, 0, 0600);
	if (b < 0)
		return 3;
	if (region_create(dev, "q-c", 2 * MiB, 0, 0600) != -EDQUOT)
		return 4;
	/* Non-admins do not set their own quota. */
	if (sysfs_write(SYSFS "/pool/user_max_bytes", "268435456") == 0)
		return 5;
	return 0; /* exit: q-b goes, q-a stays and still counts */
}

static int user_quota_after(int dev)
{
	int fd;

	if (region_create(dev, "q-d", 4 * MiB, 0, 0600) != -EDQUOT)
		return 1;
	fd = region_create(dev, "q-d", 2 * MiB, 0, 0600);
	return fd < 0 ? 2 : 0;
}

static int user_quota_freed(int dev)
{
	return region_create(dev, "q-e", 8 * MiB, 0, 0600) < 0 ? 1 : 0;
}

TEST_F(moem, user_quota)
{
	char old[32];
	uint64_t v;
	int fd;

	REQUIRE_ROOT();
	ASSERT_EQ(0, sysfs_read(SYSFS "/pool/user_max_bytes", old, sizeof(old)));
	/* Bad values change nothing. */
	EXPECT_EQ(-EINVAL, sysfs_write(SYSFS "/pool/user_max_bytes", "4096"));
	EXPECT_EQ(-EINVAL, sysfs_write(SYSFS "/pool/user_max_bytes", "-2097152"));
	EXPECT_EQ(-EINVAL, sysfs_write(SYSFS "/pool/user_max_bytes", "99999999999999999"));
	ASSERT_EQ(0, sysfs_write(SYSFS "/pool/user_max_bytes", "8388608\n"));
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/user_max_bytes", &v));
	EXPECT_EQ(8 * MiB, v);

	EXPECT_EQ(0, as_user(self->dev, user_quota_fill));
	EXPECT_EQ(0, as_user(self->dev, user_quota_after));
	/* CAP_SYS_ADMIN is counted, not limited. */
	fd = region_create(self->dev, "q-root", 16 * MiB, 0, 0600);
	EXPECT_LE(0, fd);
	close(fd);
	/* The user's persistent region goes: the quota is free again. */
	EXPECT_EQ(0, region_destroy(self->dev, "q-a"));
	EXPECT_EQ(0, as_user(self->dev, user_quota_freed));
	/* 0: users without CAP_SYS_ADMIN get nothing. */
	ASSERT_EQ(0, sysfs_write(SYSFS "/pool/user_max_bytes", "0"));
	EXPECT_EQ(1, as_user(self->dev, user_quota_freed));
	ASSERT_EQ(0, sysfs_write(SYSFS "/pool/user_max_bytes", old));
	EXPECT_POOL_BASELINE(self);
}

static int cg_write(const char *dir, const char *file, const char *v)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	return sysfs_write(path, v);
}

static int64_t cg_current(const char *dir)
{
	char path[256];
	uint64_t v;

	snprintf(path, sizeof(path), "%s/memory.current", dir);
	return sysfs_read_u64(path, &v) ? -1 : (int64_t)v;
}

/*
 * Chunks the pool grows by are charged to the creator's memory cgroup
 * (__GFP_ACCOUNT): they show in memory.current, go with the region, and a
 * region that would take the cgroup over memory.max fails with ENOMEM
 * (no OOM kill). Floor chunks (prealloc_mb) are the module's, uncharged.
 */
TEST_F(moem, memcg_charged)
{
	const char *cg = "/sys/fs/cgroup/moem-test";
	char buf[256];
	pid_t pid;

	REQUIRE_ROOT();
	if (sysfs_read("/sys/fs/cgroup/cgroup.controllers", buf, sizeof(buf)) ||
	    !strstr(buf, "memory"))
		SKIP(return, "no cgroup2 memory controller at /sys/fs/cgroup");
	ASSERT_EQ(0, cg_write("/sys/fs/cgroup", "cgroup.subtree_control", "+memory"));
	rmdir(cg);
	ASSERT_EQ(0, mkdir(cg, 0755));
	ASSERT_EQ(0, cg_write(cg, "memory.max", "16777216"));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		uint64_t grow = 8 * MiB, floor_free = self->base.free_bytes;
		int64_t c0, c1, c2;
		int fd, fd2;

		snprintf(buf, sizeof(buf), "%d", getpid());
		if (cg_write(cg, "cgroup.procs", buf))
			_exit(10);
		c0 = cg_current(cg);
		/* Every free floor chunk, and 8 MiB the pool grows by. */
		fd = region_create(self->dev, "memcg", floor_free + grow, 0, 0600);
		if (fd < 0)
			_exit(11);
		c1 = cg_current(cg);
		fprintf(stderr,
			"# memory.current %lld -> %lld after a region that grew the pool by %llu\n",
			(long long)c0, (long long)c1, (unsigned long long)grow);
		if (c1 - c0 < (int64_t)grow || c1 - c0 > (int64_t)(grow + 2 * MiB))
			_exit(12);
		/* 16 MiB more would pass memory.max. */
		fd2 = region_create(self->dev, "memcg2", 16 * MiB, 0, 0600);
		if (fd2 != -ENOMEM)
			_exit(13);
		close(fd);
		c2 = cg_current(cg);
		fprintf(stderr, "# memory.current %lld after the region went\n", (long long)c2);
		if (c2 - c0 > (int64_t)MiB)
			_exit(14);
		_exit(0);
	}
	EXPECT_EQ(0, wait_child(pid));
	EXPECT_EQ(0, rmdir(cg));
	EXPECT_POOL_BASELINE(self);
}

/* Drop CAP_SYS_ADMIN from this process's sets, staying uid 0. */
static int drop_cap_sys_admin(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d))
		return -1;
	d[CAP_SYS_ADMIN / 32].effective &= ~(1U << (CAP_SYS_ADMIN % 32));
	d[CAP_SYS_ADMIN / 32].permitted &= ~(1U << (CAP_SYS_ADMIN % 32));
	return (int)syscall(SYS_capset, &h, d);
}

/*
 * One rule for every writable knob, sysfs or ioctl: CAP_SYS_ADMIN. Root
 * without it (a confined service) can write neither.
 */
TEST_F(moem, knob_writes_need_cap_sys_admin)
{
	struct moem_budget b = {.knob = MOEM_BUDGET_PREFETCH_DEPTH};
	uint64_t before, quota;
	pid_t pid;

	REQUIRE_ROOT();
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	before = b.value;
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/user_max_bytes", &quota));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct moem_budget s = {.knob = MOEM_BUDGET_PREFETCH_DEPTH, .value = 9};

		if (drop_cap_sys_admin() || geteuid() != 0)
			_exit(10);
		if (sysfs_write(SYSFS "/budgets/prefetch_depth", "9") != -EPERM)
			_exit(11);
		if (ioc(self->dev, MOEM_IOC_BUDGET_SET, &s) != -EPERM)
			_exit(12);
		if (sysfs_write(SYSFS "/pool/user_max_bytes", "0") != -EPERM)
			_exit(13);
		/* Reading stays open to all. */
		if (ioc(self->dev, MOEM_IOC_BUDGET_GET, &s))
			_exit(14);
		_exit(0);
	}
	EXPECT_EQ(0, wait_child(pid));
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	EXPECT_EQ(before, b.value);
	uint64_t q2;

	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/pool/user_max_bytes", &q2));
	EXPECT_EQ(quota, q2);
}

TEST_HARNESS_MAIN
