// SPDX-License-Identifier: GPL-2.0-only
/*
 * Region memory as an I/O target: io_uring fixed buffers (a long-term
 * get_user_pages pin) with O_DIRECT READ_FIXED from a real file, plain
 * O_DIRECT reads, and what happens to a chunk that is still pinned when
 * its region dies. The file is /mnt/pattern.bin on the ext4 disk the
 * host made (scripts/guest/run.sh): its u64 at byte 8k is k.
 */
#include <liburing.h>

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

static int read_fixed(struct io_uring *ring, int data, void *buf, unsigned int len, uint64_t off,
		      int index)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	int ret;

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read_fixed(sqe, data, buf, len, off, index);
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
	if (!iouring_compat() && ret == -EOPNOTSUPP) {
		/* The region fd's file backs the VMA: Linux < 6.5 says no. */
		TH_LOG("iouring_compat=0: register_buffers -EOPNOTSUPP (Linux < 6.5)");
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

/*
 * A region dies while io_uring still pins its pages: those chunks must
 * not go back on the free list (io_uring could still write into them);
 * they leave the pool, and a new region gets other, zeroed memory.
 */
TEST_F(moem, pinned_chunks_are_not_reused)
{
	struct moem_pool_stats st;
	struct io_uring ring;
	struct iovec iov;
	uint8_t *p, *q;
	int fd, fd2;

	if (!iouring_compat())
		SKIP(return, "iouring_compat=0: region memory cannot be a fixed buffer here");
	if (self->base.free_bytes < 4 * MiB)
		SKIP(return, "needs a preallocated pool (prealloc_mb >= 4)");
	ASSERT_EQ(0, io_uring_queue_init(4, &ring, 0));
	fd = region_create(self->dev, "pinned", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	memset(p, 0x99, 4 * MiB);
	iov = (struct iovec){p, 2 * MiB}; /* pins the first chunk only */
	ASSERT_EQ(0, io_uring_register_buffers(&ring, &iov, 1));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd); /* last reference: the region is released now */
	EXPECT_EQ(-ENOENT, region_open(self->dev, "pinned", 0));

	ASSERT_EQ(0, pool_stats(self->dev, &st));
	EXPECT_EQ(self->base.total_bytes - 2 * MiB, st.total_bytes);
	EXPECT_EQ(self->base.free_bytes - 2 * MiB, st.free_bytes);

	/* Whatever a new region gets, it is zeroed and not the pinned chunk. */
	fd2 = region_create(self->dev, "pinned2", self->base.free_bytes, 0, 0600);
	ASSERT_LE(0, fd2);
	q = map_region(fd2, self->base.free_bytes, 0);
	ASSERT_NE(MAP_FAILED, q);
	EXPECT_TRUE(all_zero(q, self->base.free_bytes));
	ASSERT_EQ(0, munmap(q, self->base.free_bytes));
	close(fd2);

	ASSERT_EQ(0, io_uring_unregister_buffers(&ring));
	io_uring_queue_exit(&ring);
	/* Regrown to the floor by pinned2, the pool is back where it was. */
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
