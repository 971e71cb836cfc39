// SPDX-License-Identifier: GPL-2.0-only
/*
 * Hostile input on every path user space has into moem.ko: each ioctl with
 * pointers that fault, point into the kernel or straddle into an unmapped
 * page, names without a NUL before a page boundary and with every byte
 * value; a seeded random walk over the ioctl space; region fds used as
 * other things (reopened through /proc, read, written, seeked, truncated,
 * allocated, duped); mmap with absurd offsets, lengths, flags and every
 * madvise advice; and every file of /sys/kernel/moem read a byte at a
 * time and written with junk. The guest runs it as root and as an
 * unprivileged user, on every kernel: every answer must be the documented
 * error, nothing may change but what succeeded, the kernel log must stay
 * clean, and the pool must be back at its baseline after every test.
 */
#include <dirent.h>
#include <stddef.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>

#include <moem/dev.h>

#include "moem_test.h"

/* Pointers no ioctl may accept: NULL, low, kernel, non-canonical. */
static const uintptr_t bad_ptrs[] = {
	0,
	1,
	8,
	4095,
	0xffffffff81000000ULL, /* kernel text */
	0xffff888000000000ULL, /* direct map */
	0x8000000000000000ULL, /* non-canonical */
	~0ULL,
};

static const unsigned long ctl_cmds[] = {
	MOEM_IOC_VERSION,     MOEM_IOC_REGION_CREATE, MOEM_IOC_REGION_OPEN,
	MOEM_IOC_REGION_INFO, MOEM_IOC_REGION_LIST,   MOEM_IOC_REGION_DESTROY,
	MOEM_IOC_POOL_STATS,  MOEM_IOC_BUDGET_GET,    MOEM_IOC_BUDGET_SET,
};

/* A page that faults (PROT_NONE) after an accessible one: [p, p + 4096) ok. */
static uint8_t *guarded_page(void)
{
	uint8_t *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (mprotect(p + 4096, 4096, PROT_NONE)) {
		munmap(p, 8192);
		return NULL;
	}
	return p;
}

static uint32_t named_regions(int dev)
{
	struct moem_pool_stats st;

	return pool_stats(dev, &st) ? ~0U : st.nr_regions;
}

TEST_F(moem, ioctl_pointers_that_fault)
{
	uint8_t *g = guarded_page();
	int fd;

	ASSERT_NE(NULL, g);
	fd = region_create(self->dev, "hz-ptr", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	for (unsigned int c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++) {
		size_t size = _IOC_SIZE(ctl_cmds[c]);

		for (unsigned int i = 0; i < sizeof(bad_ptrs) / sizeof(bad_ptrs[0]); i++) {
			EXPECT_EQ(-EFAULT, ioc(self->dev, ctl_cmds[c], (void *)bad_ptrs[i]))
			TH_LOG("cmd %#lx ptr %#lx", ctl_cmds[c], (unsigned long)bad_ptrs[i]);
		}
		/* The struct runs off the end of the accessible page. */
		memset(g, 0, 4096);
		EXPECT_EQ(-EFAULT, ioc(self->dev, ctl_cmds[c], g + 4096 - size + 8))
		TH_LOG("cmd %#lx straddling", ctl_cmds[c]);
	}
	for (unsigned int i = 0; i < sizeof(bad_ptrs) / sizeof(bad_ptrs[0]); i++) {
		EXPECT_EQ(-EFAULT, ioc(fd, MOEM_IOC_REGION_FD_INFO, (void *)bad_ptrs[i]));
	}
	EXPECT_EQ(-EFAULT,
		  ioc(fd, MOEM_IOC_REGION_FD_INFO, g + 4096 - sizeof(struct moem_region_info) + 8));
	/* Structs that are fine but whose name (or list buffer) pointers fault. */
	for (unsigned int i = 0; i < sizeof(bad_ptrs) / sizeof(bad_ptrs[0]); i++) {
		struct moem_region_create c = {
			.name_ptr = bad_ptrs[i], .size = 2 * MiB, .mode = 0600};
		struct moem_region_open o = {.name_ptr = bad_ptrs[i]};
		struct moem_region_info info = {.name_ptr = bad_ptrs[i]};
		struct moem_region_destroy d = {.name_ptr = bad_ptrs[i]};
		struct moem_region_list l = {.buf_ptr = bad_ptrs[i], .buf_len = 4096};

		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_CREATE, &c));
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_OPEN, &o));
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_INFO, &info));
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_DESTROY, &d));
		/* LIST writes names only when there are some: there is one. */
		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
		if (bad_ptrs[i]) {
			info.name_ptr = bad_ptrs[i];
			EXPECT_EQ(-EFAULT, ioc(fd, MOEM_IOC_REGION_FD_INFO, &info));
		}
	}
	/* LIST: a buffer that claims more room than it has. */
	{
		struct moem_region_list l = {.buf_ptr = (uintptr_t)(g + 4096 - 3), .buf_len = ~0U};

		EXPECT_EQ(-EFAULT, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
	}
	close(fd);
	munmap(g, 8192);
	EXPECT_POOL_BASELINE(self);
}

/* A name ending exactly at a page's end, the next page unmapped. */
TEST_F(moem, names_at_page_boundaries)
{
	uint8_t *g = guarded_page();
	char *name;
	int fd;

	ASSERT_NE(NULL, g);
	/* No NUL before the fault: EFAULT, however short. */
	for (int len = 1; len <= 70; len++) {
		name = (char *)g + 4096 - len;
		memset(name, 'a', len);
		fd = region_create(self->dev, name, 2 * MiB, 0, 0600);
		EXPECT_EQ(len >= MOEM_NAME_MAX ? -ENAMETOOLONG : -EFAULT, fd) TH_LOG("len %d", len);
		if (fd >= 0)
			close(fd);
		EXPECT_EQ(len >= MOEM_NAME_MAX ? -ENAMETOOLONG : -EFAULT,
			  region_open(self->dev, name, 0));
	}
	/* 63 bytes and the NUL as the page's last byte: fine. */
	name = (char *)g + 4096 - MOEM_NAME_MAX;
	memset(name, 'b', MOEM_NAME_MAX - 1);
	name[MOEM_NAME_MAX - 1] = 0;
	fd = region_create(self->dev, name, 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(0, region_destroy(self->dev, name));
	close(fd);
	munmap(g, 8192);
	EXPECT_POOL_BASELINE(self);
}

/* Every byte value in a name: only printable ASCII but space and '/'. */
TEST_F(moem, names_every_byte)
{
	char name[8];

	for (int b = 1; b < 256; b++) {
		int ok = b > ' ' && b <= '~' && b != '/', fd;

		snprintf(name, sizeof(name), "hz%c", b);
		fd = region_create(self->dev, name, 2 * MiB, 0, 0600);
		if (ok) {
			EXPECT_LE(0, fd) TH_LOG("byte %#x", b);
			if (fd >= 0) {
				EXPECT_EQ(0, region_destroy(self->dev, name));
				close(fd);
			}
		} else {
			EXPECT_EQ(-EINVAL, fd) TH_LOG("byte %#x", b);
			if (fd >= 0)
				close(fd);
		}
	}
	EXPECT_EQ(-EINVAL, region_create(self->dev, ".", 2 * MiB, 0, 0600));
	EXPECT_EQ(-EINVAL, region_create(self->dev, "..", 2 * MiB, 0, 0600));
	EXPECT_EQ(-EINVAL, region_create(self->dev, "", 2 * MiB, 0, 0600));
	EXPECT_POOL_BASELINE(self);
}

static uint64_t rnd(uint64_t *s)
{
	/* splitmix64: the same seed, the same walk. */
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A value a careless or hostile caller might put in a field. */
static uint64_t rnd_field(uint64_t *s, uintptr_t good_ptr)
{
	switch (rnd(s) % 10) {
	case 0:
		return 0;
	case 1:
		return rnd(s);
	case 2:
		return bad_ptrs[rnd(s) % (sizeof(bad_ptrs) / sizeof(bad_ptrs[0]))];
	case 3:
		return good_ptr;
	case 4:
		return CHUNK * (1 + rnd(s) % 4);
	case 5:
		return ~0ULL - rnd(s) % 4096;
	case 6:
		return 1ULL << (rnd(s) % 64);
	case 7:
		return rnd(s) & 0777;
	case 8:
		return rnd(s) % 8;
	default:
		return (uint32_t)rnd(s);
	}
}

/*
 * A seeded random walk over the ioctl space: moem's magic with every
 * number, direction and size, and random struct contents (names from a
 * small set so that what gets created can be destroyed). Any answer is
 * allowed but a crash, a hang or a leak: fds that come back are closed,
 * regions destroyed, and the pool must be back at its baseline.
 */
TEST_F_TIMEOUT(moem, ioctl_random_walk, 600)
{
	static const char *const names[] = {"hz-r0", "hz-r1", "hz-r2", "hz-r3"};
	uint64_t seed = 0x6d6f656d, buf[64], scratch[256];
	uint8_t *g = guarded_page();
	unsigned long ok = 0, calls = 0;
	char **before;
	uint32_t nbefore;
	int region = region_create(self->dev, "hz-walk", 2 * MiB, 0, 0600);

	ASSERT_NE(NULL, g);
	ASSERT_LE(0, region);
	ASSERT_EQ(0, moem_dev_region_list(self->dev, &before, &nbefore));
	for (int i = 0; i < 20000; i++) {
		unsigned int nr = rnd(&seed) % 0x14, dir = rnd(&seed) % 4;
		unsigned int size =
			rnd(&seed) % 3 ? _IOC_SIZE(ctl_cmds[rnd(&seed) % 9]) : rnd(&seed) % 128;
		unsigned long cmd = _IOC(dir, MOEM_IOC_MAGIC, nr, size);
		int target = rnd(&seed) % 4 ? self->dev : region, ret;
		uintptr_t name = (uintptr_t)names[rnd(&seed) % 4];

		/* Half the time a real command, so that the walk gets past the number. */
		if (rnd(&seed) % 2) {
			cmd = target == region ? MOEM_IOC_REGION_FD_INFO : ctl_cmds[rnd(&seed) % 9];
			nr = _IOC_NR(cmd);
		}

		for (unsigned int w = 0; w < 64; w++)
			buf[w] = rnd_field(&seed, name);
		/* Mostly well-formed names and sizes the pool can give quickly. */
		if (rnd(&seed) % 2) {
			buf[0] = name;
			buf[1] = CHUNK * (1 + rnd(&seed) % 2);
		}
		/*
		 * Where the kernel writes through the first field (LIST's buffer,
		 * FD_INFO's name) it must be memory this test can spare, or bad.
		 */
		if (nr == 0x04 || target == region) {
			uint64_t pick = rnd(&seed) % 3;

			buf[0] = pick == 0   ? 0
				 : pick == 1 ? (uintptr_t)scratch
					     : bad_ptrs[rnd(&seed) % 8];
		}
		ret = ioc(target, cmd, rnd(&seed) % 16 ? (void *)buf : (void *)g + 4090);
		calls++;
		if (ret == 0) {
			ok++;
			/* CREATE and OPEN hand out an fd: in the struct, whatever cmd it was. */
			if (target == self->dev && (nr == 0x01 || nr == 0x02)) {
				size_t at = nr == 0x01 ? offsetof(struct moem_region_create, fd)
						       : offsetof(struct moem_region_open, fd);
				struct moem_region_info info;
				uint32_t fd;

				memcpy(&fd, (char *)buf + at, sizeof(fd));
				if (!region_fd_info((int)fd, &info, NULL))
					close((int)fd);
			}
		}
		if (i % 1000 == 999) {
			for (int n = 0; n < 4; n++)
				region_destroy(self->dev, names[n]);
		}
	}
	for (int n = 0; n < 4; n++)
		region_destroy(self->dev, names[n]);
	/* Any name the walk made up out of stray memory: gone too. */
	{
		char **after;
		uint32_t nafter;

		ASSERT_EQ(0, moem_dev_region_list(self->dev, &after, &nafter));
		for (uint32_t a = 0; a < nafter; a++) {
			bool old = false;

			for (uint32_t b = 0; b < nbefore; b++)
				old |= !strcmp(after[a], before[b]);
			if (!old) {
				TH_LOG("the walk made region '%s'", after[a]);
				region_destroy(self->dev, after[a]);
			}
		}
		moem_dev_names_free(after, nafter);
		moem_dev_names_free(before, nbefore);
	}
	/* The budget knobs the walk may have set (as root): back to their defaults. */
	if (geteuid() == 0) {
		for (uint32_t k = 0; k < MOEM_BUDGET_NR; k++) {
			struct moem_budget b = {.knob = k};

			EXPECT_EQ(0, ioc(self->dev, MOEM_IOC_BUDGET_SET, &b));
		}
	}
	TH_LOG("%lu calls, %lu succeeded", calls, ok);
	EXPECT_LT(0, ok);
	close(region);
	munmap(g, 8192);
	EXPECT_EQ(self->base.nr_regions, named_regions(self->dev));
	EXPECT_POOL_BASELINE(self);
}

/* A region fd is only what it is: no read, write, seek, reopen or resize. */
TEST_F(moem, region_fd_as_other_things)
{
	struct moem_region_info info;
	char path[64], buf[16];
	struct stat st;
	off_t off = 0;
	int fd, dup_fd, re, pfd[2];

	fd = region_create(self->dev, "hz-fd", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(-1, read(fd, buf, sizeof(buf)));
	EXPECT_EQ(-1, write(fd, buf, sizeof(buf)));
	EXPECT_EQ(-1, pread(fd, buf, sizeof(buf), 0));
	EXPECT_EQ(-1, ftruncate(fd, 0));
	EXPECT_EQ(-1, ftruncate(fd, 4 * MiB));
	EXPECT_EQ(-1, fallocate(fd, 0, 0, 4096));
	EXPECT_EQ(-1, fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096));
	ASSERT_EQ(0, pipe(pfd));
	EXPECT_EQ(-1, sendfile(pfd[1], fd, &off, 16));
	EXPECT_EQ(-1, splice(fd, NULL, pfd[1], NULL, 16, 0));
	close(pfd[0]);
	close(pfd[1]);
	EXPECT_EQ(0, fstat(fd, &st));
	EXPECT_EQ(0, fsync(fd));
	/* Reopening through /proc gives no second way in. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	re = open(path, O_RDWR);
	EXPECT_EQ(-1, re);
	if (re >= 0)
		close(re);
	re = open(path, O_RDONLY);
	EXPECT_EQ(-1, re);
	if (re >= 0)
		close(re);
	/* dup shares the file: still one fd's worth. */
	dup_fd = dup(fd);
	ASSERT_LE(0, dup_fd);
	ASSERT_EQ(0, region_info(self->dev, "hz-fd", &info));
	EXPECT_EQ(1, info.nr_fds);
	close(fd);
	ASSERT_EQ(0, region_info(self->dev, "hz-fd", &info));
	EXPECT_EQ(1, info.nr_fds);
	/* Control ioctls on a region fd, and the other way round. */
	for (unsigned int c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++) {
		EXPECT_EQ(-ENOTTY, ioc(dup_fd, ctl_cmds[c], &info));
	}
	EXPECT_EQ(-ENOTTY, ioc(self->dev, MOEM_IOC_REGION_FD_INFO, &info));
	close(dup_fd);
	EXPECT_EQ(-ENOENT, region_info(self->dev, "hz-fd", &info));
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, mmap_absurd_arguments)
{
	const off_t offs[] = {-4096,
			      1,
			      4095,
			      2 * MiB + 1,
			      (off_t)(4 * MiB),
			      (off_t)(1ULL << 62),
			      (off_t)((~0ULL >> 1) & ~4095ULL)};
	const size_t lens[] = {
		0, 1, 4 * MiB + 1, 8 * MiB, ~(size_t)0, ~(size_t)0 - 4095, (size_t)1 << 47};
	uint8_t *p;
	int fd, ro;

	fd = region_create(self->dev, "hz-mmap", 4 * MiB, 0, 0604);
	ASSERT_LE(0, fd);
	for (unsigned int i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, offs[i]);
		EXPECT_EQ(MAP_FAILED, p) TH_LOG("offset %lld", (long long)offs[i]);
		if (p != MAP_FAILED)
			munmap(p, 4096);
	}
	for (unsigned int i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		p = mmap(NULL, lens[i], PROT_READ, MAP_SHARED, fd, 0);
		/* 1 byte and 4 MiB + 1 round to pages: 4 KiB is fine, 4 MiB + 4 KiB is not. */
		if (lens[i] == 1) {
			EXPECT_NE(MAP_FAILED, p);
			if (p != MAP_FAILED)
				munmap(p, 1);
		} else {
			EXPECT_EQ(MAP_FAILED, p) TH_LOG("length %zu", lens[i]);
		}
	}
	/* MAP_SHARED_VALIDATE with MAP_SYNC: no DAX here. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * MiB, PROT_READ, 0x03 | 0x80000, fd, 0));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
	/* MAP_FIXED over a mapping of the same region, then over half of it. */
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 4 * MiB, 41);
	EXPECT_EQ(p, mmap(p, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 2 * MiB));
	EXPECT_EQ(-1, pattern_check_from(p, 2 * MiB, 41, 2 * MiB / 8));
	EXPECT_EQ(-1, pattern_check_from(p + 2 * MiB, 2 * MiB, 41, 2 * MiB / 8));
	/* mremap: grow refused, move and shrink fine. */
	EXPECT_EQ(MAP_FAILED, mremap(p, 4 * MiB, 8 * MiB, MREMAP_MAYMOVE));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	/* A read-only open cannot become writable by any route. */
	ro = region_open(self->dev, "hz-mmap", MOEM_OPEN_RDONLY);
	ASSERT_LE(0, ro);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED, ro, 0));
	p = mmap(NULL, 2 * MiB, PROT_READ, MAP_SHARED, ro, 0);
	ASSERT_NE(MAP_FAILED, p);
	EXPECT_EQ(-1, mprotect(p, 2 * MiB, PROT_READ | PROT_WRITE));
	EXPECT_EQ(-1, syscall(SYS_remap_file_pages, p, 4096, 0, 1, 0));
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(ro);
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/*
 * Every madvise advice on a region mapping (but HWPOISON and SOFT_OFFLINE,
 * which would take pool pages out of service, as root): whatever each
 * answers, the data stays, and the pool comes back whole.
 */
TEST_F(moem, madvise_every_advice)
{
	uint8_t *p;
	int fd, accepted = 0;

	fd = region_create(self->dev, "hz-madv", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 4 * MiB, 43);
	for (int advice = 0; advice < 100; advice++) {
		if (advice == 8 || advice == 9 || advice == 18) { /* FREE, REMOVE, WIPEONFORK */
			EXPECT_NE(0, madvise(p, 4 * MiB, advice));
		} else if (!madvise(p + MiB, 2 * MiB, advice)) {
			accepted++;
		}
		/* DONTFORK and DOFORK toggle; leave it as mmap made it. */
		madvise(p, 4 * MiB, MADV_DONTFORK);
		EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 43)) TH_LOG("after advice %d", advice);
	}
	TH_LOG("%d advice values accepted", accepted);
	EXPECT_LT(5, accepted);
	EXPECT_EQ(0, mlock(p, 4 * MiB));
	EXPECT_EQ(0, msync(p, 4 * MiB, MS_INVALIDATE));
	EXPECT_EQ(0, munlock(p, 4 * MiB));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/* Read a file a byte at a time, then at odd offsets; 0 or -errno. */
static int read_bytewise(const char *path)
{
	char c, buf[8];
	int fd = open(path, O_RDONLY | O_CLOEXEC), n = 0;
	ssize_t r;

	if (fd < 0)
		return -errno;
	while ((r = read(fd, &c, 1)) == 1 && n < 8192)
		n++;
	if (r < 0) {
		close(fd);
		return -errno;
	}
	r = pread(fd, buf, sizeof(buf), 3);
	r = pread(fd, buf, sizeof(buf), 1 << 20);
	close(fd);
	return r < 0 ? -errno : 0;
}

static int write_n(const char *path, const void *s, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, s, len) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

/* Junk nobody should be able to store anywhere. */
static const struct {
	const char *s;
	size_t len;
} junk[] = {
	{"\xff\xfe\x00\x01", 4},
	{"-1", 2},
	{"-0", 2},
	{"0x10", 4},
	{" 1", 2},
	{"1 ", 2},
	{"1\n2", 3},
	{"\n", 1},
	{"7\0xyz", 6},
	{"99999999999999999999999", 23},
	{"lynx lynx", 9},
	{"none\0", 5},
	{"\0", 1},
};

static void sysfs_walk(struct __test_metadata *_metadata, const char *dir, bool root)
{
	char path[512], before[256], after[256];
	struct dirent *e;
	DIR *d = opendir(dir);

	ASSERT_NE(NULL, d);
	while ((e = readdir(d))) {
		struct stat st;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ASSERT_EQ(0, lstat(path, &st));
		if (S_ISDIR(st.st_mode)) {
			sysfs_walk(_metadata, path, root);
			continue;
		}
		EXPECT_EQ(0, read_bytewise(path)) TH_LOG("%s", path);
		ASSERT_EQ(0, sysfs_read(path, before, sizeof(before)));
		for (unsigned int j = 0; j < sizeof(junk) / sizeof(junk[0]); j++) {
			int ret = write_n(path, junk[j].s, junk[j].len);

			/*
			 * Knobs: EINVAL as root, EACCES for others. Read-only
			 * files: EACCES for others; root passes the permission
			 * check and meets a file with no store method.
			 */
			if (!root) {
				EXPECT_EQ(-EACCES, ret) TH_LOG("%s <- junk %u", path, j);
			} else if (st.st_mode & 0200) {
				EXPECT_EQ(-EINVAL, ret) TH_LOG("%s <- junk %u", path, j);
			} else {
				EXPECT_NE(0, ret) TH_LOG("%s <- junk %u", path, j);
			}
		}
		/* A page of digits, and more than a page: too long for any value. */
		{
			static char big[8192];

			memset(big, '1', sizeof(big));
			EXPECT_NE(0, write_n(path, big, 4095)) TH_LOG("%s", path);
			EXPECT_NE(0, write_n(path, big, sizeof(big))) TH_LOG("%s", path);
		}
		ASSERT_EQ(0, sysfs_read(path, after, sizeof(after)));
		if (strcmp(e->d_name, "free_bytes") && strcmp(e->d_name, "total_bytes")) {
			EXPECT_STREQ(before, after) TH_LOG("%s", path);
		}
	}
	closedir(d);
}

TEST_F_TIMEOUT(moem, sysfs_every_file, 300)
{
	int fd;

	/* A region, so that regions/<name>/ is walked too. */
	fd = region_create(self->dev, "hz-sysfs", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	sysfs_walk(_metadata, SYSFS, geteuid() == 0);
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/* Sizes whose page or chunk counts would overflow, everywhere a size goes. */
TEST_F(moem, sizes_that_overflow)
{
	const uint64_t sizes[] = {~0ULL & ~(CHUNK - 1), 1ULL << 63, (1ULL << 52) + CHUNK,
				  (~0ULL >> 9) & ~(CHUNK - 1), (~0ULL >> 12) & ~(CHUNK - 1)};
	struct moem_region_list l = {.buf_len = ~0U};

	for (unsigned int i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		EXPECT_EQ(-ENOSPC, region_create(self->dev, "hz-size", sizes[i], 0, 0600))
		TH_LOG("size %#llx", (unsigned long long)sizes[i]);
	}
	/* LIST with a huge claimed length and no buffer: nothing to copy, no fault. */
	if (self->base.nr_regions == 0) {
		EXPECT_EQ(0, ioc(self->dev, MOEM_IOC_REGION_LIST, &l));
		EXPECT_EQ(0, l.count);
	}
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
