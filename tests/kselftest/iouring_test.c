// SPDX-License-Identifier: GPL-2.0-only
/*
 * Region memory as an I/O target and under long-term pins: io_uring fixed
 * buffers (FOLL_LONGTERM) with O_DIRECT READ_FIXED from a real file where
 * the kernel allows them (6.5 and later; 6.1's io_uring takes only shmem
 * and hugetlbfs fixed buffers), io_uring reads with O_DIRECT into
 * unregistered region memory (6.1's loader path), plain O_DIRECT, an
 * AF_XDP umem (the same FOLL_WRITE | FOLL_LONGTERM pin as CUDA's and
 * RDMA's registration) on every kernel, and what happens to a region that
 * dies while a chunk of it is pinned: held, counted, never handed to
 * another region, returned when the pin goes. The file is
 * /mnt/pattern.bin on the ext4 disk the host made (scripts/guest/run.sh):
 * its u64 at byte 8k is k.
 */
#include <liburing.h>
#include <time.h>

#include "moem_test.h"

#define DATA "/mnt/pattern.bin"

/* Check a buffer against the file pattern starting at file offset off. */
static int64_t file_pattern_check(const void *p, uint64_t len, uint64_t off)
{
	return pattern_check_from(p, len, 0, off / 8);
}

static int open_data(void)
{
	return open(DATA, O_RDONLY | O_DIRECT | O_CLOEXEC);
}

/* The page frame under addr (root only: others read 0), or 0. */
static uint64_t pfn_of(const void *addr)
{
	uint64_t e = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	if (pread(fd, &e, sizeof(e), (off_t)((uintptr_t)addr / 4096 * 8)) != sizeof(e))
		e = 0;
	close(fd);
	return (e >> 63) ? e & ((1ULL << 55) - 1) : 0;
}

/* Wait up to 20 s for the pool to hold what it held at the start. */
static int wait_pool_baseline(int dev, const struct moem_pool_stats *base)
{
	struct moem_pool_stats st;

	for (int i = 0; i < 2000; i++) {
		if (pool_stats(dev, &st))
			return -1;
		if (st.total_bytes == base->total_bytes && st.free_bytes == base->free_bytes)
			return 0;
		/* The pin goes with deferred work (socket release, ring exit). */
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	return -1;
}

TEST_F(moem, odirect_read_into_region)
{
	uint8_t *p;
	int fd, data;

	data = open_data();
	if (data < 0)
		SKIP(return, DATA ": %s (no test disk)", strerror(errno));
	fd = region_create(self->dev, "odirect", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	/* 1 MiB across the chunk boundary: two physically separate chunks. */
	ASSERT_EQ(MiB, pread(data, p + 3 * MiB / 2, MiB, 5 * MiB));
	EXPECT_EQ(-1, file_pattern_check(p + 3 * MiB / 2, MiB, 5 * MiB));
	EXPECT_TRUE(all_zero(p, 3 * MiB / 2));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	close(data);
	EXPECT_POOL_BASELINE(self);
}

static int submit_wait(struct io_uring *ring)
{
	struct io_uring_cqe *cqe;
	int ret;

	ret = io_uring_submit(ring);
	if (ret != 1)
		return ret < 0 ? ret : -EIO;
	ret = io_uring_wait_cqe(ring, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	io_uring_cqe_seen(ring, cqe);
	return ret;
}

static int read_fixed(struct io_uring *ring, int data, void *buf, unsigned int len, uint64_t off,
		      int index)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read_fixed(sqe, data, buf, len, off, index);
	return submit_wait(ring);
}

static int read_plain(struct io_uring *ring, int data, void *buf, unsigned int len, uint64_t off)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, data, buf, len, off);
	return submit_wait(ring);
}

TEST_F(moem, iouring_fixed_buffer_read)
{
	struct io_uring ring;
	struct iovec iov;
	uint8_t *p;
	int fd, data, ret;

	data = open_data();
	if (data < 0)
		SKIP(return, DATA ": %s (no test disk)", strerror(errno));
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, 0));
	fd = region_create(self->dev, "iouring", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);

	iov = (struct iovec){p, 4 * MiB};
	ret = io_uring_register_buffers(&ring, &iov, 1);
	if (!iouring_takes_file_buffers()) {
		/* 6.1's io_pin_pages(): file-backed, not shmem or hugetlbfs. */
		EXPECT_EQ(-EOPNOTSUPP, ret);
		TH_LOG("Linux < 6.5: register_buffers over a region is %d (io_uring's rule)", ret);
		goto out;
	}
	ASSERT_EQ(0, ret);
	/* Whole chunk, then a read straddling the two chunks. */
	ASSERT_EQ(2 * MiB, read_fixed(&ring, data, p, 2 * MiB, 0, 0));
	EXPECT_EQ(-1, file_pattern_check(p, 2 * MiB, 0));
	ASSERT_EQ(MiB, read_fixed(&ring, data, p + 3 * MiB / 2, MiB, 6 * MiB, 0));
	EXPECT_EQ(-1, file_pattern_check(p + 3 * MiB / 2, MiB, 6 * MiB));
	EXPECT_TRUE(all_zero(p + 5 * MiB / 2, 3 * MiB / 2));
	/* A reader through another mapping sees what the device wrote. */
	{
		int fd2 = region_open(self->dev, "iouring", 0);
		uint8_t *q;

		ASSERT_LE(0, fd2);
		q = map_region(fd2, 4 * MiB, 0);
		ASSERT_NE(MAP_FAILED, q);
		EXPECT_EQ(0, memcmp(p, q, 4 * MiB));
		munmap(q, 4 * MiB);
		close(fd2);
	}
	ASSERT_EQ(0, io_uring_unregister_buffers(&ring));
out:
	io_uring_queue_exit(&ring);
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	close(data);
	EXPECT_POOL_BASELINE(self);
}

/* io_uring without registration: each read pins the pages it lands in. */
TEST_F(moem, iouring_odirect_read_unregistered)
{
	struct io_uring ring;
	uint8_t *p;
	int fd, data;

	data = open_data();
	if (data < 0)
		SKIP(return, DATA ": %s (no test disk)", strerror(errno));
	ASSERT_EQ(0, io_uring_queue_init(8, &ring, 0));
	fd = region_create(self->dev, "iouring-plain", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(2 * MiB, read_plain(&ring, data, p + 2 * MiB, 2 * MiB, 4 * MiB));
	EXPECT_EQ(-1, file_pattern_check(p + 2 * MiB, 2 * MiB, 4 * MiB));
	ASSERT_EQ(MiB, read_plain(&ring, data, p + 3 * MiB / 2, MiB, MiB));
	EXPECT_EQ(-1, file_pattern_check(p + 3 * MiB / 2, MiB, MiB));
	EXPECT_TRUE(all_zero(p, 3 * MiB / 2));
	io_uring_queue_exit(&ring);
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	close(data);
	EXPECT_POOL_BASELINE(self);
}

/* The pin CUDA's cuMemHostRegister and RDMA take, on every kernel. */
TEST_F(moem, longterm_pin_writable)
{
	uint8_t *p;
	int fd, xsk;

	fd = region_create(self->dev, "longterm", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	xsk = umem_pin(p, 4 * MiB);
	if (xsk == -EPERM || xsk == -EAFNOSUPPORT) {
		munmap(p, 4 * MiB);
		close(fd);
		SKIP(return, "AF_XDP: %s (needs CAP_NET_RAW and CONFIG_XDP_SOCKETS)",
			   strerror(-xsk));
	}
	/* 6.5+ refuse FOLL_LONGTERM | FOLL_WRITE where a VMA needs dirty tracking. */
	ASSERT_LE(0, xsk) TH_LOG("XDP_UMEM_REG over a region mapping: %s", strerror(-xsk));
	pattern_fill(p, 4 * MiB, 31);
	close(xsk);
	EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 31));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	ASSERT_EQ(0, wait_pool_baseline(self->dev, &self->base));
	EXPECT_POOL_BASELINE(self);
}

/*
 * A region dies while its first chunk is pinned: it is held whole, still
 * counted (total does not move, free stays short of it), and none of its
 * chunks goes to the next region; when the pin goes the pool is back where
 * it was.
 */
static void check_held_while_pinned(struct __test_metadata *_metadata, int dev,
				    const struct moem_pool_stats *base, uint64_t pinned_pfn,
				    const char *name)
{
	struct moem_pool_stats st;
	uint64_t size;
	uint8_t *q;
	int fd;

	EXPECT_EQ(-ENOENT, region_open(dev, name, 0));
	ASSERT_EQ(0, pool_stats(dev, &st));
	EXPECT_EQ(base->total_bytes, st.total_bytes);
	EXPECT_EQ(base->free_bytes - 4 * MiB, st.free_bytes);
	EXPECT_EQ(base->nr_regions, st.nr_regions);
	/* Everything the pool can give: none of it is the held chunk. */
	size = st.free_bytes ? st.free_bytes : 2 * MiB;
	fd = region_create(dev, "after-pin", size, 0, 0600);
	ASSERT_LE(0, fd);
	q = map_region(fd, size, 0);
	ASSERT_NE(MAP_FAILED, q);
	EXPECT_TRUE(all_zero(q, size));
	for (uint64_t off = 0; off < size; off += CHUNK) {
		EXPECT_NE(pinned_pfn, pfn_of(q + off))
		TH_LOG("chunk at %llu", (unsigned long long)off);
	}
	ASSERT_EQ(0, munmap(q, size));
	close(fd);
}

TEST_F(moem, pinned_region_held_not_reused)
{
	uint64_t pfn;
	uint8_t *p;
	int fd, xsk;

	REQUIRE_ROOT(); /* AF_XDP and page frame numbers */
	if (self->base.free_bytes < 4 * MiB)
		SKIP(return, "needs a preallocated pool (prealloc_mb >= 4)");
	fd = region_create(self->dev, "pinned", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x99, 4 * MiB);
	pfn = pfn_of(p);
	ASSERT_NE(0, pfn);
	xsk = umem_pin(p, 2 * MiB); /* the first chunk only */
	if (xsk == -EAFNOSUPPORT) {
		munmap(p, 4 * MiB);
		close(fd);
		SKIP(return, "no AF_XDP in this kernel");
	}
	ASSERT_LE(0, xsk) TH_LOG("%s", strerror(-xsk));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd); /* last reference: the region is released now, but pinned */

	check_held_while_pinned(_metadata, self->dev, &self->base, pfn, "pinned");
	close(xsk);
	EXPECT_EQ(0, wait_pool_baseline(self->dev, &self->base));
	EXPECT_POOL_BASELINE(self);
}

/* The same with io_uring's fixed buffer, which also writes into the held chunk. */
TEST_F(moem, iouring_pinned_region_held_not_reused)
{
	struct io_uring ring;
	struct iovec iov;
	uint64_t pfn;
	uint8_t *p;
	int fd, data;

	REQUIRE_ROOT(); /* page frame numbers */
	if (!iouring_takes_file_buffers())
		SKIP(return, "Linux < 6.5: io_uring takes no region memory as a fixed buffer");
	if (self->base.free_bytes < 4 * MiB)
		SKIP(return, "needs a preallocated pool (prealloc_mb >= 4)");
	data = open_data();
	if (data < 0)
		SKIP(return, DATA ": %s (no test disk)", strerror(errno));
	ASSERT_EQ(0, io_uring_queue_init(4, &ring, 0));
	fd = region_create(self->dev, "pinned-iou", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x99, 4 * MiB);
	pfn = pfn_of(p);
	ASSERT_NE(0, pfn);
	iov = (struct iovec){p, 2 * MiB};
	ASSERT_EQ(0, io_uring_register_buffers(&ring, &iov, 1));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);

	/* The device still writes into the held chunk: nobody else sees it. */
	EXPECT_EQ(2 * MiB, read_fixed(&ring, data, p, 2 * MiB, 0, 0));
	check_held_while_pinned(_metadata, self->dev, &self->base, pfn, "pinned-iou");
	ASSERT_EQ(0, io_uring_unregister_buffers(&ring));
	io_uring_queue_exit(&ring);
	close(data);
	EXPECT_EQ(0, wait_pool_baseline(self->dev, &self->base));
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
