// SPDX-License-Identifier: GPL-2.0-only
/*
 * The loader's read paths, byte for byte: io_uring with fixed buffers and
 * registered files, io_uring plain, the pread pool, buffered reads (forced,
 * and on a file system that refuses O_DIRECT), into THP and hugetlb pools;
 * request splitting and queue-depth edge cases; concurrent submitters.
 */
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include "test_loader_lib.h"

#include "kselftest_harness.h"

#define SEED	  0x6c6f61646572ULL
#define FILE_SIZE (8 * MOEM_MiB)

/* Read [off, off + len) of file idx into dst synchronously; returns the callback's err. */
static int read_wait(struct moem_loader *ld, uint32_t idx, uint64_t off, uint64_t len, void *dst)
{
	struct tl_done d = TL_DONE_INIT;
	int ret;

	ret = moem_loader_read(ld, idx, off, len, dst, tl_cb, &d);
	if (ret)
		return ret;
	ret = moem_loader_drain(ld);
	if (ret)
		return ret;
	return d.calls == 1 ? d.last_err : -EPROTO;
}

/* Each engine and I/O mode reads the same file into a THP pool, exactly. */
FIXTURE(paths)
{
	char path[256];
	struct moem_pool *pool;
	struct moem_loader *ld;
	uint32_t idx;
	bool direct;
};

FIXTURE_VARIANT(paths)
{
	enum moem_loader_mode mode;
	bool no_direct;
	bool register_pool;
	enum moem_loader_engine engine;
	const char *path; /* the stats' path when the file took O_DIRECT */
};

FIXTURE_VARIANT_ADD(paths, uring_fixed){
	.mode = MOEM_LOADER_AUTO,
	.register_pool = true,
	.engine = MOEM_LOADER_ENGINE_URING,
	.path = "io_uring + fixed buffers + registered file, O_DIRECT",
};

FIXTURE_VARIANT_ADD(paths, uring_plain){
	.mode = MOEM_LOADER_URING,
	.engine = MOEM_LOADER_ENGINE_URING,
	.path = "io_uring + registered file, O_DIRECT",
};

FIXTURE_VARIANT_ADD(paths, uring_buffered){
	.mode = MOEM_LOADER_URING,
	.no_direct = true,
	.register_pool = true,
	.engine = MOEM_LOADER_ENGINE_URING,
	.path = "io_uring + fixed buffers + registered file, buffered",
};

FIXTURE_VARIANT_ADD(paths, pread_pool){
	.mode = MOEM_LOADER_PREAD,
	.register_pool = true,
	.engine = MOEM_LOADER_ENGINE_PREAD,
	.path = "pread x8 threads, O_DIRECT",
};

FIXTURE_VARIANT_ADD(paths, buffered){
	.mode = MOEM_LOADER_BUFFERED,
	.engine = MOEM_LOADER_ENGINE_PREAD,
	.path = "buffered pread x8 threads",
};

FIXTURE_SETUP(paths)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP, .size = 16 * MOEM_MiB};
	struct moem_loader_opts lo = {.mode = variant->mode, .no_direct = variant->no_direct};
	struct moem_loader_file_info fi;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, self->path, sizeof(self->path)));
	ASSERT_EQ(0, moem_pool_open(&po, &self->pool)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_loader_create(&lo, &self->ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(self->ld, self->path, &self->idx))
	TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_loader_file_info(self->ld, self->idx, &fi));
	self->direct = fi.direct;
	if (variant->register_pool) {
		ASSERT_EQ(0, moem_loader_register_memory(self->ld, moem_pool_base(self->pool),
							 moem_pool_size(self->pool)));
	}
}

FIXTURE_TEARDOWN(paths)
{
	moem_loader_destroy(self->ld);
	moem_pool_close(self->pool);
	unlink(self->path);
}

TEST_F(paths, whole_file_exact)
{
	uint8_t *dst = moem_pool_base(self->pool);
	struct moem_loader_stats st;
	char buf[2048];

	memset(dst, 0, FILE_SIZE + 4096);
	ASSERT_EQ(0, read_wait(self->ld, self->idx, 0, FILE_SIZE, dst))
	TH_LOG("%s", moem_last_error());
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, FILE_SIZE));
	EXPECT_EQ(0, dst[FILE_SIZE]); /* nothing written past the range */

	moem_loader_get_stats(self->ld, &st);
	TH_LOG("%s", moem_loader_format_stats(&st, buf, sizeof(buf)));
	EXPECT_EQ(variant->engine, st.engine);
	EXPECT_EQ(1, st.reads);
	EXPECT_EQ(FILE_SIZE, st.bytes);
	EXPECT_EQ(FILE_SIZE / MOEM_LOADER_REQ_DEFAULT, st.requests);
	EXPECT_EQ(0, st.errors);
	EXPECT_LT(0, st.busy_ns);
	if (variant->engine == MOEM_LOADER_ENGINE_URING && variant->register_pool) {
		EXPECT_TRUE(st.fixed_buffers);
		EXPECT_EQ(st.requests, st.fixed_requests);
	} else {
		EXPECT_EQ(0, st.fixed_requests);
	}
	if (variant->engine == MOEM_LOADER_ENGINE_URING) {
		EXPECT_TRUE(st.registered_files);
	}
	if (variant->no_direct || variant->mode == MOEM_LOADER_BUFFERED) {
		EXPECT_FALSE(self->direct);
		EXPECT_EQ(0, st.direct_bytes);
	}
	if (self->direct || variant->no_direct || variant->mode == MOEM_LOADER_BUFFERED) {
		EXPECT_STREQ(variant->path, st.path);
	} else {
		TH_LOG("the test directory refuses O_DIRECT: path checks skipped");
	}
	if (self->direct) {
		EXPECT_EQ(FILE_SIZE, st.direct_bytes);
	}
}

/* Ranges not aligned to anything: only where the file is buffered. */
TEST_F(paths, unaligned_when_buffered)
{
	uint8_t *dst = (uint8_t *)moem_pool_base(self->pool) + 1;
	struct tl_done d = TL_DONE_INIT;
	const uint64_t offs[] = {3, 4095, 12345, FILE_SIZE - 1000};
	const uint64_t lens[] = {1, 1000, 3 * MOEM_MiB + 7, 1000};

	if (self->direct)
		SKIP(return, "the file is O_DIRECT: unaligned reads are refused "
			     "(test_loader_errors)");
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(offs); i++) {
		memset(dst, 0, lens[i]);
		ASSERT_EQ(0,
			  moem_loader_read(self->ld, self->idx, offs[i], lens[i], dst, tl_cb, &d));
		ASSERT_EQ(0, moem_loader_drain(self->ld));
		ASSERT_EQ(i + 1, d.ok) TH_LOG("%s", d.msg);
		EXPECT_EQ(-1, tl_check(SEED, dst, offs[i], lens[i])) TH_LOG("range %u", i);
	}
}

/* Splitting: ranges shorter than a request, not a multiple, many small ones. */
FIXTURE(split)
{
	char path[256];
	struct moem_pool *pool;
};

FIXTURE_VARIANT(split)
{
	enum moem_loader_mode mode;
	uint32_t qd, req;
};

FIXTURE_VARIANT_ADD(split, uring_qd1_64k){
	.mode = MOEM_LOADER_URING,
	.qd = 1,
	.req = 64 * 1024,
};

FIXTURE_VARIANT_ADD(split, uring_qd3_4k){
	.mode = MOEM_LOADER_URING,
	.qd = 3,
	.req = 4096,
};

FIXTURE_VARIANT_ADD(split, uring_qd32_1m){
	.mode = MOEM_LOADER_URING,
	.qd = 32,
	.req = 1 << 20,
};

FIXTURE_VARIANT_ADD(split, pread_64k){
	.mode = MOEM_LOADER_PREAD,
	.qd = 1,
	.req = 64 * 1024,
};

FIXTURE_SETUP(split)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP, .size = 16 * MOEM_MiB};

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, self->path, sizeof(self->path)));
	ASSERT_EQ(0, moem_pool_open(&po, &self->pool)) TH_LOG("%s", moem_last_error());
}

FIXTURE_TEARDOWN(split)
{
	moem_pool_close(self->pool);
	unlink(self->path);
}

static uint64_t pieces(uint64_t len, uint64_t req)
{
	return len / req + (len % req != 0);
}

TEST_F(split, edge_lengths)
{
	struct moem_loader_opts lo = {
		.mode = variant->mode, .queue_depth = variant->qd, .req_size = variant->req};
	uint8_t *base = moem_pool_base(self->pool);
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	struct moem_loader *ld;
	uint64_t want_req = 0;
	uint32_t idx;
	/* len < req, == req, req + 1 block, 3.5 req, and one long read */
	const uint64_t r = variant->req;
	const uint64_t lens[] = {4096, r, r + 4096, 3 * r + r / 2, 2 * MOEM_MiB + 8192};
	uint64_t off = 0, dsto = 0;

	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, self->path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, base, moem_pool_size(self->pool)));
	memset(base, 0, moem_pool_size(self->pool));
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(lens); i++) {
		ASSERT_EQ(0, moem_loader_read(ld, idx, off, lens[i], base + dsto, tl_cb, &d));
		want_req += pieces(lens[i], r);
		off += lens[i] + 4096; /* skip a block between ranges */
		dsto += lens[i];
	}
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(MOEM_ARRAY_SIZE(lens), d.ok) TH_LOG("%s", d.msg);
	off = dsto = 0;
	for (unsigned int i = 0; i < MOEM_ARRAY_SIZE(lens); i++) {
		EXPECT_EQ(-1, tl_check(SEED, base + dsto, off, lens[i])) TH_LOG("range %u", i);
		off += lens[i] + 4096;
		dsto += lens[i];
	}
	moem_loader_get_stats(ld, &st);
	EXPECT_EQ(want_req, st.requests);
	EXPECT_EQ(dsto, st.bytes);
	moem_loader_destroy(ld);
}

TEST_F(split, many_small_reads)
{
	struct moem_loader_opts lo = {
		.mode = variant->mode, .queue_depth = variant->qd, .req_size = variant->req};
	uint8_t *base = moem_pool_base(self->pool);
	struct tl_done d = TL_DONE_INIT;
	const unsigned int n = 1500, blocks = FILE_SIZE / 4096;
	struct moem_loader *ld;
	struct moem_rng rng;
	uint64_t *offs;
	uint32_t idx;

	offs = calloc(n, sizeof(*offs));
	ASSERT_NE(NULL, offs);
	moem_rng_seed(&rng, 7, 0);
	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, self->path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, base, moem_pool_size(self->pool)));
	/* Slot i of the pool gets a random block of the file. */
	for (unsigned int i = 0; i < n; i++) {
		offs[i] = (moem_rng_u64(&rng) % blocks) * 4096;
		ASSERT_EQ(0,
			  moem_loader_read(ld, idx, offs[i], 4096, base + i * 4096ULL, tl_cb, &d));
	}
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(n, d.calls);
	EXPECT_EQ(n, d.ok) TH_LOG("%s", d.msg);
	for (unsigned int i = 0; i < n; i++) {
		ASSERT_EQ(-1, tl_check(SEED, base + i * 4096ULL, offs[i], 4096))
		TH_LOG("read %u", i);
	}
	moem_loader_destroy(ld);
	free(offs);
}

/* Fixed buffers in small pieces: requests are cut at piece boundaries and
 * every one is READ_FIXED. */
TEST(fixed_pieces_small)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP, .size = 8 * MOEM_MiB};
	struct moem_loader_opts lo = {.mode = MOEM_LOADER_URING, .piece_max = 2 * MOEM_MiB};
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	struct moem_loader *ld;
	struct moem_pool *pool;
	char path[256], buf[2048];
	uint8_t *base, *dst;
	uint32_t idx;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	ASSERT_EQ(0, moem_pool_open(&po, &pool));
	base = moem_pool_base(pool);
	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, base, 8 * MOEM_MiB));
	moem_loader_get_stats(ld, &st);
	ASSERT_EQ(4, st.fixed_pieces) TH_LOG("%s", st.why);
	EXPECT_EQ(8 * MOEM_MiB, st.fixed_bytes);

	/* 64 KiB before the first boundary to 192 KiB after it: two requests
	 * (one per piece) although 256 KiB fits one 1 MiB request. */
	dst = base + 2 * MOEM_MiB - 64 * 1024;
	ASSERT_EQ(0, moem_loader_read(ld, idx, 1 * MOEM_MiB, 256 * 1024, dst, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(-1, tl_check(SEED, dst, 1 * MOEM_MiB, 256 * 1024));
	/* 6 MiB at 1.5 MiB crosses the boundaries at 2, 4 and 6 MiB: 7 requests
	 * where 1 MiB requests alone would make 6. */
	dst = base + 3 * MOEM_MiB / 2;
	ASSERT_EQ(0, moem_loader_read(ld, idx, 0, 6 * MOEM_MiB, dst, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(2, d.ok) TH_LOG("%s", d.msg);
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, 6 * MOEM_MiB));
	moem_loader_get_stats(ld, &st);
	TH_LOG("%s", moem_loader_format_stats(&st, buf, sizeof(buf)));
	EXPECT_EQ(2 + 7, st.requests);
	EXPECT_EQ(st.requests, st.fixed_requests);

	/* A destination outside the registered memory goes plain. */
	dst = aligned_alloc(4096, MOEM_MiB);
	ASSERT_NE(NULL, dst);
	ASSERT_EQ(0, moem_loader_read(ld, idx, 0, MOEM_MiB, dst, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(3, d.ok);
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, MOEM_MiB));
	moem_loader_get_stats(ld, &st);
	EXPECT_EQ(10, st.requests);
	EXPECT_EQ(9, st.fixed_requests);
	free(dst);
	moem_loader_destroy(ld);
	moem_pool_close(pool);
	unlink(path);
}

/* The split itself, on a multi-GiB layout that needs no memory. */
TEST(plan_pieces)
{
	const uintptr_t base = 0x7f0000000000ULL;
	const uint64_t len = 5 * MOEM_GiB + 6 * MOEM_MiB;
	struct iovec iov[8];
	int n;

	n = moem_loader_plan_pieces((void *)base, len, MOEM_LOADER_PIECE_MAX, iov, 8);
	ASSERT_EQ(6, n);
	for (int i = 0; i < n; i++) {
		EXPECT_EQ(base + i * MOEM_GiB, (uintptr_t)iov[i].iov_base);
		EXPECT_EQ(i < 5 ? MOEM_GiB : 6 * MOEM_MiB, iov[i].iov_len);
	}
	/* Exactly 2 GiB: two full pieces, no empty third. */
	EXPECT_EQ(2, moem_loader_plan_pieces((void *)base, 2 * MOEM_GiB, MOEM_GiB, iov, 8));
	EXPECT_EQ(MOEM_GiB, iov[1].iov_len);
	/* Too little room: the count needed, only max filled. */
	iov[2].iov_len = 12345;
	EXPECT_EQ(6, moem_loader_plan_pieces((void *)base, len, MOEM_GiB, iov, 2));
	EXPECT_EQ(12345, iov[2].iov_len);
	/* 64 GiB in 2 MiB pieces */
	EXPECT_EQ(32768,
		  moem_loader_plan_pieces((void *)base, 64 * MOEM_GiB, 2 * MOEM_MiB, NULL, 0));
	EXPECT_EQ(-EINVAL, moem_loader_plan_pieces((void *)base, 0, MOEM_GiB, iov, 8));
	EXPECT_EQ(-EINVAL, moem_loader_plan_pieces((void *)base, len, 0, iov, 8));
	EXPECT_EQ(-EINVAL,
		  moem_loader_plan_pieces((void *)(UINTPTR_MAX - 4095), 8192, MOEM_GiB, iov, 8));
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

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

#define NR_HUGE	  "/proc/sys/vm/nr_hugepages"
#define FREE_HUGE "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"

/* A hugetlb pool as the destination: fixed buffers over hugetlb pages. */
TEST(hugetlb_pool_fixed)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_HUGETLB, .size = 8 * MOEM_MiB};
	struct moem_loader_opts lo = {.mode = MOEM_LOADER_URING};
	long old = read_long(NR_HUGE), avail = read_long(FREE_HUGE);
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	struct moem_pool *pool;
	struct moem_loader *ld;
	bool raised = false;
	char path[256], num[32];
	uint32_t idx;
	int ret;

	if (avail < 4) {
		snprintf(num, sizeof(num), "%ld", old + 4 - moem_max(avail, 0L));
		if (old < 0 || geteuid() != 0 || write_str(NR_HUGE, num) < 0)
			SKIP(return, "no free huge pages and cannot reserve (needs root)");
		raised = true;
	}
	ret = moem_pool_open(&po, &pool);
	if (ret) {
		if (raised) {
			snprintf(num, sizeof(num), "%ld", old);
			write_str(NR_HUGE, num);
		}
		SKIP(return, "hugetlb pool: %s", moem_last_error());
	}
	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	ASSERT_EQ(0, moem_loader_create(&lo, &ld)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, moem_pool_base(pool), moem_pool_size(pool)));
	ASSERT_EQ(0, moem_loader_read(ld, idx, 0, FILE_SIZE, moem_pool_base(pool), tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(1, d.ok) TH_LOG("%s", d.msg);
	EXPECT_EQ(-1, tl_check(SEED, moem_pool_base(pool), 0, FILE_SIZE));
	moem_loader_get_stats(ld, &st);
	EXPECT_TRUE(st.fixed_buffers) TH_LOG("%s", st.why);
	EXPECT_EQ(st.requests, st.fixed_requests);
	moem_loader_destroy(ld);
	moem_pool_close(pool);
	unlink(path);
	if (raised) {
		snprintf(num, sizeof(num), "%ld", old);
		write_str(NR_HUGE, num);
	}
}

/*
 * A file system without O_DIRECT (ramfs) gets buffered reads on its own,
 * and says so. The mount lives in a private mount namespace of this test's
 * process only.
 */
TEST(ramfs_falls_back_to_buffered)
{
	struct moem_loader_opts lo = {.mode = MOEM_LOADER_AUTO};
	struct moem_loader_file_info fi;
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	char dir[] = "/tmp/moem-ramfs-XXXXXX", path[256];
	struct moem_loader *ld;
	uint8_t *dst;
	uint32_t idx;

	if (!mkdtemp(dir))
		SKIP(return, "mkdtemp: %s", strerror(errno));
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("moem-test", dir, "ramfs", 0, NULL) < 0) {
		rmdir(dir);
		SKIP(return, "cannot mount ramfs in a private namespace: %s", strerror(errno));
	}
	ASSERT_EQ(0, tl_make_file(dir, SEED, 3 * MOEM_MiB + 100, path, sizeof(path)));
	ASSERT_EQ(0, moem_loader_create(&lo, &ld));
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx)) TH_LOG("%s", moem_last_error());
	ASSERT_EQ(0, moem_loader_file_info(ld, idx, &fi));
	EXPECT_FALSE(fi.direct);
	EXPECT_NE(NULL, strstr(fi.why, "O_DIRECT refused")) TH_LOG("%s", fi.why);
	EXPECT_EQ(1, fi.off_align);
	dst = malloc(3 * MOEM_MiB + 100);
	ASSERT_NE(NULL, dst);
	/* Unaligned and up to the exact end of file: fine when buffered. */
	ASSERT_EQ(0, moem_loader_read(ld, idx, 0, 3 * MOEM_MiB + 100, dst, tl_cb, &d));
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(1, d.ok) TH_LOG("%s", d.msg);
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, 3 * MOEM_MiB + 100));
	moem_loader_get_stats(ld, &st);
	EXPECT_NE(NULL, strstr(st.path, "buffered")) TH_LOG("%s", st.path);
	EXPECT_NE(NULL, strstr(st.why, "O_DIRECT refused")) TH_LOG("%s", st.why);
	EXPECT_EQ(0, st.direct_bytes);
	moem_loader_destroy(ld);
	free(dst);
	EXPECT_EQ(0, umount(dir)) TH_LOG("umount: %s", strerror(errno));
	EXPECT_EQ(0, rmdir(dir)) TH_LOG("rmdir: %s", strerror(errno));
}

/* Many threads submitting at once; every callback once, every byte right. */
struct submitter {
	struct moem_loader *ld;
	uint32_t idx;
	uint8_t *dst; /* this thread's 1 MiB of the pool */
	unsigned int id, n;
	struct tl_done *d;
	int bad;
	uint64_t *offs;
};

static void *submit_thread(void *arg)
{
	struct submitter *s = arg;
	struct moem_rng rng;

	moem_rng_seed(&rng, 11, s->id);
	/* Each read lands in its own 4 KiB..64 KiB slot; 16 slots of 64 KiB. */
	for (unsigned int i = 0; i < s->n; i++) {
		uint64_t len = (1 + moem_rng_u64(&rng) % 16) * 4096;
		uint64_t off = (moem_rng_u64(&rng) % (FILE_SIZE / 4096 - 16)) * 4096;

		s->offs[i] = off | len << 32;
		if (moem_loader_read(s->ld, s->idx, off, len, s->dst + (i % 16) * 65536ULL, tl_cb,
				     s->d))
			s->bad++;
	}
	return NULL;
}

TEST(concurrent_submitters)
{
	struct moem_pool_opts po = {.provider = MOEM_POOL_THP, .size = 16 * MOEM_MiB};
	struct moem_loader_opts lo = {.req_size = 16384, .queue_depth = 8};
	const unsigned int nthreads = 8, per = 400;
	struct submitter s[8];
	pthread_t th[8];
	struct tl_done d = TL_DONE_INIT;
	struct moem_loader_stats st;
	struct moem_loader *ld;
	struct moem_pool *pool;
	char path[256];
	uint32_t idx;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	ASSERT_EQ(0, moem_pool_open(&po, &pool));
	ASSERT_EQ(0, moem_loader_create(&lo, &ld));
	ASSERT_EQ(0, tl_add_unlink(ld, path, &idx));
	ASSERT_EQ(0, moem_loader_register_memory(ld, moem_pool_base(pool), moem_pool_size(pool)));
	for (unsigned int t = 0; t < nthreads; t++) {
		s[t] = (struct submitter){.ld = ld,
					  .idx = idx,
					  .id = t,
					  .n = per,
					  .d = &d,
					  .dst = (uint8_t *)moem_pool_base(pool) + t * MOEM_MiB};
		s[t].offs = calloc(per, sizeof(uint64_t));
		ASSERT_NE(NULL, s[t].offs);
		ASSERT_EQ(0, pthread_create(&th[t], NULL, submit_thread, &s[t]));
	}
	for (unsigned int t = 0; t < nthreads; t++)
		pthread_join(th[t], NULL);
	ASSERT_EQ(0, moem_loader_drain(ld));
	EXPECT_EQ(nthreads * per, d.calls);
	EXPECT_EQ(nthreads * per, d.ok) TH_LOG("%s", d.msg);
	/* Slots are reused, so only the last read into each slot is checkable;
	 * reads into one slot may complete out of order, so check the last
	 * round again, alone. */
	for (unsigned int t = 0; t < nthreads; t++) {
		EXPECT_EQ(0, s[t].bad);
		for (unsigned int i = per - 16; i < per; i++) {
			uint64_t off = s[t].offs[i] & 0xffffffffULL, len = s[t].offs[i] >> 32;
			uint8_t *dst = s[t].dst + (i % 16) * 65536ULL;

			ASSERT_EQ(0, moem_loader_read(ld, idx, off, len, dst, tl_cb, &d));
		}
	}
	ASSERT_EQ(0, moem_loader_drain(ld));
	for (unsigned int t = 0; t < nthreads; t++) {
		for (unsigned int i = per - 16; i < per; i++) {
			uint64_t off = s[t].offs[i] & 0xffffffffULL, len = s[t].offs[i] >> 32;

			EXPECT_EQ(-1, tl_check(SEED, s[t].dst + (i % 16) * 65536ULL, off, len));
		}
		free(s[t].offs);
	}
	moem_loader_get_stats(ld, &st);
	EXPECT_EQ(nthreads * (per + 16), st.reads);
	moem_loader_destroy(ld);
	moem_pool_close(pool);
	unlink(path);
}

/* A callback may issue the next read; drain from a callback is refused. */
struct chain {
	struct moem_loader *ld;
	uint32_t idx;
	uint8_t *dst;
	unsigned int next, total;
	int drain_ret, errs;
};

static void chain_cb(void *arg, int err)
{
	struct chain *c = arg;

	if (err)
		c->errs++;
	if (c->next == 1)
		c->drain_ret = moem_loader_drain(c->ld);
	if (c->next < c->total) {
		uint64_t off = (uint64_t)c->next * 65536;

		c->next++;
		if (moem_loader_read(c->ld, c->idx, off, 65536, c->dst + off, chain_cb, c))
			c->errs++;
	}
}

FIXTURE(chain){};

FIXTURE_VARIANT(chain)
{
	enum moem_loader_mode mode;
};

FIXTURE_VARIANT_ADD(chain, uring){
	.mode = MOEM_LOADER_URING,
};

FIXTURE_VARIANT_ADD(chain, pread){
	.mode = MOEM_LOADER_PREAD,
};

FIXTURE_SETUP(chain)
{
}

FIXTURE_TEARDOWN(chain)
{
}

TEST_F(chain, callback_submits)
{
	struct moem_loader_opts lo = {.mode = variant->mode};
	struct chain c = {.total = 64};
	char path[256];
	uint8_t *dst;

	ASSERT_EQ(0, tl_make_file(NULL, SEED, FILE_SIZE, path, sizeof(path)));
	dst = aligned_alloc(4096, 64 * 65536);
	ASSERT_NE(NULL, dst);
	ASSERT_EQ(0, moem_loader_create(&lo, &c.ld));
	ASSERT_EQ(0, tl_add_unlink(c.ld, path, &c.idx));
	c.dst = dst;
	c.next = 1;
	ASSERT_EQ(0, moem_loader_read(c.ld, c.idx, 0, 65536, dst, chain_cb, &c));
	ASSERT_EQ(0, moem_loader_drain(c.ld));
	/* drain waited for the whole chain: each link was queued before the
	 * callback that queued it returned */
	EXPECT_EQ(64, c.next);
	EXPECT_EQ(0, c.errs);
	EXPECT_EQ(-EDEADLK, c.drain_ret);
	EXPECT_EQ(-1, tl_check(SEED, dst, 0, 64 * 65536));
	moem_loader_destroy(c.ld);
	free(dst);
	unlink(path);
}

TEST_HARNESS_MAIN
