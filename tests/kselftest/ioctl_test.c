// SPDX-License-Identifier: GPL-2.0-only
/*
 * Every ioctl with bad input: unknown numbers, non-zero padding and
 * reserved fields, unknown flags, bad names (NULL, unterminated, empty,
 * too long, '/', ".", "..", control bytes), sizes that are zero, not a
 * multiple of 2 MiB, larger than the pool or overflowing, bad pointers.
 * Each refusal must leave the pool and the namespace as they were.
 */
#include "moem_test.h"

static const char long_name[MOEM_NAME_MAX] = /* 64 bytes, no NUL */
	"0123456789012345678901234567890123456789012345678901234567890123";

/* Names the kernel must refuse, with the errno it gives. */
static const struct {
	const char *name;
	int err;
} bad_names[] = {
	{"", -EINVAL},
	{".", -EINVAL},
	{"..", -EINVAL},
	{"a/b", -EINVAL},
	{"/", -EINVAL},
	{"sp ace", -EINVAL},
	{"tab\t", -EINVAL},
	{"nl\n", -EINVAL},
	{"del\x7f", -EINVAL},
	{"hi\xc3\xa9", -EINVAL},
	{long_name, -ENAMETOOLONG},
};

TEST_F(moem, unknown_ioctl_numbers)
{
	struct moem_region_create c;
	char big[256] = {0};
	int fd;

	EXPECT_EQ(-ENOTTY, ioc(self->dev, _IOWR(MOEM_IOC_MAGIC, 0x7f, struct moem_budget), big));
	EXPECT_EQ(-ENOTTY, ioc(self->dev, _IOWR(MOEM_IOC_MAGIC, 0x09, struct moem_budget), big));
	/* The size is part of the number: a struct of another size is unknown. */
	EXPECT_EQ(-ENOTTY, ioc(self->dev, _IOWR(MOEM_IOC_MAGIC, 0x01, char[72]), big));
	EXPECT_EQ(-ENOTTY,
		  ioc(self->dev, _IOW(MOEM_IOC_MAGIC, 0x01, struct moem_region_create), big));
	EXPECT_EQ(-ENOTTY, ioc(self->dev, _IO('T', 0x01), NULL));
	/* Region-fd ioctls on the control fd and the other way round. */
	EXPECT_EQ(-ENOTTY, ioc(self->dev, MOEM_IOC_REGION_FD_INFO, big));
	fd = region_create(self->dev, "ioctl-num", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	memset(&c, 0, sizeof(c));
	c.name_ptr = (uintptr_t) "x";
	c.size = 2 * MiB;
	EXPECT_EQ(-ENOTTY, ioc(fd, MOEM_IOC_REGION_CREATE, &c));
	EXPECT_EQ(-ENOTTY, ioc(fd, MOEM_IOC_VERSION, big));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

static struct moem_region_create good_create(const char *name)
{
	return (struct moem_region_create){
		.name_ptr = (uintptr_t)name, .size = 2 * MiB, .mode = 0600};
}

TEST_F(moem, create_bad_fields)
{
	struct moem_region_create c;

	c = good_create("bad");
	c.node = 1; /* a pad before 1.4: without MOEM_REGION_NODE still zero */
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	for (int i = 0; i < 4; i++) {
		c = good_create("bad");
		c.reserved[i] = 1ULL << 63;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c))
		TH_LOG("reserved %d", i);
	}
	c = good_create("bad");
	c.flags = 1U << 2;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c.flags = 0x80000000U;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c = good_create("bad");
	c.mode = 01000;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	c.mode = 0xffffffffU;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
	EXPECT_EQ(-ENOENT, region_open(self->dev, "bad", 0));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, create_bad_sizes)
{
	struct moem_pool_stats st;
	const uint64_t sizes_einval[] = {
		0, 1, 4096, CHUNK - 1, CHUNK + 4096, 3 * MiB, ~0ULL, (1ULL << 63) + 1};
	uint64_t max = self->base.max_bytes;
	const uint64_t sizes_enospc[] = {max + CHUNK, 1ULL << 63, ~0ULL - CHUNK + 1,
					 /* chunk count that wraps page arithmetic */
					 (~0ULL >> 9) & ~(CHUNK - 1)};

	for (unsigned int i = 0; i < sizeof(sizes_einval) / sizeof(sizes_einval[0]); i++) {
		EXPECT_EQ(-EINVAL, region_create(self->dev, "size", sizes_einval[i], 0, 0600))
		TH_LOG("size %llu", (unsigned long long)sizes_einval[i]);
	}
	for (unsigned int i = 0; i < sizeof(sizes_enospc) / sizeof(sizes_enospc[0]); i++) {
		EXPECT_EQ(-ENOSPC, region_create(self->dev, "size", sizes_enospc[i], 0, 0600))
		TH_LOG("size %llu", (unsigned long long)sizes_enospc[i]);
	}
	/* A user without CAP_SYS_ADMIN: its quota first. */
	uint64_t quota;

	if (geteuid() != 0 && !sysfs_read_u64(SYSFS "/pool/user_max_bytes", &quota) &&
	    quota < max) {
		EXPECT_EQ(-EDQUOT, region_create(self->dev, "size", max, 0, 0600));
		EXPECT_EQ(-EDQUOT, region_create(self->dev, "size", quota + CHUNK, 0, 0600));
		EXPECT_POOL_BASELINE(self);
		return;
	}
	/* The whole pool is fine (and its memory comes back). */
	int fd = region_create(self->dev, "size", max, 0, 0600);

	ASSERT_LE(0, fd) TH_LOG("max %llu", (unsigned long long)max);
	ASSERT_EQ(0, pool_stats(self->dev, &st));
	EXPECT_EQ(max, st.total_bytes);
	EXPECT_EQ(0, st.free_bytes);
	EXPECT_EQ(-ENOSPC, region_create(self->dev, "size2", CHUNK, 0, 0600));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, bad_names_everywhere)
{
	struct moem_region_info info;
	struct moem_region_open o;
	struct moem_region_destroy d;
	struct moem_region_create c;

	for (unsigned int i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
		const char *n = bad_names[i].name;
		int err = bad_names[i].err;

		EXPECT_EQ(err, region_create(self->dev, n, 2 * MiB, 0, 0600)) TH_LOG("name %u", i);
		EXPECT_EQ(err, region_open(self->dev, n, 0)) TH_LOG("name %u", i);
		EXPECT_EQ(err, region_info(self->dev, n, &info)) TH_LOG("name %u", i);
		EXPECT_EQ(err, region_destroy(self->dev, n)) TH_LOG("name %u", i);
	}
	/* NULL and wild name pointers. */
	const uint64_t ptrs[] = {0, 1, ~0ULL, 1ULL << 63, 0xffff800000000000ULL};

	for (unsigned int i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
		c = good_create(NULL);
		c.name_ptr = ptrs[i];
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
		o = (struct moem_region_open){.name_ptr = ptrs[i]};
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_OPEN, &o));
		memset(&info, 0, sizeof(info));
		info.name_ptr = ptrs[i];
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_INFO, &info));
		d = (struct moem_region_destroy){.name_ptr = ptrs[i]};
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_DESTROY, &d));
	}
	/* A name running into an unmapped page. */
	char *page = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	ASSERT_NE(MAP_FAILED, page);
	ASSERT_EQ(0, munmap(page + 4096, 4096));
	memset(page + 4096 - 3, 'z', 3);
	EXPECT_EQ(-EFAULT, region_create(self->dev, page + 4096 - 3, 2 * MiB, 0, 0600));
	/* 63 bytes is the longest name, and it round-trips. */
	char name63[MOEM_NAME_MAX];
	int fd;

	memcpy(name63, long_name, 63);
	name63[63] = 0;
	fd = region_create(self->dev, name63, 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	char back[MOEM_NAME_MAX];

	ASSERT_EQ(0, region_fd_info(fd, &info, back));
	EXPECT_STREQ(name63, back);
	close(fd);
	munmap(page, 4096);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, duplicate_name)
{
	int fd;

	fd = region_create(self->dev, "dup", 2 * MiB, MOEM_REGION_PERSISTENT, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-EEXIST, region_create(self->dev, "dup", 2 * MiB, 0, 0600));
	EXPECT_EQ(-EEXIST, region_create(self->dev, "dup", 4 * MiB, MOEM_REGION_PERSISTENT, 0600));
	close(fd);
	EXPECT_EQ(-EEXIST, region_create(self->dev, "dup", 2 * MiB, 0, 0600));
	ASSERT_EQ(0, region_destroy(self->dev, "dup"));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, open_info_destroy_bad_fields)
{
	struct moem_region_open o;
	struct moem_region_info info;
	struct moem_region_destroy d;
	int fd;

	fd = region_create(self->dev, "fields", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	for (int i = 0; i < 4; i++) {
		o = (struct moem_region_open){.name_ptr = (uintptr_t) "fields"};
		o.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_OPEN, &o));
		memset(&info, 0, sizeof(info));
		info.name_ptr = (uintptr_t) "fields";
		info.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_INFO, &info));
		EXPECT_EQ(-EINVAL, ioc(fd, MOEM_IOC_REGION_FD_INFO, &info));
	}
	o = (struct moem_region_open){.name_ptr = (uintptr_t) "fields",
				      .flags = MOEM_OPEN_FLAGS_ALL + 1};
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_OPEN, &o));
	o.flags = 1U << 31;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_OPEN, &o));
	/* INFO's node (a pad before 1.4) is output only: any value goes in. */
	memset(&info, 0, sizeof(info));
	info.name_ptr = (uintptr_t) "fields";
	info.node = 1;
	EXPECT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_INFO, &info));
	EXPECT_EQ(0u, info.node);
	info.name_ptr = 0;
	info.node = 5;
	EXPECT_EQ(0, ioc(fd, MOEM_IOC_REGION_FD_INFO, &info));
	EXPECT_EQ(0u, info.node);
	/* FD_INFO copies the name only where asked, and checks the pointer. */
	memset(&info, 0, sizeof(info));
	info.name_ptr = 16;
	EXPECT_EQ(-EFAULT, ioc(fd, MOEM_IOC_REGION_FD_INFO, &info));
	for (int i = 0; i < 2; i++) {
		d = (struct moem_region_destroy){.name_ptr = (uintptr_t) "fields"};
		d.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_DESTROY, &d));
	}
	EXPECT_EQ(-ENOENT, region_open(self->dev, "nosuch", 0));
	EXPECT_EQ(-ENOENT, region_info(self->dev, "nosuch", &info));
	EXPECT_EQ(-ENOENT, region_destroy(self->dev, "nosuch"));
	/* Nothing above touched the region. */
	ASSERT_EQ(0, region_info(self->dev, "fields", &info));
	EXPECT_EQ(0, info.nr_maps);
	EXPECT_EQ(1, info.nr_fds);
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, list_bad_fields)
{
	struct moem_region_list l;
	int fd;

	fd = region_create(self->dev, "lst", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	memset(&l, 0, sizeof(l));
	l.pad = 1;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	for (int i = 0; i < 2; i++) {
		memset(&l, 0, sizeof(l));
		l.reserved[i] = 1;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	}
	/* Big enough length, bad buffer: a fault, not a crash. */
	memset(&l, 0, sizeof(l));
	l.buf_len = 4096;
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	l.buf_ptr = ~0ULL - 15; /* pointer + length wraps */
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	l.buf_ptr = 1ULL << 63;
	l.buf_len = 0xffffffffU;
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	/* A bad struct pointer for every ioctl. */
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, NULL));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_VERSION, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_CREATE, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_OPEN, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_INFO, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_DESTROY, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_POOL_STATS, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_BUDGET_GET, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_BUDGET_SET, (void *)8));
	EXPECT_EQ(-EFAULT, ioc(fd, MOEM_IOC_REGION_FD_INFO, (void *)8));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/*
 * CREATE's result cannot be written back (read-only struct): the region
 * must vanish again and no fd may leak into the table.
 */
TEST_F(moem, create_copy_out_fails)
{
	struct moem_region_create *c;
	int before, after;

	c = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, c);
	*c = good_create("ro-struct");
	c->name_ptr = (uintptr_t) "ro-struct";
	ASSERT_EQ(0, mprotect(c, 4096, PROT_READ));
	before = dup(0);
	close(before);
	EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_CREATE, c));
	after = dup(0);
	close(after);
	EXPECT_EQ(before, after); /* the lowest free fd did not move */
	EXPECT_EQ(-ENOENT, region_open(self->dev, "ro-struct", 0));
	munmap(c, 4096);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, budget_bad_fields)
{
	struct moem_budget b;
	uint64_t before;

	REQUIRE_ROOT(); /* values are checked after the capability */
	memset(&b, 0, sizeof(b));
	b.knob = MOEM_BUDGET_PREFETCH_DEPTH;
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	before = b.value;
	b.knob = MOEM_BUDGET_NR;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_SET, &b));
	b.knob = 0xffffffffU;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	memset(&b, 0, sizeof(b));
	b.knob = MOEM_BUDGET_PREFETCH_DEPTH;
	b.pad = 1;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_SET, &b));
	b.pad = 0;
	b.reserved[1] = 1;
	b.value = 5;
	EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_SET, &b));
	/* Out-of-range values, including ones that wrap when scaled. */
	const struct {
		uint32_t knob;
		uint64_t v;
	} bad[] = {
		{MOEM_BUDGET_HBM_BYTES, MOEM_BUDGET_BYTES_MAX + 1},
		{MOEM_BUDGET_HBM_BYTES, ~0ULL},
		{MOEM_BUDGET_DRAM_BYTES, 1ULL << 63},
		{MOEM_BUDGET_HI_PRECISION_PERMILLE, 1001},
		{MOEM_BUDGET_HI_PRECISION_PERMILLE, (1ULL << 32) + 5},
		{MOEM_BUDGET_PREFETCH_DEPTH, 65},
		{MOEM_BUDGET_PREFETCH_DEPTH, ~0ULL},
		{MOEM_BUDGET_REROUTE, MOEM_REROUTE_NR},
		{MOEM_BUDGET_REROUTE, (1ULL << 32)},
		{MOEM_BUDGET_EXEC, MOEM_EXEC_MODE_NR},
		{MOEM_BUDGET_EXEC, ~0ULL},
		{MOEM_BUDGET_CPU_MOE_LAYERS, MOEM_BUDGET_MOE_LAYERS_MAX + 1},
		{MOEM_BUDGET_CPU_MOE_LAYERS, (1ULL << 32) + 1},
	};
	for (unsigned int i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&b, 0, sizeof(b));
		b.knob = bad[i].knob;
		b.value = bad[i].v;
		EXPECT_EQ(-EINVAL, ioc(self->dev, MOEM_IOC_BUDGET_SET, &b)) TH_LOG("bad %u", i);
	}
	memset(&b, 0, sizeof(b));
	b.knob = MOEM_BUDGET_PREFETCH_DEPTH;
	ASSERT_EQ(0, ioc(self->dev, MOEM_IOC_BUDGET_GET, &b));
	EXPECT_EQ(before, b.value);
}

TEST_HARNESS_MAIN
