/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers shared by the moem.ko tests that run inside the QEMU guest
 * (scripts/guest/run.sh): raw ioctl wrappers that return -errno (the
 * tests check the kernel's answers, not libmoem's), sysfs access, and a
 * fixture that opens /dev/moem and records the pool's baseline.
 */
#ifndef MOEM_KSELFTEST_H
#define MOEM_KSELFTEST_H

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/moem.h>

#include "kselftest_harness.h"
#include "moem_pin.h"

#define MiB   (1ULL << 20)
#define CHUNK MOEM_CHUNK_SIZE
#define SYSFS "/sys/kernel/moem"

static inline int ioc(int fd, unsigned long req, void *arg)
{
	return ioctl(fd, req, arg) < 0 ? -errno : 0;
}

static inline int dev_open(void)
{
	int fd = open("/dev/moem", O_RDWR | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* Region fd, or -errno. */
static inline int region_create(int dev, const char *name, uint64_t size, uint32_t flags,
				uint32_t mode)
{
	struct moem_region_create c = {
		.name_ptr = (uintptr_t)name, .size = size, .flags = flags, .mode = mode};
	int ret = ioc(dev, MOEM_IOC_REGION_CREATE, &c);

	return ret ? ret : (int)c.fd;
}

/* The same on NUMA node node (MOEM_REGION_NODE). */
static inline int region_create_on(int dev, const char *name, uint64_t size, uint32_t flags,
				   uint32_t mode, uint32_t node)
{
	struct moem_region_create c = {.name_ptr = (uintptr_t)name,
				       .size = size,
				       .flags = flags | MOEM_REGION_NODE,
				       .mode = mode,
				       .node = node};
	int ret = ioc(dev, MOEM_IOC_REGION_CREATE, &c);

	return ret ? ret : (int)c.fd;
}

static inline int region_open(int dev, const char *name, uint32_t flags)
{
	struct moem_region_open o = {.name_ptr = (uintptr_t)name, .flags = flags};
	int ret = ioc(dev, MOEM_IOC_REGION_OPEN, &o);

	return ret ? ret : (int)o.fd;
}

static inline int region_destroy(int dev, const char *name)
{
	struct moem_region_destroy d = {.name_ptr = (uintptr_t)name};

	return ioc(dev, MOEM_IOC_REGION_DESTROY, &d);
}

static inline int region_info(int dev, const char *name, struct moem_region_info *info)
{
	memset(info, 0, sizeof(*info));
	info->name_ptr = (uintptr_t)name;
	return ioc(dev, MOEM_IOC_REGION_INFO, info);
}

static inline int region_fd_info(int fd, struct moem_region_info *info, char *name)
{
	memset(info, 0, sizeof(*info));
	info->name_ptr = (uintptr_t)name;
	return ioc(fd, MOEM_IOC_REGION_FD_INFO, info);
}

static inline int pool_stats(int dev, struct moem_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	return ioc(dev, MOEM_IOC_POOL_STATS, st);
}

static inline void *map_region(int fd, uint64_t len, off_t off)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
}

/* Fill with the pattern word(i) = seed * 2^32 + i, or check it. */
static inline void pattern_fill(void *p, uint64_t len, uint32_t seed)
{
	uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = ((uint64_t)seed << 32) + i;
}

/* Index of the first word off the pattern (word i is first + i), or -1. */
static inline int64_t pattern_check_from(const void *p, uint64_t len, uint32_t seed, uint64_t first)
{
	const uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++) {
		if (w[i] != ((uint64_t)seed << 32) + first + i)
			return (int64_t)i;
	}
	return -1;
}

static inline int64_t pattern_check(const void *p, uint64_t len, uint32_t seed)
{
	return pattern_check_from(p, len, seed, 0);
}

static inline bool all_zero(const void *p, uint64_t len)
{
	const uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++) {
		if (w[i])
			return false;
	}
	return true;
}

/* Read a sysfs file into buf (newline stripped); -errno on failure. */
static inline int sysfs_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = 0;
	return 0;
}

static inline int sysfs_read_u64(const char *path, uint64_t *v)
{
	char buf[64], *end;
	int ret = sysfs_read(path, buf, sizeof(buf));

	if (ret)
		return ret;
	errno = 0;
	*v = strtoull(buf, &end, 0);
	return errno || *end || end == buf ? -EINVAL : 0;
}

/* Write s with one write(2); 0 or -errno. */
static inline int sysfs_write(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, strlen(s)) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Tests that switch users, set budgets or trace need root (and skip as the user). */
#define REQUIRE_ROOT()                                                                \
	do {                                                                          \
		if (geteuid() != 0)                                                   \
			SKIP(return, "needs root (the unprivileged phase skips it)"); \
	} while (0)

/* Wait for a child; its exit status, or 128 + signal. */
static inline int wait_child(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * Fixture: /dev/moem open and the pool as the test found it. Each test
 * cleans up after itself and checks the pool came back to this baseline.
 */
FIXTURE(moem)
{
	int dev;
	struct moem_pool_stats base;
};

FIXTURE_SETUP(moem)
{
	self->dev = dev_open();
	if (self->dev < 0)
		SKIP(return, "/dev/moem: %s (moem.ko not loaded)", strerror(-self->dev));
	ASSERT_EQ(0, pool_stats(self->dev, &self->base));
}

FIXTURE_TEARDOWN(moem)
{
	if (self->dev >= 0)
		close(self->dev);
}

/* The pool holds exactly what it held before the test, all of it free. */
#define EXPECT_POOL_BASELINE(self)                                    \
	do {                                                          \
		struct moem_pool_stats _st;                           \
                                                                      \
		ASSERT_EQ(0, pool_stats((self)->dev, &_st));          \
		EXPECT_EQ((self)->base.total_bytes, _st.total_bytes); \
		EXPECT_EQ((self)->base.free_bytes, _st.free_bytes);   \
		EXPECT_EQ((self)->base.nr_regions, _st.nr_regions);   \
	} while (0)

#endif /* MOEM_KSELFTEST_H */
