// SPDX-License-Identifier: GPL-2.0-only
/*
 * Mappings of a region: fork does not inherit them (unless MADV_DOFORK
 * asks), mremap cannot grow them, partial munmap and moves keep the rest
 * correct, out-of-range and private mappings are refused, zapped pages
 * fault back in with the same data, write-protect faults (mprotect,
 * soft-dirty tracking) work, remap_file_pages() works on a mapping whose
 * fd is closed, page tables grow with use rather than with the mapping,
 * closing the fd leaves the mapping counted but not the fd, each region
 * has an inode of its own, and the VMA names itself in /proc/pid/maps.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "moem_test.h"

#ifndef MADV_COLD
#define MADV_COLD 20
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

static int nr_maps(int fd)
{
	struct moem_region_info info;

	return region_fd_info(fd, &info, NULL) ? -1 : (int)info.nr_maps;
}

/* Count /proc/self/maps lines naming region name. */
static int maps_lines(const char *name)
{
	char tag[MOEM_NAME_MAX + 8], line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	if (!f)
		return -1;
	snprintf(tag, sizeof(tag), "[moem:%s]", name);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, tag) != NULL;
	fclose(f);
	return n;
}

TEST_F(moem, fork_does_not_inherit)
{
	uint8_t *p;
	pid_t pid;
	int fd;

	fd = region_create(self->dev, "fork", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	p[0] = 42;
	EXPECT_EQ(1, maps_lines("fork"));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		/* VM_DONTCOPY: the range is simply not mapped in the child. */
		if (maps_lines("fork") != 0)
			_exit(1);
		if (mincore(p, 4096, (unsigned char[1]){0}) == 0 || errno != ENOMEM)
			_exit(2);
		_exit(0);
	}
	EXPECT_EQ(0, wait_child(pid));
	EXPECT_EQ(42, p[0]);
	EXPECT_EQ(1, nr_maps(fd));
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, mremap_cannot_grow)
{
	uint8_t *p, *q, *dst;
	int fd;

	fd = region_create(self->dev, "mremap", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 5);
	/* VM_DONTEXPAND: growing in place or by moving is refused. */
	EXPECT_EQ(MAP_FAILED, mremap(p, 2 * MiB, 4 * MiB, 0));
	EXPECT_EQ(MAP_FAILED, mremap(p, 2 * MiB, 4 * MiB, MREMAP_MAYMOVE));
	EXPECT_EQ(EFAULT, errno);

	/* A same-size move keeps the data and the single mapping. */
	dst = mmap(NULL, 4 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, dst);
	q = mremap(p, 2 * MiB, 2 * MiB, MREMAP_MAYMOVE | MREMAP_FIXED, dst + 2 * MiB);
	ASSERT_EQ(dst + 2 * MiB, q);
	EXPECT_EQ(-1, pattern_check(q, 2 * MiB, 5));
	EXPECT_EQ(1, nr_maps(fd));
	/* Shrinking is an unmap of the tail. */
	q = mremap(q, 2 * MiB, 1 * MiB, 0);
	ASSERT_EQ(dst + 2 * MiB, q);
	EXPECT_EQ(-1, pattern_check(q, 1 * MiB, 5));
	EXPECT_EQ(1, nr_maps(fd));
	ASSERT_EQ(0, munmap(dst, 4 * MiB));
	EXPECT_EQ(0, nr_maps(fd));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, partial_munmap)
{
	uint64_t size = 8 * MiB;
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "partial", size, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, size, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, size, 6);
	/* A hole across a chunk boundary, and a single page elsewhere. */
	ASSERT_EQ(0, munmap(p + 3 * MiB, 2 * MiB));
	EXPECT_EQ(2, nr_maps(fd));
	ASSERT_EQ(0, munmap(p + 6 * MiB + 4096, 4096));
	EXPECT_EQ(3, nr_maps(fd));
	EXPECT_EQ(3, maps_lines("partial"));
	EXPECT_EQ(-1, pattern_check(p, 3 * MiB, 6));
	EXPECT_EQ(-1, pattern_check_from(p + 5 * MiB, MiB + 4096, 6, 5 * MiB / 8));
	EXPECT_EQ(-1,
		  pattern_check_from(p + 6 * MiB + 8192, 2 * MiB - 8192, 6, (6 * MiB + 8192) / 8));
	/* Writes through the pieces still reach the region. */
	p[7 * MiB] = 0x11;
	{
		uint8_t *q = map_region(fd, 2 * MiB, 6 * MiB);

		ASSERT_NE(MAP_FAILED, q);
		EXPECT_EQ(0x11, q[MiB]);
		EXPECT_EQ(4, nr_maps(fd));
		ASSERT_EQ(0, munmap(q, 2 * MiB));
	}
	ASSERT_EQ(0, munmap(p, size));
	EXPECT_EQ(0, nr_maps(fd));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, out_of_range_refused)
{
	int fd;
	void *p;

	fd = region_create(self->dev, "range", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	EXPECT_EQ(MAP_FAILED, map_region(fd, 4 * MiB + 4096, 0));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(MAP_FAILED, map_region(fd, 4096, 4 * MiB));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(MAP_FAILED, map_region(fd, 2 * MiB + 4096, 2 * MiB));
	EXPECT_EQ(EINVAL, errno);
	/* Offsets whose page index overflows when the length is added. */
	EXPECT_EQ(MAP_FAILED, map_region(fd, 2 * MiB, (off_t)(~0ULL >> 1) & ~4095LL));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, -4096));
	/* Private mappings would copy-on-write pool pages: refused. */
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 2 * MiB, PROT_READ, MAP_PRIVATE, fd, 0));
	/* The control device is not mappable. */
	EXPECT_EQ(MAP_FAILED, map_region(self->dev, 2 * MiB, 0));
	EXPECT_EQ(ENODEV, errno);
	/* Exactly the region is fine, at the last page too. */
	p = map_region(fd, 4096, 4 * MiB - 4096);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, munmap(p, 4096));
	EXPECT_EQ(0, nr_maps(fd));
	/* read/write on a region fd are not a thing. */
	char c;

	EXPECT_EQ(-1, read(fd, &c, 1));
	EXPECT_EQ(-1, write(fd, &c, 1));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

static sigjmp_buf jb;

static void on_fault(int sig)
{
	siglongjmp(jb, sig);
}

TEST_F(moem, access_past_the_end_faults)
{
	struct sigaction sa = {.sa_handler = on_fault}, old_segv, old_bus;
	volatile uint8_t *p;
	uint8_t *res;
	int fd, sig;

	fd = region_create(self->dev, "end", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	/* Reserve 4 MiB, put the region in the first half, leave a hole. */
	res = mmap(NULL, 4 * MiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, res);
	ASSERT_EQ(0, munmap(res + 2 * MiB, 2 * MiB));
	p = mmap(res, 2 * MiB, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	ASSERT_EQ((void *)res, (void *)p);
	p[2 * MiB - 1] = 1;
	sigaction(SIGSEGV, &sa, &old_segv);
	sigaction(SIGBUS, &sa, &old_bus);
	sig = sigsetjmp(jb, 1);
	if (!sig)
		p[2 * MiB] = 1; /* one byte past the region */
	sigaction(SIGSEGV, &old_segv, NULL);
	sigaction(SIGBUS, &old_bus, NULL);
	EXPECT_TRUE(sig == SIGSEGV || sig == SIGBUS) TH_LOG("signal %d", sig);
	ASSERT_EQ(0, munmap(res, 2 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, zapped_pages_fault_back)
{
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "zap", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 4 * MiB, 8);
	/* Drop the page table entries; the fault handler reinserts the pages. */
	ASSERT_EQ(0, madvise(p, 4 * MiB, MADV_DONTNEED));
	EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 8));
	ASSERT_EQ(0, madvise(p + MiB, 2 * MiB, MADV_DONTNEED));
	/* A write fault first (read-only insert, then write-protect fault). */
	p[MiB + 4096 + 3] = 0x3c;
	EXPECT_EQ(0x3c, p[MiB + 4096 + 3]);
	((uint64_t *)p)[(MiB + 4096) / 8] = ((uint64_t)8 << 32) + (MiB + 4096) / 8;
	EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 8));
	/* Hints that would reclaim ordinary pages leave pool pages alone. */
	madvise(p, 4 * MiB, MADV_COLD);
	madvise(p, 4 * MiB, MADV_PAGEOUT);
	EXPECT_EQ(-1, pattern_check(p, 4 * MiB, 8));
	EXPECT_EQ(0, mlock(p, 4 * MiB));
	EXPECT_EQ(0, munlock(p, 4 * MiB));
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

struct fault_arg {
	uint8_t *p;
	int idx;
};

static void *fault_thread(void *a)
{
	struct fault_arg *fa = a;

	/* Every thread touches every page: concurrent faults on the same pte. */
	for (uint64_t off = 0; off < 4 * MiB; off += 4096)
		fa->p[off + fa->idx] = (uint8_t)fa->idx;
	return NULL;
}

TEST_F(moem, concurrent_faults)
{
	struct fault_arg args[4];
	pthread_t th[4];
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "cfault", 4 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 4 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	for (int round = 0; round < 5; round++) {
		ASSERT_EQ(0, madvise(p, 4 * MiB, MADV_DONTNEED));
		for (int i = 0; i < 4; i++) {
			args[i] = (struct fault_arg){p, i + 1};
			ASSERT_EQ(0, pthread_create(&th[i], NULL, fault_thread, &args[i]));
		}
		for (int i = 0; i < 4; i++)
			pthread_join(th[i], NULL);
	}
	for (uint64_t off = 0; off < 4 * MiB; off += 4096) {
		for (int i = 1; i <= 4; i++) {
			ASSERT_EQ(i, p[off + i]);
		}
	}
	ASSERT_EQ(0, munmap(p, 4 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, write_protect_faults)
{
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "wp", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 2);
	/* mprotect round trip: the ptes come back read-only first. */
	ASSERT_EQ(0, mprotect(p, 2 * MiB, PROT_READ));
	EXPECT_EQ(-1, pattern_check(p, 2 * MiB, 2));
	ASSERT_EQ(0, mprotect(p, 2 * MiB, PROT_READ | PROT_WRITE));
	p[12345] = 0xab;
	EXPECT_EQ(0xab, p[12345]);
	/*
	 * Soft-dirty tracking write-protects every pte; the next write goes
	 * through wp_page_shared(), which needs ->page_mkwrite when the VMA
	 * has no file.
	 */
	ASSERT_EQ(0, sysfs_write("/proc/self/clear_refs", "4"));
	p[54321] = 0xcd;
	EXPECT_EQ(0xcd, p[54321]);
	ASSERT_EQ(0, sysfs_write("/proc/self/clear_refs", "1"));
	p[4096] = 1;
	EXPECT_EQ(1, p[4096]);
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, vma_named_and_readable_by_gup)
{
	struct iovec local, remote;
	uint8_t *p, buf[8192];
	char line[512];
	FILE *f;
	int fd, mem, found = 0;

	fd = region_create(self->dev, "named", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 12);
	f = fopen("/proc/self/maps", "r");
	ASSERT_NE(NULL, f);
	while (fgets(line, sizeof(line), f)) {
		if (strtoul(line, NULL, 16) == (uintptr_t)p) {
			found = 1;
			EXPECT_NE(NULL, strstr(line, "[moem:named]")) TH_LOG("%s", line);
			EXPECT_NE(NULL, strstr(line, "rw-s")) TH_LOG("%s", line);
		}
	}
	fclose(f);
	EXPECT_TRUE(found);
	/* get_user_pages from another path: /proc/self/mem and process_vm_readv. */
	mem = open("/proc/self/mem", O_RDONLY);
	ASSERT_LE(0, mem);
	ASSERT_EQ(sizeof(buf), pread(mem, buf, sizeof(buf), (uintptr_t)p + MiB));
	EXPECT_EQ(0, memcmp(buf, p + MiB, sizeof(buf)));
	close(mem);
	local = (struct iovec){buf, sizeof(buf)};
	remote = (struct iovec){p + 4096, sizeof(buf)};
	ASSERT_EQ(sizeof(buf), process_vm_readv(getpid(), &local, 1, &remote, 1, 0));
	EXPECT_EQ(0, memcmp(buf, p + 4096, sizeof(buf)));
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/*
 * remap_file_pages() maps the VMA's own file again over the range; with the
 * region fd closed, that file is what keeps the region alive. (When the
 * module's old iouring_compat=1 left mappings without a file, this oopsed
 * Linux 6.1 and 6.12 for any user; the guest also runs it unprivileged.)
 */
TEST_F(moem, remap_file_pages)
{
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "rfp", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 13);
	close(fd);
	/* Put region page 5 at the first page of the mapping. */
	ASSERT_EQ(0, syscall(SYS_remap_file_pages, p, 4096, 0, 5, 0));
	EXPECT_EQ(-1, pattern_check_from(p, 4096, 13, 5 * 4096 / 8));
	EXPECT_EQ(-1, pattern_check_from(p + 4096, 2 * MiB - 4096, 13, 4096 / 8));
	/* Page 5 of the region, seen through both (volatile: p[0] and p[5 * 4096] alias). */
	((volatile uint8_t *)p)[0] = 0x42;
	EXPECT_EQ(0x42, ((volatile uint8_t *)p)[5 * 4096]);
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	EXPECT_POOL_BASELINE(self);
}

/* The fd is closed; the mapping lives on: one map, no fd (sysfs agrees). */
TEST_F(moem, fd_closed_mapping_lives)
{
	struct moem_region_info info;
	uint64_t v;
	uint8_t *p;
	int fd;

	fd = region_create(self->dev, "fdclose", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	ASSERT_EQ(0, region_info(self->dev, "fdclose", &info));
	EXPECT_EQ(1, info.nr_fds);
	EXPECT_EQ(1, info.nr_maps);
	close(fd);
	ASSERT_EQ(0, region_info(self->dev, "fdclose", &info));
	EXPECT_EQ(0, info.nr_fds);
	EXPECT_EQ(1, info.nr_maps);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/regions/fdclose/files", &v));
	EXPECT_EQ(0, v);
	ASSERT_EQ(0, sysfs_read_u64(SYSFS "/regions/fdclose/maps", &v));
	EXPECT_EQ(1, v);
	/* msync has nothing to write back and succeeds through the mapping's file. */
	p[7] = 7;
	EXPECT_EQ(0, msync(p, 2 * MiB, MS_SYNC));
	/* A second open counts one fd; its own mapping one more map. */
	fd = region_open(self->dev, "fdclose", 0);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, region_info(self->dev, "fdclose", &info));
	EXPECT_EQ(1, info.nr_fds);
	EXPECT_EQ(1, info.nr_maps);
	close(fd);
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	/* Not persistent: the last mapping took the region with it. */
	EXPECT_EQ(-ENOENT, region_info(self->dev, "fdclose", &info));
	EXPECT_POOL_BASELINE(self);
}

/* VmPTE of this process, in KiB, or -1. */
static long vm_pte_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmPTE: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/*
 * Mapping a 32 MiB region 16 times costs no page tables until touched,
 * then one page of PTEs (4 KiB) per 2 MiB piece touched: 512 MiB mapped,
 * 16 pieces touched, about 64 KiB of PTEs (filled up front it would be
 * 1 MiB).
 */
TEST_F(moem, page_tables_grow_with_use)
{
	enum { NMAPS = 16, SIZE = 32 * MiB };
	uint8_t *maps[NMAPS];
	long before, mapped, touched;
	int fd;

	if (self->base.max_bytes < SIZE)
		SKIP(return, "pool ceiling below 32 MiB");
	fd = region_create(self->dev, "ptes", SIZE, 0, 0600);
	ASSERT_LE(0, fd);
	before = vm_pte_kb();
	ASSERT_LE(0, before);
	for (int i = 0; i < NMAPS; i++) {
		maps[i] = map_region(fd, SIZE, 0);
		ASSERT_NE(MAP_FAILED, maps[i]);
	}
	mapped = vm_pte_kb();
	for (int i = 0; i < NMAPS; i++)
		maps[i][i * CHUNK + 100] = (uint8_t)i; /* one piece of each */
	touched = vm_pte_kb();
	TH_LOG("VmPTE: %ld kB before, %ld kB with %d mappings, %ld kB with one piece each touched",
	       before, mapped, NMAPS, touched);
	EXPECT_GE(64, mapped - before);
	EXPECT_GE(touched - mapped, NMAPS * 4);
	EXPECT_GE(NMAPS * 4 + 64, touched - before);
	/* Every mapping shows the same region. */
	for (int i = 0; i < NMAPS; i++) {
		EXPECT_EQ(i, maps[(i + 1) % NMAPS][i * CHUNK + 100]);
	}
	for (int i = 0; i < NMAPS; i++)
		ASSERT_EQ(0, munmap(maps[i], SIZE));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

/* Each region has its own inode: not anon_inode's, which every eventfd shares. */
TEST_F(moem, region_inode_is_private)
{
	struct stat a, a2, b, ev;
	int fa, fa2, fb, efd;

	fa = region_create(self->dev, "ino-a", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fa);
	fb = region_create(self->dev, "ino-b", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fb);
	fa2 = region_open(self->dev, "ino-a", 0);
	ASSERT_LE(0, fa2);
	efd = eventfd(0, EFD_CLOEXEC);
	ASSERT_LE(0, efd);
	ASSERT_EQ(0, fstat(fa, &a));
	ASSERT_EQ(0, fstat(fa2, &a2));
	ASSERT_EQ(0, fstat(fb, &b));
	ASSERT_EQ(0, fstat(efd, &ev));
	EXPECT_EQ(a.st_ino, a2.st_ino);
	EXPECT_EQ(a.st_dev, a2.st_dev);
	EXPECT_NE(a.st_ino, b.st_ino);
	EXPECT_TRUE(a.st_dev != ev.st_dev || a.st_ino != ev.st_ino);
	EXPECT_EQ(a.st_dev, b.st_dev);
	EXPECT_NE(a.st_dev, ev.st_dev);
	close(efd);
	close(fa2);
	close(fb);
	close(fa);
	EXPECT_POOL_BASELINE(self);
}

/*
 * VM_DONTCOPY keeps a mapping out of fork()'s child, but MADV_DOFORK
 * clears it (only VM_IO would stop that, and VM_IO stops every pin). The
 * child's copy is an ordinary mapping of the region: it shares the pages,
 * counts as a map, and keeps the region while the child lives.
 */
TEST_F(moem, madv_dofork_child_shares)
{
	int go[2], done[2];
	uint8_t *p, c;
	pid_t pid;
	int fd;

	fd = region_create(self->dev, "dofork", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	p = map_region(fd, 2 * MiB, 0);
	ASSERT_NE(MAP_FAILED, p);
	pattern_fill(p, 2 * MiB, 17);
	ASSERT_EQ(0, madvise(p, 2 * MiB, MADV_DOFORK));
	ASSERT_EQ(0, pipe(go));
	ASSERT_EQ(0, pipe(done));
	pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		close(fd);
		if (pattern_check(p, 2 * MiB, 17) != -1)
			_exit(1);
		p[99] = 0xee;
		if (write(done[1], "x", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(2);
		_exit(p[100] == 0xdd ? 0 : 3);
	}
	ASSERT_EQ(1, read(done[0], &c, 1));
	EXPECT_EQ(0xee, p[99]);
	EXPECT_EQ(2, nr_maps(fd));
	p[100] = 0xdd;
	/* The parent's mapping goes first: the child's still holds the region. */
	ASSERT_EQ(0, munmap(p, 2 * MiB));
	close(fd);
	ASSERT_EQ(1, write(go[1], "x", 1));
	EXPECT_EQ(0, wait_child(pid));
	close(go[0]);
	close(go[1]);
	close(done[0]);
	close(done[1]);
	EXPECT_POOL_BASELINE(self);
}

TEST_F(moem, many_mappings)
{
	uint8_t *maps[32];
	int fd;

	fd = region_create(self->dev, "many", 2 * MiB, 0, 0600);
	ASSERT_LE(0, fd);
	for (int i = 0; i < 32; i++) {
		maps[i] = map_region(fd, 2 * MiB, 0);
		ASSERT_NE(MAP_FAILED, maps[i]);
		maps[i][i] = (uint8_t)i + 1;
	}
	close(fd);
	for (int i = 0; i < 32; i++) {
		ASSERT_EQ(i + 1, maps[0][i]);
	}
	fd = region_open(self->dev, "many", 0);
	ASSERT_LE(0, fd);
	EXPECT_EQ(32, nr_maps(fd));
	for (int i = 0; i < 32; i++)
		ASSERT_EQ(0, munmap(maps[i], 2 * MiB));
	EXPECT_EQ(0, nr_maps(fd));
	close(fd);
	EXPECT_POOL_BASELINE(self);
}

TEST_HARNESS_MAIN
