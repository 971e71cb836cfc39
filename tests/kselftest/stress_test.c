// SPDX-License-Identifier: GPL-2.0-only
/*
 * Races and leaks: threads looping create / open / mmap / close /
 * destroy on the same few names for a fixed count; threads racing every
 * way a mapping comes and goes (map and unmap, close under a mapping,
 * remap_file_pages, MADV_DOFORK + fork, long-term pins and unpins,
 * destroy and recreate, sysfs and INFO readers) on one region name;
 * 1000 open / mmap / close cycles; filling the pool to its ceiling and
 * back. Afterwards the pool must hold exactly what it held before, all of
 * it free. The debug kernel's run (KASAN, lockdep) is where these count.
 */
#include <liburing.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#include "moem_test.h"

#define RACE_THREADS 4
#define RACE_ITERS   400
#define RACE_NAMES   3
#define RACE_FDS     4

struct race {
	int dev;
	unsigned int seed;
	int fds[RACE_FDS];
	unsigned long ops[6]; /* successful create, open, map, close, destroy, list */
	int bad;	      /* an answer the kernel must never give */
};

static unsigned int next_rand(unsigned int *s)
{
	*s = *s * 1103515245u + 12345u;
	return *s >> 8;
}

static void *race_thread(void *arg)
{
	struct race *r = arg;
	char name[16];

	for (int i = 0; i < RACE_ITERS; i++) {
		unsigned int op = next_rand(&r->seed) % 6, slot = next_rand(&r->seed) % RACE_FDS;
		int ret;

		snprintf(name, sizeof(name), "race-%u", next_rand(&r->seed) % RACE_NAMES);
		switch (op) {
		case 0: /* create, persistent or not */
			if (r->fds[slot] >= 0)
				break;
			ret = region_create(r->dev, name, CHUNK * (1 + next_rand(&r->seed) % 2),
					    next_rand(&r->seed) % 2 ? MOEM_REGION_PERSISTENT : 0,
					    0600);
			if (ret >= 0) {
				r->fds[slot] = ret;
				r->ops[0]++;
			} else if (ret != -EEXIST && ret != -ENOSPC && ret != -EDQUOT) {
				r->bad = ret;
			}
			break;
		case 1: /* open */
			if (r->fds[slot] >= 0)
				break;
			ret = region_open(r->dev, name, 0);
			if (ret >= 0) {
				r->fds[slot] = ret;
				r->ops[1]++;
			} else if (ret != -ENOENT) {
				r->bad = ret;
			}
			break;
		case 2: { /* map, touch every page, unmap */
			struct moem_region_info info;
			uint8_t *p;

			if (r->fds[slot] < 0)
				break;
			if (region_fd_info(r->fds[slot], &info, NULL)) {
				r->bad = -1000;
				break;
			}
			p = map_region(r->fds[slot], info.size, 0);
			if (p == MAP_FAILED) {
				r->bad = -errno;
				break;
			}
			for (uint64_t off = 0; off < info.size; off += 4096)
				p[off]++;
			munmap(p, info.size);
			r->ops[2]++;
			break;
		}
		case 3: /* close */
			if (r->fds[slot] >= 0) {
				close(r->fds[slot]);
				r->fds[slot] = -1;
				r->ops[3]++;
			}
			break;
		case 4: /* destroy */
			ret = region_destroy(r->dev, name);
			if (!ret)
				r->ops[4]++;
			else if (ret != -ENOENT)
				r->bad = ret;
			break;
		default: { /* list */
			struct moem_region_list l = {0};
			char buf[256];

			l.buf_ptr = (uintptr_t)buf;
			l.buf_len = sizeof(buf);
			ret = ioc(r->dev, MOEM_IOC_REGION_LIST, &l);
			if (ret)
				r->bad = ret;
			else
				r->ops[5]++;
			break;
		}
		}
	}
	for (int s = 0; s < RACE_FDS; s++) {
		if (r->fds[s] >= 0)
			close(r->fds[s]);
	}
	return NULL;
}

TEST_F_TIMEOUT(moem, races_same_names, 300)
{
	struct race races[RACE_THREADS];
	pthread_t th[RACE_THREADS];
	unsigned long total[6] = {0};
	char name[16];

	for (int t = 0; t < RACE_THREADS; t++) {
		races[t] = (struct race){.dev = self->dev, .seed = 0x9e3779b9u * (t + 1)};
		for (int s = 0; s < RACE_FDS; s++)
			races[t].fds[s] = -1;
		ASSERT_EQ(0, pthread_create(&th[t], NULL, race_thread, &races[t]));
	}
	for (int t = 0; t < RACE_THREADS; t++) {
		pthread_join(th[t], NULL);
		EXPECT_EQ(0, races[t].bad) TH_LOG("thread %d got %d", t, races[t].bad);
		for (int k = 0; k < 6; k++)
			total[k] += races[t].ops[k];
	}
	TH_LOG("create %lu open %lu map %lu close %lu destroy %lu list %lu", total[0], total[1],
	       total[2], total[3], total[4], total[5]);
	/* The loop must really have exercised every path. */
	for (int k = 0; k < 6; k++) {
		EXPECT_LT(0, total[k]) TH_LOG("op %d never succeeded", k);
	}
	/* Persistent leftovers are ours to remove. */
	for (int n = 0; n < RACE_NAMES; n++) {
		snprintf(name, sizeof(name), "race-%d", n);
		int ret = region_destroy(self->dev, name);

		EXPECT_TRUE(ret == 0 || ret == -ENOENT);
	}
	EXPECT_POOL_BASELINE(self);
}

#define MAP_THREADS 4
#define MAP_ITERS   150

struct mrace {
	int dev;
	unsigned int seed;
	unsigned long ops[8];
	int bad;
};

/* An fd of "mrace", creating it (persistent, 4 MiB) if it is not there. */
static int mrace_fd(int dev)
{
	int fd = region_open(dev, "mrace", 0);

	if (fd == -ENOENT) {
		fd = region_create(dev, "mrace", 4 * MiB, MOEM_REGION_PERSISTENT, 0600);
		if (fd == -EEXIST)
			fd = region_open(dev, "mrace", 0);
	}
	return fd;
}

static void *mrace_thread(void *arg)
{
	struct mrace *m = arg;
	char path[96], buf[32];

	for (int i = 0; i < MAP_ITERS && !m->bad; i++) {
		unsigned int op = next_rand(&m->seed) % 8;
		uint64_t off = (next_rand(&m->seed) % 1024) * 4096;
		int fd = mrace_fd(m->dev);
		uint8_t *p;

		if (fd == -ENOENT || fd == -EDQUOT)
			continue; /* destroyed in between, or the user's quota is full */
		if (fd < 0) {
			m->bad = fd;
			break;
		}
		p = op == 6 ? NULL : map_region(fd, 4 * MiB, 0);
		if (p == MAP_FAILED) {
			m->bad = -errno;
			close(fd);
			break;
		}
		switch (op) {
		case 0: /* touch, unmap, close */
			p[off]++;
			break;
		case 1: /* close first: the mapping alone holds the region */
			close(fd);
			fd = -1;
			p[off] = 1;
			break;
		case 2: /* remap_file_pages, with the fd closed half the time */
			if (next_rand(&m->seed) % 2) {
				close(fd);
				fd = -1;
			}
			if (syscall(SYS_remap_file_pages, p, 4096, 0, off / 4096, 0))
				m->bad = -errno;
			p[0]++;
			break;
		case 3: { /* a child that inherits the mapping */
			pid_t pid;

			madvise(p, 4 * MiB, MADV_DOFORK);
			pid = fork();
			if (pid == 0) {
				p[off] = 2;
				_exit(0);
			}
			if (pid < 0 || wait_child(pid))
				m->bad = -ECHILD;
			break;
		}
		case 4: { /* a long-term pin, dropped after the unmap half the time */
			int xsk = umem_pin(p, 2 * MiB);
			struct io_uring ring;
			bool ring_up = false;

			if (xsk == -EAFNOSUPPORT && iouring_takes_file_buffers() &&
			    !io_uring_queue_init(2, &ring, 0)) {
				struct iovec iov = {p, 2 * MiB};

				ring_up = true;
				io_uring_register_buffers(&ring, &iov, 1);
			}
			if (next_rand(&m->seed) % 2) {
				munmap(p, 4 * MiB);
				p = NULL;
			}
			if (xsk >= 0)
				close(xsk);
			if (ring_up)
				io_uring_queue_exit(&ring);
			break;
		}
		case 5: /* destroy: the name goes, this mapping keeps the memory */
			region_destroy(m->dev, "mrace");
			p[off]++;
			break;
		case 6: { /* readers */
			struct moem_region_info info;

			snprintf(path, sizeof(path), SYSFS "/regions/mrace/maps");
			sysfs_read(path, buf, sizeof(buf));
			snprintf(path, sizeof(path), SYSFS "/regions/mrace/files");
			sysfs_read(path, buf, sizeof(buf));
			region_info(m->dev, "mrace", &info);
			region_fd_info(fd, &info, NULL);
			break;
		}
		default: /* a split, then the pieces go one by one */
			munmap(p + 2 * MiB, 4096);
			p[0]++;
			munmap(p, 2 * MiB);
			munmap(p + 2 * MiB + 4096, 2 * MiB - 4096);
			p = NULL;
			break;
		}
		if (p)
			munmap(p, 4 * MiB);
		if (fd >= 0)
			close(fd);
		m->ops[op]++;
	}
	return NULL;
}

TEST_F_TIMEOUT(moem, races_around_mappings, 600)
{
	struct mrace races[MAP_THREADS];
	pthread_t th[MAP_THREADS];
	unsigned long total[8] = {0};

	for (int t = 0; t < MAP_THREADS; t++) {
		races[t] = (struct mrace){.dev = self->dev, .seed = 0x85ebca6bu * (t + 1)};
		ASSERT_EQ(0, pthread_create(&th[t], NULL, mrace_thread, &races[t]));
	}
	for (int t = 0; t < MAP_THREADS; t++) {
		pthread_join(th[t], NULL);
		EXPECT_EQ(0, races[t].bad) TH_LOG("thread %d got %d", t, races[t].bad);
		for (int k = 0; k < 8; k++)
			total[k] += races[t].ops[k];
	}
	TH_LOG("touch %lu close-first %lu remap %lu fork %lu pin %lu destroy %lu read %lu split "
	       "%lu",
	       total[0], total[1], total[2], total[3], total[4], total[5], total[6], total[7]);
	for (int k = 0; k < 8; k++) {
		EXPECT_LT(0, total[k]) TH_LOG("op %d never ran", k);
	}
	int ret = region_destroy(self->dev, "mrace");

	EXPECT_TRUE(ret == 0 || ret == -ENOENT);
	/* Pins dropped by deferred work (socket, ring teardown) come back too. */
	for (int i = 0; i < 2000; i++) {
		struct moem_pool_stats st;

		ASSERT_EQ(0, pool_stats(self->dev, &st));
		if (st.total_bytes == self->base.total_bytes &&
		    st.free_bytes == self->base.free_bytes)
			break;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	EXPECT_POOL_BASELINE(self);
}

TEST_F_TIMEOUT(moem, thousand_open_map_close, 300)
{
	struct moem_region_info info;
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "cycle", 2 * MiB, MOEM_REGION_PERSISTENT, 0600);
	ASSERT_LE(0, fd);
	close(fd);
	for (int i = 0; i < 1000; i++) {
		fd = region_open(self->dev, "cycle", 0);
		ASSERT_LE(0, fd) TH_LOG("cycle %d", i);
		p = map_region(fd, 2 * MiB, 0);
		ASSERT_NE(MAP_FAILED, p) TH_LOG("cycle %d", i);
		ASSERT_EQ((uint8_t)i, p[i % 4096 + 4096]); /* what cycle i-1 left */
		p[(i + 1) % 4096 + 4096] = (uint8_t)(i + 1);
		ASSERT_EQ(0, munmap(p, 2 * MiB));
		close(fd);
	}
	ASSERT_EQ(0, region_info(self->dev, "cycle", &info));
	EXPECT_EQ(0, info.nr_maps);
	EXPECT_EQ(0, info.nr_fds);
	ASSERT_EQ(0, region_destroy(self->dev, "cycle"));
	EXPECT_POOL_BASELINE(self);
}

TEST_F_TIMEOUT(moem, fill_pool_to_ceiling, 300)
{
	struct moem_pool_stats st;
	uint64_t limit = self->base.max_bytes, quota, n;
	int over = -ENOSPC, *fds;
	char name[32];

	/* A user without CAP_SYS_ADMIN meets its quota first. */
	if (geteuid() != 0 && !sysfs_read_u64(SYSFS "/pool/user_max_bytes", &quota) &&
	    quota < limit) {
		limit = quota;
		over = -EDQUOT;
	}
	n = limit / CHUNK;
	fds = calloc(n, sizeof(*fds));
	ASSERT_NE(NULL, fds);
	for (uint64_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "fill-%llu", (unsigned long long)i);
		fds[i] = region_create(self->dev, name, CHUNK, 0, 0600);
		ASSERT_LE(0, fds[i])
		TH_LOG("region %llu of %llu", (unsigned long long)i, (unsigned long long)n);
	}
	ASSERT_EQ(0, pool_stats(self->dev, &st));
	if (over == -ENOSPC) {
		EXPECT_EQ(self->base.max_bytes, st.total_bytes);
		EXPECT_EQ(0, st.free_bytes);
	}
	EXPECT_EQ(self->base.nr_regions + n, st.nr_regions);
	EXPECT_EQ(over, region_create(self->dev, "fill-over", CHUNK, 0, 0600));
	for (uint64_t i = 0; i < n; i++)
		close(fds[i]);
	free(fds);
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
